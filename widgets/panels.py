"""What the dashboard draws: the panels a loop declares, how each metric is drawn, and the
series behind each trace.

    panels_for(trainer)                    # trainer.panels, (title, keys) pairs, as Panels
    Panel("reward (mean ± 2 s.e. over prompts)", ("train/reward",), band="train/reward_sem",
          band_width=2.0)
    rolling_mean([1, 2, 3, 4], 2)          # [1.0, 1.5, 2.5, 3.5]: trailing, NaN-aware

Implementation choices:
1) The reward band is an interval of the step's mean reward, ± 2 standard errors over the
   step's prompts (``train/reward_sem``, about 95 %), not the spread of single responses: the
   per-response std of 0/1 rewards runs below 0 and above 1 and reads like an interval while
   saying nothing about how well the mean is known.
2) Smoothing is a trailing mean over the last ``window`` logged values of each line (the plot
   at step t uses no later step); the band then shows the interval of that smoothed mean,
   ``sqrt(Σ se²)/n`` over the n steps in the window (the steps' means are independent
   estimates). Markers (held-out accuracy) are never smoothed.
3) A panel can declare when a value is undefined (``defined``): explained variance on a batch
   whose returns do not vary (``rlnb.algorithms.value_loss.returns_vary``) is stored as NaN, which
   plotly draws as a gap and the smoothing skips, instead of the 1.0 the formula reads there.
4) A loop declares its panels as data, a title and metric keys each (``Trainer.panels``,
   ``rlnb/engine/trainers/views.py``); how a metric is drawn (the reward's band and held-out
   markers, a fixed axis, undefined points) is this module's, by metric key (``DRAWING``), so
   a new loop's ``train/reward`` gets the reward's band without saying so.
5) No loop is named here. A saved run's panels are its loop's: the trainer class the run
   recorded (``parts.json``), else the loop its config names, looked up in the registry
   (``rlnb.engine.trainers.loops.LOOPS``, plug-ins included). A history with neither gets the
   registered loop whose panels' keys it holds most of (the default loop's on a tie).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rlnb.algorithms.value_loss import returns_vary
from rlnb.engine.trainers.loops import LOOPS


@dataclass(frozen=True)
class Panel:
    """One subplot: a title and the metric keys drawn in it; ``band`` a key whose value times
    ``band_width`` is drawn as ± around the first key; ``defined(record)`` False stores the
    panel's keys as NaN for that step (choice 3)."""

    title: str
    keys: tuple[str, ...]
    band: str | None = None
    band_width: float = 1.0
    markers: str | None = None  # a sparse key drawn as markers (e.g. validation accuracy)
    y_range: tuple[float, float] | None = None  # a fixed y axis (None: plotly's autorange)
    defined: Callable[[dict[str, Any]], bool] | None = None


def critic_returns_vary(record: dict[str, Any]) -> bool:
    """EV is defined on a PPO step unless its returns do not vary (records without the moments,
    e.g. older runs, are taken as they are)."""
    try:
        return returns_vary(record, prefix="critic/")
    except (KeyError, TypeError):  # a moment missing, or None (a NaN on disk)
        return True


# how a metric is drawn in whichever loop's panel plots it first (choices 1 and 3): the loops
# declare their panels as (title, metric keys), rlnb.engine.trainers.views
DRAWING: dict[str, dict[str, Any]] = {
    "train/reward": {"band": "train/reward_sem", "band_width": 2.0,
                     "markers": "validation/accuracy"},
    # fixed at [-1, 1]: one batch whose returns are nearly all equal can read -3 or less, and
    # autorange would flatten the trend the panel is for (docs/algorithms.md#value-loss)
    "critic/explained_var": {"y_range": (-1.0, 1.0), "defined": critic_returns_vary},
    "train/accuracy": {"y_range": (0.0, 1.0)},  # DPO's preference accuracy
}


