"""One notebook run headless through papermill (``rlnb run``), and the parameter parsing that
``rlnb sweep`` (``rlnb.run.sweep``) and ``rlnb launch`` (``rlnb.run.launch``) share.

    run_notebook("notebooks/01_grpo_step_by_step.ipynb", parameters={"fast": True})

A run directory holds the executed notebook (``notebook.ipynb``), its HTML export
(``notebook.html``) and whatever the notebook's ``TrainingRun`` wrote there (``config.yaml``,
``metrics.jsonl``, ``rollouts/``).

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
   Its formulas use a MathJax copied next to it (``mathjax/``, ``rlnb.run.mathjax``), so the
   page typesets them offline.
7) Every value is checked before a kernel starts (``check_parameters``), so a bad one costs no
   run directory. A parameter must fit the type of its literal default in the parameters cell:
   an int stays an int (a bool is not one), a float takes an int, a str takes a str, a list or
   dict the same, a ``None`` or non-literal default anything. A config override (a dotted key, or
   an item of ``overrides``) goes through ``load_config`` alone, and only what it says about that
   key (an unknown key with its closest valid one, a bad value) refuses it: the notebook picks
   the base config, the preset and the algorithm, so errors about other keys (cross-field checks,
   a section of a loop the notebook may well use) are left to the notebook's own load.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import json
import keyword
import math
import os
import re
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import yaml

NOTEBOOK, HTML = "notebook.ipynb", "notebook.html"
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


def notebook_parameters(notebook: str | Path) -> set[str] | None:
    """The names the cell tagged ``parameters`` assigns; None if the notebook has no such cell."""
    defaults = parameter_defaults(notebook)
    return None if defaults is None else set(defaults)


_NOT_LITERAL = object()  # a default such as ``2 ** 10`` or ``Path("x")``: its type is not checked


def parameter_defaults(notebook: str | Path) -> dict[str, Any] | None:
    """``{name: default}`` of the cell tagged ``parameters`` (the last assignment wins; a default
    that is not a literal maps to ``_NOT_LITERAL``); None if the notebook has no such cell."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            defaults: dict[str, Any] = {}
            for node in ast.parse(source).body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) else [])
                for target in targets:
                    if isinstance(target, ast.Name):
                        defaults[target.id] = _literal(node.value)
            return defaults
    return None


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else _NOT_LITERAL
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _kind_problem(value: Any, default: Any) -> str | None:
    """What ``value`` is not, to stand where ``default`` does (``"an int"``); None if it fits."""
    if default is None or default is _NOT_LITERAL:
        return None
    if isinstance(default, bool):  # before int: a bool is an int to isinstance
        return None if isinstance(value, bool) else "a bool (true or false)"
    # numbers.Integral and Real: numpy's scalars from the Python API fit too
    if isinstance(default, int):
        return None if isinstance(value, Integral) and not isinstance(value, bool) else "an int"
    if isinstance(default, float):  # 1 where 0.5 was: what the notebook does with it is the same
        return None if isinstance(value, Real) and not isinstance(value, bool) else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a str"
    if isinstance(default, (list, tuple)):
        return None if isinstance(value, (list, tuple)) else "a list"
    if isinstance(default, dict):
        return None if isinstance(value, dict) else "a dict"
    return None  # a set, bytes, complex: rare in a parameters cell, left to the notebook


def _check_types(notebook: Path, params: Mapping[str, Any]) -> None:
    defaults = parameter_defaults(notebook) or {}
    for name, value in params.items():
        if "." in name or name not in defaults:
            continue
        kind = _kind_problem(value, defaults[name])
        if kind is not None:
            hint = (f"; quote it to pass it as text: -p {name} '\"{format_value(value)}\"'"
                    if kind == "a str" and isinstance(value, (bool, int, float)) else "")
            raise ValueError(f"-p {name}: {value!r} is not {kind} (the default in "
                             f"{notebook.name}'s parameters cell is {defaults[name]!r}){hint}")


