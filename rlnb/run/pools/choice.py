"""The pool a sweep's points run in, chosen by the flags: here (``--jobs``) or on Ray (``--ray``).

    executor = make_executor(jobs=2)            # LocalPool: two point processes at a time
    executor = make_executor(ray="auto")        # RayPool: one Ray task per point

Both pools run the same point processes (``executors.py``); ``ray_pool.py`` imports ``ray`` only
when a Ray pool is started, so this module imports without it.
"""

from __future__ import annotations

from rlnb.run.pools.executors import LocalPool
from rlnb.run.pools.machine import default_threads, gpu_slots, visible_gpus
from rlnb.run.pools.ray_pool import ray_pool


def make_executor(*, jobs: int | None = None, cpus_per_run: int | None = None,
                  gpus_per_run: int | None = None, ray: str | bool | None = False):
    """The executor the flags ask for, checked (ValueError naming the flag) but not started:
    ``ray=False`` runs here (``jobs`` at a time), ``ray=None``/``"ADDRESS"`` on Ray."""
    for flag, value in (("--jobs", jobs), ("--cpus-per-run", cpus_per_run),
                        ("--gpus-per-run", gpus_per_run)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError(f"{flag} must be a whole number, got {value!r}")
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be at least 1, got {jobs}")
    if cpus_per_run is not None and cpus_per_run < 1:
        raise ValueError(f"--cpus-per-run must be at least 1, got {cpus_per_run}")
    if gpus_per_run is not None and gpus_per_run < 0:
        raise ValueError(f"--gpus-per-run must be 0 or more, got {gpus_per_run}")
    if ray is not False:
        return ray_pool(ray, jobs, cpus_per_run, gpus_per_run)
    jobs = jobs or 1
    gpus = visible_gpus() if jobs > 1 or gpus_per_run else []
    if gpus_per_run is None:
        gpus_per_run = 1 if gpus and jobs > 1 else 0
    slots = gpu_slots(gpus, jobs, gpus_per_run)
    return LocalPool(jobs, cpus_per_run or default_threads(jobs), slots)
