"""How torch's CPU threads wait for each other, set before torch starts its thread pool, so a run
on a shared machine slows by its share of the cores and no more.

    import rlnb          # sets GOMP_SPINCOUNT for torch's OpenMP runtime, unless already set
    busy_machine_note()  # one line when other processes already hold the cores (TrainingRun)

Why: torch's CPU kernels run on OpenMP threads (GNU libgomp in the PyPI wheel) that meet at a
barrier after every parallel operation. A thread that arrives first spins before it sleeps, about
300,000 iterations by libgomp's default (milliseconds). On a quiet machine the others arrive
within microseconds and the spin is what makes small operations fast; on a busy one the thread
it waits for has lost its core to another process, and the spinning thread burns the slice that
thread needed: two busy processes beside a 2-thread run made it 9 times slower, not 2
(docs/benchmarks.md#on-a-busy-machine).

Implementation choices:
1) ``import rlnb`` sets ``GOMP_SPINCOUNT`` (``SPIN_COUNT`` iterations, then sleep) in the
   environment before anything imports torch: the OpenMP runtime reads it once, when torch loads
   it. Every process rlnb starts inherits it (``rlnb run``'s kernels, sweep points, ``rlnb
   launch``'s ranks), and ``import rlnb`` as a notebook's first import sets it for that kernel.
   The count was measured against the default, ``OMP_WAIT_POLICY=PASSIVE`` and other counts,
   quiet and beside busy processes (``benchmarks/bench_busy.py``).
2) A user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is kept, and ``RLNB_OMP=off`` leaves
   the runtime's default; if torch was imported before rlnb the runtime has read its settings
   already, and ``wait_policy()`` says so.
3) The thread count is not changed with the load: a reduction split over other threads adds in
   another order, so a run's numbers would depend on what else ran when it started. Sweeps and
   parallel jobs size their threads from the job count (``rlnb.run.pools.machine``).
"""

from __future__ import annotations

import os
import sys

SPIN_COUNT = 10_000  # libgomp's spin before a waiting thread sleeps (default about 300,000)
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")


def set_wait_policy(environ=os.environ) -> None:
    """Set ``GOMP_SPINCOUNT`` (choice 1) unless the user set a wait policy, opted out, or torch
    is loaded already (choice 2)."""
    if environ.get("RLNB_OMP", "").lower() in ("off", "0", "false"):
        return
    if any(v in environ for v in WAIT_VARS) or "torch" in sys.modules:
        return
    environ["GOMP_SPINCOUNT"] = str(SPIN_COUNT)


def wait_policy(environ=os.environ) -> str:
    """How this process's OpenMP threads wait, in words (for the log line)."""
    if "OMP_WAIT_POLICY" in environ:
        return f"OMP_WAIT_POLICY={environ['OMP_WAIT_POLICY']}"
    if "GOMP_SPINCOUNT" in environ:
        return f"a spin of {environ['GOMP_SPINCOUNT']} then sleep (GOMP_SPINCOUNT)"
    return "the OpenMP runtime's default spin (torch was imported before rlnb, or RLNB_OMP=off)"


def busy_machine_note(threads: int, cores: int | None = None,
                      load: float | None = None) -> str | None:
    """One line when the machine is busy at a run's start: the load average above what the
    run's own threads account for leaves fewer free cores than it has threads; None otherwise."""
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None else load
    others = max(0.0, load - 1.0)  # this process, starting, counts about one
    if others < cores - threads + 0.5:
        return None
    return (f"the machine is busy: load {load:.2f} on {cores} cores (other processes hold about "
            f"{min(others, cores):.0f}); torch keeps {threads} thread(s), which wait by "
            f"{wait_policy()}, so the run slows by about its share of the cores; its numbers do "
            "not depend on the load")
