"""How torch's CPU threads wait for each other, chosen before torch starts its thread pool, so a run
on a shared machine slows by its share of the cores and no more.

    import rlnb          # measures the machine, then sets the wait policy torch's OpenMP reads
    busy_machine_note(threads)  # one line when the machine is busy at a run's start (TrainingRun)

Why: torch's CPU kernels run on OpenMP threads (GNU libgomp in the PyPI wheel) that meet at a
barrier after every parallel operation. A thread that arrives first spins before it sleeps, about
300,000 iterations by libgomp's default (milliseconds). On a quiet machine the others arrive
within microseconds and the spin is what makes small operations fast; on a busy one the thread
it waits for has lost its core to another process, and the spinning thread burns the slice that
thread needed: two busy processes beside a 2-thread run made it 7 to 12 times slower, not 2
(docs/benchmarks.md#on-a-busy-machine). No one setting serves both: sleeping at once
(``OMP_WAIT_POLICY=PASSIVE``) keeps a busy machine's fair share but halves the quiet speed, and a
short spin keeps the quiet speed but loses half the busy one (the table in the docs).

Implementation choices:
1) ``import rlnb`` measures, before anything imports torch, how many cores other processes keep
   busy (``/proc/stat`` over ``SAMPLE_SECONDS``) and sets the environment the OpenMP runtime reads
   once, when torch loads it: ``GOMP_SPINCOUNT=SPIN_COUNT`` (spin briefly, then sleep) when the
   cores left free hold the run's threads, ``OMP_WAIT_POLICY=PASSIVE`` when they do not
   (``contended``). The choice is made at the start: a machine that turns busy later keeps the
   short spin, which still loses far less than the runtime's default.
2) The wait policy never changes a number, only the time: the thread count is not changed with
   the load (a reduction split over other threads adds in another order, so a run's numbers would
   depend on what else ran when it started). Sweeps and parallel jobs size their threads from the
   job count (``rlnb.run.pools.machine``).
3) A user's own ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` is kept; ``RLNB_OMP`` chooses by hand
   (``off``: the runtime's default, ``spin``, ``passive``; ``auto``, the default, measures); if
   torch was imported before rlnb the runtime has read its settings already, and
   ``wait_policy()`` says so. What rlnb chose is marked (``RLNB_OMP_CHOSEN``), so a process rlnb
   starts (``rlnb run``'s kernels, sweep points, ``rlnb launch``'s ranks) measures afresh
   instead of inheriting its parent's choice as the user's.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass

SPIN_COUNT = 10_000  # libgomp's spin before a waiting thread sleeps (default about 300,000)
SAMPLE_SECONDS = 0.05  # how long import rlnb watches the cores (choice 1)
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
CHOICES = ("auto", "spin", "passive", "off")


@dataclass(frozen=True)
class Choice:
    """What ``import rlnb`` saw and chose: the cores other processes kept busy (None: not
    measured), the threads torch will start, the machine's cores, and the variable it set."""

    others: float | None
    threads: int
    cores: int
    setting: str


CHOSEN: Choice | None = None  # this process's choice, once set_wait_policy ran


def contended(others: float, threads: int, cores: int) -> bool:
    """Do the cores other processes leave free (``cores − others``) fall short of the run's
    ``threads`` by half a core or more? Then a waiting thread should sleep at once."""
    return others >= cores - threads + 0.5


def busy_cores(seconds: float = SAMPLE_SECONDS) -> float | None:
    """Cores kept busy by every process over ``seconds`` (this one sleeps meanwhile), from the
    kernel's CPU counters; None where there are none to read (not Linux)."""

    def read() -> tuple[int, int] | None:
        try:
            with open("/proc/stat") as f:
                fields = [int(x) for x in f.readline().split()[1:9]]
        except (OSError, ValueError):
            return None
        if len(fields) < 5:
            return None
        return sum(fields), fields[3] + fields[4]  # all ticks, idle + iowait ticks

    first = read()
    if first is None:
        return None
    time.sleep(seconds)
    second = read()
    if second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    return (total - idle) / total * (os.cpu_count() or 1)


def set_wait_policy(environ=os.environ, measure=busy_cores) -> None:
    """Choose and set the OpenMP wait policy (choice 1) unless the user set one, opted out, or
    torch is loaded already (choice 3)."""
    global CHOSEN
    mode = environ.get("RLNB_OMP", "auto").lower() or "auto"
    if mode not in CHOICES:
        raise ValueError(f"RLNB_OMP={environ['RLNB_OMP']!r}: expected one of {', '.join(CHOICES)}")
    if "torch" in sys.modules:
        return
    if environ.get("RLNB_OMP_CHOSEN") in WAIT_VARS:  # a parent rlnb's choice: choose again
        environ.pop(environ.pop("RLNB_OMP_CHOSEN"), None)
    if mode == "off" or any(v in environ for v in WAIT_VARS):
        return
    cores = os.cpu_count() or 1
    given = environ.get("OMP_NUM_THREADS", "")
    threads = int(given) if given.isdigit() and int(given) > 0 else cores
    others = measure() if mode == "auto" and threads > 1 else None  # one thread never waits
    if mode == "passive" or (others is not None and contended(others, threads, cores)):
        var, value = "OMP_WAIT_POLICY", "PASSIVE"
    else:
        var, value = "GOMP_SPINCOUNT", str(SPIN_COUNT)
    environ[var], environ["RLNB_OMP_CHOSEN"] = value, var
    CHOSEN = Choice(others, threads, cores, f"{var}={value}")


def wait_policy(environ=os.environ) -> str:
    """How this process's OpenMP threads wait, in words (for the log line)."""
    if environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE":
        return "sleeping as soon as they wait (OMP_WAIT_POLICY=PASSIVE)"
    if "OMP_WAIT_POLICY" in environ:
        return f"OMP_WAIT_POLICY={environ['OMP_WAIT_POLICY']}"
    if "GOMP_SPINCOUNT" in environ:
        return f"a spin of {environ['GOMP_SPINCOUNT']} then sleep (GOMP_SPINCOUNT)"
    return "the OpenMP runtime's default spin (torch was imported before rlnb, or RLNB_OMP=off)"


def busy_machine_note(threads: int, cores: int | None = None, load: float | None = None,
                      chosen: Choice | None = None) -> str | None:
    """One line when the machine is busy at a run's start: when ``import rlnb`` found the cores
    taken (``chosen``, default ``CHOSEN``), or the load average now, less about one for the run
    itself, leaves fewer free cores than it has threads; None otherwise."""
    cores = cores or os.cpu_count() or 1
    load = os.getloadavg()[0] if load is None else load
    chosen = CHOSEN if chosen is None else chosen
    others = max(0.0, load - 1.0)  # this process, starting, counts about one
    seen = chosen is not None and chosen.others is not None and contended(
        chosen.others, chosen.threads, chosen.cores)
    if not seen and not contended(others, threads, cores):
        return None
    measured = (f"other processes kept {chosen.others:.1f} of {chosen.cores} cores busy when "
                "rlnb loaded, " if seen else "")
    who = " (chosen by rlnb)" if chosen is not None else ""
    return (f"the machine is busy: {measured}load {load:.2f} on {cores} cores; torch keeps "
            f"{threads} thread(s), {wait_policy()}{who}, so the run slows by about its share "
            "of the cores; its numbers do not depend on the load")
