"""Plots of a sweep (``rlnb sweep``): one figure per metric, a line per run and the mean over seeds.

    for fig in sweep_figures("runs/sweep-01_grpo_step_by_step-..."):
        show(fig)

The sweep's table and records are the run layer's (``rlnb.run.experiments.sweep_summary``); only the
drawing is here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlnb.run.experiments.sweep_summary import read_sweep, seed_keys, setting_label

FIGURE_METRICS = ("train/reward", "validation/accuracy")


def sweep_figures(root: str | Path, metrics: Sequence[str] = FIGURE_METRICS) -> list:
    """One plotly figure per metric: a line per run against the step (dashed if it failed) and,
    when seeds are swept, the mean over seeds of each other combination (thick)."""
    import pandas as pd
    import plotly.graph_objects as go
    from plotly.colors import qualitative

    record, runs = read_sweep(Path(root))
    seeds = seed_keys(record)

    def group_of(run):
        return setting_label(run["parameters"], seeds)

    groups = list(dict.fromkeys(group_of(run) for run, _ in runs))
    palette = qualitative.Plotly
    figures = []
    for metric in metrics:
        fig = go.Figure()
        means: dict[str, list] = {g: [] for g in groups}
        for run, records in runs:
            points = [(r["step"], r[metric]) for r in records if r.get(metric) is not None]
            if not points:
                continue
            steps, values = zip(*points)
            g = group_of(run)
            color = palette[(groups.index(g) if seeds else len(fig.data)) % len(palette)]
            fig.add_scatter(
                x=steps, y=values, name=run["name"], mode="lines+markers",
                line={"color": color, "dash": "solid" if run["status"] == "ok" else "dash",
                      "width": 1 if seeds else 2},
                opacity=0.5 if seeds else 1.0, legendgroup=g)
            if run["status"] == "ok":
                means[g].append(pd.Series(values, index=steps))
        for g, series in means.items():
            if seeds and series:
                mean = pd.concat(series, axis=1).mean(axis=1).sort_index()
                fig.add_scatter(x=mean.index, y=mean.values, name=f"mean over seeds: {g}",
                                mode="lines", legendgroup=g,
                                line={"color": palette[groups.index(g) % len(palette)],
                                      "width": 4})
        title = metric if fig.data else f"{metric} (no run logged it)"
        fig.update_layout(title=title, xaxis_title="step", yaxis_title=metric,
                          template="plotly_white", height=420)
        figures.append(fig)
    return figures
