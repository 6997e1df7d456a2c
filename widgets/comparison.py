"""Estimator comparison: one frozen batch through every advantage estimator and loss setting.

    EstimatorComparison(trainer, batch).display()

Tabs: the advantage estimators side by side (summary, per-response table, a figure of each
response's sequence advantage per estimator), and the loss settings (clipping, dual clip, KL
estimators) as dry-run updates on the same tokens. The numbers come from
``rlnb.engine.inspection.counterfactual``; nothing here changes the trainer.
"""

from __future__ import annotations

from rlnb.widgets.static import LiveAndStatic, figure_html


def advantage_figure(table, estimators: list[str]):
    """Each response's sequence advantage, one marker series per estimator, by group."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for name in estimators:
        fig.add_scatter(
            x=list(range(len(table))), y=table[name].tolist(), mode="markers", name=name,
            text=[f"group {g} · reward {r:.2f} · {s!r}" for g, r, s in
                  zip(table["group"], table["reward"], table["response"])],
            hovertemplate="row %{x}: %{y:.3f}<br>%{text}<extra>" + name + "</extra>",
        )
    for g in sorted(set(table["group"]))[1:]:  # a faint line between groups
        fig.add_vline(x=float(table.index[table["group"] == g][0]) - 0.5,
                      line={"color": "#ddd", "width": 1})
    fig.update_layout(title="sequence advantage per response (same tokens, each estimator)",
                      xaxis_title="response (rows of a group are adjacent)",
                      yaxis_title="advantage", height=380, template="plotly_white")
    return fig


class EstimatorComparison(LiveAndStatic):
    def __init__(self, trainer, batch, *, estimators=None, loss_settings=None):
        import ipywidgets as w

        from rlnb.engine.inspection.counterfactual import (
            compare_estimators,
            compare_losses,
            estimator_summary,
            estimator_table,
        )

        self.advantages = compare_estimators(trainer, batch, estimators)
        self.summary = estimator_summary(self.advantages)
        self.table = estimator_table(self.advantages)
        ok = [k for k, v in self.advantages.items() if not isinstance(v, Exception)]
        self.figure = advantage_figure(self.table, ok) if ok else None
        base = next((self.advantages[k] for k in ok), None)
        self.losses = compare_losses(trainer, base, loss_settings) if base is not None else None
        self.advantage_html = (
            "<h4>advantage estimators</h4>" + self.summary.to_html(float_format="%.4f")
            + (figure_html(self.figure) if self.figure is not None else "")
            + self.table.to_html(float_format="%.3f", max_rows=64))
        self.loss_html = ("<h4>loss settings (dry-run update on the same batch)</h4>"
                          + (self.losses.to_html(float_format="%.4f")
                             if self.losses is not None else "<p>no estimator ran</p>"))
        fig_widget = w.Output()
        if self.figure is not None:
            import plotly.graph_objects as go

            fig_widget = go.FigureWidget(self.figure)
        tabs = w.Tab(children=[
            w.VBox([w.HTML(self.summary.to_html(float_format="%.4f")), fig_widget,
                    w.HTML(self.table.to_html(float_format="%.3f", max_rows=64))]),
            w.HTML(self.loss_html),
        ])
        tabs.set_title(0, "advantage estimators")
        tabs.set_title(1, "loss settings")
        self.widget = tabs

    def static_html(self) -> str:
        return self.advantage_html + self.loss_html

    def __repr__(self) -> str:
        return (f"EstimatorComparison({', '.join(self.advantages)})\n"
                f"{self.summary}\n{self.losses}")
