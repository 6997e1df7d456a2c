"""What this machine offers the runs it starts, and how they share it: its cores, the GPUs this
process may use, the threads each of ``jobs`` runs gets, the GPUs each slot of a pool owns.

    default_threads(2)                        # cores // 2 (a smaller OMP_NUM_THREADS kept)
    gpu_slots(visible_gpus(), jobs=2, gpus_per_run=1)   # [["0"], ["1"]]

A sweep's local pool (``executors.LocalPool``), its Ray tasks (``ray_pool.py``) and
``rlnb launch``'s ranks (``launch.py``) all read these, so a point and a rank get the same share
(``executors.py``, choice 2). Nothing here imports torch until ``visible_gpus`` is called.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

# the variables that set a process's CPU threads (OpenMP, MKL, OpenBLAS), all set to one count
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask, which a container or taskset
    narrows), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def visible_gpus() -> list[str]:
    """The GPU ids this process may use: ``CUDA_VISIBLE_DEVICES`` if set, else torch's count."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [x.strip() for x in env.split(",") if x.strip()][:count]
    return [str(i) for i in range(count)]


def gpu_slots(gpus: Sequence[str], jobs: int, gpus_per_run: int) -> list[list[str]]:
    """Slot ``i`` owns ``gpus[i*K:(i+1)*K]`` (``executors.py``, choice 2); a ValueError naming
    the flag when the machine has too few."""
    if gpus_per_run == 0:
        return [[] for _ in range(jobs)]
    have = f"this machine has {len(gpus)}" + (f" ({','.join(gpus)})" if gpus else "")
    if gpus_per_run > len(gpus):
        raise ValueError(f"--gpus-per-run {gpus_per_run} is more GPUs than {have}")
    if jobs * gpus_per_run > len(gpus):
        raise ValueError(f"--jobs {jobs} with {gpus_per_run} GPU(s) per run needs "
                         f"{jobs * gpus_per_run} GPUs and {have}: use --jobs "
                         f"{len(gpus) // gpus_per_run} or fewer GPUs per run")
    return [list(gpus[i * gpus_per_run:(i + 1) * gpus_per_run]) for i in range(jobs)]


def default_threads(jobs: int) -> int | None:
    """``cores // jobs``, or the ``OMP_NUM_THREADS`` already set if smaller; None (leave the
    environment alone) for one job at a time."""
    if jobs == 1:
        return None
    threads = max(1, cpu_cores() // jobs)
    given = os.environ.get("OMP_NUM_THREADS", "")
    return min(threads, int(given)) if given.isdigit() and int(given) > 0 else threads
