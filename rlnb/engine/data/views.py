"""What a notebook sees of a step's objects (``batches.py``): a pandas frame with one row per
response and a few readable lines, each the method of its batch (``batch.to_frame()``,
``print(batch)``), kept apart from the data they show.

    batch.to_frame()        # RolloutBatch: prompt, response, reward, correct, length, ...
    advantages.to_frame()   # AdvantageBatch: the same, with the baseline, std and advantage
    print(result)           # UpdateResult: the loss and the metrics its KEYS name
"""

from __future__ import annotations


def zero_signal_groups(batch) -> list[int]:
    """Groups whose rewards are all equal: no learning signal for GRPO."""
    out = []
    for g in batch.group.unique().tolist():
        r = batch.rewards[batch.group == g]
        if bool((r == r[0]).all()):
            out.append(g)
    return out


def rollout_frame(batch):
    """One row per response: prompt, response, reward, correct, length, truncated."""
    import pandas as pd

    return pd.DataFrame(
        {
            "group": batch.group.tolist(),
            "prompt": batch.prompts,
            "response": batch.responses,
            "answer": [r.get("answer") for r in batch.rows],
            "reward": batch.rewards.tolist(),
            "correct": batch.correct.tolist(),
            "length": batch.response_lengths.tolist(),
            "truncated": batch.truncated.tolist(),
            **{f"reward/{k}": v.tolist() for k, v in batch.reward_components.items()},
        }
    )


def rollout_summary(batch) -> str:
    """Counts, the reward and accuracy, the groups without signal, the first responses."""
    n_groups = int(batch.group.max()) + 1 if len(batch) else 0
    lines = [
        f"RolloutBatch(step={batch.step}): {len(batch)} responses = {n_groups} prompts x "
        f"{batch.group_size}",
        f"  reward mean {batch.rewards.mean():.3f}   accuracy {batch.correct.float().mean():.3f}"
        f"   mean length {batch.response_lengths.float().mean():.1f}   truncated "
        f"{int(batch.truncated.sum())}",
        f"  groups with no learning signal: {len(batch.zero_signal_groups())}/{n_groups}",
    ]
    for i in range(min(3, len(batch))):
        lines.append(
            f"  [{i}] {batch.prompts[i]!r} -> {batch.responses[i]!r}  "
            f"reward {batch.rewards[i]:.2f}"
        )
    return "\n".join(lines)


def advantage_frame(batch):
    """The rollout's frame with the shaped reward, baseline, std, advantage and kept flag."""
    frame = batch.rollout.to_frame()
    frame["shaped_reward"] = batch.rewards.tolist()
    frame["baseline"] = batch.baseline.tolist()
    frame["std"] = batch.std.tolist()
    frame["advantage"] = batch.sequence_advantages().tolist()
    frame["kept"] = batch.kept.tolist()
    return frame


def advantage_summary(batch) -> str:
    """The estimator, the rows kept, the advantages' spread."""
    a = batch.sequence_advantages()
    return (
        f"AdvantageBatch({batch.estimator}, step={batch.rollout.step}): {len(batch)} rows, "
        f"{int(batch.kept.sum())} kept\n  advantage mean {a.mean():+.3f}  min {a.min():+.3f}"
        f"  max {a.max():+.3f}   rows with zero advantage {int((a == 0).sum())}"
    )


def update_summary(result) -> str:
    """The metrics the result's ``KEYS`` name (a loop's subclass names its own)."""
    m = result.metrics
    shown = "  ".join(f"{k.removeprefix('train/')} {m[k]:.4g}" for k in result.KEYS if k in m)
    return f"UpdateResult(step={result.step}{', dry run' if result.dry_run else ''}): {shown}"


def summary_of(obj) -> str:
    """``repr``: the object's ``summary()``, a subclass's own (PPO's advantages) included."""
    return obj.summary()