def panels_of(declared) -> tuple[Panel, ...]:
    """A loop's declared panels (``Trainer.panels``: ``(title, metric keys)`` pairs, or
    ``Panel``s) as ``Panel``s, each drawn as ``DRAWING`` says for its first key."""
    panels = []
    for p in declared:
        if not isinstance(p, Panel):
            title, keys = p
            p = Panel(title, tuple(keys), **DRAWING.get(keys[0], {}))
        panels.append(p)
    return tuple(panels)


def loop_trainers() -> list[type]:
    """Every registered loop's trainer classes, the default loop's first (choice 5)."""
    out = []
    for spec in LOOPS.values():
        out += [t for t in (spec.trainer, spec.async_trainer) if t is not None and t not in out]
    return out


# the default loop's panels (the first registered: algorithm's default)
DEFAULT_PANELS = panels_of(loop_trainers()[0].panels)


def loop_class(loop) -> type | None:
    """A loop's trainer class from a class, a ``"module.Class"`` path (a run's ``parts.json``)
    or a registered loop name; None if it cannot be found."""
    if isinstance(loop, type):
        return loop
    if not isinstance(loop, str):
        return None
    if loop in LOOPS:
        return LOOPS[loop].trainer
    module, _, name = loop.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name) if module else None
    except (ImportError, AttributeError):  # a plug-in no longer importable
        return None


def matching_loop(keys: set[str]) -> type:
    """The registered loop whose declared panels' keys ``keys`` holds most of (choice 5)."""
    def held(trainer) -> tuple[float, int]:
        wanted = {k for _, ks in trainer.panels for k in ks}
        found = len(wanted & keys)
        return (found / len(wanted) if wanted else 0.0, found)

    trainers = loop_trainers()
    return max(trainers, key=lambda t: (held(t), -trainers.index(t)))


TIMING_NAMES = {
    "timing/train/generation": "generation",
    "timing/train/policy_and_reference_logprobs": "logprobs",
    "timing/train/value_inference": "values",
    "timing/train/advantage_calculation": "advantages",
    "timing/train/value_training": "critic update",
    "timing/train/policy_training": "update",
    "timing/train/wait_for_trajectories": "trainer waits for data",
    "timing/async/collector_wait_for_weights": "collector waits for weights",
}
# the smoothing control's choices: (label, window in logged steps)
SMOOTHING = (("off", 1), ("10 steps", 10), ("50 steps", 50), ("200 steps", 200))


def panels_for(trainer=None, history: Iterable[dict[str, Any]] = (), loop=None
               ) -> tuple[Panel, ...]:
    """The panels a trainer's loop declares (``trainer.panels``); without a trainer, those of
    ``loop`` (a trainer class, ``"module.Class"`` or a loop name: a saved run's), else of the
    registered loop whose panels the history's keys match best (choice 5). A task of reward
    functions adds a panel of its components; one with no notion of correct (a history without
    accuracy but with the held-out reward) marks the held-out reward, not accuracy."""
    declared = getattr(trainer, "panels", ())
    if trainer is not None and declared:
        task = getattr(trainer, "task", None)
        return task_panels(panels_of(declared), [f.name for f in getattr(task, "funcs", ())],
                           getattr(task, "defines_correct", True))
    keys = {k for record in history for k in record}
    cls = loop_class(loop) or matching_loop(keys)
    correct = "validation/reward" not in keys or "validation/accuracy" in keys
    return task_panels(panels_of(cls.panels), [], correct)


def task_panels(panels: tuple[Panel, ...], reward_names: list[str], defines_correct: bool
                ) -> tuple[Panel, ...]:
    """``panels`` for a task: the reward panel's markers are ``validation/reward`` when it
    defines no ``correct``; reward functions get a panel of ``train/reward/<name>``."""
    first = panels[0]
    if not defines_correct:
        first = replace(first, markers="validation/reward")
    extra = (Panel("reward components (mean)",
                   tuple(f"train/reward/{n}" for n in reward_names)),) if reward_names else ()
    return (first, *panels[1:], *extra)


