"""Where the points of a sweep run: in a pool of local processes, one at a time or
``rlnb sweep --jobs N`` at once, or as tasks on a Ray cluster (``rlnb sweep --ray``).

    executor = choice.make_executor(jobs=2)           # or make_executor(ray="auto", ...)
    executor.run(points, on_start, on_end)            # calls back as each point starts and ends

``rlnb.run.experiments.sweep`` decides which points run, keeps ``sweep.json`` and prints the
progress; this module only runs them, gives each its devices, and never lets one outlive the sweep.

Implementation choices (the details, Ray's addresses included: docs/sweeps.md):
1) A point is one ``python -m rlnb.run.pools.executors point`` process in a session of its own, so a
   Ctrl-C reaches the sweep alone, which stops every point in order (SIGTERM, then after
   ``STOP_GRACE`` seconds SIGKILL); a point whose parent dies stops itself.
2) Each point gets ``OMP_NUM_THREADS`` (and MKL's, OpenBLAS's) = ``cpus_per_run``, by default
   ``cores // jobs``, and slot i of the pool owns GPUs ``[i*K, (i+1)*K)``: no oversubscription.
3) On Ray (``ray_pool.py``) a point is a task running the same process, writing into a sweep
   root every node sees.
4) Every check runs before anything is written (``check()``) and names its flag.
5) A point with a ``runner`` (``"module:function"``) calls ``function(parameters)`` instead of
   executing a notebook (``rlnb.ablate``'s training runs): the same processes, logs, Ray tasks
   and stopping; an exception it raises fails the point with its one-line message.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rlnb.run.pools.machine import THREAD_VARS

STOP_GRACE = 15.0  # seconds a point has to shut its kernel down before it is killed
POLL = 0.2  # seconds between looks at the running points
REPORT_PREFIX = "rlnb sweep point "  # a point process's last line: "<prefix><name>: <how>"


@dataclass
class Point:
    """One grid point to run: papermill ``parameters`` (split, ``run_dir`` included)."""

    name: str
    notebook: str
    run_dir: str
    parameters: dict[str, Any]
    log: str
    kernel_name: str | None = None
    runner: str | None = None  # "module:function" called with parameters instead (see 5)


@dataclass
class Outcome:
    ok: bool
    error: str | None
    seconds: float


Callback = Callable[[Point], None]
EndCallback = Callable[[Point, Outcome], None]


# ---------------------------------------------------------------------------------- one point
def run_point_here(point: Point, progress: bool = False) -> Outcome:
    """Execute the point's notebook in this process (papermill starts the kernel), or call
    its runner (see 5)."""
    from rlnb.run.notebooks.execute import HTML, NOTEBOOK, run_papermill, try_export_html

    start = time.perf_counter()
    nb, run_dir = Path(point.notebook), Path(point.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if point.runner is not None:
        import importlib

        module, _, name = point.runner.partition(":")
        try:
            getattr(importlib.import_module(module), name)(point.parameters)
        except Exception as err:  # the point fails, the others go on (as a failed notebook)
            return Outcome(False, exception_line(err), time.perf_counter() - start)
        return Outcome(True, None, time.perf_counter() - start)
    error = run_papermill(nb, run_dir / NOTEBOOK, point.parameters, kernel_name=point.kernel_name,
                          cwd=nb.parent, progress=progress)
    try_export_html(run_dir / NOTEBOOK, run_dir / HTML, f"{nb.stem}: {run_dir.name}")
    return Outcome(error is None, error, time.perf_counter() - start)


def _point_command(point: Point) -> list[str]:
    return [sys.executable, "-m", "rlnb.run.pools.executors", "point", json.dumps(asdict(point))]


def start_point(point: Point, env: dict[str, str]) -> subprocess.Popen:
    """The point as its own process (in its own session, see 1), output to its log file."""
    Path(point.log).parent.mkdir(parents=True, exist_ok=True)
    with open(point.log, "wb") as log:
        return subprocess.Popen(_point_command(point), stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, env=env, start_new_session=True)


def finished_outcome(point: Point, code: int, seconds: float) -> Outcome:
    """How a point process ended: its notebook's error, else the last line of its log."""
    from rlnb.run.notebooks.execute import NOTEBOOK, notebook_error

    if code == 0:
        return Outcome(True, None, seconds)
    nb = Path(point.run_dir) / NOTEBOOK
    error = notebook_error(nb) if nb.is_file() else None
    if error is None:  # the kernel died or never started: the point's own last line says why
        lines = [x.strip() for x in _tail(Path(point.log)).splitlines() if x.strip()]
        own = f"{REPORT_PREFIX}{point.name}: "
        if lines and lines[-1].startswith(own):
            error = lines[-1][len(own):]
        else:
            why = f"killed by signal {-code}" if code < 0 else f"exited with {code}"
            error = f"its process {why}" + (f": {lines[-1][:300]}" if lines else "")
    return Outcome(False, error, seconds)


