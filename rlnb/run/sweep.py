"""Sweeps (``rlnb sweep``): one notebook run per point of a parameter grid, then a report.

    sweep("notebooks/01_grpo_step_by_step.ipynb", {"loss_fn.ratio_clip_max": [0.2, 0.28],
                                                   "seed": [0, 1]})

A sweep root holds one run directory per grid point (each as ``rlnb.run.notebooks.run_notebook``
writes it), ``sweep.json`` (what ran and how it ended), ``summary.csv`` (``sweep_table``) and
``report.ipynb`` / ``report.html``.

Implementation choices:
1) The grid is the cartesian product of the swept values, first key slowest. On the command line
   ``-p KEY V1,V2`` sweeps the comma-separated values (commas inside brackets or quotes do not
   split) and ``-p KEY V`` fixes one; values are read as YAML, as ``rlnb run`` reads them.
2) Every point is checked (declared parameters, distinct run names, an empty root) before the
   first run starts. Each run goes to ``root/<run_name(point)>``, a readable folder name such as
   ``loss_fn.ratio_clip_max=0.2__seed=0``; a failed run does not stop the others, and
   ``sweep.json`` is rewritten after each run, so an interrupted sweep still says what ran.
3) The report is a notebook built here and executed like any other. Its plotly figures carry
   plotly.js inline (``rlnb.widgets.show``), so ``report.html`` works offline.
   It calls ``sweep_table`` (here) and ``rlnb.widgets.sweep_figures`` (plots are the UI layer's);
   so can any notebook.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlnb.run.notebooks import (
    NotebookResult,
    _check_declared,
    _check_kernel,
    _execute,
    _export,
    _new_path,
    format_value,
    parse_value,
    run_notebook,
    split_parameters,
)

SWEEP_JSON, SUMMARY_CSV, REPORT = "sweep.json", "summary.csv", "report"
# sweep_table's metric columns, in this order, where some run logged them
HEADLINE_METRICS = (
    "train/reward", "validation/accuracy", "train/loss", "train/kl_penalty",
    "train/approx_entropy", "train/clip_fraction", "train/grad_norm",
    "train/mean_gen_tokens_per_sample",
)


@dataclass
class SweepResult:
    root: Path
    runs: list[NotebookResult]
    report_notebook: Path | None
    report_html: Path | None
    report_error: str | None = None

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
          kernel_name: str | None = None, progress: bool = True,
          report: bool = True) -> SweepResult:
    """Run ``notebook`` once per point of ``grid`` (``{"seed": [0, 1], ...}``, cartesian product,
    first key slowest) with ``parameters`` fixed, each into ``root/<run_name(point)>``; a failed run
    does not stop the others. Then write ``summary.csv`` and the report (``report.ipynb/html``)."""
    nb = Path(notebook)
    if not nb.is_file():
        raise FileNotFoundError(f"no notebook at {nb}")
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
    for point in points:
        _check_declared(nb, split_parameters({**fixed, **point}))
    if kernel_name is not None:
        _check_kernel(kernel_name)
    root = Path(root) if root is not None else _new_path("runs", f"sweep-{nb.stem}")
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise ValueError(f"{root} exists and is not empty: choose a new sweep root")
    root = root.resolve()
    root.mkdir(parents=True, exist_ok=True)
    record = {"notebook": str(nb.resolve()), "grid": grid, "parameters": fixed, "runs": [
        {"name": n, "parameters": p, "status": "pending", "error": None, "seconds": None}
        for n, p in zip(names, points)]}
    _write_record(root, record)
    results = []
    for i, (entry, point) in enumerate(zip(record["runs"], points), 1):
        if progress:
            label = " ".join(f"{k}={format_value(v)}" for k, v in point.items()) or "run"
            print(f"[{i}/{len(points)}] {label} ...", end=" ", flush=True)
        res = run_notebook(nb, run_dir=root / entry["name"], parameters={**fixed, **point},
                           kernel_name=kernel_name, progress=False)
        results.append(res)
        entry.update(status="ok" if res.ok else "failed", error=res.error,
                     seconds=round(res.seconds, 2))
        _write_record(root, record)
        if progress:
            print(f"ok in {res.seconds:.1f} s" if res.ok
                  else f"FAILED in {res.seconds:.1f} s: {res.error}", flush=True)
    sweep_table(root).to_csv(root / SUMMARY_CSV, index=False)
    report_nb = report_html = report_error = None
    if report:
        report_nb, report_html, report_error = write_report(root, kernel_name=kernel_name)
        if report_error and progress:
            print(f"the report failed: {report_error}", flush=True)
    return SweepResult(root, results, report_nb, report_html, report_error)


def _write_record(root: Path, record: dict) -> None:
    from rlnb.run.atomic import atomic_write_text

    atomic_write_text(root / SWEEP_JSON, json.dumps(record, indent=1) + "\n")


def _final_metrics(records: list[dict]) -> dict[str, Any]:
    """The last logged value of every key (keys logged now and then, like validation, too)."""
    final: dict[str, Any] = {}
    for rec in records:
        final.update({k: v for k, v in rec.items() if v is not None})
    return final


def read_sweep(root: Path) -> tuple[dict, list[tuple[dict, list[dict]]]]:
    from rlnb.run.rundir import RunDir, read_metrics_file

    record = json.loads((root / SWEEP_JSON).read_text(encoding="utf-8"))
    return record, [(run, read_metrics_file(root / run["name"] / RunDir.METRICS))
                    for run in record["runs"]]


def sweep_table(root: str | Path, metrics: Sequence[str] | str | None = None):
    """One row per run of the sweep in ``root``: its swept parameters, status, time, last step and
    the final value of each metric (default: ``HEADLINE_METRICS`` and every ``validation/*`` key
    that some run logged; ``"all"``: every key but ``timing/*``), then the error if it failed."""
    import pandas as pd

    record, runs = read_sweep(Path(root))
    finals = [_final_metrics(records) for _, records in runs]
    logged = {k for f in finals for k in f} - {"step"}
    if metrics is None:
        headline = [k for k in HEADLINE_METRICS if k in logged]
        metrics = headline + sorted(k for k in logged
                                    if k.startswith("validation/") and k not in headline)
    elif metrics == "all":
        metrics = sorted(k for k in logged if not k.startswith("timing/"))
    rows = []
    for (run, _), final in zip(runs, finals):
        rows.append({"run": run["name"], **run["parameters"], "status": run["status"],
                     "seconds": run["seconds"], "steps": final.get("step"),
                     **{k: final.get(k) for k in metrics}, "error": run["error"] or ""})
    columns = ["run", *record["grid"], "status", "seconds", "steps", *metrics, "error"]
    return pd.DataFrame(rows, columns=columns)


def write_report(root: str | Path, *, kernel_name: str | None = None
                 ) -> tuple[Path | None, Path | None, str | None]:
    """Build and execute ``report.ipynb`` in the sweep root, export ``report.html``; returns
    (notebook, html, error)."""
    import nbformat

    root = Path(root)
    record = json.loads((root / SWEEP_JSON).read_text(encoding="utf-8"))
    failed = sum(run["status"] != "ok" for run in record["runs"])
    grid = ", ".join(f"`{k}` in {v}" for k, v in record["grid"].items()) or "one point"
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell(
            f"# Sweep of `{Path(record['notebook']).name}`\n\n{len(record['runs'])} runs over "
            f"{grid}; {failed} failed. Fixed parameters: `{record['parameters']}`.\n\n"
            "Written by `rlnb sweep`; rerun it in this folder to refresh."),
        v4.new_code_cell('root = "."  # the sweep root', metadata={"tags": ["parameters"]}),
        v4.new_code_cell(
            "from rlnb.run.sweep import sweep_table\n"
            "from rlnb.widgets import show, sweep_figures  # plotly.js inline: no CDN needed"),
        v4.new_code_cell("sweep_table(root)"),
        v4.new_code_cell("for fig in sweep_figures(root):\n    show(fig)"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    out = root / f"{REPORT}.ipynb"
    error = _execute(nb, out, {}, kernel_name=kernel_name, cwd=root, progress=False)
    html = _export(out, root / f"{REPORT}.html", f"sweep {root.name}")
    return (out if out.is_file() else None), html, error
