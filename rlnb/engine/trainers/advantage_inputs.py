"""The advantage stage's inputs, made from a rollout batch: its rewards scaled then shaped, its
sample mask filtered, and which of its groups carry a signal (rewards that differ within the
group, the only ones a group baseline turns into nonzero advantages). GRPO's and PPO's
``compute_advantages`` call the first two; DAPO's dynamic sampling (``dynamic_sampling.py``)
shapes each generated batch's rewards and keeps the groups with signal; the rollout's
``train/groups_with_signal`` and the sample funnel count them.

    rewards, components = shaped_rewards(loop, batch.rewards, batch.reward_components,
                                         batch.truncated, batch.response_lengths)
    sample_mask, metrics = filtered_sample_mask(loop, batch, rewards)

``loop`` is the loop's config section (``grpo`` or ``ppo``); the math is the algorithm layer's
(``rlnb.algorithms.rewards``, ``rlnb.algorithms.filtering``).
"""

from __future__ import annotations

import torch

from rlnb.algorithms.filtering import overlong_filter, seq_logprob_error_mask
from rlnb.algorithms.rewards import scale_rewards, shape_rewards
from rlnb.engine.data.batches import RolloutBatch


def shaped_rewards(loop, rewards, components, truncated, lengths):
    """Reward scaling then shaping (docs/algorithms.md#reward-scaling-and-shaping), pure
    functions of the raw rewards: ``(rewards [B], components name -> [B])``."""
    if loop.reward_scaling.enabled:
        kw = loop.reward_scaling.model_dump(exclude={"enabled"})
        rewards = scale_rewards(rewards, **kw)
        components = {k: scale_rewards(v, **kw) for k, v in components.items()}
    if loop.reward_shaping.enabled:
        kw = loop.reward_shaping.model_dump(exclude={"enabled"})
        rewards = shape_rewards(rewards, truncated=truncated, response_lengths=lengths, **kw)
    return rewards, components


def filtered_sample_mask(loop, batch: RolloutBatch, rewards: torch.Tensor
                         ) -> tuple[torch.Tensor, dict[str, float]]:
    """``[B]`` sample mask after overlong filtering and log-prob-error masking (the loop's
    settings), with the masking metrics."""
    sample_mask, metrics = batch.sample_mask.clone(), {}
    if loop.overlong_filtering:
        sample_mask = overlong_filter(sample_mask, batch.truncated)
    if loop.seq_logprob_error_threshold is not None:
        sample_mask, err = seq_logprob_error_mask(
            batch.prev_logprobs, batch.generation_logprobs, batch.token_mask, sample_mask,
            rewards, seq_logprob_error_threshold=loop.seq_logprob_error_threshold)
        metrics.update({f"train/{k}": v for k, v in err.items()})
    return sample_mask, metrics


def groups_with_signal(group: torch.Tensor, rewards: torch.Tensor) -> tuple[int, int]:
    """``(groups whose rewards are not all equal, groups)`` for group ids ``[B]`` and raw
    rewards ``[B]``: a group of equal rewards has zero advantages under any group baseline, so
    it adds nothing to the gradient (DAPO's dynamic sampling keeps only the others)."""
    signal, _ = signal_per_group(group, rewards)
    return int(signal.sum()), len(signal)


def signal_per_group(group: torch.Tensor, rewards: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``([P] bool: whether each group's rewards differ, [B] each row's group index)`` for
    group ids ``[B]`` and raw rewards ``[B]``."""
    ids, index = group.unique(return_inverse=True)  # [P], [B]
    r = rewards.double()
    hi = torch.full((len(ids),), -torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, "amax")
    lo = torch.full((len(ids),), torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, "amin")
    return hi > lo, index
