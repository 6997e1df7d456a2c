"""Joining rollout batches and turning them into plain data: dynamic sampling concatenates its
generation batches, the async loop its groups, and checkpoints save the replay buffer's groups.

    batch = concat_rollouts([part_a, part_b], keep=torch.tensor([0, 3, 5]), pad_id=0)
"""

from __future__ import annotations

from typing import Any

import torch

from rlnb.engine.data.batches import RolloutBatch


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


def rollout_to_dict(batch: RolloutBatch) -> dict[str, Any]:
    """A ``RolloutBatch`` as plain data (tensors, lists, dicts) for ``torch.save``."""
    return {name: getattr(batch, name) for name in RolloutBatch.__dataclass_fields__}


def rollout_from_dict(data: dict[str, Any]) -> RolloutBatch:
    """Inverse of ``rollout_to_dict``."""
    return RolloutBatch(**data)
