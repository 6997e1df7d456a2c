"""rlnb.widgets: the Jupyter UI layer.

    from rlnb.widgets import Dashboard, StageStepper, RolloutInspector, TokenView
    from rlnb.widgets import EstimatorComparison, ConfigPanel, metric_card, show

- ``Dashboard``: live reward / KL / entropy / clip fraction / length / timing plots, a Stop
  button, a smoothing control, and metric cards (formula, expected range, what to check) behind
  an info toggle; its panels are the ones the trainer's loop declares, drawn by ``panels.py``.
- ``StageStepper``: a button per stage the trainer's loop declares (GRPO: Rollout / Advantages
  / Update; PPO and DPO: their own), then Step / Run N / Stop.
- ``RolloutInspector`` and ``TokenView``: one group side by side; tokens coloured by advantage,
  ratio, KL, entropy or the generation-vs-training log-prob gap (DPO's pairs: ``PairView``, the
  chosen and rejected responses coloured by log π - log π_ref).
- ``EstimatorComparison``: one frozen batch through every estimator and loss setting.
- ``ConfigPanel``: edit hyperparameters between steps.
- ``RewardWorkbench``: a run's reward functions on hand-written or sampled completions, per row
  and per group, no-signal groups flagged; ``signal_figure`` draws the signal check.
- ``TemplateInspector``: a chat template's turn N against turn N+1 token by token (the first
  token it rewrote, red), or a trajectory's tokens by who wrote them (trained or environment).
- ``show(fig)``: a plotly figure that also renders in saved notebooks and HTML exports.
- ``sweep_figures(root)``: the curves of an ``rlnb sweep`` (a line per run, the mean over seeds).

Its modules: ``dashboard`` (with ``panels``: what it draws, ``cards``: the metric cards),
``stepper``, ``inspector``, ``comparison``, ``config_panel``, ``reward_workbench``,
``template_inspector``, ``findings`` (an ablation's bands), ``sweep_report`` and ``static``.

Every widget displays with a static HTML twin, so executed notebooks still show results without
a live kernel (see ``static.py``). Installed as ``rlnb.widgets`` (the build maps this folder
there), so ``import rlnb`` never imports it and never needs Jupyter packages.
"""

from rlnb.widgets.cards import MetricCard, metric_card
from rlnb.widgets.comparison import EstimatorComparison
from rlnb.widgets.config_panel import ConfigPanel
from rlnb.widgets.dashboard import Dashboard
from rlnb.widgets.inspector import PairView, RolloutInspector, TokenView
from rlnb.widgets.panels import DEFAULT_PANELS, Panel
from rlnb.widgets.reward_workbench import RewardWorkbench, signal_figure
from rlnb.widgets.static import ensure_plotlyjs, figure_bundle, figure_html, show, table_html
from rlnb.widgets.stepper import StageStepper
from rlnb.widgets.sweep_report import sweep_figures
from rlnb.widgets.template_inspector import TemplateInspector

__all__ = [
    "DEFAULT_PANELS", "ConfigPanel", "Dashboard", "EstimatorComparison", "MetricCard", "Panel",
    "PairView", "RewardWorkbench", "RolloutInspector", "StageStepper", "TemplateInspector",
    "TokenView",
    "ensure_plotlyjs", "figure_bundle", "figure_html", "metric_card", "show", "signal_figure",
    "sweep_figures", "table_html",
]