@functools.cache
def config_override_problem(item: str) -> str | None:
    """What ``load_config`` says against the override ``item`` (``"dotted.key=value"``) itself, as
    one line (``loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?``); None if it
    says nothing (see 7).

    The override is laid over the default config alone, with the algorithm that owns its section
    (``ppo.*`` under ``algorithm: ppo``); a line of the error about another key or a whole
    section (a cross-field check) is dropped, as the notebook's own config may settle it.
    """
    from rlnb.config import parse_override
    from rlnb.engine.trainers.grpo import OVERRIDE_ALIASES
    from rlnb.engine.trainers.loops import LOOP_SECTIONS
    from rlnb.run.master_config import load_config

    try:
        path, _ = parse_override(item)
        key = ".".join(path)
        target = OVERRIDE_ALIASES.get(key, key)  # grpo.normalize_rewards is checked where it goes
        owner = next((a for a, sections in LOOP_SECTIONS.items() if path[0] in sections), None)
        load_config({"algorithm": owner} if owner else {}, [item])
    except ValueError as err:
        head, *lines = str(err).splitlines()
        if head != "invalid config:" or not lines:
            return _one_line(str(err))  # about the override as written (not valid YAML, ...)
        own = []
        for line in lines:  # "  loss_fn.ratio_clip_mx: unknown key; did you mean ...?"
            where, _, what = line.strip().partition(": ")
            inside = where == target or where.startswith(target + ".")
            on_the_way = what.startswith("unknown ") and target.startswith(where + ".")
            if inside or on_the_way:
                own.append(f"{where}: {what}")
        return "; ".join(own) or None
    return None


def _check_overrides(params: Mapping[str, Any]) -> None:
    """Each config override given (dotted keys, ``overrides`` items) through ``load_config``."""
    given = [(name, f"{name}={format_value(value)}") for name, value in params.items()
             if "." in name]
    given += [("overrides", item) for item in params.get("overrides") or []
              if isinstance(item, str)]
    for name, item in given:
        problem = config_override_problem(item)
        if problem is not None:  # -p loss_fn.x: unknown key (the key said once)
            raise ValueError(f"-p {name}: {problem.removeprefix(f'{name}: ')}")


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


