"""Notebooks run headless through papermill: ``rlnb run``, ``rlnb sweep`` and ``rlnb launch``.

    run_notebook("notebooks/01_grpo_step_by_step.ipynb", parameters={"fast": True})
    sweep("notebooks/01_grpo_step_by_step.ipynb", {"loss_fn.ratio_clip_max": [0.2, 0.28],
                                                   "seed": [0, 1]})
    launch("notebooks/01_grpo_step_by_step.ipynb", num_processes=2)

A run directory holds the executed notebook (``notebook.ipynb``), its HTML export
(``notebook.html``) and whatever the notebook's ``TrainingRun`` wrote there (``config.yaml``,
``metrics.jsonl``, ``rollouts/``); ``launch`` adds ``ranks/rank{R}.ipynb`` for ranks R > 0. A sweep
root holds one run directory per grid point, ``sweep.json`` (what ran and how it ended),
``summary.csv`` (``sweep_table``) and ``report.ipynb`` / ``report.html``.

Implementation choices:
1) Notebooks follow one convention: a cell tagged ``parameters`` with flat literals, among them
   ``fast``, ``seed``, ``run_dir`` and ``overrides`` (a list of ``"dotted.key=value"``). A parameter
   whose name has a dot (``loss_fn.ratio_clip_max``) is a config key, not a Python name: it is
   appended to ``overrides`` as ``"loss_fn.ratio_clip_max=0.28"``. A name the parameters cell does
   not declare is refused (papermill only logs a warning, and a typo would sweep nothing).
2) Values are read as YAML, as the config's own overrides are: ``0.28``, ``true``, ``null`` and
   ``[1, 2]`` mean the same on the command line as in a config file (and ``1e-3`` is a float).
3) The kernel runs the interpreter running rlnb: by default ipykernel's built-in ``python3`` spec,
   made for ``sys.executable``, and never the first kernelspec called ``python3`` that
   jupyter_client would find (``JUPYTER_PATH`` and the user's data dir come before the
   environment's own). ``kernel_name`` picks a named kernelspec instead.
4) The kernel starts in the notebook's folder, as in Jupyter; ``run_dir`` is passed absolute.
5) A failing cell does not lose the run: papermill saves the notebook with the error in it, the
   HTML is still exported, and the result names the cell and the exception.
6) The HTML export drops the saved widget state, so each widget output falls back to the
   text/html or text/plain it carries (rendering the live widget needs scripts from a CDN).
7) ``launch`` starts ranks with ``accelerate launch --multi_gpu`` (``--cpu`` starts ONE process;
   with no GPU the ranks use gloo). Each rank runs papermill in-process
   (``python -m rlnb.run.notebooks rank``); its kernel inherits RANK, WORLD_SIZE, MASTER_ADDR and
   MASTER_PORT, so ``rlnb.auto_accelerator()`` in the notebook joins the process group. Rank 0's
   notebook is the record; the others go to ``ranks/``.
8) The sweep report is a notebook built here and executed like any other. Its plotly figures
   carry plotly.js inline (renderer ``plotly_mimetype+notebook``), so ``report.html`` works
   offline. ``sweep_table`` and ``sweep_figures`` are what it calls; so can any notebook.
"""

from __future__ import annotations

import argparse
import ast
import functools
import hashlib
import itertools
import json
import keyword
import math
import os
import re
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NOTEBOOK, HTML, RANKS = "notebook.ipynb", "notebook.html", "ranks"
SWEEP_JSON, SUMMARY_CSV, REPORT = "sweep.json", "summary.csv", "report"
# sweep_table's metric columns, in this order, where some run logged them
HEADLINE_METRICS = (
    "train/reward", "validation/accuracy", "train/loss", "train/kl_penalty",
    "train/approx_entropy", "train/clip_fraction", "train/grad_norm",
    "train/mean_gen_tokens_per_sample",
)
FIGURE_METRICS = ("train/reward", "validation/accuracy")
_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # 1e-3: a string to YAML 1.1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class NotebookResult:
    """One executed notebook: where it went and how it ended."""

    run_dir: Path
    notebook: Path
    html: Path | None
    ok: bool
    error: str | None  # one line: the failing cell and its exception
    seconds: float
    parameters: dict[str, Any] = field(default_factory=dict)  # as given, before the split


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


