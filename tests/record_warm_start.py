"""Record the default configuration's warm start for ``tests/test_warm_start_drift.py``: held-out
accuracy, a sha256 of the weights, the SFT step count, and the environment they came from.

    python tests/record_warm_start.py      # rewrites tests/data/warm_start_reference.json

It runs the warm start twice from empty caches and refuses to record unless both runs agree to
the bit. Rerun it after a deliberate change to the numbers (new code, new package versions) and
commit the JSON with the change that moved them.
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
COMMAND = "python tests/record_warm_start.py"
# intra-op threads, pinned: a matmul's reduction order may follow them (here 1 and 2 threads gave
# the same bits), and one thread is several times faster on a busy 2-core machine
THREADS = 1


def environment() -> dict:
    """What the numbers depend on besides the code: the packages that compute them (as the
    warm-start cache records them), the CPU instruction set torch's kernels use, the threads."""
    from rlnb.engine.trainers.warm_start import package_versions

    return {**package_versions(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "threads": THREADS}


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
    from rlnb.run.warm_start_cache import cached_warm_start

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
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps({**runs[0], "environment": environment()}, indent=2) + "\n")
    print(f"wrote {REFERENCE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
