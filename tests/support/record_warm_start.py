"""Record the default configuration's warm start for ``tests/engine/test_warm_start_drift.py``:
held-out accuracy, a sha256 of the weights, the SFT step count, the code that computed them and
the environment they came from.

    python tests/support/record_warm_start.py   # adds or replaces this machine's record

The numbers depend on the CPU's kernels as well as on the code: an AVX-512 machine, or ATen's
unvectorised kernels (``ATEN_CPU_CAPABILITY=default``), give other SFT step counts and weights
than the AVX2 build machines from the same code and seed. So the file holds one record per
environment (the packages that compute, the CPU instruction set torch uses, the CPU vendor, the
threads), and the test compares a run only with the record of its own environment.

A machine of a wider class records a narrower one's by telling every kernel library to stay
within it: ``ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 ONEDNN_MAX_CPU_ISA=AVX2`` on an
AVX-512 machine gave the AVX2 machine's record bit for bit (and ``ATEN_CPU_CAPABILITY=default``
with the same two the DEFAULT one), so all three records can be made on one machine.

It runs the warm start twice from empty caches and refuses to record unless both runs agree to
the bit. A record made by other code (another ``code`` hash) than this one is dropped when this
one is written: its environment then reports until someone records there again. Rerun it after a
deliberate change to the numbers (new code, new package versions) and commit the JSON with the
change that moved them.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

REFERENCE = Path(__file__).parent / "data" / "warm_start_reference.json"
COMMAND = "python tests/support/record_warm_start.py"
# intra-op threads, pinned: a matmul's reduction order may follow them (here 1 and 2 threads gave
# the same bits), and one thread is several times faster on a busy 2-core machine
THREADS = 1


def cpu_vendor() -> str:
    """``GenuineIntel``, ``AuthenticAMD``, ... (the BLAS picks its kernels by vendor as well as by
    instruction set); ``unknown`` where /proc/cpuinfo does not say."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def environment() -> dict:
    """What the numbers depend on besides the code: the packages that compute them (as the
    warm-start cache records them), the CPU instruction set torch's kernels use and its vendor,
    the threads."""
    from rlnb.engine.trainers.warm_start import package_versions

    return {**package_versions(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "cpu_vendor": cpu_vendor(), "threads": THREADS}


def code() -> str:
    """The hash of the modules that compute a warm start (the warm-start cache's own stamp)."""
    from rlnb.engine.trainers.warm_start import code_hash

    return code_hash()


def weights_sha256(model) -> str:
    """sha256 over the state dict in name order: each name, its dtype and shape, its bytes."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name} {t.dtype} {tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def measure(cache_dir: Path) -> dict:
    """The default config's warm start (``rlnb.load_config(None)``, seed 0) as ``TrainingRun``
    builds it (``cached_warm_start``, here from the empty cache ``cache_dir``), then held-out
    accuracy as the run's first validation measures it."""
    import rlnb
    from rlnb.engine.trainers.loops import make_trainer
    from rlnb.run.store.warm_start_cache import cached_warm_start

    before = os.environ.get("RLNB_CACHE_DIR"), torch.get_num_threads()
    os.environ["RLNB_CACHE_DIR"] = str(cache_dir)
    torch.set_num_threads(THREADS)
    try:
        config = rlnb.load_config(None)
        trainer = make_trainer(config)
        info = cached_warm_start(trainer, config.sft, log=lambda *a: None)
        if info["cached"]:
            raise RuntimeError(f"{cache_dir} was not empty: the warm start was loaded")
        accuracy = trainer.validate()["validation/accuracy"]
    finally:
        if before[0] is None:
            os.environ.pop("RLNB_CACHE_DIR", None)
        else:
            os.environ["RLNB_CACHE_DIR"] = before[0]
        torch.set_num_threads(before[1])
    return {"sft_steps": info["steps"], "probe_accuracy": info["probe_accuracy"],
            "heldout_accuracy": accuracy, "weights_sha256": weights_sha256(trainer.policy.model)}


def records() -> list[dict]:
    """Every record on file: ``{"environment", "code", <the numbers>}``."""
    if not REFERENCE.is_file():
        return []
    return json.loads(REFERENCE.read_text())["records"]


def record_for(env: dict) -> dict | None:
    """The record made in exactly this environment, or None."""
    return next((r for r in records() if r["environment"] == env), None)


def main() -> int:
    runs = []
    for i in range(2):
        with tempfile.TemporaryDirectory() as cache:
            runs.append(measure(Path(cache)))
        print(f"run {i + 1}: {runs[-1]}")
    if runs[0] != runs[1]:
        print("the two runs differ: the warm start is not deterministic; nothing recorded",
              file=sys.stderr)
        return 1
    env, now = environment(), code()
    kept = [r for r in records() if r["environment"] != env and r["code"] == now]
    dropped = [r["environment"] for r in records()
               if r["environment"] != env and r["code"] != now]
    mine = {"environment": env, "code": now, **runs[0]}
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps({"records": [*kept, mine]}, indent=2) + "\n")
    print(f"wrote {REFERENCE}: this environment's record, {len(kept)} other(s) kept")
    for stale in dropped:
        print(f"dropped a record made by other code: {stale}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