@dataclass
class LaunchResult:
    run_dir: Path
    notebook: Path  # rank 0's, the record
    html: Path | None
    ok: bool
    error: str | None
    seconds: float
    rank_notebooks: list[Path]
    rank_errors: dict[int, str]
    returncode: int


# ---------------------------------------------------------------------------------- parameters
def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it: ``0.28`` float, ``3`` int, ``true`` bool, ``null``
    None, ``[1, 2]`` list, else the string itself; ``1e-3`` is a float too."""
    if not text.strip():
        return text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"cannot read the value {text!r}: {str(err).splitlines()[0]}") from None
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    return value if _plain(value) else text  # YAML dates and the like stay text


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float, str))


def format_value(value: Any) -> str:
    """``value`` as override text that ``parse_value`` (and the config) reads back unchanged."""
    if isinstance(value, str) and value.strip() and parse_value(value) == value:
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value)  # JSON is YAML: quotes a string that would read as a number


def split_parameters(params: Mapping[str, Any]) -> dict[str, Any]:
    """papermill parameters from ``{name: value}``: a dotted name is a config key, appended to
    ``overrides`` as ``"dotted.key=value"``; any other name must be a Python name.

    >>> split_parameters({"seed": 1, "loss_fn.ratio_clip_max": 0.28})
    {'seed': 1, 'overrides': ['loss_fn.ratio_clip_max=0.28']}
    """
    out: dict[str, Any] = {}
    dotted: list[str] = []
    for key, value in params.items():
        if "." in key:
            if not all(_NAME.fullmatch(part) for part in key.split(".")):
                raise ValueError(f"parameter {key!r} is neither a Python name nor a dotted config "
                                 "key (names joined by dots, like loss_fn.ratio_clip_max)")
            dotted.append(f"{key}={format_value(value)}")
        elif key.isidentifier() and not keyword.iskeyword(key):
            out[key] = value
        else:
            raise ValueError(f"parameter {key!r} is not a Python name")
    if dotted:
        given = out.get("overrides") or []
        if not isinstance(given, list):
            raise ValueError(f"overrides must be a list of 'dotted.key=value', got {given!r}")
        out["overrides"] = [*given, *dotted]
    return out


def parse_pairs(pairs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``-p KEY VALUE`` pairs as ``{key: parse_value(value)}``; a key given twice is an error."""
    out: dict[str, Any] = {}
    for key, text in pairs:
        if key in out:
            raise ValueError(f"parameter {key!r} is given twice")
        out[key] = parse_value(text)
    return out


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


