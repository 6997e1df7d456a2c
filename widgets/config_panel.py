"""Config panel: edit the main hyperparameters between steps.

    ConfigPanel(trainer).display()     # edit, then Apply; the next step uses the new values

The controls are the ones the trainer's loop declares (``Trainer.config_fields``,
``rlnb.engine.trainers.views``), or the ``fields`` given. Apply goes through
``trainer.reconfigure``, which validates the values like a config file
and refuses keys that cannot change mid-run (shapes, the model, the data). The panel shows what
changed and from which step, or the error, and keeps the trainer's previous values on an error.
While a dashboard trains in the background, a valid change is checked at once and applied by the
training thread between two steps (``Dashboard.call_between_steps``), so no step runs with half
of it; Reset before that cancels it and shows the trainer's values again.
"""

from __future__ import annotations

import html

from rlnb.engine.trainers.views import ConfigField
from rlnb.widgets.static import LiveAndStatic, table_html


def as_fields(fields) -> tuple[ConfigField, ...]:
    """Controls as ``ConfigField`` s: a loop's declaration, or a dict ``{dotted key: (label,
    kind, options)}`` for a panel of one's own choosing."""
    if isinstance(fields, dict):
        return tuple(ConfigField(k, *spec) for k, spec in fields.items())
    return tuple(fields)


def get_dotted(config, key: str):
    """The value a control shows: NeMo-RL's top-level names read where their override sets them
    (``grpo.use_leave_one_out_baseline`` -> the estimator's flag, ``OVERRIDE_ALIASES``)."""
    from rlnb.engine.trainers.loop_config import OVERRIDE_ALIASES

    value = config
    for part in OVERRIDE_ALIASES.get(key, key).split("."):
        value = getattr(value, part)
    return value


class ConfigPanel(LiveAndStatic):
    def __init__(self, trainer, fields=None, *, dashboard=None):
        import ipywidgets as w

        self.trainer = trainer
        self.dashboard = dashboard  # None: whichever Dashboard trains this trainer
        self._queued = None  # the change waiting for the end of the step in progress
        self.controls = {}
        for field in as_fields(fields if fields is not None else trainer.config_fields):
            key, label, kind, options = field.key, field.label, field.kind, field.options
            value = get_dotted(trainer.config, key)
            style = {"description_width": "110px"}
            if kind == "float":
                ctrl = w.FloatText(value=value, description=label, style=style,
                                   layout=w.Layout(width="230px"))
            elif kind == "bool":
                ctrl = w.Checkbox(value=value, description=label, style=style)
            else:
                ctrl = w.Dropdown(options=list(options() if callable(options) else options),
                                  value=value, description=label,
                                  style=style, layout=w.Layout(width="260px"))
            ctrl.tooltip = key
            self.controls[key] = ctrl
        self.apply_button = w.Button(description="Apply", button_style="success",
                                     tooltip="the next step uses these values")
        self.reset_button = w.Button(description="Reset", tooltip="show the trainer's values")
        self.apply_button.on_click(lambda _: self.apply())
        self.reset_button.on_click(lambda _: self.reset())
        self.message = w.HTML()
        ctrls = list(self.controls.values())
        self.widget = w.VBox([w.HBox(ctrls[i:i + 3]) for i in range(0, len(ctrls), 3)]
                             + [w.HBox([self.apply_button, self.reset_button]), self.message])

    def pending(self) -> dict:
        """Controls whose value differs from the trainer's config."""
        return {k: c.value for k, c in self.controls.items()
                if c.value != get_dotted(self.trainer.config, k)}

    def apply(self) -> dict:
        """Send the edited values to the trainer; returns ``{key: (old, new)}`` (during
        background training: the changes that will apply after the step in progress)."""
        from rlnb.widgets.dashboard import Dashboard

        pending = self.pending()
        try:
            changed = self.trainer.reconfigure(pending, dry_run=True)  # validate only
        except ValueError as err:
            self._refused(err)
            return {}
        if not changed:
            self.message.value = "<i>nothing changed</i>"
            return {}
        dash = self.dashboard or Dashboard.training(self.trainer)
        token = self._queued = object()

        def apply_now():
            if self._queued is not token:  # Reset cancelled it
                return
            self._queued = None
            try:
                done = self.trainer.reconfigure(pending)
            except ValueError as err:  # the config moved on since the check
                self._refused(err)
                return
            rows = [{"key": k, "old": o, "new": n} for k, (o, n) in done.items()]
            self.message.value = (f"<i>applied from step {self.trainer.step_count + 1}:</i>"
                                  + table_html(rows))

        if dash is not None and dash.call_between_steps(apply_now):
            self.message.value = (f"<i>training is running: applies after step "
                                  f"{self.trainer.step_count + 1} ends…</i>")
        elif dash is None:
            apply_now()
        return changed

    def _refused(self, err: Exception) -> None:
        self.message.value = (f"<pre style='color:#b00'>refused: {html.escape(str(err))}</pre>")
        self.reset(keep_message=True)

    def reset(self, *, keep_message: bool = False) -> None:
        """Show the trainer's values again (and cancel a change still waiting to apply)."""
        cancelled = self._queued is not None
        self._queued = None
        for key, ctrl in self.controls.items():
            ctrl.value = get_dotted(self.trainer.config, key)
        if not keep_message:
            self.message.value = ("<i>cancelled; showing the trainer's values</i>" if cancelled
                                  else "<i>showing the trainer's values</i>")

    def static_html(self) -> str:
        rows = [{"key": k, "value": get_dotted(self.trainer.config, k)} for k in self.controls]
        return table_html(rows) + self.message.value
