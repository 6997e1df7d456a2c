"""Dynamic sampling's rollout (DAPO): generate until P·G rows carry a learning signal.

    repeat: generate P' prompts x G  ->  keep rows whose group std != 0  ->  until P·G kept

Implementation choices (docs/algorithms.md#dynamic-sampling):
1) Generation batches are filtered by the per-sample std of the *shaped* rewards (scaling, then
   shaping, as the advantage stage computes them), with the loop's leave-one-out flag; the kept
   rows of every batch are concatenated and cut to P·G rows, as NeMo-RL does.
2) The advantage stage then recomputes baselines on the surviving rows.
3) One process only: ranks would draw different numbers of generation batches (the trainer
   refuses it at start).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.dynamic_sampling import DynamicSamplingState, dynamic_sampling
from rlnb.engine.data.batch_join import concat_rollouts
from rlnb.engine.data.batches import RolloutBatch
from rlnb.engine.trainers.advantage_inputs import groups_with_signal, shaped_rewards

Rows = list[dict[str, Any]]


def dynamic_sampling_rollout(loop, generate: Callable[[Rows, int], RolloutBatch],
                             next_rows: Callable[[int], Rows], pad_id: int,
                             rows: Rows | None = None) -> RolloutBatch:
    """Generate until P·G rows have a non-zero std (the module's choices 1-2).

    Args:
        loop: the loop's config section; ``generate(rows, G)``: a scored batch with log-probs;
        ``next_rows(n)``: the next n rows of the training stream; ``pad_id``: the pad token;
        ``rows``: the first generation batch's rows (default: the stream's).
    """
    train_size = loop.num_prompts_per_step * loop.num_generations_per_prompt
    state, parts = DynamicSamplingState(), []
    n_prompts = int(loop.num_prompts_per_step * loop.batch_multiplier)
    while True:
        part = generate(rows or next_rows(n_prompts), loop.num_generations_per_prompt)
        rows = None
        part.group = part.group + sum(int(p.group.max()) + 1 for p in parts)
        parts.append(part)
        shaped, _ = shaped_rewards(loop, part.rewards, part.reward_components, part.truncated,
                                   part.response_lengths)
        _, std = calculate_baseline_and_std_per_prompt(
            part.prompt_ids, shaped, leave_one_out=loop.leave_one_out)
        index = torch.arange(len(part)) + sum(len(p) for p in parts[:-1])
        result = dynamic_sampling(
            {"row": index.float(), "total_reward": shaped}, std=std,
            baseline=torch.zeros_like(std), state=state, train_size=train_size,
            max_gen_batches=loop.dynamic_sampling_max_gen_batches,
        )
        state = result.state
        if result.batch is not None:
            break
    keep = result.batch["row"].long()
    batch = concat_rollouts(parts, keep, pad_id)
    batch.metrics.update({f"train/{k}": v for k, v in result.metrics.items()})
    # over every generated group, not the kept ones (those have signal by construction)
    counts = [groups_with_signal(p.group, p.rewards) for p in parts]
    batch.metrics["train/groups_with_signal"] = (
        sum(c[0] for c in counts) / sum(c[1] for c in counts))
    return batch
