"""Plots of the findings studies (notebook 07): a metric's mean over seeds with a ±1 sd band.

    runs = sweep_finding(FINDINGS["clip_higher"], ...)      # label -> records, one per seed
    show(band_figure(runs, "train/approx_entropy"))
    show(band_figure(runs, "validation/accuracy", x="wall_s"))

The runs and their reductions are the run layer's (``rlnb.run.findings``); only the drawing is
here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlnb.run.findings import curves_frame

X_TITLES = {"step": "training step", "wall_s": "training seconds (mean over seeds)"}


def band_figure(runs: Mapping[str, Sequence[list[dict]]], key: str, x: str = "step",
                title: str | None = None):
    """One line per setting: the mean of ``key`` over seeds at each step, and a band of ±1 sd
    (with two seeds or more). ``x="wall_s"`` places each step at the seeds' mean training time,
    so a setting that costs more per step stretches to the right."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    frame = curves_frame(runs, key)
    fig = go.Figure()
    if x == "wall_s":
        times = curves_frame(runs, "wall_s").rename(columns={"value": "wall"})
        frame = frame.merge(times[["setting", "seed", "x", "wall"]], on=["setting", "seed", "x"])
    for i, (label, part) in enumerate(frame.groupby("setting", sort=False)):
        color = qualitative.Plotly[i % len(qualitative.Plotly)]
        stats = part.groupby("x")["value"].agg(["mean", "std", "count"]).reset_index()
        xs = part.groupby("x")["wall"].mean().values if x == "wall_s" else stats["x"].values
        if (stats["count"] > 1).any():
            sd = stats["std"].fillna(0.0).values
            fig.add_scatter(x=[*xs, *xs[::-1]],
                            y=[*(stats["mean"] + sd), *(stats["mean"] - sd)[::-1]],
                            fill="toself", fillcolor=color, opacity=0.2, line={"width": 0},
                            hoverinfo="skip", showlegend=False, legendgroup=label)
        seeds = int(stats["count"].max())
        fig.add_scatter(x=xs, y=stats["mean"], mode="lines+markers", legendgroup=label,
                        name=f"{label} (mean of {seeds} seed{'s' if seeds > 1 else ''})",
                        line={"color": color, "width": 3})
    fig.update_layout(title=title or (key if len(frame) else f"{key} (no run logged it)"),
                      xaxis_title=X_TITLES.get(x, x), yaxis_title=key,
                      template="plotly_white", height=400)
    return fig
