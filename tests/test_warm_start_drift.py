"""The default warm start (configs/tiny.yaml, seed 0, an empty cache) still gives its recorded SFT
step count, held-out accuracy and weights; regenerate the record with
``python tests/record_warm_start.py``."""

import json

from record_warm_start import COMMAND, REFERENCE, environment, measure


def test_the_default_warm_start_matches_its_record(tmp_path):
    reference = json.loads(REFERENCE.read_text())
    recorded_env = reference.pop("environment")
    got = measure(tmp_path / "cache")
    env = environment()
    moved = [f"{k}: recorded {reference.get(k)!r}, now {v!r}" for k, v in got.items()
             if reference.get(k) != v]
    changed = [f"{k} {recorded_env.get(k, 'none')} -> {v}" for k, v in env.items()
               if recorded_env.get(k) != v]
    if not moved and not changed:
        return
    # a version change fails even when the numbers held: the record says what it was made with
    lines = ["the default warm start drifted from tests/data/warm_start_reference.json:"]
    lines += moved or ["the numbers are unchanged"]
    lines.append("environment: " + ("; ".join(changed) if changed else "the same as recorded "
                                    "(so the code changed them)"))
    lines.append(f"if this change is meant, rerun `{COMMAND}` and commit the JSON with it")
    raise AssertionError("\n".join(lines))
