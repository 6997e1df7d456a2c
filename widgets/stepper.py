"""The stage stepper: buttons that run one stage of the loop at a time and show each result.

    stepper = StageStepper(run, dashboard=dash)   # a TrainingRun (or a bare trainer)
    stepper.display()      # Rollout | Advantages | Update | Step | Run N | Stop
                           # PPO: Rollout | Values | Advantages | Update | ...
                           # DPO: Pairs | Reference | Loss | Update | ...

The stage buttons are the ones the trainer's loop declares (``trainer.stages``, ``Stage`` in
``rlnb/engine/trainers/views.py``: the label, the method it calls, what must run first), so a
new loop brings its own; pressing them in order is one step taken by hand (the stepper then
logs it like a step of the run and feeds the dashboard). Step runs them all at once; Run N
trains N steps through the dashboard (in the background, so Stop works). The next stage's
button is highlighted. The last results stay on the object under the names the stages keep
them (``stepper.rollout``, ``.advantages``, ``.result``; PPO's ``.values``; DPO: the pairs in
``.rollout``, their scores in ``.advantages``; all in ``stepper.results``) for the cells below.
"""

from __future__ import annotations

import html
import time

from rlnb.engine.trainers.views import RECORDED
from rlnb.widgets.static import LiveAndStatic

# the stepper's own buttons after the loop's stages -> their tooltips
CONTROLS = {
    "Step": "all the stages",
    "Run N": "train N steps (plots update live; Stop ends it)",
    "Stop": "end Run N after the current step",
}


