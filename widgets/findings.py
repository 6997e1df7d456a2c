"""Band plots of an ablation (notebook 07): a metric's mean over seeds per arm, ±1 sd band.

    result = rlnb.ablate({...}, seeds=[0, 1, 2], ...)
    show(band_figure(result, "train/approx_entropy"))                # against the step
    show(band_figure(result, "validation/accuracy", x="wall_s"))     # against training time

The runs and the numbers (mean, sd and count per step: ``rlnb.run.experiments.effects.band_frame``)
are the run layer's; only the drawing is here, so ``rlnb`` itself never imports plotly.
"""

from __future__ import annotations

from collections.abc import Mapping

from rlnb.run.experiments.effects import X_TITLES, band_frame


def band_figure(runs, key: str | None = None, x: str = "step", title: str | None = None):
    """One line per arm: the mean of ``key`` over seeds at each step, and a band of ±1 sd
    (with two seeds or more). ``runs`` is an ``rlnb.ablate`` result (``key`` defaults to its
    first metric) or a mapping label -> records, one per seed. ``x="wall_s"`` places each step
    at the seeds' mean training time, so an arm that costs more per step stretches right."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    if not isinstance(runs, Mapping):  # an Ablation
        key = key or runs.metrics[0].key
        runs = runs.runs
    if key is None:
        raise ValueError("band_figure needs the metric key to plot")
    frame = band_frame(runs, key, x)
    fig = go.Figure()
    for i, (label, stats) in enumerate(frame.groupby("setting", sort=False)):
        color = qualitative.Plotly[i % len(qualitative.Plotly)]
        xs = stats["x"].values
        if (stats["count"] > 1).any():
            sd = stats["sd"].fillna(0.0).values
            fig.add_scatter(x=[*xs, *xs[::-1]],
                            y=[*(stats["mean"] + sd), *(stats["mean"] - sd)[::-1]],
                            fill="toself", fillcolor=color, opacity=0.2, line={"width": 0},
                            hoverinfo="skip", showlegend=False, legendgroup=label)
        seeds = int(stats["count"].max())
        fig.add_scatter(x=xs, y=stats["mean"], mode="lines+markers", legendgroup=label,
                        name=f"{label} (mean of {seeds} seed{'s' if seeds > 1 else ''})",
                        line={"color": color, "width": 3})
    fig.update_layout(title=title or (key if len(frame) else f"{key} (no run logged it)"),
                      xaxis_title=X_TITLES[x], yaxis_title=key,
                      template="plotly_white", height=400)
    return fig

