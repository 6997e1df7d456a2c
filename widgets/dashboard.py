"""The live training dashboard: the plots the trainer's loop declares (GRPO: reward, KL,
entropy, clipping, length and stage timings; PPO: value loss and explained variance instead of
entropy and length; DPO and async GRPO: their own).

    dash = Dashboard(run)   # a TrainingRun (steps logged to its run dir) or a bare trainer
    dash.display()          # live plots + Stop button + metric cards (info toggle)
    dash.run(200)           # trains in a background thread; the kernel stays free
    await dash.finished()   # wait in a cell; clicks (Stop) still reach the kernel meanwhile

It only reads: the metrics dicts a run's ``steps`` (or a trainer's ``train``) yields, or
``update(metrics)`` from any loop, so the trainer never knows a dashboard exists (the UI hangs
off the loop).

Implementation choices:
1) Columns are kept per metric key and appended to, so taking in a step costs one append per key
   and one figure update, whatever the history (see benchmarks/bench_widgets.py).
2) ``run`` trains in a thread when the kernel has an interactive front end, so the Stop button's
   click reaches Python; the loop checks the stop flag between steps, so a stop always ends
   after a complete step (weights, optimizer and run directory stay consistent). Headless
   (``RLNB_HEADLESS=1``, set by ``rlnb run``/``sweep``/``launch``, or no IPython kernel) it runs in
   the calling thread: papermill then waits for training like for any cell.
3) While it trains, the figure is redrawn at most every ``redraw_interval`` seconds (and once at
   the end), never once per step. A tiny model takes tens of steps a second, and each redraw
   sends every trace's whole history: one redraw per step flooded the browser, whose main
   thread then queued a click on Stop behind seconds of plot updates, so the click reached the
   kernel after training had ended. A direct ``update(metrics)`` (a step taken by hand) still
   redraws at once.
4) ``call_between_steps(fn)`` runs ``fn`` in the training thread after the step in progress:
   the config panel applies a change made during training that way, so no step ever sees half
   of it.
5) The static twin (``static_html``) is a plotly figure plus a table of the last values; it is
   refreshed in the saved output when a run ends.
6) The panels are those the trainer's loop declares (``trainer.panels``, ``panels_for``): PPO
   shows its critic's value loss and explained variance; DPO its preference loss, implicit
   rewards, the pairs' log-probs, preference accuracy and KL to the reference. How each panel
   draws (the reward's interval, smoothing, undefined points) is in ``panels.py``; the smoothing
   control only redraws.
"""

from __future__ import annotations

import math
import os
import threading
import time
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from rlnb.run.training.probes import attach_probes
from rlnb.widgets.cards import metric_card
from rlnb.widgets.panels import (
    SMOOTHING,
    Panel,
    band_series,
    build_figure,
    panels_for,
    rolling_mean,
    task_panels,
)
from rlnb.widgets.static import LiveAndStatic, figure_html, table_html


def training_loop(source):
    """``(trainer, steps, log)`` of a ``TrainingRun`` (its steps are logged to the run directory)
    or of a bare trainer (steps are only plotted, with the probes a run would attach:
    ``rlnb.run.training.probes``); ``steps(n)`` yields ``StepMetrics`` and ``log(metrics)``
    records a step taken stage by stage."""
    if hasattr(source, "steps") and hasattr(source, "trainer"):  # a TrainingRun
        return source.trainer, source.steps, source.log
    if hasattr(source, "probes"):  # what a run would measure: the funnel, the memory peaks
        attach_probes(source)
    return source, source.train, lambda metrics: None


def is_headless() -> bool:
    """True when no interactive front end can click a button (papermill via rlnb, scripts)."""
    if os.environ.get("RLNB_HEADLESS", "") not in ("", "0"):
        return True
    try:
        from IPython import get_ipython
    except ImportError:
        return True
    shell = get_ipython()
    return shell is None or not hasattr(shell, "kernel")


def no_accuracy_note(trainer) -> str | None:
    """The line saying why there is no accuracy: the task has no notion of correct."""
    task = getattr(trainer, "task", None)
    if task is None or getattr(task, "defines_correct", True):
        return None
    return ("no accuracy: no reward defines a correct response (data.correct_reward names "
            "one); the markers are the held-out reward")


