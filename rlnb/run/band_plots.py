"""Band plots of an ablation: a metric's mean over seeds per arm, with a ±1 sd band.

    fig = band_figure(result.runs, "train/approx_entropy")            # against the step
    fig = band_figure(result.runs, "validation/accuracy", x="wall_s")  # against training time

``runs`` maps an arm's label to its records, one per seed (``rlnb.run.effects``). plotly is
imported inside the function, so ``rlnb`` imports and trains without it; ``rlnb.widgets.show``
(or the figure's own ``show``) displays the result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlnb.run.effects import curves_frame

X_TITLES = {"step": "training step", "wall_s": "training seconds (mean over seeds)"}


def band_figure(runs: Mapping[str, Sequence[list[dict]]], key: str, x: str = "step",
                title: str | None = None):
    """One line per arm: the mean of ``key`` over seeds at each step, and a band of ±1 sd
    (with two seeds or more). ``x="wall_s"`` places each step at the seeds' mean training time,
    so an arm that costs more per step stretches to the right."""
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    if x not in X_TITLES:
        raise ValueError(f"x must be one of {', '.join(X_TITLES)}, got {x!r}")
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
                      xaxis_title=X_TITLES[x], yaxis_title=key,
                      template="plotly_white", height=400)
    return fig
