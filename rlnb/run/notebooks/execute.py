"""One notebook run headless through papermill (``rlnb run``).

    run_notebook("notebooks/01_grpo_step_by_step.ipynb", parameters={"fast": True})

A run directory holds the executed notebook (``notebook.ipynb``), its HTML export
(``notebook.html``) and whatever the notebook's ``TrainingRun`` wrote there (``config.yaml``,
``metrics.jsonl``, ``rollouts/``). The ``-p`` parameters are read and checked before a kernel
starts (``parameters.py``), so a bad one costs no run directory.

Implementation choices:
1) The kernel runs the interpreter running rlnb: by default ipykernel's built-in ``python3`` spec,
   made for ``sys.executable``, and never the first kernelspec called ``python3`` that
   jupyter_client would find (``JUPYTER_PATH`` and the user's data dir come before the
   environment's own). ``kernel_name`` picks a named kernelspec instead.
2) The kernel starts in the notebook's folder, as in Jupyter; ``run_dir`` is passed absolute.
3) A failing cell does not lose the run: papermill saves the notebook with the error in it, the
   HTML is still exported, and the result names the cell and the exception.
4) The HTML export drops the saved widget state, so each widget output falls back to the
   text/html or text/plain it carries (rendering the live widget needs scripts from a CDN).
   Its formulas use a MathJax copied next to it (``mathjax/``, ``rlnb.run.notebooks.mathjax``), so
   the page typesets them offline; the template's require.js (a CDN script no rlnb output needs)
   is left out, so the page requests nothing from the network.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb.run.notebooks.parameters import check_parameters, one_line

NOTEBOOK, HTML = "notebook.ipynb", "notebook.html"


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


def notebook_file(notebook: str | Path) -> Path:
    """The notebook's path, checked: a missing one is a FileNotFoundError, a folder (or another
    non-file) a ValueError saying so."""
    nb = Path(notebook)
    if nb.is_dir():
        raise ValueError(f"{nb} is a directory, not a notebook: give the .ipynb file")
    if not nb.is_file():
        raise FileNotFoundError(f"no notebook at {nb}")
    return nb


def check_is_notebook(nb: Path) -> None:
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


def check_kernel(kernel_name: str) -> None:
    """A Jupyter kernel named ``kernel_name`` is installed, else a ValueError listing those that
    are."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

    ksm = KernelSpecManager()
    try:
        ksm.get_kernel_spec(kernel_name)
    except NoSuchKernel:
        known = ", ".join(sorted(ksm.find_kernel_specs())) or "none"
        raise ValueError(f"no Jupyter kernel named {kernel_name!r} (installed: {known})") from None


def prepare_run(notebook, run_dir, parameters, kernel_name, *, fresh: bool = True
                ) -> tuple[Path, Path, dict[str, Any]]:
    """Check everything before anything is written; returns absolute notebook and run dir
    (which must be new or empty unless ``fresh=False``)."""
    nb = notebook_file(notebook)
    check_is_notebook(nb)
    params = check_parameters(nb, parameters or {})
    if kernel_name is not None:
        check_kernel(kernel_name)
    path = Path(run_dir) if run_dir is not None else new_run_path("runs", nb.stem)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is a file, not a directory: choose a new run directory")
    if path.exists() and fresh and any(path.iterdir()):
        raise ValueError(f"{path} exists and is not empty: choose a new run directory")
    return nb.resolve(), path.resolve(), params


