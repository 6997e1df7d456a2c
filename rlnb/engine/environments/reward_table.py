"""The reward workbench's numbers: each reward function's score per row and per group, on
hand-written completions or on a batch's, and the groups that carry no signal.

    table = reward_table(trainer.task, rows, completions, generations=G)   # hand-written
    table = batch_reward_table(trainer.task, batch)                        # a RolloutBatch
    table.to_frame(); table.groups(); table.no_signal_groups

The functions are called exactly as in training (``reward_funcs.call_reward_funcs``), so a
score seen here is the score the trainer would use; the view is ``rlnb.widgets``'
``RewardWorkbench``. A group has no signal when its G total rewards are all equal
(``train/groups_with_signal``'s rule).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlnb.engine.environments.reward_funcs import build_call, call_reward_funcs
from rlnb.engine.environments.reward_task import RewardFuncsTask


@dataclass
class RewardTable:
    """Scores of B completions (G consecutive per prompt): one dict per row with ``row``,
    ``group``, ``prompt``, ``completion``, a column per function (None where it does not
    score), ``total`` and ``correct`` (None when the task has no notion of correct)."""

    names: list[str]
    rows: list[dict]
    generations: int
    extra: dict[str, list] = field(default_factory=dict)  # log_extra columns
    metrics: dict[str, float] = field(default_factory=dict)  # log_metric values (means)

    def to_frame(self):
        import pandas as pd

        frame = pd.DataFrame(self.rows)
        for column, values in self.extra.items():
            if len(values) == len(frame):
                frame[column] = values
        return frame

    def groups(self) -> list[dict]:
        """One dict per group: its prompt, each function's mean over the rows it scores, the
        total's mean and spread, and whether the group carries signal."""
        out = []
        for g in sorted({r["group"] for r in self.rows}):
            members = [r for r in self.rows if r["group"] == g]
            totals = [r["total"] for r in members]
            mean = sum(totals) / len(totals)
            entry = {"group": g, "prompt": members[0]["prompt"], "n": len(members)}
            for name in self.names:
                scored = [r[name] for r in members if r[name] is not None]
                entry[name] = sum(scored) / len(scored) if scored else None
            entry["total"] = mean
            entry["total_std"] = (sum((t - mean) ** 2 for t in totals) / len(totals)) ** 0.5
            entry["signal"] = max(totals) > min(totals)
            out.append(entry)
        return out

    def groups_frame(self):
        import pandas as pd

        return pd.DataFrame(self.groups())

    @property
    def no_signal_groups(self) -> list[int]:
        """Groups whose totals are all equal: zero advantage under any group baseline."""
        return [g["group"] for g in self.groups() if not g["signal"]]


def reward_table(task: RewardFuncsTask, rows: list[dict] | dict, completions: list[str], *,
                 completion_ids: list[list[int]] | None = None, generations: int | None = None,
                 step: int = 0) -> RewardTable:
    """Score ``completions`` of ``rows`` (one row for all of them, or one per completion; G
    consecutive completions per group, default: all in one group)."""
    if not isinstance(task, RewardFuncsTask):
        raise ValueError(f"the reward workbench calls a run's reward functions; this run's task "
                         f"({type(task).__name__}) has none (reward_funcs)")
    if isinstance(rows, dict):
        rows = [rows] * len(completions)
    if len(rows) != len(completions):
        raise ValueError(f"{len(completions)} completions for {len(rows)} rows: give one row, "
                         "or one per completion")
    G = generations or len(completions)
    if len(completions) % G:
        raise ValueError(f"{len(completions)} completions do not split into groups of {G}")
    ids = completion_ids if completion_ids is not None else [[] for _ in completions]
    call = build_call([dict(r) for r in rows], list(completions), ids, G, step)
    scores, log = call_reward_funcs(task.funcs, call)
    rewards = task.to_rewards(scores, log)
    table_rows = []
    for i, completion in enumerate(completions):
        entry = {"row": i, "group": i // G, "prompt": rows[i]["prompt"],
                 "completion": completion}
        entry.update({name: scores[name][i] for name in scores})
        entry["total"] = float(rewards.total[i])
        entry["correct"] = bool(rewards.correct[i]) if task.defines_correct else None
        table_rows.append(entry)
    return RewardTable(list(scores), table_rows, G, dict(log["extra"]), dict(rewards.metrics))


def batch_reward_table(task: RewardFuncsTask, batch) -> RewardTable:
    """The table of a ``RolloutBatch`` (its rows, responses and sampled token ids)."""
    counts = batch.group.bincount()
    ids = [r[m.bool()].tolist() for r, m in
           zip(batch.input_ids[:, batch.prompt_ids.shape[1]:], batch.token_mask[
               :, batch.prompt_ids.shape[1]:])]
    return reward_table(task, batch.rows, batch.responses, completion_ids=ids,
                        generations=int(counts[0]), step=batch.step)
