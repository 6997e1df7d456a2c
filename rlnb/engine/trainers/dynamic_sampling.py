"""Dynamic sampling's rollout (DAPO): generate until P·G rows carry a learning signal.

    repeat: generate P' prompts x G  ->  keep rows whose group std != 0  ->  until P·G kept

Implementation choices (docs/algorithms.md#dynamic-sampling):
1) Generation batches are filtered by the per-sample std of the *shaped* rewards (scaling, then
   shaping, as the advantage stage computes them), with the loop's leave-one-out flag; the kept
   rows of every batch are concatenated and cut to P·G rows, as NeMo-RL does.
2) The advantage stage then recomputes baselines on the surviving rows.
3) One process only: ranks would draw different numbers of generation batches.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.dynamic_sampling import DynamicSamplingState, dynamic_sampling
from rlnb.engine.batches import RolloutBatch
from rlnb.engine.trainers.rollout import generate_and_score, groups_with_signal, shaped_rewards


def dynamic_sampling_rollout(trainer, rows=None) -> RolloutBatch:
    """Generate until P·G rows have a non-zero std (the module's choices 1-3)."""
    loop = trainer.loop_config
    if trainer.dist.world_size > 1:  # ranks would need different numbers of batches
        raise ValueError(f"{trainer.loop_section}.use_dynamic_sampling runs in one process only "
                         "(ranks would draw different numbers of generation batches)")
    train_size = loop.num_prompts_per_step * loop.num_generations_per_prompt
    state, parts = DynamicSamplingState(), []
    n_prompts = int(loop.num_prompts_per_step * loop.batch_multiplier)
    while True:
        part = generate_and_score(trainer, rows or trainer.next_prompt_rows(n_prompts),
                                  loop.num_generations_per_prompt, trainer.step_count)
        rows = None
        part.group = part.group + sum(int(p.group.max()) + 1 for p in parts)
        parts.append(part)
        shaped, _ = shaped_rewards(loop, part.rewards, part.reward_components, part.truncated,
                                   part.response_lengths)
        _, std = calculate_baseline_and_std_per_prompt(
            part.prompt_ids, shaped, leave_one_out=loop.adv_estimator.use_leave_one_out_baseline)
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
    batch = concat_rollouts(parts, keep, trainer.policy.tokenizer.pad_token_id)
    batch.metrics.update({f"train/{k}": v for k, v in result.metrics.items()})
    # over every generated group, not the kept ones (those have signal by construction)
    counts = [groups_with_signal(p.group, p.rewards) for p in parts]
    batch.metrics["train/groups_with_signal"] = (
        sum(c[0] for c in counts) / sum(c[1] for c in counts))
    return batch


def concat_rollouts(parts: list[RolloutBatch], keep: torch.Tensor, pad_id: int) -> RolloutBatch:
    """Rows ``keep`` of the concatenation of several generation batches (dynamic sampling, the
    async loop's groups). Log-probs that are None in the first part are None in the result."""
    width = max(p.input_ids.shape[1] for p in parts)
    pwidth = max(p.prompt_ids.shape[1] for p in parts)

    def cat(name, pad_to=None, left=False, value=0):
        xs = []
        for p in parts:
            x = getattr(p, name)
            if pad_to is not None and x.shape[1] < pad_to:
                extra = pad_to - x.shape[1]
                x = torch.nn.functional.pad(x, (extra, 0) if left else (0, extra), value=value)
            xs.append(x)
        return torch.cat(xs)[keep]

    flat = lambda name: [v for p in parts for v in getattr(p, name)]  # noqa: E731
    keep_list = keep.tolist()
    first = parts[0]
    metrics = {
        k: sum(p.metrics.get(k, 0.0) for p in parts) if k.startswith("timing/") else v
        for k, v in first.metrics.items()
    }
    components = {
        k: torch.cat([p.reward_components[k] for p in parts])[keep] for k in first.reward_components
    }
    return RolloutBatch(
        step=first.step,
        rows=[flat("rows")[i] for i in keep_list],
        prompts=[flat("prompts")[i] for i in keep_list],
        responses=[flat("responses")[i] for i in keep_list],
        group=cat("group"),
        prompt_ids=cat("prompt_ids", pwidth, left=True, value=pad_id),
        input_ids=cat("input_ids", width, value=pad_id),
        attention_mask=cat("attention_mask", width),
        token_mask=cat("token_mask", width),
        sample_mask=cat("sample_mask"),
        generation_logprobs=cat("generation_logprobs", width),
        prev_logprobs=cat("prev_logprobs", width) if first.prev_logprobs is not None else None,
        reference_logprobs=cat("reference_logprobs", width)
        if first.reference_logprobs is not None
        else None,
        rewards=cat("rewards"),
        reward_components=components,
        correct=cat("correct"),
        truncated=cat("truncated"),
        response_lengths=cat("response_lengths"),
        weight_version=first.weight_version,
        metrics=metrics,
        weight_versions=cat("weight_versions") if first.weight_versions is not None else None,
    )