def notebook_parameters(notebook: str | Path) -> set[str] | None:
    """The names the cell tagged ``parameters`` assigns; None if the notebook has no such cell."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            names: set[str] = set()
            for node in ast.parse(source).body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) else [])
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
            return names
    return None


def _check_declared(notebook: Path, params: Mapping[str, Any]) -> None:
    if "run_dir" in params:
        raise ValueError("run_dir is set by the command: pass --run-dir (run_dir= in Python)")
    declared = notebook_parameters(notebook)
    unknown = sorted(set(params) - (declared or set()))
    if unknown and declared is None:
        raise ValueError(f"{notebook.name} has no cell tagged 'parameters', so it takes none "
                         f"(given: {', '.join(unknown)})")
    if unknown:
        raise ValueError(f"{notebook.name} has no parameter {', '.join(unknown)}; its parameters "
                         f"cell declares: {', '.join(sorted(declared))} (a config key has a dot)")


def _check_kernel(kernel_name: str) -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    try:
        ksm.get_kernel_spec(kernel_name)
    except NoSuchKernel:
        known = ", ".join(sorted(ksm.find_kernel_specs())) or "none"
        raise ValueError(f"no Jupyter kernel named {kernel_name!r} (installed: {known})") from None


def _prepare(notebook, run_dir, parameters, kernel_name) -> tuple[Path, Path, dict[str, Any]]:
    """Check everything before anything is written; returns absolute notebook and run dir."""
    nb = Path(notebook)
    if not nb.is_file():
        raise FileNotFoundError(f"no notebook at {nb}")
    params = split_parameters(parameters or {})
    _check_declared(nb, params)
    if kernel_name is not None:
        _check_kernel(kernel_name)
    path = Path(run_dir) if run_dir is not None else _new_path("runs", nb.stem)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(f"{path} exists and is not empty: choose a new run directory")
    return nb.resolve(), path.resolve(), params


def _new_path(root: str | Path, prefix: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path, n = Path(root) / f"{prefix}-{stamp}", 1
    while path.exists():
        n += 1
        path = Path(root) / f"{prefix}-{stamp}-{n}"
    return path


# ---------------------------------------------------------------------------------- execution
@functools.cache
def _this_python_kernel_manager():
    """A kernel manager class that only knows ipykernel's native spec (``sys.executable``)."""
    import zmq
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import AsyncKernelManager  # nbclient's default manager class
    from traitlets import default

    # CurveZMQ between papermill and the kernel where both sides have it (jupyter_client >= 8.10,
    # ipykernel 7); without it every kernel warns on stderr that its TCP traffic is plain text
    curve = hasattr(AsyncKernelManager, "transport_encryption") and zmq.has("curve")

    class ThisPythonKernelManager(AsyncKernelManager):
        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            # no kernel dirs: "python3" resolves to ipykernel's built-in spec for this interpreter
            return KernelSpecManager(kernel_dirs=[])

        if curve:
            @default("transport_encryption")
            def _transport_encryption_default(self):
                return "auto"

    return ThisPythonKernelManager