def check_parameters(notebook: str | Path, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` (``{name: value}``, dotted names config keys) checked against ``notebook``
    before anything runs (see 1 and 7), returned as papermill parameters (``split_parameters``).
    A ValueError names the parameter: an undeclared name, a value that does not fit its default,
    a config key or value that ``load_config`` refuses."""
    notebook = Path(notebook)
    params = split_parameters(parameters)
    if "overrides" in params and not (isinstance(params["overrides"], list)
                                      and all(isinstance(x, str) for x in params["overrides"])):
        raise ValueError(
            f"parameter overrides must be a list of 'dotted.key=value' strings, got "
            f"{params['overrides']!r}; give a config key directly: -p grpo.seed 1")
    _check_declared(notebook, params)
    _check_types(notebook, parameters)
    _check_overrides(parameters)  # last: it loads the config schema (transformers, torch)
    return params


def _check_is_notebook(nb: Path) -> None:
    """A readable Jupyter notebook (nbformat 4 JSON with cells), else a ValueError naming it."""
    if nb.suffix != ".ipynb":
        raise ValueError(f"{nb} is not a notebook (.ipynb)")
    try:
        data = json.loads(nb.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{nb} is not a notebook: not JSON ({err})") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or \
            data.get("nbformat") != 4:
        raise ValueError(f"{nb} is not a Jupyter notebook (nbformat 4 JSON with 'cells')")


def _check_kernel(kernel_name: str) -> None:
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    try:
        ksm.get_kernel_spec(kernel_name)
    except NoSuchKernel:
        known = ", ".join(sorted(ksm.find_kernel_specs())) or "none"
        raise ValueError(f"no Jupyter kernel named {kernel_name!r} (installed: {known})") from None


def _prepare(notebook, run_dir, parameters, kernel_name, *, fresh: bool = True
             ) -> tuple[Path, Path, dict[str, Any]]:
    """Check everything before anything is written; returns absolute notebook and run dir
    (which must be new or empty unless ``fresh=False``)."""
    nb = Path(notebook)
    if not nb.is_file():
        raise FileNotFoundError(f"no notebook at {nb}")
    _check_is_notebook(nb)
    params = check_parameters(nb, parameters or {})
    if kernel_name is not None:
        _check_kernel(kernel_name)
    path = Path(run_dir) if run_dir is not None else _new_path("runs", nb.stem)
    if path.exists() and (not path.is_dir() or (fresh and any(path.iterdir()))):
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
        exit_codes: list[int] = []  # a kernel found dead: its exit status (-N: signal N)

        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            # no kernel dirs: "python3" resolves to ipykernel's built-in spec for this interpreter
            return KernelSpecManager(kernel_dirs=[])

        async def is_alive(self) -> bool:
            # nbclient asks this while it waits for a cell; the process's exit status is only
            # visible here, before the manager cleans the kernel up (it says *why* it died)
            provisioner = self.provisioner if self.has_kernel else None
            code = await provisioner.poll() if provisioner is not None else None
            if code is not None and provisioner.process is not None:
                type(self).exit_codes.append(code)
            return await super().is_alive()

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
        with _headless_kernel_env():
            pm.execute_notebook(notebook, str(output), parameters=parameters,
                                progress_bar=progress, cwd=str(cwd), **kernel)
    except PapermillExecutionError as err:
        return _error_line(err.exec_count, err.ename, err.evalue)
    except Exception as err:  # the kernel died or did not start: a failed run, not a crash
        codes = getattr(kernel.get("kernel_manager_class"), "exit_codes", [])
        died = f" ({exit_status(codes[-1])})" if codes else ""
        return f"{type(err).__name__}: {_one_line(str(err))}{died}"
    return None


def exit_status(code: int) -> str:
    """A process's exit status in words: ``-9`` -> ``killed by SIGKILL``."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@contextlib.contextmanager
def _headless_kernel_env():
    """The kernel inherits ``RLNB_HEADLESS=1``: no one can click, so widgets such as the
    dashboard train in the foreground of their cell (see rlnb.widgets.dashboard)."""
    old = os.environ.get("RLNB_HEADLESS")
    os.environ["RLNB_HEADLESS"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("RLNB_HEADLESS", None)
        else:
            os.environ["RLNB_HEADLESS"] = old


def _one_line(text: str | None, limit: int = 400) -> str:
    """A multi-line message on one line (``invalid config:\n  grpo.seed: ...`` keeps the key)."""
    joined = " ".join(part.strip() for part in (text or "").strip().splitlines() if part.strip())
    return joined[:limit] + ("…" if len(joined) > limit else "")


def _error_line(exec_count, ename: str, evalue: str) -> str:
    text = _one_line(evalue)
    return f"cell In [{exec_count}] raised {ename}" + (f": {text}" if text else "")


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
    """Export a notebook to standalone HTML, widget outputs as their static fallback (see 6),
    formulas typeset by a local MathJax written beside it (``rlnb.run.mathjax``: no CDN)."""
    import nbformat
    from nbconvert import HTMLExporter

    from rlnb.run.atomic import atomic_write_text
    from rlnb.run.mathjax import local_mathjax

    notebook = Path(notebook)
    html = Path(html) if html else notebook.with_suffix(".html")
    nb = nbformat.read(notebook, as_version=4)
    nb.metadata.pop("widgets", None)
    url = local_mathjax(html.parent)
    exporter = HTMLExporter(mathjax_url=url) if url else HTMLExporter()
    body, _ = exporter.from_notebook_node(
        nb, resources={"metadata": {"name": title or notebook.stem}})
    return atomic_write_text(html, body)


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

    Bad arguments (missing notebook, unknown parameter, a value that does not fit its default,
    a config override that ``load_config`` refuses, non-empty run dir) raise ``ValueError`` or
    ``FileNotFoundError`` before anything is written; a failing cell returns ``ok=False``.
    """
    nb, path, params = _prepare(notebook, run_dir, parameters, kernel_name)
    path.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    error = _execute(nb, path / NOTEBOOK, {**params, "run_dir": str(path)},
                     kernel_name=kernel_name, cwd=nb.parent, progress=progress)
    html = _export(path / NOTEBOOK, path / HTML, f"{nb.stem}: {path.name}")
    return NotebookResult(path, path / NOTEBOOK, html, error is None, error,
                          time.perf_counter() - start, dict(parameters or {}))


# ---------------------------------------------------------------------------------- re-exports
# sweep.py and launch.py import this module, so importing them here at the top would be a cycle:
# `from rlnb.run.notebooks import sweep` loads them on first use instead (PEP 562)
