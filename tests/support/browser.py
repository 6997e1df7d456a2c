"""Drive JupyterLab in a real headless Chromium: a throwaway server, a browser, and the few
page actions a notebook test needs (open, Run All Cells, wait, read plots, click a widget).

Used by tests/ui/test_browser.py, and handy from a shell when a widget misbehaves only in the lab:

    with jupyter_lab(tmp) as lab, chromium(tmp / "profile") as browser:
        shutil.copy("notebooks/demo.ipynb", lab.root)
        with notebook_session(browser, lab, "demo.ipynb", tmp / "artifacts") as nb:
            run_all_cells(nb.page)
            print(error_outputs(nb.page), plot_trace_lengths(nb.page))

The server runs from this interpreter's environment with its own Jupyter config, data, runtime,
settings and workspace folders (nothing from ~/.jupyter leaks in, no saved layout is restored),
while the environment's lab extensions (ipywidgets, plotly, anywidget) are still found under
sys.prefix/share/jupyter/labextensions. The kernel is this interpreter.

Selectors below are JupyterLab 4's (checked on 4.6); each one is named once, here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import quote

if TYPE_CHECKING:  # playwright is a dev dependency: import it only where a browser is launched
    from playwright.sync_api import BrowserContext, Page

# Flags for a root user in a container with no GPU and no internet (see shared ENVIRONMENT.md).
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]

# --- JupyterLab 4 DOM
NOTEBOOK_CELL = ".jp-NotebookPanel .jp-Notebook .jp-Cell"
CODE_PROMPT = ".jp-NotebookPanel .jp-CodeCell .jp-InputPrompt"  # text "[ ]:", "[*]:", "[3]:"
# The notebook toolbar's kernel indicator; data-status is the kernel status ("idle", "busy", ...).
KERNEL_INDICATOR = ".jp-NotebookPanel .jp-Notebook-ExecutionIndicator"
KERNEL_NAME = ".jp-NotebookPanel .jp-Toolbar-kernelName"  # "No Kernel" until one is attached
MENUBAR_LABEL = ".lm-MenuBar-itemLabel"
MENU_ITEM = ".lm-Menu-item"  # carries data-command, e.g. "runmenu:run-all"
DIALOG = ".jp-Dialog"
# An error output is rendered as the traceback text under the stderr mime type; the output
# wrapper has no separate "error" mime type in JupyterLab 4.
STDERR_OUTPUT = '.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
TRACEBACK = re.compile(
    r"Traceback \(most recent call last\)|^\s*Cell In\[\d+\], line \d+", re.M
)
PLOTLY_GRAPH = ".js-plotly-plot"  # the div plotly.js draws into; its .data is the traces
WIDGET_BUTTON = ".widget-button"  # an ipywidgets Button; its text is the description
WIDGET_HTML = ".widget-html"

# User settings for the isolated lab: attach every cell to the DOM (the default windowing leaves
# off-screen cells, and so their widgets, unrendered), and never ask about or fetch news (no
# internet; a toast would cover the page). The notebook's kernelspec picks the kernel: adding
# autoStartDefaultKernel made the lab now and then start two kernels and shut the first one
# down under a running Run All.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification": {
        "fetchNews": "false", "checkForUpdates": False,
    },
}


def find_chromium() -> str | None:
    """The system Chromium, or None. Never `playwright install`: it downloads a browser."""
    path = shutil.which("chromium") or "/usr/bin/chromium"
    return path if os.access(path, os.X_OK) else None


# --- server


@dataclass
class LabServer:
    url: str  # http://127.0.0.1:PORT
    root: Path  # the server's root_dir: notebooks go here
    log: Path  # the server's stdout and stderr

    def notebook_url(self, name: str, workspace: str) -> str:
        # A workspace of its own: the default one would reopen the notebooks of earlier pages
        # (their tabs, and kernels), and menu commands would act on whichever is current.
        return f"{self.url}/lab/workspaces/{quote(workspace)}/tree/{quote(name)}"

    def api(self, path: str, method: str = "GET"):
        request = urllib.request.Request(f"{self.url}/api/{path}", method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            body = response.read()
        return json.loads(body) if body else None

    def shut_down_kernels(self, name: str) -> None:
        """End the sessions (and so the kernels) the lab holds for notebook `name`."""
        for session in self.api("sessions"):
            if session["path"] == name:
                self.api(f"sessions/{session['id']}", method="DELETE")

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=1))


def _isolated_env(state: Path, cache: Path, extra: Mapping[str, str]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        OMP_NUM_THREADS="1",  # leave a core to the browser on a 2-core machine
        RLNB_CACHE_DIR=str(cache),
        PYTHONUNBUFFERED="1",
        JUPYTER_CONFIG_DIR=str(state / "config"),
        JUPYTER_DATA_DIR=str(state / "data"),  # searched first; sys.prefix/share/jupyter after it
        JUPYTER_RUNTIME_DIR=str(state / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(state / "settings"),
        JUPYTERLAB_WORKSPACES_DIR=str(state / "workspaces"),
        IPYTHONDIR=str(state / "ipython"),  # no user startup files or profile
    )
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env.update(extra)
    return env


def _write_kernelspec(data_dir: Path) -> None:
    # Shadows any other "python3" spec (the environment's own one runs whatever `python` is on
    # PATH): the kernel is exactly this interpreter.
    _write_json(data_dir / "kernels" / "python3" / "kernel.json", {
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
        "metadata": {"debugger": True},
    })


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM the server (it shuts its kernels down), then kill by PID whatever is left.

    Kernels run in sessions of their own (jupyter_client starts them with start_new_session),
    so they are found as the server's children, not through its process group.
    """
    import psutil  # a dependency of ipykernel, so present wherever the lab runs

    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    for child in alive:  # psutil.Process checks the PID was not reused before signalling
        try:
            child.kill()
        except psutil.NoSuchProcess:
            pass