def _execute(notebook, output: Path, parameters: dict, *, kernel_name: str | None, cwd: Path,
             progress: bool) -> str | None:
    """Run ``notebook`` (a path or a NotebookNode) into ``output``; the error as one line."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    kernel: dict[str, Any] = {"kernel_name": kernel_name}
    if kernel_name is None:
        kernel = {"kernel_name": "python3", "language": "python",
                  "kernel_manager_class": _this_python_kernel_manager()}
    try:
        pm.execute_notebook(notebook, str(output), parameters=parameters, progress_bar=progress,
                            cwd=str(cwd), **kernel)
    except PapermillExecutionError as err:
        return _error_line(err.exec_count, err.ename, err.evalue)
    except Exception as err:  # the kernel died or did not start: a failed run, not a crash
        return f"{type(err).__name__}: {_first_line(str(err))}"
    return None


def _first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:300] if lines else ""


def _error_line(exec_count, ename: str, evalue: str) -> str:
    first = _first_line(evalue)
    return f"cell In [{exec_count}] raised {ename}" + (f": {first}" if first else "")


def notebook_error(path: str | Path) -> str | None:
    """The first error a saved notebook holds, as one line; None if it finished cleanly."""
    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        for out in cell.get("outputs", []):
            if out.get("output_type") != "error":
                continue
            if out.get("ename") == "SystemExit" and out.get("evalue") in ("", "0"):
                continue
            return _error_line(cell.get("execution_count"), out.get("ename"), out.get("evalue"))
    meta = nb.get("metadata", {}).get("papermill", {})
    if meta.get("exception"):
        return "a cell failed without an error output"
    if "end_time" in meta and meta["end_time"] is None:
        return "stopped before the end (its process was ended)"
    return None


def export_html(notebook: str | Path, html: str | Path | None = None,
                title: str | None = None) -> Path:
    """Export a notebook to standalone HTML, widget outputs as their static fallback (see 6)."""
    import nbformat
    from nbconvert import HTMLExporter

    from rlnb.run.atomic import atomic_write_text

    notebook = Path(notebook)
    nb = nbformat.read(notebook, as_version=4)
    nb.metadata.pop("widgets", None)
    body, _ = HTMLExporter().from_notebook_node(
        nb, resources={"metadata": {"name": title or notebook.stem}})
    return atomic_write_text(Path(html) if html else notebook.with_suffix(".html"), body)


def _export(notebook: Path, html: Path, title: str) -> Path | None:
    if not notebook.is_file():
        return None
    try:
        return export_html(notebook, html, title)
    except Exception as err:  # the executed notebook is the record; a broken export is not fatal
        print(f"rlnb: could not export {notebook} to HTML ({type(err).__name__}: {err})",
              file=sys.stderr)
        return None


def run_notebook(notebook: str | Path, *, run_dir: str | Path | None = None,
                 parameters: Mapping[str, Any] | None = None, kernel_name: str | None = None,
                 progress: bool = True) -> NotebookResult:
    """Execute ``notebook`` into a run directory (default ``runs/<stem>-<time>``).

    Bad arguments (missing notebook, unknown parameter, non-empty run dir) raise ``ValueError``
    or ``FileNotFoundError`` before anything is written; a failing cell returns ``ok=False``.
    """
    nb, path, params = _prepare(notebook, run_dir, parameters, kernel_name)
    path.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    error = _execute(nb, path / NOTEBOOK, {**params, "run_dir": str(path)},
                     kernel_name=kernel_name, cwd=nb.parent, progress=progress)
    html = _export(path / NOTEBOOK, path / HTML, f"{nb.stem}: {path.name}")
    return NotebookResult(path, path / NOTEBOOK, html, error is None, error,
                          time.perf_counter() - start, dict(parameters or {}))


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


def _runs(root: Path) -> tuple[dict, list[tuple[dict, list[dict]]]]:
    from rlnb.run.rundir import RunDir, read_metrics_file

    record = json.loads((root / SWEEP_JSON).read_text(encoding="utf-8"))
    return record, [(run, read_metrics_file(root / run["name"] / RunDir.METRICS))
                    for run in record["runs"]]


def sweep_table(root: str | Path, metrics: Sequence[str] | str | None = None):
    """One row per run of the sweep in ``root``: its swept parameters, status, time, last step and
    the final value of each metric (default: ``HEADLINE_METRICS`` and every ``validation/*`` key
    that some run logged; ``"all"``: every key but ``timing/*``), then the error if it failed."""
    import pandas as pd

    record, runs = _runs(Path(root))
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


def sweep_figures(root: str | Path, metrics: Sequence[str] = FIGURE_METRICS) -> list:
    """One plotly figure per metric: a line per run against the step (dashed if it failed) and,
    when seeds are swept, the mean over seeds of each other combination (thick)."""
    import pandas as pd
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    record, runs = _runs(Path(root))
    seeds = [k for k, v in record["grid"].items()
             if (k == "seed" or k.endswith(".seed")) and len(v) > 1]

    def group_of(run):
        return " ".join(f"{k}={format_value(v)}" for k, v in run["parameters"].items()
                        if k not in seeds) or "all runs"

    groups = list(dict.fromkeys(group_of(run) for run, _ in runs))
    palette = qualitative.Plotly
    figures = []
    for metric in metrics:
        fig = go.Figure()
        means: dict[str, list] = {g: [] for g in groups}
        for run, records in runs:
            points = [(r["step"], r[metric]) for r in records if r.get(metric) is not None]
            if not points:
                continue
            steps, values = zip(*points)
            g = group_of(run)
            color = palette[(groups.index(g) if seeds else len(fig.data)) % len(palette)]
            fig.add_scatter(
                x=steps, y=values, name=run["name"], mode="lines+markers",
                line={"color": color, "dash": "solid" if run["status"] == "ok" else "dash",
                      "width": 1 if seeds else 2},
                opacity=0.5 if seeds else 1.0, legendgroup=g)
            if run["status"] == "ok":
                means[g].append(pd.Series(values, index=steps))
        for g, series in means.items():
            if seeds and series:
                mean = pd.concat(series, axis=1).mean(axis=1).sort_index()
                fig.add_scatter(x=mean.index, y=mean.values, name=f"mean over seeds: {g}",
                                mode="lines", legendgroup=g,
                                line={"color": palette[groups.index(g) % len(palette)],
                                      "width": 4})
        title = metric if fig.data else f"{metric} (no run logged it)"
        fig.update_layout(title=title, xaxis_title="step", yaxis_title=metric,
                          template="plotly_white", height=420)
        figures.append(fig)
    return figures


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
            "import plotly.io as pio\n\n"
            "from rlnb.run.notebooks import sweep_figures, sweep_table\n\n"
            "# embeds plotly.js once, here: the exported HTML needs no CDN\n"
            'pio.renderers.default = "plotly_mimetype+notebook"'),
        v4.new_code_cell("sweep_table(root)"),
        v4.new_code_cell("for fig in sweep_figures(root):\n    fig.show()"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    out = root / f"{REPORT}.ipynb"
    error = _execute(nb, out, {}, kernel_name=kernel_name, cwd=root, progress=False)
    html = _export(out, root / f"{REPORT}.html", f"sweep {root.name}")
    return (out if out.is_file() else None), html, error


# ---------------------------------------------------------------------------------- launch
def launch_command(num_processes: int, args: Sequence[str], port: int | None = None) -> list[str]:
    """``accelerate launch`` that really starts ``num_processes`` ranks on one machine (GPUs, or
    gloo on CPU: ``--cpu`` would start only one), followed by ``args``."""
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    # accelerate refuses --multi_gpu for one process; alone, the process runs without a group
    multi = ["--multi_gpu"] if num_processes > 1 else []
    return [sys.executable, "-m", "accelerate.commands.launch", *multi,
            "--num_processes", str(num_processes), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), *args]


def rank_notebook(run_dir: Path, rank: int) -> Path:
    return run_dir / NOTEBOOK if rank == 0 else run_dir / RANKS / f"rank{rank}.ipynb"


def launch(notebook: str | Path, num_processes: int, *, run_dir: str | Path | None = None,
           parameters: Mapping[str, Any] | None = None, kernel_name: str | None = None,
           progress: bool = True) -> LaunchResult:
    """Run ``notebook`` on ``num_processes`` ranks (one papermill and one kernel per rank)."""
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    nb, path, params = _prepare(notebook, run_dir, parameters, kernel_name)
    path.mkdir(parents=True, exist_ok=True)
    args = ["-m", "rlnb.run.notebooks", "rank", str(nb), str(path),
            "--parameters", json.dumps({**params, "run_dir": str(path)})]
    if kernel_name is not None:
        args += ["--kernel", kernel_name]
    if not progress:
        args.append("--no-progress")
    start = time.perf_counter()
    proc = subprocess.run(launch_command(num_processes, args))
    seconds = time.perf_counter() - start
    notebooks = [rank_notebook(path, r) for r in range(num_processes)]
    errors = {}
    for rank, nb_path in enumerate(notebooks):
        err = notebook_error(nb_path) if nb_path.is_file() else "wrote no notebook"
        if err:
            errors[rank] = err
    if proc.returncode and not errors:
        errors[-1] = f"accelerate launch exited with {proc.returncode}"
    html = _export(path / NOTEBOOK, path / HTML, f"{nb.stem}: {path.name}")
    first = next(iter(errors.items()), None)
    error = None if first is None else (
        first[1] if first[0] < 0 else f"rank {first[0]}: {first[1]}")
    return LaunchResult(path, path / NOTEBOOK, html, not errors, error, seconds, notebooks,
                        errors, proc.returncode)


def _rank_main(argv: Sequence[str] | None = None) -> int:
    """One rank of ``launch``: run the notebook into this rank's file (RANK from the launcher)."""
    parser = argparse.ArgumentParser(prog="python -m rlnb.run.notebooks")
    sub = parser.add_subparsers(dest="command", required=True)
    rank = sub.add_parser("rank", help="run NOTEBOOK as this process's rank (used by launch)")
    rank.add_argument("notebook")
    rank.add_argument("run_dir")
    rank.add_argument("--parameters", default="{}", help="papermill parameters as JSON")
    rank.add_argument("--kernel", default=None)
    rank.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    r = int(os.environ.get("RANK", "0"))
    out = rank_notebook(Path(args.run_dir), r)
    out.parent.mkdir(parents=True, exist_ok=True)
    nb = Path(args.notebook)
    error = _execute(nb, out, json.loads(args.parameters), kernel_name=args.kernel,
                     cwd=nb.parent, progress=r == 0 and not args.no_progress)
    if error:
        print(f"rank {r}: {error}", file=sys.stderr, flush=True)
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(_rank_main())
