"""The stage stepper: buttons that run one stage of the loop at a time and show each result.

    stepper = StageStepper(run, dashboard=dash)   # a TrainingRun (or a bare trainer)
    stepper.display()      # Rollout | Advantages | Update | Step | Run N | Stop
                           # PPO: Rollout | Values | Advantages | Update | ...
                           # DPO: Pairs | Reference | Loss | Update | ...

Rollout -> Advantages -> Update (PPO: Rollout -> Values -> Advantages -> Update, where Update is
``ppo_epochs`` passes of the critic, then the policy; DPO: Pairs -> Reference -> Loss -> Update)
is one step taken by hand (the stepper
then logs it like a step of the run and feeds the dashboard); Step runs them all at once; Run N
trains N steps through the dashboard (in the background, so Stop works). The next stage's
button is highlighted. The last results stay on the object (``stepper.rollout``, ``.values``,
``.advantages``, ``.result``; DPO: the pairs in ``.rollout``, their scores in ``.advantages``)
for the cells below.
"""

from __future__ import annotations

import html
import time

from rlnb.widgets.static import LiveAndStatic

STAGES = ("Rollout", "Advantages", "Update")
# a trainer's loop (``loop_section``) -> its stages, in order
LOOP_STAGES = {"grpo": STAGES, "ppo": ("Rollout", "Values", "Advantages", "Update"),
               "dpo": ("Pairs", "Reference", "Loss", "Update")}