class StageStepper(LiveAndStatic):
    def __init__(self, source, dashboard=None, *, run_steps: int = 10):
        import ipywidgets as w

        from rlnb.widgets.dashboard import Dashboard, training_loop

        self.trainer, self._steps, self._log = training_loop(source)
        specs = tuple(getattr(self.trainer, "stages", ()))
        if not specs:
            raise TypeError(f"{type(self.trainer).__name__} declares no stages to step through "
                            "(Trainer.stages, rlnb/engine/trainers/views.py)")
        clash = [s.name for s in specs if s.name in CONTROLS]
        if clash:
            raise ValueError(f"stages {clash} of {type(self.trainer).__name__} are named like "
                             f"the stepper's own buttons {list(CONTROLS)}")
        self.dashboard = dashboard if dashboard is not None else Dashboard(source)
        self._specs = {s.name: s for s in specs}
        self.stages = tuple(self._specs)  # the stage buttons' labels, in order
        self.results = dict.fromkeys((*RECORDED, *(s.keeps for s in specs)))
        self._done: set[str] = set()  # the stages run on the current batch
        self._trained = False  # the current batch has been through the last stage: start again
        self._started: float | None = None
        self.next_stage = self.stages[0]
        tips = {s.name: f"stage {i}: {s.describe(self.trainer)}" for i, s in enumerate(specs, 1)}
        self.buttons = {name: w.Button(description=name, tooltip=tip)
                        for name, tip in {**tips, **CONTROLS}.items()}
        self.run_steps = w.BoundedIntText(value=run_steps, min=1, max=100_000, description="N",
                                          layout=w.Layout(width="130px"))
        for name, button in self.buttons.items():
            button.on_click(lambda _, name=name: self.press(name))
        self.label = w.HTML()
        self.view = w.HTML()
        self.widget = w.VBox([
            w.HBox([*(self.buttons[s] for s in (*self.stages, "Step")), self.run_steps,
                    self.buttons["Run N"], self.buttons["Stop"]]),
            self.label, self.view,
        ])
        self.dashboard.on_running_change(self._refresh)
        self._refresh()

    def __getattr__(self, name: str):
        """A stage's last result by the name it keeps it under (``stepper.rollout``)."""
        results = self.__dict__.get("results", {})
        if name in results:
            return results[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # ------------------------------------------------------------------ actions
    def press(self, name: str) -> None:
        """What a click on button ``name`` does (tests and scripts can call it directly)."""
        try:
            if name in self._specs:
                self.run_stage(name)
            else:
                {"Step": self.do_step, "Run N": self.do_run, "Stop": self.dashboard.stop}[name]()
        except Exception as err:  # shown in the widget; the notebook keeps running
            self._show(f"<pre style='color:#b00'>{html.escape(type(err).__name__)}: "
                       f"{html.escape(str(err))}</pre>")
        self._refresh()

    def run_stage(self, name: str):
        """Stage ``name`` of the loop on the current batch: the trainer method it names, called
        with the results it takes; the first stage starts a new batch, the last one ends the
        step (logged and plotted like a step of the run). Returns the stage's result."""
        stage, first, last = self._specs[name], name == self.stages[0], name == self.stages[-1]
        self._check_idle()
        for needed, why in stage.needs:
            if needed not in self._done:
                raise ValueError(f"run {needed} first: {why}")
        if not first:
            self._check_untrained()
        else:
            self._started = time.perf_counter()
        taken = [self.results[key] for key in stage.takes]
        result = getattr(self.trainer, stage.method)(*taken)
        if first:  # a new batch: the last one's results go
            self.results = dict.fromkeys(self.results)
            self._done, self._trained = set(), False
        self.results[stage.keeps] = result
        self._done.add(name)
        self.next_stage = self.stages[(self.stages.index(name) + 1) % len(self.stages)]
        if last:
            self._end_step()
        text, frame = (stage.view(result, *taken) if stage.view is not None else
                       (result.summary(), result.to_frame() if hasattr(result, "to_frame")
                        else None))
        self._show(_pre(text) + ("" if frame is None
                                 else frame.head(32).to_html(max_rows=32)))
        return result

    def _end_step(self):
        """The last stage has run: record the step (the run directory, the dashboard)."""
        self._trained = True
        seconds = time.perf_counter() - self._started if self._started else None
        metrics = self.trainer.record_step(*(self.results[k] for k in RECORDED), seconds)
        self._log(metrics)  # to the run directory, like a step of the loop
        self.dashboard.update(metrics)

    def do_step(self):
        self._check_idle()
        for metrics in self._steps(1):
            self.dashboard.update(metrics)
            if metrics.trained:  # (a first record may be validation only)
                recorded = dict(zip(RECORDED, (metrics.rollout, metrics.advantages,
                                               metrics.result)))
                # a stage's own result, where the step's advantages carry it (PPO's values)
                self.results = {k: recorded[k] if k in recorded
                                else getattr(metrics.advantages, k, None) for k in self.results}
        self._done, self._trained = set(self.stages), True
        self.next_stage = self.stages[0]
        self._show(_pre(f"step {self.trainer.step_count}\n{self.results['result'].summary()}"))
        return metrics

    def do_run(self):
        self._check_idle()
        self.dashboard.run(int(self.run_steps.value))
        self._show(_pre(f"running {self.run_steps.value} steps (see the dashboard)"
                        if self.dashboard.running else
                        f"ran to step {self.trainer.step_count}"))

    # ------------------------------------------------------------------ views
    def _check_untrained(self):
        if self._trained:
            raise ValueError(f"run {self.stages[0]} first: this batch has already been trained "
                             "on (its log-probs are no longer the policy's)")

    def _check_idle(self):
        if self.dashboard.running:
            raise RuntimeError("training is running (Run N); click Stop first")

    def _refresh(self):
        running = self.dashboard.running
        for name, button in self.buttons.items():
            button.disabled = running if name != "Stop" else not running or self.dashboard.stopping
            button.button_style = "primary" if name == self.next_stage and not running else ""
        self.label.value = (
            f"<i>step {self.trainer.step_count} done — next stage: <b>{self.next_stage}</b></i>"
            if not running else "<i>training… (Stop ends it after the current step)</i>"
        )

    def _show(self, html_text: str):
        self.view.value = html_text

    def static_html(self) -> str:
        return self.label.value + self.view.value


def _pre(text: str) -> str:
    return f"<pre>{html.escape(text)}</pre>"
