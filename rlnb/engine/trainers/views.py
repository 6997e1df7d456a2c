"""What a loop shows the UI, declared as data next to the loop: its stages (the stepper's
buttons), its dashboard panels and the config panel's fields.

    class PPOTrainer(Trainer):
        stages = (ROLLOUT_STAGE,
                  Stage("Values", "the critic's value of every token (no side effects)",
                        "compute_values", keeps="values", takes=("rollout",),
                        needs=(("Rollout", "there is no batch to compute values on"),)), ...)
        panels = (REWARD_PANEL, KL_PANEL, ("value loss (critic)", ("critic/loss",)), ...)

Implementation choices:
1) A stage names the trainer method it calls and the earlier results it is called with, so the
   stepper (``rlnb.widgets.stepper``) runs any loop's stages without knowing the loop: a new
   loop's buttons are its declaration. The first stage starts a step (the results of the last
   one are dropped); the last one ends it, and the step is recorded from the results kept as
   ``rollout``, ``advantages`` and ``result`` (``Trainer.record_step``'s arguments).
2) A panel is a title and the metric keys it draws: the loop knows the metrics it emits, not how
   the dashboard draws them (``rlnb.widgets.panels`` adds the reward's interval, fixed axes and
   the like, by metric key), so the engine never imports the UI.
3) ``check_stages`` runs when a trainer class is defined (``Trainer.__init_subclass__``), so a
   declaration that does not fit together fails at import, naming the stage, not at a click.
4) A loop's config-panel fields (``config_fields``) are the hyperparameters worth changing
   between its steps, as ``ConfigField`` s: every loop's (``COMMON_FIELDS``: the learning rate,
   the clip, the KL, the temperature) and its own (GRPO's estimator, PPO's critic rate and
   GAE λ); the panel (``rlnb.widgets.config_panel``) shows whichever the trainer declares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# (title, metric keys): one subplot of the dashboard (choice 2)
PanelSpec = tuple[str, tuple[str, ...]]

# the results a step is recorded from (choice 1): Trainer.record_step(rollout, advantages, result)
RECORDED = ("rollout", "advantages", "result")


@dataclass(frozen=True)
class Stage:
    """One stage of a loop, as the stepper shows it: a button that calls a trainer method.

    Args:
        name: the button's label (``"Rollout"``).
        description: one line for its tooltip, or a function of the trainer giving it
            (``lambda t: f"{t.loop_config.ppo_epochs} passes of the critic, then the policy"``);
            the stepper puts ``stage <n>:`` before it.
        method: the trainer method it calls (``"compute_advantages"``), with ``takes``.
        keeps: the name its result is kept under (``stepper.<keeps>``); a step is recorded from
            ``rollout``, ``advantages`` and ``result`` (the last stage's).
        takes: the earlier results the method is called with, by the names they are kept under.
        needs: ``(stage, why)`` pairs: the stages that must have run on this batch first; a
            press before one of them shows ``run <stage> first: <why>``.
        view: ``view(result, *taken) -> (text, table or None)`` for a result shown otherwise
            than by its ``summary()`` and ``to_frame()`` (a tensor of values, say).
    """

    name: str
    description: str | Callable[[Any], str]
    method: str
    keeps: str
    takes: tuple[str, ...] = ()
    needs: tuple[tuple[str, str], ...] = ()
    view: Callable[..., tuple[str, Any]] | None = None

    def describe(self, trainer) -> str:
        """The stage's one line for ``trainer``."""
        return self.description(trainer) if callable(self.description) else self.description


def check_stages(cls: type) -> None:
    """The stages ``cls`` declares fit together (choice 3): names unique, each method one of
    ``cls``'s, ``takes`` and ``needs`` naming earlier stages, the step's record kept (the last
    stage's result as ``result``). A ``TypeError`` naming the stage otherwise."""
    stages = getattr(cls, "stages", ())
    where = f"{cls.__name__}.stages"
    kept: set[str] = set()
    for i, stage in enumerate(stages):
        if not isinstance(stage, Stage):
            raise TypeError(f"{where}[{i}] is a {type(stage).__name__}, not a Stage")
        earlier = [s.name for s in stages[:i]]
        if stage.name in earlier:
            raise TypeError(f"{where}: two stages are called {stage.name!r}")
        if not callable(getattr(cls, stage.method, None)):
            raise TypeError(f"{where}: stage {stage.name!r} calls {stage.method!r}, which is not "
                            f"a method of {cls.__name__}")
        unknown = [t for t in stage.takes if t not in kept]
        if unknown:
            raise TypeError(f"{where}: stage {stage.name!r} takes {unknown}, which no stage "
                            f"before it keeps (they keep {sorted(kept)})")
        unknown = [n for n, _ in stage.needs if n not in earlier]
        if unknown:
            raise TypeError(f"{where}: stage {stage.name!r} needs {unknown}, which are not "
                            f"stages before it ({earlier})")
        kept.add(stage.keeps)
    if stages and (stages[-1].keeps != "result" or not set(RECORDED) <= kept):
        raise TypeError(f"{where}: a step is recorded from the results kept as {RECORDED}, the "
                        f"last stage's as 'result'; these stages keep "
                        f"{[s.keeps for s in stages]}")


@dataclass(frozen=True)
class ConfigField:
    """One control of the config panel (choice 4): the dotted config key it edits, its label,
    its kind (``"float"``, ``"bool"`` or ``"choice"``) and, for a choice, its options or a
    function giving them when the panel is built (so a registered estimator is listed)."""

    key: str
    label: str
    kind: str
    options: tuple[str, ...] | Callable[[], Any] | None = None


COMMON_FIELDS = (
    ConfigField("policy.optimizer.lr", "learning rate", "float"),
    ConfigField("loss_fn.ratio_clip_min", "clip ε low", "float"),
    ConfigField("loss_fn.ratio_clip_max", "clip ε high", "float"),
    ConfigField("loss_fn.reference_policy_kl_penalty", "KL β", "float"),
    ConfigField("loss_fn.reference_policy_kl_type", "KL estimator", "choice", ("k1", "k2", "k3")),
    ConfigField("policy.generation.temperature", "temperature", "float"),
)


# the panels most loops share (choice 2): the reward first (its band and the held-out markers
# are the dashboard's), the KL penalty and the clipped share of tokens
REWARD_PANEL: PanelSpec = ("reward (mean ± 2 s.e. over prompts)", ("train/reward",))
KL_PANEL: PanelSpec = ("KL penalty", ("train/kl_penalty",))
CLIP_PANEL: PanelSpec = ("clip fraction", ("train/clip_fraction",))
# where a step's rows went (funnel.py): generated, then those that reached the gradient
FUNNEL_PANEL: PanelSpec = ("sample funnel (rows)", (
    "funnel/generated", "funnel/no_signal", "funnel/filtered", "funnel/trained"))