@contextmanager
def jupyter_lab(workdir: Path, *, timeout: float = 120.0,
                env: Mapping[str, str] | None = None) -> Iterator[LabServer]:
    """Start `jupyter lab` on a free port with root_dir `workdir/root`; stop it at exit.

    Waits until /api/status answers; if the server dies or does not answer within `timeout`
    seconds, raises RuntimeError with the tail of its log.
    """
    workdir = Path(workdir)
    root, state = workdir / "root", workdir / "jupyter"
    root.mkdir(parents=True, exist_ok=True)
    _write_kernelspec(state / "data")
    for plugin, settings in LAB_SETTINGS.items():
        _write_json(state / "settings" / f"{plugin}.jupyterlab-settings", settings)
    port = _free_port()
    lab = LabServer(url=f"http://127.0.0.1:{port}", root=root, log=workdir / "jupyter-lab.log")
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
        "--IdentityProvider.token=", "--ServerApp.password=", "--allow-root",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.port_retries=0",  # fail loudly rather than serve on a port we don't know
        "--ServerApp.disable_check_xsrf=True",  # lets LabServer.api DELETE without a cookie
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    with open(lab.log, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=root,
                                env=_isolated_env(state, workdir / "cache", env or {}),
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{lab.log_tail()}")
            try:
                with urllib.request.urlopen(f"{lab.url}/api/status", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"jupyter lab did not answer in {timeout:.0f} s:\n"
                                   f"{lab.log_tail()}")
            time.sleep(0.25)
        yield lab
    finally:
        _stop(proc)


# --- browser


ACTION_TIMEOUT_MS = 120_000


@contextmanager
def chromium(profile_dir: Path, *, executable: str | None = None,
             viewport: tuple[int, int] = (1400, 1000)) -> Iterator[BrowserContext]:
    """A headless system Chromium with a fresh profile in `profile_dir`."""
    from playwright.sync_api import sync_playwright

    executable = executable or find_chromium()
    if executable is None:
        raise FileNotFoundError("no chromium on PATH or at /usr/bin/chromium")
    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(profile_dir), executable_path=executable, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": viewport[0], "height": viewport[1]},
        )
        # an action (a click, a fill) waits up to this long for the page to take it: Playwright's
        # 30 s default was once too short in CI, where a click into a cell while Run N redrew the
        # plots every step waited past it (2 test workers and the tiers' pip builds on 2 cores)
        context.set_default_timeout(ACTION_TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


@dataclass
class NotebookPage:
    page: Page
    console: list[str] = field(default_factory=list)  # browser console lines and page errors

    def save_artifacts(self, out_dir: Path, name: str = "failure") -> list[Path]:
        """Write a screenshot and the console log into `out_dir`; return their paths."""
        out_dir.mkdir(parents=True, exist_ok=True)
        shot, log = out_dir / f"{name}.png", out_dir / f"{name}-console.log"
        log.write_text("\n".join(self.console) + "\n")
        try:
            self.page.screenshot(path=str(shot), timeout=15_000)
        except Exception as exc:  # a crashed page still leaves its console log behind
            shot = out_dir / f"{name}-screenshot-failed.txt"
            shot.write_text(repr(exc))
        return [shot, log]


@contextmanager
def notebook_session(browser: BrowserContext, lab: LabServer, name: str, artifacts: Path, *,
                     timeout: float = 90.0) -> Iterator[NotebookPage]:
    """Open `lab.root/name` in a new tab and yield once its cells show and its kernel is idle.

    If the body (or the opening) fails, saves a screenshot and the console log into `artifacts`
    and raises an AssertionError that names them and quotes the ends of the console and server
    logs (in CI, the message is all one gets). At exit, closes the tab and shuts the notebook's
    kernel down.
    """
    page = browser.new_page()
    nb = NotebookPage(page)
    page.on("console", lambda msg: nb.console.append(f"[{msg.type}] {msg.text}"))
    page.on("pageerror", lambda exc: nb.console.append(f"[pageerror] {exc}"))
    try:
        workspace = f"{Path(name).stem}-{uuid.uuid4().hex[:8]}"
        page.goto(lab.notebook_url(name, workspace), timeout=timeout * 1000)
        page.wait_for_selector(NOTEBOOK_CELL, timeout=timeout * 1000)
        wait_kernel_idle(page, timeout=timeout)
        yield nb
    except Exception as exc:
        shot, log = nb.save_artifacts(artifacts)
        console_tail = "\n".join(nb.console[-20:])
        raise AssertionError(
            f"{type(exc).__name__}: {exc}\n\nscreenshot: {shot}\nconsole log: {log}\n"
            f"server log: {lab.log}\nopen dialogs: {_safe(dialogs, page)}\n"
            f"--- console (last 20 lines)\n{console_tail}\n"
            f"--- server log (last 30 lines)\n{lab.log_tail(30)}"
        ) from exc
    finally:
        page.close()
        with suppress(OSError):  # a dead server has no kernels left to end
            lab.shut_down_kernels(name)


def _safe(fn, page):
    try:
        return fn(page)
    except Exception as exc:  # the page may have crashed: report, don't mask the real failure
        return f"(unavailable: {exc})"


def wait_kernel_idle(page: Page, *, timeout: float = 60.0) -> None:
    """Wait until the notebook's kernel is connected and idle.

    The execution indicator reads "idle" from the start, before any kernel exists (the toolbar
    then says "No Kernel"); a Run All clicked then is silently lost. Once a kernel is attached
    the indicator goes through "connecting", and "idle" after that is the kernel's own reply.
    """
    page.wait_for_function(
        """([indicator, name]) => {
            const kernel = document.querySelector(name)?.textContent.trim();
            return kernel && kernel !== 'No Kernel'
                && document.querySelector(indicator)?.dataset.status === 'idle';
        }""",
        arg=[KERNEL_INDICATOR, KERNEL_NAME], timeout=timeout * 1000, polling=250,
    )


def code_prompts(page: Page) -> list[str]:
    return [p.strip() for p in page.locator(CODE_PROMPT).all_text_contents()]


def run_all_cells(page: Page, *, timeout: float = 180.0) -> None:
    """Run > Run All Cells from the menu bar, then wait until no cell is queued or running.

    Done means: at least one cell has an execution count, no prompt shows "[*]", and the kernel
    is idle. Cells after a failing one are aborted (their prompt goes back to "[ ]"), so a
    failure ends the wait too: check `error_outputs` afterwards.
    """
    start_run_all(page)
    wait_all_cells_done(page, timeout=timeout)


def start_run_all(page: Page) -> None:
    """Run > Run All Cells from the menu bar; returns once the cells are queued."""
    page.locator(MENUBAR_LABEL, has_text=re.compile(r"^Run$")).click()
    item = page.locator(f'{MENU_ITEM}[data-command="runmenu:run-all"]')
    item.wait_for(state="visible", timeout=10_000)
    label = item.inner_text()
    if "Run All Cells" not in label:
        raise AssertionError(f"Run menu's run-all item reads {label!r}, not 'Run All Cells'")
    item.click()
    try:  # clicking Run All marks every code cell "[*]" at once, before the kernel runs any
        page.wait_for_function(
            "(sel) => [...document.querySelectorAll(sel)].some(e => /\\[(\\*|\\d+)\\]/"
            ".test(e.textContent))", arg=CODE_PROMPT, timeout=15_000, polling=100,
        )
    except Exception as exc:
        raise AssertionError(f"Run All Cells queued no cell; prompts: {code_prompts(page)}") from exc


def wait_all_cells_done(page: Page, *, timeout: float = 180.0) -> None:
    """Wait until no cell is queued or running (see `run_all_cells`)."""
    page.wait_for_function(
        """([prompt, indicator]) => {
            const texts = [...document.querySelectorAll(prompt)].map(e => e.textContent);
            const status = document.querySelector(indicator)?.dataset.status;
            return texts.some(t => /\\[\\d+\\]/.test(t)) && !texts.some(t => t.includes('[*]'))
                && status === 'idle';
        }""",
        arg=[CODE_PROMPT, KERNEL_INDICATOR], timeout=timeout * 1000, polling=250,
    )


def error_outputs(page: Page) -> list[str]:
    """Texts of the outputs that show an exception raised by a cell.

    JupyterLab 4 renders an error output exactly like a stderr stream (same mime type, same
    classes), so tell them apart by text: IPython's tracebacks say "Traceback (most recent call
    last)" (runtime errors) or "Cell In[n], line k" (all of them, SyntaxError included), while
    progress bars and warnings on stderr say neither.
    """
    texts = page.locator(STDERR_OUTPUT).all_inner_texts()
    return [t for t in texts if TRACEBACK.search(t)]


def error_coloured_outputs(page: Page) -> list[str]:
    """Texts of every output JupyterLab draws in its error colour: exceptions and anything a
    cell wrote to stderr (a warning, a stray progress bar), which a reader takes for an error."""
    return page.locator(STDERR_OUTPUT).all_inner_texts()


def dialogs(page: Page) -> list[str]:
    """Texts of open JupyterLab dialogs (kernel not found, kernel died, ...)."""
    return page.locator(DIALOG).all_inner_texts()


def plot_traces(page: Page) -> list[dict]:
    """For every plotly graph in the page: the number of traces, the first trace's name and
    number of x values, the layout's title and meta (the graph div's .data and .layout, as
    drawn)."""
    return page.evaluate(
        """(sel) => [...document.querySelectorAll(sel)].map(gd => ({
            traces: (gd.data || []).length,
            name: gd.data?.[0]?.name ?? null,
            points: gd.data?.[0]?.x?.length ?? null,
            title: gd.layout?.title?.text ?? (typeof gd.layout?.title === 'string'
                                               ? gd.layout.title : null),
            meta: gd.layout?.meta ?? null,
        }))""",
        PLOTLY_GRAPH,
    )


def plot_trace_y(page: Page, graph: int, name: str, nth: int = 0) -> list[float | None]:
    """The y values of the `nth` trace called `name` (a band's edges have the name "") in the
    `graph`-th plotly graph, as drawn (NaN as None)."""
    return page.evaluate(
        """([sel, g, name, nth]) => Array.from(
            (document.querySelectorAll(sel)[g]?.data ?? []).filter(t => (t.name ?? '') === name)
                [nth]?.y ?? [],
            v => (Number.isFinite(v) ? v : null))""",
        [PLOTLY_GRAPH, graph, name, nth],
    )


def plot_trace_lengths(page: Page) -> list[int | None]:
    return [t["points"] for t in plot_traces(page)]


def widget_texts(page: Page) -> list[str]:
    """Texts of the ipywidgets HTML widgets (where widgets show their messages and errors)."""
    return [t.strip() for t in page.locator(WIDGET_HTML).all_inner_texts() if t.strip()]


def button_labels(page: Page) -> list[str]:
    return [t.strip() for t in page.locator(WIDGET_BUTTON).all_inner_texts()]


def wait_for_more_points(page: Page, graph: int, than: int, *, timeout: float = 120.0) -> int:
    """Wait until the first trace of the `graph`-th plotly graph has more than `than` x values;
    return how many it has then."""
    page.wait_for_function(
        """([sel, i, n]) => (document.querySelectorAll(sel)[i]?.data?.[0]?.x?.length ?? 0) > n""",
        arg=[PLOTLY_GRAPH, graph, than], timeout=timeout * 1000, polling=250,
    )
    return plot_trace_lengths(page)[graph]


def click_button(page: Page, label: str) -> None:
    """Click the one ipywidgets button whose description is exactly `label`."""
    button = page.locator(WIDGET_BUTTON, has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))
    button.scroll_into_view_if_needed()
    button.click()


