"""The reward workbench: a run's reward functions on hand-written completions or on a batch's,
each component per row and per group, the groups with no signal flagged; and the signal check's
figure.

    RewardWorkbench(trainer, rows=row, completions=["<answer>19</answer>", "19"]).display()
    RewardWorkbench(trainer, batch=trainer.rollout()).display()
    show(signal_figure(rlnb.signal_check(trainer)))

Display only (no controls): the numbers come from ``rlnb.engine.environments.reward_table`` and
``rlnb.engine.inspection.signal_check``; this module lays them out.
"""

from __future__ import annotations

import html

from rlnb.engine.environments.reward_table import batch_reward_table, reward_table
from rlnb.widgets.static import LiveAndStatic


def _cell(value) -> str:
    if value is None:
        return "<td style='color:#999'>None</td>"
    if isinstance(value, bool):
        return f"<td>{'✓' if value else '✗'}</td>"
    if isinstance(value, float):
        shade = "rgba(44,160,44,0.25)" if value > 0 else "rgba(214,39,40,0.18)" if value < 0 \
            else "transparent"
        return f"<td style='background:{shade}'>{value:.3g}</td>"
    text = value if isinstance(value, str) else str(value)
    return f"<td style='font-family:monospace;white-space:pre'>{html.escape(text[:80])}</td>"


def _table(rows: list[dict], columns: list[str], flag=None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for r in rows:
        style = " style='outline:2px solid #d62728'" if flag and flag(r) else ""
        body.append(f"<tr{style}>" + "".join(_cell(r.get(c)) for c in columns) + "</tr>")
    return (f"<table class='rlnb-table'><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def _prompt_text(prompt) -> str:
    if isinstance(prompt, list):  # chat messages: the last one
        return prompt[-1]["content"] if prompt else ""
    return str(prompt)


class RewardWorkbench(LiveAndStatic):
    """Each reward function's score of every completion (per row and per group).

    Args:
        trainer: a trainer whose task has reward functions (``reward_funcs``), or that task.
        rows, completions: hand-written completions of one row (a dict) or of one row each;
            ``generations``: G consecutive completions per group (default: one group).
        batch: a ``RolloutBatch`` instead (its rows, responses and token ids).
    """

    def __init__(self, trainer, *, rows=None, completions=None, generations=None, batch=None):
        import ipywidgets as w

        task = getattr(trainer, "task", trainer)
        if batch is not None:
            self.table = batch_reward_table(task, batch)
        elif completions is not None and rows is not None:
            self.table = reward_table(task, rows, completions, generations=generations)
        else:
            raise ValueError("RewardWorkbench needs completions= with rows=, or batch=")
        self.widget = w.HTML(self.static_html())

    def static_html(self) -> str:
        t = self.table
        rows = [{**r, "prompt": _prompt_text(r["prompt"])} for r in t.rows]
        columns = ["row", "group", "prompt", "completion", *t.names, "total"]
        if rows and rows[0]["correct"] is not None:
            columns.append("correct")
        groups = [{**g, "prompt": _prompt_text(g["prompt"])} for g in t.groups()]
        none = t.no_signal_groups
        head = (f"<div><b>reward workbench</b> — {len(rows)} completions in {len(groups)} "
                f"group(s) of {t.generations}; {len(none)} with no signal"
                + (f" (groups {none[:12]})" if none else "") + "</div>")
        per_group = _table(groups, ["group", "prompt", "n", *t.names, "total", "total_std",
                                    "signal"], flag=lambda g: not g["signal"])
        extra = "".join(f"<div>{html.escape(k)}: {v:.4g}</div>" for k, v in t.metrics.items())
        return (head + "<div><i>per row</i></div>" + _table(rows, columns)
                + "<div><i>per group (outlined: no signal, all totals equal)</i></div>"
                + per_group + extra)

    def __repr__(self) -> str:
        return (f"RewardWorkbench({len(self.table.rows)} completions, functions "
                f"{self.table.names}, no-signal groups {self.table.no_signal_groups})")


def signal_figure(report):
    """Bars: the expected share of groups with no signal for each G of a ``SignalReport`` (the
    run's G highlighted), with the 50 % line above which the check warns."""
    import plotly.graph_objects as go

    sizes = sorted(report.expected)
    fig = go.Figure(go.Bar(
        x=[str(g) for g in sizes], y=[report.expected[g] for g in sizes],
        marker_color=["#d62728" if g == report.group_size else "#636efa" for g in sizes],
        text=[f"{report.expected[g]:.0%}" for g in sizes], textposition="outside"))
    fig.add_hline(y=0.5, line_dash="dot", annotation_text="most groups lost")
    fig.update_layout(title="expected share of groups with no signal (red: this run's G)",
                      xaxis_title="G (responses per prompt)", yaxis_range=[0, 1.1],
                      height=320, template="plotly_white", margin={"t": 50, "b": 40})
    return fig