def _tail(path: Path, size: int = 4000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, path.stat().st_size - size))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def stop_processes(procs: Sequence[subprocess.Popen], grace: float = STOP_GRACE) -> None:
    """SIGTERM each point process (it shuts its kernel down), SIGKILL whatever of its process
    tree (the kernel included) is still alive after ``grace`` seconds."""
    try:
        import psutil
    except ImportError:  # ipykernel depends on psutil; without it, the processes alone
        psutil = None
    trees = []
    for proc in procs:
        tree = []
        if psutil is not None and proc.poll() is None:
            try:
                tree = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                pass
        trees.append(tree)
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc, tree in zip(procs, trees):
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for child in tree:  # the kernel runs in a session of its own: not in the point's group
            try:
                child.kill()
            except psutil.Error:
                pass


# ---------------------------------------------------------------------------------- executors
class LocalPool:
    """Up to ``jobs`` point processes at once, each with its threads and its GPUs (see 2)."""

    def __init__(self, jobs: int, threads: int | None, gpu_slots: list[list[str]]):
        self.jobs, self.threads, self.gpu_slots = jobs, threads, gpu_slots
        each = [f"{threads} thread(s)"] if threads else []
        each += [f"{len(gpu_slots[0])} GPU(s)"] if gpu_slots[0] else []
        self.description = f"{jobs} at a time" + (f", {' and '.join(each)} each" if each else "")

    def env(self, slot: int) -> dict[str, str]:
        env = dict(os.environ)
        if self.threads:
            env.update({var: str(self.threads) for var in THREAD_VARS})
        if self.gpu_slots[slot]:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpu_slots[slot])
        return env

    def run(self, points: Sequence[Point], on_start: Callback, on_end: EndCallback) -> None:
        queue, free = deque(points), list(range(self.jobs))
        running: dict[int, tuple[Point, subprocess.Popen, float]] = {}
        try:
            while queue or running:
                while queue and free:
                    slot, point = free.pop(0), queue.popleft()
                    running[slot] = (point, start_point(point, self.env(slot)), time.perf_counter())
                    on_start(point)
                time.sleep(POLL)
                for slot, (point, proc, t0) in list(running.items()):
                    code = proc.poll()
                    if code is not None:
                        del running[slot]
                        free.append(slot)
                        on_end(point, finished_outcome(point, code, time.perf_counter() - t0))
        finally:  # Ctrl-C (or any error here): no point outlives the sweep
            stop_processes([proc for _, proc, _ in running.values()])

    def close(self) -> None:
        pass


def exception_line(err: BaseException) -> str:
    """``err`` as ``Type: message`` on one line (at most 300 characters): a failed point's
    error, as a sweep prints and records it."""
    from rlnb.run.notebooks.parameters import one_line

    return one_line(f"{type(err).__name__}: {err}", limit=300)


# ---------------------------------------------------------------------------------- point process
def _stop_when_orphaned() -> None:
    """If the process that started this point dies, stop as if it had sent SIGTERM (see 1)."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True).start()


def _point_main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlnb.run.pools.executors")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("point", help="run one sweep point (used by rlnb sweep)").add_argument(
        "point", help="the Point as JSON")
    args = parser.parse_args(argv)
    point = Point(**json.loads(args.point))
    _stop_when_orphaned()
    outcome = run_point_here(point)
    print(f"{REPORT_PREFIX}{point.name}: " + ("ok" if outcome.ok else outcome.error), flush=True)
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(_point_main())