class StageStepper(LiveAndStatic):
    def __init__(self, source, dashboard=None, *, run_steps: int = 10):
        import ipywidgets as w

        from rlnb.widgets.dashboard import Dashboard, training_loop

        self.trainer, self._steps, self._log = training_loop(source)
        self.dashboard = dashboard if dashboard is not None else Dashboard(source)
        self.stages = LOOP_STAGES.get(getattr(self.trainer, "loop_section", "grpo"), STAGES)
        self.rollout = self.values = self.advantages = self.result = None
        self._trained = False  # the current batch has been through Update: roll out again
        self._referenced = False  # DPO: the current pairs have their reference log-probs
        self._started: float | None = None
        self.next_stage = self.stages[0]
        ppo, dpo = "Values" in self.stages, "Pairs" in self.stages
        tips = {
            "Rollout": "stage 1: sample P prompts x G responses and score them",
            "Values": "stage 2: the critic's value of every token (no side effects)",
            "Advantages": f"stage {2 + ppo}: rewards -> per-token advantages (no side effects)",
            "Update": (f"stage 4: {self.trainer.config.ppo.ppo_epochs} passes of the critic, "
                       "then the policy" if ppo else "stage 4: the DPO loss and an optimizer step"
                       if dpo else "stage 3: loss and one optimizer step"),
            "Pairs": "stage 1: this step's chosen/rejected pairs (sampled and scored, or read)",
            "Reference": "stage 2: the reference policy's log-probs of the pairs",
            "Loss": "stage 3: implicit rewards, margins and the loss now (no side effects)",
            "Step": "all the stages",
            "Run N": "train N steps (plots update live; Stop ends it)",
            "Stop": "end Run N after the current step",
        }
        self.buttons = {name: w.Button(description=name, tooltip=tips[name])
                        for name in (*self.stages, "Step", "Run N", "Stop")}
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

    # ------------------------------------------------------------------ actions
    def press(self, name: str) -> None:
        """What a click on button ``name`` does (tests and scripts can call it directly)."""
        try:
            {"Rollout": self.do_rollout, "Values": self.do_values,
             "Advantages": self.do_advantages, "Update": self.do_update, "Step": self.do_step,
             "Run N": self.do_run, "Stop": self.dashboard.stop, "Pairs": self.do_pairs,
             "Reference": self.do_reference, "Loss": self.do_loss}[name]()
        except Exception as err:  # shown in the widget; the notebook keeps running
            self._show(f"<pre style='color:#b00'>{html.escape(type(err).__name__)}: "
                       f"{html.escape(str(err))}</pre>")
        self._refresh()

    def do_rollout(self):
        self._check_idle()
        self._started = time.perf_counter()
        self.rollout = self.trainer.rollout()
        self.values = self.advantages = self.result = None
        self._trained = False
        self.next_stage = self.stages[1]
        frame = self.rollout.to_frame()
        self._show(_pre(self.rollout.summary()) + frame.head(32).to_html(max_rows=32))
        return self.rollout

    def do_values(self):
        """PPO's stage 2: the critic's values of the rollout (``trainer.compute_values``)."""
        self._check_idle()
        if self.rollout is None:
            raise ValueError("run Rollout first: there is no batch to compute values on")
        self._check_untrained()
        self.values = self.trainer.compute_values(self.rollout)  # [B, S]
        self.next_stage = "Advantages"
        tm = self.rollout.token_mask
        first = tm.argmax(dim=1, keepdim=True)  # [B, 1]: each response's first token
        frame = self.rollout.to_frame()
        frame.insert(0, "value of the prompt", self.values.gather(1, first).squeeze(1).tolist())
        frame.insert(1, "mean value", ((self.values * tm).sum(1) / tm.sum(1).clamp(min=1)).tolist())
        text = (f"values [B, S] = {tuple(self.values.shape)}: V_t = the critic's value before "
                f"token t (V_0 = 0); mean over response tokens "
                f"{float((self.values * tm).sum() / tm.sum().clamp(min=1)):+.3f}")
        self._show(_pre(text) + frame.head(32).to_html(max_rows=32))
        return self.values

    def do_advantages(self):
        self._check_idle()
        if self.rollout is None:
            raise ValueError("run Rollout first: there is no batch to compute advantages on")
        self._check_untrained()
        if "Values" in self.stages:
            if self.values is None:
                raise ValueError("run Values first: PPO's advantages need the critic's values")
            self.advantages = self.trainer.compute_advantages(self.rollout, self.values)
        else:
            self.advantages = self.trainer.compute_advantages(self.rollout)
        self.next_stage = "Update"
        frame = self.advantages.to_frame()
        self._show(_pre(self.advantages.summary()) + frame.head(32).to_html(max_rows=32))
        return self.advantages

    # DPO's stages: the pairs in self.rollout, their scores in self.advantages
    def do_pairs(self):
        """DPO's stage 1: this step's pairs (``trainer.pairs``)."""
        self._check_idle()
        self._started = time.perf_counter()
        self.rollout = self.trainer.pairs()
        self.advantages = self.result = None
        self._trained, self._referenced = False, False
        self.next_stage = "Reference"
        self._show(_pre(self.rollout.summary()) + self.rollout.to_frame().head(32).to_html())
        return self.rollout

    def do_reference(self):
        """DPO's stage 2: the reference's log-probs of the pairs."""
        self._check_idle()
        if self.rollout is None:
            raise ValueError("run Pairs first: there are no pairs to score")
        self._check_untrained()
        self.trainer.reference_logprobs(self.rollout)
        self._referenced = True
        self.next_stage = "Loss"
        b = self.rollout
        per_row = (b.reference_logprobs * b.token_mask).sum(1)  # [B]
        frame = b.to_frame()
        frame["ref logprob chosen"] = per_row[0::2].tolist()
        frame["ref logprob rejected"] = per_row[1::2].tolist()
        self._show(_pre(f"log π_ref [B, S] = {tuple(b.reference_logprobs.shape)}: summed over "
                        "each response") + frame.head(32).to_html())
        return self.rollout

    def do_loss(self):
        """DPO's stage 3: implicit rewards, margins and the loss (no side effects)."""
        self._check_idle()
        if not self._referenced:
            raise ValueError("run Reference first: the loss compares the policy with the "
                             "reference's log-probs")
        self._check_untrained()
        self.advantages = self.trainer.compute_loss(self.rollout)
        self.next_stage = "Update"
        self._show(_pre(self.advantages.summary())
                   + self.advantages.to_frame().head(32).to_html())
        return self.advantages

    def do_update(self):
        self._check_idle()
        self._check_untrained()
        if self.advantages is None:
            raise ValueError("run Loss first: Update trains on the scored pairs" if "Pairs" in
                             self.stages else
                             "run Advantages first: Update trains on an AdvantageBatch")
        batch = self.rollout if "Pairs" in self.stages else self.advantages
        self.result = self.trainer.update(batch)
        self._trained = True
        seconds = time.perf_counter() - self._started if self._started else None
        metrics = self.trainer.record_step(self.rollout, self.advantages, self.result, seconds)
        self._log(metrics)  # to the run directory, like a step of the loop
        self.dashboard.update(metrics)
        self.next_stage = self.stages[0]
        self._show(_pre(self.result.summary()))
        return self.result

    def do_step(self):
        self._check_idle()
        for metrics in self._steps(1):
            self.dashboard.update(metrics)
            if metrics.trained:  # (a first record may be validation only)
                self.rollout, self.advantages, self.result = (
                    metrics.rollout, metrics.advantages, metrics.result)
                self.values = getattr(metrics.advantages, "values", None)
        self._trained = True
        self.next_stage = self.stages[0]
        self._show(_pre(f"step {self.trainer.step_count}\n{self.result.summary()}"))
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