def new_run_path(root: str | Path, prefix: str) -> Path:
    """``root/<prefix>-<YYYYmmdd-HHMMSS>`` (``-2``, ``-3``, ... when taken), not created."""
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

        @default("transport")
        def _transport_default(self):
            # Unix sockets where there are: TCP ports are picked free, released, then bound by
            # the kernel, and a kernel started at the same moment elsewhere (a sweep's other
            # point, a test worker) can take one in between ("Address already in use")
            return "ipc" if os.name == "posix" else "tcp"

        @default("ip")
        def _ip_default(self):
            if self.transport != "ipc":
                return super()._ip_default()
            # the sockets' path prefix: unique and absolute (jupyter_client's default is
            # "kernel-ipc" in the kernel's folder, shared by ranks started in one folder), and
            # short (a Unix socket path holds about 100 characters)
            import tempfile
            import uuid

            return os.path.join(tempfile.gettempdir(), f"rlnb-kernel-{uuid.uuid4().hex[:12]}")

        @default("kernel_spec_manager")
        def _kernel_spec_manager_default(self):
            # no kernel dirs: "python3" resolves to ipykernel's built-in spec for this interpreter
            return KernelSpecManager(kernel_dirs=[])

        async def _async_interrupt_kernel(self) -> None:
            # jupyter_client interrupts every kernel (SIGINT) before it asks it to shut down; an
            # ipykernel caught between two messages then logs "KeyboardInterrupt caught in
            # kernel" on stderr (seen in CI). ipykernel answers the shutdown request on its
            # control thread, busy or not, so the interrupt is not needed then; nbclient's own
            # interrupts (a cell's timeout) go through interrupt_kernel and still signal
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

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


def skip_iri_grammar() -> None:
    """Spare every ``rlnb run`` / ``sweep`` / ``launch`` process 1.5-2 s of start-up: jsonschema
    (imported by nbformat and papermill) imports ``rfc3987_syntax`` when it is installed (the
    Jupyter server's ``jsonschema[format-nongpl]`` brings it), and that module builds 38 lark
    grammars at import, to check the "iri" string format that no notebook schema uses. Marking
    it absent makes jsonschema's optional import fail quietly; a process that already imported
    it keeps it."""
    sys.modules.setdefault("rfc3987_syntax", None)


def run_papermill(notebook, output: Path, parameters: dict, *, kernel_name: str | None,
                  cwd: Path, progress: bool) -> str | None:
    """Run ``notebook`` (a path or a NotebookNode) into ``output``; the error as one line."""
    skip_iri_grammar()
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
        return f"{type(err).__name__}: {one_line(str(err))}{died}"
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


def _error_line(exec_count, ename: str, evalue: str) -> str:
    text = one_line(evalue)
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
    """Export a notebook to standalone HTML, widget outputs as their static fallback (see 4),
    formulas typeset by a local MathJax written beside it (``rlnb.run.notebooks.mathjax``: no
    CDN)."""
    skip_iri_grammar()
    import nbformat
    from nbconvert import HTMLExporter

    from rlnb.run.notebooks.mathjax import local_mathjax
    from rlnb.run.store.atomic import atomic_write_text

    notebook = Path(notebook)
    html = Path(html) if html else notebook.with_suffix(".html")
    nb = nbformat.read(notebook, as_version=4)
    nb.metadata.pop("widgets", None)
    url = local_mathjax(html.parent)
    exporter = HTMLExporter(mathjax_url=url) if url else HTMLExporter()
    body, _ = exporter.from_notebook_node(
        nb, resources={"metadata": {"name": title or notebook.stem}})
    # nbconvert's template loads require.js from a CDN for widget and figure outputs that use an
    # AMD loader; rlnb's have none (plotly.js is inline: rlnb.widgets.static), so the page loads
    # nothing from the network (mermaid, also on a CDN, loads only for a mermaid diagram)
    body = body.replace(f'<script src="{exporter.require_js_url}"></script>', "")
    return atomic_write_text(html, body)


def try_export_html(notebook: Path, html: Path, title: str) -> Path | None:
    """``export_html``, for a run's record: None, with a line on stderr, when the notebook is
    missing or the export fails (the executed notebook is what counts)."""
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
    nb, path, params = prepare_run(notebook, run_dir, parameters, kernel_name)
    path.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    error = run_papermill(nb, path / NOTEBOOK, {**params, "run_dir": str(path)},
                          kernel_name=kernel_name, cwd=nb.parent, progress=progress)
    html = try_export_html(path / NOTEBOOK, path / HTML, f"{nb.stem}: {path.name}")
    return NotebookResult(path, path / NOTEBOOK, html, error is None, error,
                          time.perf_counter() - start, dict(parameters or {}))