MARKER_NAMES = {"validation/accuracy": "held-out accuracy",
                "validation/reward": "held-out reward"}


def build_figure(panels: tuple[Panel, ...], cols: int = 3):
    """An empty ``FigureWidget`` with one subplot per panel; returns (fig, trace index map)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    rows = math.ceil(len(panels) / cols)
    base = make_subplots(rows=rows, cols=cols, subplot_titles=[p.title for p in panels],
                         horizontal_spacing=0.07, vertical_spacing=0.16)
    fig = go.FigureWidget(base)
    index: dict[tuple[str, str], int] = {}  # (key, role) -> trace number
    for i, panel in enumerate(panels):
        row, col = i // cols + 1, i % cols + 1
        for key in panel.keys:  # the main lines first: data[0] is the first panel's mean
            name = TIMING_NAMES.get(key, key.removeprefix("train/"))
            index[(key, "line")] = len(fig.data)
            fig.add_scatter(x=[], y=[], mode="lines", name=name, row=row, col=col,
                            showlegend=len(panel.keys) > 1, legendgroup=panel.title)
        if panel.band:
            main = panel.keys[0]
            for role in ("lower", "upper"):
                index[(main, role)] = len(fig.data)
                fig.add_scatter(x=[], y=[], mode="lines", line={"width": 0}, showlegend=False,
                                fill="tonexty" if role == "upper" else None,
                                fillcolor="rgba(99,110,250,0.2)", hoverinfo="skip",
                                row=row, col=col)
        if panel.y_range is not None:
            fig.update_yaxes(range=list(panel.y_range), autorange=False, row=row, col=col)
        if panel.markers:
            index[(panel.markers, "markers")] = len(fig.data)
            fig.add_scatter(x=[], y=[], mode="markers",
                            name=MARKER_NAMES.get(panel.markers, panel.markers),
                            marker={"symbol": "diamond", "size": 8}, row=row, col=col)
    fig.update_layout(meta="rlnb-dashboard", height=300 * rows,
                      margin={"l": 40, "r": 10, "t": 40, "b": 30},
                      legend={"orientation": "h", "y": -0.08}, template="plotly_white")
    return fig, index


# ------------------------------------------------------------------------- series


def rolling_mean(values, window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start), NaN values skipped;
    a point whose window holds no number stays NaN. ``window <= 1``: the values as floats."""
    y = np.asarray(values, dtype=float)
    if window <= 1 or y.size == 0:
        return y
    finite = np.isfinite(y)
    sums = np.concatenate([[0.0], np.cumsum(np.where(finite, y, 0.0))])
    counts = np.concatenate([[0], np.cumsum(finite)])
    end = np.arange(1, y.size + 1)
    start = np.maximum(end - window, 0)
    n = counts[end] - counts[start]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, (sums[end] - sums[start]) / n, np.nan)


def band_series(steps, means, mean_steps_se: dict[float, float], *, width: float,
                window: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(x, lower, upper)`` of ``mean ± width·se`` on the steps that have both a mean and an
    se (``mean_steps_se``: step -> se); with smoothing, the interval of the window's mean:
    ``se_window = sqrt(Σ se²) / n`` (choice 2)."""
    pts = [(x, y, mean_steps_se[x]) for x, y in zip(steps, means)
           if x in mean_steps_se and math.isfinite(y) and math.isfinite(mean_steps_se[x])]
    x = np.asarray([p[0] for p in pts], dtype=float)
    centre = rolling_mean([p[1] for p in pts], window)
    se2 = np.asarray([p[2] ** 2 for p in pts], dtype=float)
    n = np.minimum(np.arange(1, len(pts) + 1), max(window, 1))
    se = np.sqrt(rolling_mean(se2, window) / n) if window > 1 else np.sqrt(se2)
    return x, centre - width * se, centre + width * se
