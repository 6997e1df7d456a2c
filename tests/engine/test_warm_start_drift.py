"""The default warm start (configs/tiny.yaml, seed 0, an empty cache) still gives the SFT step
count, held-out accuracy and weights recorded for this machine's environment; on a machine with
no record (another CPU class, other packages) it reports what it measured and skips. Record with
``python tests/support/record_warm_start.py``."""

import pytest
from record_warm_start import COMMAND, code, environment, measure, record_for, records


@pytest.mark.slow
def test_the_default_warm_start_matches_its_record(tmp_path):
    env = environment()
    got = measure(tmp_path / "cache")
    record = record_for(env)
    if record is None:
        # Another CPU class or package set gives other floating-point results from the same code
        # (AVX-512 against AVX2: other SFT step counts and weights): nothing to compare with here.
        nearest = min(records(), key=lambda r: sum(r["environment"].get(k) != v
                                                   for k, v in env.items()), default=None)
        differs = ["no record yet"] if nearest is None else [
            f"{k} {nearest['environment'].get(k, 'none')} -> {v}" for k, v in env.items()
            if nearest["environment"].get(k) != v]
        pytest.skip(f"no warm-start record for this environment ({'; '.join(differs)}); "
                    f"measured {got}; `{COMMAND}` records one")
    expected = {k: record[k] for k in got}
    if got == expected:
        return
    moved = [f"{k}: recorded {expected[k]!r}, now {v!r}" for k, v in got.items()
             if expected[k] != v]
    why = ("the code that computes it changed since the record" if record["code"] != code()
           else "the code is the one recorded: the warm start is no longer deterministic, or "
                "depends on something the environment does not name")
    raise AssertionError("\n".join([
        "the default warm start drifted from tests/support/data/warm_start_reference.json "
        f"(environment {env}):", *moved, why,
        f"if this change is meant, rerun `{COMMAND}` and commit the JSON with it"]))