# --- driving widgets and cells


def wait_for_widget_text(page: Page, pattern: str, *, timeout: float = 30.0) -> str:
    """Wait until some ipywidgets HTML widget's text matches the regex `pattern`; return it."""
    page.wait_for_function(
        """([sel, pat]) => [...document.querySelectorAll(sel)]
            .some(e => new RegExp(pat).test(e.innerText))""",
        arg=[WIDGET_HTML, pattern], timeout=timeout * 1000, polling=100,
    )
    return next(t for t in widget_texts(page) if re.search(pattern, t))


def click_nth_button(page: Page, label: str, nth: int) -> None:
    """Click the `nth` (0-based, in page order) ipywidgets button labelled exactly `label`."""
    button = page.locator(WIDGET_BUTTON, has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))
    button.nth(nth).scroll_into_view_if_needed()
    button.nth(nth).click()


def _labelled(page: Page, kind: str, label: str):
    """ipywidgets controls of class `kind` (widget-text, widget-dropdown) whose label is
    exactly `label`."""
    return page.locator(f".{kind}", has=page.locator(
        ".widget-label", has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")))


def set_number(page: Page, label: str, value: float, nth: int = 0) -> None:
    """Type `value` into the number box labelled `label` and press Enter (which sends it)."""
    box = _labelled(page, "widget-text", label).nth(nth).locator("input")
    box.scroll_into_view_if_needed()
    box.fill(str(value))
    box.press("Enter")


def number_value(page: Page, label: str, nth: int = 0) -> float:
    return float(_labelled(page, "widget-text", label).nth(nth).locator("input").input_value())


def select_index(page: Page, label: str, index: int, nth: int = 0) -> None:
    """Choose option `index` of the `nth` dropdown labelled `label`."""
    select = _labelled(page, "widget-dropdown", label).nth(nth).locator("select")
    select.scroll_into_view_if_needed()
    select.select_option(index=index)


def click_toggle(page: Page, value: str, nth: int = 0) -> None:
    """Click the option `value` of the `nth` ToggleButtons group."""
    button = page.locator(".widget-toggle-buttons").nth(nth).locator(
        f'button[data-value="{value}"]')
    button.scroll_into_view_if_needed()
    button.click()


def run_cell(page: Page, marker: str, *, timeout: float = 60.0) -> tuple[str, float]:
    """Run the code cell whose source contains `marker` as a user would (click into it,
    Ctrl+Enter); wait for its new execution count and return (its output text, seconds from
    the key press to the output)."""
    cell = page.locator(".jp-CodeCell", has=page.locator(".jp-InputArea", has_text=marker))
    if cell.count() != 1:
        raise AssertionError(f"{cell.count()} code cells contain {marker!r}")
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.inner_text().strip()
    cell.locator(".jp-InputArea-editor").click()
    start = time.monotonic()
    page.keyboard.press("Control+Enter")
    prompt_handle = prompt.element_handle()
    page.wait_for_function(
        """([el, old]) => { const t = el.textContent.trim();
                            return /\\[\\d+\\]/.test(t) && t !== old; }""",
        arg=[prompt_handle, before], timeout=timeout * 1000, polling=50,
    )
    seconds = time.monotonic() - start
    return cell.locator(".jp-OutputArea").inner_text(), seconds


def click_toggle_button(page: Page, label: str) -> None:
    """Click the ipywidgets ToggleButton (a single on/off button) labelled `label`."""
    button = page.locator("button.widget-toggle-button",
                          has_text=re.compile(rf"^\s*{re.escape(label)}\s*$"))
    button.scroll_into_view_if_needed()
    button.click()