class Dashboard(LiveAndStatic):
    """Live plots of a training run; ``update(metrics)`` takes one step's metrics dict."""

    _instances: weakref.WeakSet = weakref.WeakSet()

    @classmethod
    def training(cls, trainer) -> Dashboard | None:
        """The dashboard training ``trainer`` in the background right now, if any."""
        return next((d for d in list(cls._instances) if d.trainer is trainer and d.running), None)

    def __init__(self, source=None, *, panels: tuple[Panel, ...] | None = None,
                 history: Iterable[dict[str, Any]] = (), redraw_interval: float = 0.5):
        """``source``: a ``TrainingRun`` or a trainer to train from (None: plots only);
        ``panels``: default, those of the trainer's loop (``panels_for``)."""
        import ipywidgets as w

        self.trainer, self._steps, self.log = (
            training_loop(source) if source is not None else (None, None, None))
        history = list(history)
        self.panels = panels if panels is not None else panels_for(self.trainer, history)
        panels = self.panels
        self.redraw_interval = redraw_interval
        self._last_redraw = -math.inf
        self._between_steps: list = []  # callables queued for the training thread
        self._loop_open = False  # the training thread still takes queued callables
        self._queue_lock = threading.Lock()
        Dashboard._instances.add(self)
        self.fig, self._index = build_figure(panels)
        self.columns: dict[str, tuple[list[float], list[float]]] = {}  # key -> (steps, values)
        self.history: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._running = False
        self._on_running_change: list = []  # callables: training started or ended
        self.error: BaseException | None = None
        self.stop_button = w.Button(description="Stop", icon="stop", button_style="danger",
                                    disabled=True, tooltip="end training after the current step")
        self.stop_button.on_click(lambda _: self.stop())
        self.info = w.ToggleButton(description="metric cards", icon="info", value=False,
                                   tooltip="formula, expected range and what to check")
        self.cards = w.HTML(self.cards_html(), layout=w.Layout(display="none"))
        self.info.observe(self._toggle_cards, names="value")
        self.note = no_accuracy_note(self.trainer)
        self.status = w.HTML(self._status_text("ready"))
        self.smoothing = w.Dropdown(
            options=list(SMOOTHING), value=1, description="smoothing",
            layout=w.Layout(width="220px"),
            tooltip="trailing mean of each line over the last N logged steps; the reward band "
                    "is then the interval of that mean")
        self.smoothing.observe(lambda _: self.redraw(), names="value")
        self.widget = w.VBox([w.HBox([self.status, self.stop_button, self.info, self.smoothing]),
                              self.fig, self.cards])
        for metrics in history:
            self.update(metrics, redraw=False)
        self.redraw()

    # ------------------------------------------------------------------ data in
    def update(self, metrics: dict[str, Any], *, redraw: bool = True) -> None:
        """Take in one step's metrics (``step`` key, else the next index)."""
        step = metrics.get("step", len(self.history) + 1)
        self.history.append(dict(metrics))
        undefined = {k for p in self.panels if p.defined and not p.defined(metrics) for k in p.keys}
        for key, value in metrics.items():
            if key == "step" or not isinstance(value, (int, float)):  # None: a NaN on disk
                continue
            xs, ys = self.columns.setdefault(key, ([], []))
            xs.append(step)
            ys.append(math.nan if key in undefined else float(value))  # panels.py, choice 3
        if redraw:
            self.redraw()
            self.status.value = self._status_text(f"step {step}")

    def redraw(self) -> None:
        """Push the columns into the figure (one batched message), smoothed over the window the
        smoothing control holds (panels.py, choice 2)."""
        self._last_redraw = time.monotonic()
        window = int(self.smoothing.value)
        empty: tuple[list[float], list[float]] = ([], [])
        bands: dict[str, tuple] = {}
        with self.fig.batch_update():
            for (key, role), i in self._index.items():
                xs, ys = self.columns.get(key, empty)
                trace = self.fig.data[i]
                if role == "line":  # numpy: plotly validates lists per element
                    trace.x, trace.y = np.asarray(xs, dtype=float), rolling_mean(ys, window)
                elif role == "markers":
                    trace.x, trace.y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
                else:  # band: mean ± width·se, on the steps where both exist
                    if key not in bands:
                        panel = next(p for p in self.panels if p.band and p.keys[0] == key)
                        sx, sy = self.columns.get(panel.band, empty)
                        bands[key] = band_series(xs, ys, dict(zip(sx, sy)),
                                                 width=panel.band_width, window=window)
                    x, lower, upper = bands[key]
                    trace.x, trace.y = x, lower if role == "lower" else upper

    @classmethod
    def from_run_dir(cls, path: str | Path, **kwargs) -> Dashboard:
        """Replay a saved run's ``metrics.jsonl`` (no trainer needed), with the panels of the
        loop the run recorded (``parts.json``; else its config's ``algorithm``)."""
        from rlnb.run.store.rundir import RunDir, read_metrics_file

        records = read_metrics_file(Path(path) / RunDir.METRICS)
        config = Path(path) / RunDir.CONFIG
        saved = {}
        if config.is_file():  # read as every run file is: a repeated key refused, one line
            from rlnb.user_files import load_yaml

            saved = load_yaml(config.read_text(), f"run config {config}") or {}
        if "panels" not in kwargs:
            loop = recorded_loop(Path(path), saved)
            entries = saved.get("reward_funcs") or []
            names = [e["name"] or e["func"].rsplit(":", 1)[1] if isinstance(e, dict)
                     else e.rsplit(":", 1)[1] for e in entries]
            panels = panels_for(None, records, loop=loop)
            if names:  # a run of reward functions: a panel of theirs
                correct = (saved.get("data") or {}).get("correct_reward") is not None
                panels = task_panels(panels, names, correct)
            kwargs["panels"] = panels
        return cls(history=records, **kwargs)

    # ------------------------------------------------------------------ training
    @property
    def running(self) -> bool:
        """True from ``run`` until the last step is plotted (cleared before the Stop button is
        disabled, so observers of that button already see training as ended)."""
        return self._running

    @property
    def stopping(self) -> bool:
        """Stop was clicked and the step in progress has not ended yet."""
        return self._running and self._stop.is_set()

    def run(self, num_steps: int, *, background: bool | None = None) -> None:
        """Train ``num_steps`` steps with ``trainer.train``, plotting each step as it ends."""
        if self.trainer is None:
            raise ValueError("Dashboard.run needs a run or a trainer: Dashboard(run)")
        if self.running:
            raise RuntimeError("training is already running; click Stop or call wait()")
        background = (not is_headless()) if background is None else background
        self._stop.clear()
        self.error = None
        self.stop_button.disabled = False
        self._set_running(True)
        if background:
            self._loop_open = True
            self._thread = threading.Thread(target=self._loop, args=(num_steps,), daemon=True)
            self._thread.start()
        else:
            self._loop(num_steps)
            if self.error is not None:
                raise self.error

    def _loop(self, num_steps: int) -> None:
        start, done = time.perf_counter(), 0
        steps = self._steps(num_steps)
        try:
            for metrics in steps:
                done += getattr(metrics, "trained", True)  # not the validation-only record
                self.update(metrics, redraw=False)
                if time.monotonic() - self._last_redraw >= self.redraw_interval:
                    self.redraw()  # throttled: see choice 3
                    self.status.value = self._status_text(f"step {metrics.get('step', done)}")
                self._run_between_steps()
                if self._stop.is_set():
                    break
        except BaseException as err:  # shown in the status line; re-raised by run/wait
            self.error = err
        finally:
            steps.close()
            with self._queue_lock:
                self._loop_open = False
            self._run_between_steps()  # a change queued during the last step still lands
            self.redraw()
            self.stop_button.disabled = True
            self._set_running(False)
            how = "stopped" if self._stop.is_set() else "failed" if self.error else "done"
            self.status.value = self._status_text(
                f"{how}: {done} steps in {time.perf_counter() - start:.1f} s"
                + (f" — {type(self.error).__name__}: {self.error}" if self.error else "")
            )
            self.refresh_static()

    def on_running_change(self, fn) -> None:
        """Call ``fn()`` whenever training starts or ends (the stepper greys its buttons)."""
        self._on_running_change.append(fn)

    def _set_running(self, running: bool) -> None:
        self._running = running
        for fn in self._on_running_change:
            fn()

    def call_between_steps(self, fn) -> bool:
        """Run ``fn()`` after the step in progress if training runs in the background (returns
        True), else at once (returns False)."""
        with self._queue_lock:
            if self._loop_open:
                self._between_steps.append(fn)
                return True
        fn()
        return False

    def _run_between_steps(self) -> None:
        with self._queue_lock:
            pending, self._between_steps = self._between_steps, []
        for fn in pending:
            fn()  # callers report their own errors (the config panel shows them)

    def stop(self) -> None:
        """End training after the step in progress."""
        self._stop.set()
        self.stop_button.disabled = True
        self.status.value = self._status_text("stopping after this step…")

    async def finished(self, poll: float = 0.1) -> None:
        """``await dash.finished()``: wait for background training in a cell while the kernel
        keeps handling clicks (a blocking ``wait()`` holds the kernel, so a Stop clicked
        meanwhile would only be read after training ended); re-raises its error."""
        import asyncio

        while self.running:
            await asyncio.sleep(poll)
        self.wait()

    def wait(self, timeout: float | None = None) -> None:
        """Block until background training ends; re-raises its error."""
        if self._thread is not None:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                # again from this cell: headless executors (nbclient) drop output that the
                # thread sent once the cell that started it had finished
                self.refresh_static()
        if self.error is not None:
            raise self.error

    # ------------------------------------------------------------------ views
    def _status_text(self, text: str) -> str:
        note = f" — {self.note}" if getattr(self, "note", None) else ""
        return f"<span style='font-family:monospace;padding:0 1em'>{text}{note}</span>"

    def _toggle_cards(self, change) -> None:
        self.cards.layout.display = "block" if change["new"] else "none"

    def plotted_keys(self) -> list[str]:
        keys = []
        for p in self.panels:
            keys += [*p.keys, *([p.band] if p.band else []), *([p.markers] if p.markers else [])]
        return keys

    def cards_html(self) -> str:
        blocks = []
        for key in self.plotted_keys():
            try:
                blocks.append(metric_card(key).html())
            except KeyError as err:
                blocks.append(f"<div class='rlnb-card'><code>{key}</code>: {err}</div>")
        return "".join(blocks)

    def static_figure(self):
        """A plain ``go.Figure`` copy of the live figure (for HTML and saved notebooks)."""
        import plotly.graph_objects as go

        return go.Figure(self.fig.to_dict())

    def last_values(self) -> list[dict[str, Any]]:
        """Per plotted key: the last defined value, its step, and the min / max (NaN, an
        undefined point, left out)."""
        rows = []
        for key in self.plotted_keys():
            xs, ys = self.columns.get(key, ([], []))
            defined = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
            if defined:
                values = [y for _, y in defined]
                rows.append({"metric": key, "step": defined[-1][0], "last": values[-1],
                             "min": min(values), "max": max(values)})
        return rows

    def static_html(self) -> str:
        n = len(self.history)
        note = f" — {self.note}" if self.note else ""
        return (f"<div><b>rlnb dashboard</b> — {n} steps (static snapshot){note}</div>"
                + figure_html(self.static_figure()) + table_html(self.last_values()))


def recorded_loop(run_dir: Path, saved: dict) -> str | None:
    """The loop a run recorded: the trainer class in its ``parts.json`` (``"module.Class"``),
    else its config's ``algorithm``; None if neither says (the panels then follow the keys)."""
    import json

    try:
        parts = json.loads((run_dir / "parts.json").read_text())
    except (OSError, ValueError):
        parts = {}
    trainer = next((v for k, v in parts.items() if k.startswith("algorithm=")), None)
    return trainer or saved.get("algorithm")
