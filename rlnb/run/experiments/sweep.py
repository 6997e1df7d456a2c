"""Sweeps (``rlnb sweep``): one notebook run per point of a parameter grid, then a report.

    sweep("notebooks/01_grpo_step_by_step.ipynb", {"loss_fn.ratio_clip_max": [0.2, 0.28],
                                                   "seed": [0, 1]}, jobs=2)

A sweep root holds one run directory per grid point (each as
``rlnb.run.notebooks.execute.run_notebook`` writes it), ``sweep.json`` (what ran and how it ended),
``logs/<run>.log`` (each point's process output), ``summary.csv`` (``sweep_table``) and
``report.ipynb`` / ``report.html`` (``rlnb.run.experiments.sweep_summary``).

Implementation choices:
1) The grid is the cartesian product of the swept values, first key slowest. On the command line
   ``-p KEY V1,V2`` sweeps the comma-separated values (commas inside brackets or quotes do not
   split) and ``-p KEY V`` fixes one; values are read as YAML, as ``rlnb run`` reads them.
2) Everything is checked (declared parameters, each value of the grid against its default and
   each config override as ``rlnb run`` checks them, distinct run names, the root, the
   executor's flags, the Ray cluster) before anything is written. Each run goes to
   ``root/<run_name(point)>``, a readable folder name such as
   ``loss_fn.ratio_clip_max=0.2__seed=0``; a failed run does not stop the others.
3) Points run as processes of their own, ``jobs`` at a time or as Ray tasks
   (``rlnb.run.pools.executors``); this process alone writes ``sweep.json``, atomically, as each
   point starts and ends (``pending``, ``running``, ``ok``, ``failed``, ``interrupted``), so a sweep
   stopped in any way still says what ran. ``root/.lock`` is held while it runs.
4) Resuming: the same notebook, grid and fixed parameters into a root that holds them keeps the
   points that finished (``ok`` with their notebook), reruns the ones that never ended, and the
   failed ones only with ``rerun_failed`` (a failure is a result: rerunning it is a choice);
   ``force`` reruns every point. A point to rerun starts from an empty folder. Another notebook's
   sweep, or other parameters, are refused.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb.run.experiments.sweep_summary import (  # noqa: F401  (re-exported: rlnb.run.experiments.sweep.sweep_table)
    HEADLINE_METRICS,
    REPORT,
    SUMMARY_CSV,
    SWEEP_JSON,
    read_sweep,
    setting_differences,
    setting_summary,
    sweep_table,
    write_report,
)
from rlnb.run.notebooks.execute import (
    HTML,
    NOTEBOOK,
    NotebookResult,
    check_is_notebook,
    check_kernel,
    new_run_path,
    notebook_file,
)
from rlnb.run.notebooks.parameters import (
    check_parameters,
    format_value,
    parse_value,
    split_parameters,
)
from rlnb.run.pools.choice import make_executor
from rlnb.run.pools.executors import Outcome, Point

LOCK, LOGS = ".lock", "logs"


@dataclass
class SweepResult:
    root: Path
    runs: list[NotebookResult]
    report_notebook: Path | None
    report_html: Path | None
    report_error: str | None = None
    ran: list[str] = field(default_factory=list)  # the points run this time
    kept: list[str] = field(default_factory=list)  # the points a resumed sweep kept

    @property
    def failed(self) -> list[NotebookResult]:
        return [r for r in self.runs if not r.ok]

    @property
    def ok(self) -> bool:
        return not self.failed and self.report_error is None

    def table(self):
        return sweep_table(self.root)


# ---------------------------------------------------------------------------------- grid
def parse_grid(pairs: Sequence[Sequence[str]]) -> tuple[dict[str, list], dict[str, Any]]:
    """``-p KEY V1,V2`` pairs as ``(grid, fixed)``: comma-separated values (outside brackets and
    quotes) are swept, a single value is fixed."""
    grid: dict[str, list] = {}
    fixed: dict[str, Any] = {}
    for key, text in pairs:
        if key in grid or key in fixed:
            raise ValueError(f"parameter {key!r} is given twice")
        values = [parse_value(v) for v in _split_commas(text)]
        if len(values) > 1:
            grid[key] = values
        else:
            fixed[key] = values[0]
    return grid, fixed


def _split_commas(text: str) -> list[str]:
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    return [*parts, text[start:].strip()]


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The cartesian product, first key slowest, values in the order given."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*grid.values())]


def run_name(point: Mapping[str, Any]) -> str:
    """A readable, filesystem-safe folder name: ``loss_fn.ratio_clip_max=0.2__seed=0``."""
    name = "__".join(f"{k}={format_value(v)}" for k, v in point.items()) or "run"
    name = re.sub(r"[^A-Za-z0-9._=+-]+", "_", name).strip("._") or "run"
    if len(name) > 120:  # keep clear of the 255-byte limit, unique through a hash of the point
        digest = hashlib.sha1(json.dumps(point, sort_keys=True).encode()).hexdigest()[:8]
        name = f"{name[:110]}-{digest}"
    return name


# ---------------------------------------------------------------------------------- sweep
def sweep(notebook: str | Path, grid: Mapping[str, Sequence[Any] | Any], *,
          root: str | Path | None = None, parameters: Mapping[str, Any] | None = None,
          kernel_name: str | None = None, progress: bool = True, report: bool = True,
          jobs: int | None = None, cpus_per_run: int | None = None,
          gpus_per_run: int | None = None, ray: str | bool | None = False,
          rerun_failed: bool = False, force: bool = False) -> SweepResult:
    """Run ``notebook`` once per point of ``grid`` (``{"seed": [0, 1], ...}``, cartesian product,
    first key slowest) with ``parameters`` fixed, each into ``root/<run_name(point)>``; a failed run
    does not stop the others. Then write ``summary.csv`` and the report (``report.ipynb/html``).

    ``jobs`` points run at once on this machine (``cpus_per_run`` threads and ``gpus_per_run``
    GPUs each), or on a Ray cluster with ``ray=None`` (join or start one) or ``ray="ADDRESS"``
    (see ``rlnb.run.pools.executors``). A ``root`` that holds this sweep already is resumed:
    finished points are kept, unfinished ones rerun, failed ones too with ``rerun_failed``, every
    point with ``force``. Ctrl-C stops the running points, marks them ``interrupted`` and
    re-raises."""
    nb = notebook_file(notebook)
    check_is_notebook(nb)
    grid = {k: list(v) if isinstance(v, (list, tuple)) else [v] for k, v in grid.items()}
    fixed = dict(parameters or {})
    if grid.keys() & fixed.keys():
        raise ValueError(f"swept and fixed at once: {', '.join(sorted(grid.keys() & fixed))}")
    points = grid_points(grid)
    if not points:
        raise ValueError("the grid is empty: every swept parameter needs at least one value")
    names = [run_name(p) for p in points]
    if len(set(names)) != len(names):
        raise ValueError("two grid points give the same run name: the grid repeats a value")
    for point in points:  # every value of the grid, as rlnb run checks it
        check_parameters(nb, {**fixed, **point})
    if kernel_name is not None:
        check_kernel(kernel_name)
    executor = make_executor(jobs=jobs, cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run,
                             ray=ray)
    root, record, todo = _plan(root, nb, grid, fixed, names, points, rerun_failed, force)
    if hasattr(executor, "connect"):  # RayPool: joins or starts the cluster; nothing written
        executor.connect()
    try:
        with _locked(root):
            return _run(nb, root, record, todo, executor, kernel_name, progress, report,
                        rerun_failed)
    finally:
        executor.close()


def _plan(root, nb: Path, grid: dict, fixed: dict, names: list[str], points: list[dict],
          rerun_failed: bool, force: bool) -> tuple[Path, dict, list[str]]:
    """The root, its record and the names of the points to run; reads and checks, writes nothing."""
    root = Path(root) if root is not None else new_run_path("runs", f"sweep-{nb.stem}")
    record = {"notebook": str(nb.resolve()), "grid": grid, "parameters": fixed, "runs": [
        {"name": n, "parameters": p, "status": "pending", "error": None, "seconds": None}
        for n, p in zip(names, points)]}
    if not root.exists() or (root.is_dir() and not any(root.iterdir())):
        return root.resolve(), record, names
    if not root.is_dir():
        raise ValueError(f"--root {root} is a file, not a directory: choose a new sweep root")
    if not (root / SWEEP_JSON).is_file():
        raise ValueError(f"--root {root} exists and is not empty (it holds no sweep): choose a "
                         "new sweep root")
    try:
        old = json.loads((root / SWEEP_JSON).read_text(encoding="utf-8"))
        old_nb, old_runs = Path(old["notebook"]), {r["name"]: r for r in old["runs"]}
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(f"--root {root}: its {SWEEP_JSON} is unreadable ({err}): choose a new "
                         "sweep root") from None
    if old_nb != nb.resolve():
        raise ValueError(f"--root {root} holds a sweep of another notebook ({old_nb}), not of "
                         f"{nb.name}: choose a new sweep root")
    if _canonical(old["grid"]) != _canonical(grid) or \
            _canonical(old["parameters"]) != _canonical(fixed):
        raise ValueError(f"--root {root} holds a sweep of {nb.name} with other parameters "
                         f"(grid {old['grid']}, fixed {old['parameters']}): give those to resume "
                         "it, or choose a new sweep root")
    todo = []
    for name in names:
        status = old_runs[name]["status"]
        done = status == "ok" and (root / name / NOTEBOOK).is_file()
        if force or not (done or status == "failed") or (status == "failed" and rerun_failed):
            todo.append(name)
    return root.resolve(), old, todo


def _canonical(value) -> str:
    return json.dumps(value)  # order matters: it orders the grid's points


@contextlib.contextmanager
def _locked(root: Path):
    """Hold ``root/.lock`` while the sweep runs: a second sweep into the same root is refused."""
    import fcntl

    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            raise ValueError(f"--root {root} is in use by another rlnb sweep "
                             f"(pid {f.read().strip() or '?'})") from None
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run(nb: Path, root: Path, record: dict, todo: list[str], executor, kernel_name,
         progress: bool, report: bool, rerun_failed: bool) -> SweepResult:
    entries = {run["name"]: run for run in record["runs"]}
    say = print if progress else (lambda *a, **k: None)
    kept = [n for n in entries if n not in todo]
    if kept:
        failed_kept = [n for n in kept if entries[n]["status"] == "failed"]
        say(f"resuming {root}: {len(kept) - len(failed_kept)} finished point(s) kept"
            + (f", {len(failed_kept)} failed point(s) kept (--rerun-failed reruns them)"
               if failed_kept and not rerun_failed else "") + f", {len(todo)} to run")
    for name in todo:  # a rerun starts from an empty folder
        shutil.rmtree(root / name, ignore_errors=True)
        (root / LOGS / f"{name}.log").unlink(missing_ok=True)
        entries[name].update(status="pending", error=None, seconds=None)
    _write_record(root, record)
    say(f"rlnb sweep: {len(todo)} point(s), {executor.description}", flush=True)
    count = {"done": 0, "running": 0, "failed": 0}
    running: set[str] = set()

    def line(what: str, name: str, tail: str = "") -> None:
        label = " ".join(f"{k}={format_value(v)}" for k, v in entries[name]["parameters"].items())
        say(f"[{count['done']}/{len(todo)} done, {count['running']} running, {count['failed']} "
            f"failed] {what} {label or name}{tail}", flush=True)

    def on_start(point: Point) -> None:
        entries[point.name].update(status="running")
        running.add(point.name)
        count["running"] += 1
        _write_record(root, record)
        line("start ", point.name)

    def on_end(point: Point, outcome: Outcome) -> None:
        entries[point.name].update(status="ok" if outcome.ok else "failed", error=outcome.error,
                                   seconds=round(outcome.seconds, 2))
        running.discard(point.name)
        count["running"] -= 1
        count["done"] += 1
        count["failed"] += not outcome.ok
        _write_record(root, record)
        line("ok    " if outcome.ok else "FAILED", point.name,
             f" in {outcome.seconds:.1f} s" + ("" if outcome.ok else f": {outcome.error}"))

    fixed = record["parameters"]
    points = [Point(name, str(nb.resolve()), str(root / name),
                    {**split_parameters({**fixed, **entries[name]["parameters"]}),
                     "run_dir": str(root / name)},
                    str(root / LOGS / f"{name}.log"), kernel_name) for name in todo]
    try:
        executor.run(points, on_start, on_end)
    except KeyboardInterrupt:
        for name in running:
            entries[name].update(status="interrupted", error="stopped by Ctrl-C")
        _write_record(root, record)
        sweep_table(root).to_csv(root / SUMMARY_CSV, index=False)
        say(f"\nrlnb sweep: interrupted; {count['done']} point(s) finished, {len(running)} "
            f"stopped. Rerun the same command to resume.", flush=True)
        raise
    sweep_table(root).to_csv(root / SUMMARY_CSV, index=False)
    report_nb = report_html = report_error = None
    if report:
        report_nb, report_html, report_error = write_report(root, kernel_name=kernel_name)
        if report_error:
            say(f"the report failed: {report_error}", flush=True)
    runs = [NotebookResult(root / r["name"], root / r["name"] / NOTEBOOK,
                           root / r["name"] / HTML if (root / r["name"] / HTML).is_file() else None,
                           r["status"] == "ok", r["error"], r["seconds"] or 0.0, r["parameters"])
            for r in record["runs"]]
    return SweepResult(root, runs, report_nb, report_html, report_error, ran=list(todo),
                       kept=kept)


def _write_record(root: Path, record: dict) -> None:
    from rlnb.run.store.atomic import atomic_write_text

    atomic_write_text(root / SWEEP_JSON, json.dumps(record, indent=1) + "\n")
