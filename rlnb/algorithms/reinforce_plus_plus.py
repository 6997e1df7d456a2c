"""Reinforce++: the group-mean baseline, then whitening over every valid token of the batch.

    A = whiten_tokens(r_i - mean_g(r) - β·KL_t)

Reinforce++: https://arxiv.org/abs/2501.03262; docs/algorithms.md#grpo-family-advantage-estimators.

Implementation choices:
1) The *non*-leave-one-out group mean (``minus_baseline``); optionally β·KL(π_old‖π_ref) per
   token (``use_kl_in_reward``; the loss then uses β = 0).
2) Whitening over all masked tokens of the batch, the biased variance floored at 1e-8, applied to
   every position (masked ones included); an all-zero mask gives NaN, as in NeMo-RL.
3) With ``use_kl_in_reward`` and β > 0, a missing log-prob tensor raises (NeMo-RL would train
   without the KL).
"""

from __future__ import annotations

import torch

from rlnb.algorithms.advantage_config import AdvEstimatorConfig, kl_reward_penalty
from rlnb.algorithms.advantages import Estimator
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.checks import check_finite, check_mask, check_tensor


def reinforce_plus_plus_advantages(
    prompt_ids: torch.Tensor,
    rewards: torch.Tensor,
    mask: torch.Tensor,
    *,
    minus_baseline: bool = True,
    kl_penalty: torch.Tensor | None = None,
) -> torch.Tensor:
    """Reinforce++ advantages with global token whitening.

    Args:
        prompt_ids: ``[B, L]``.
        rewards: ``[B]``, finite.
        mask: ``[B, T]`` token_mask·sample_mask; whitening statistics are over its ones.
        minus_baseline: subtract the group mean (non-leave-one-out; a group of 1 gets 0).
        kl_penalty: optional ``[B, T]`` per-token β·KL to subtract before whitening (KL in the
            reward; see ``kl_in_reward``).
    Returns:
        ``[B, T]`` advantages (whitened at every position, masked ones included).
    """
    check_tensor("rewards", rewards, ndim=1, floating=True)
    check_finite("rewards", rewards)
    m = check_mask("mask", mask, shape=(rewards.shape[0], None))
    r = rewards.float()
    if minus_baseline:
        baseline, _ = calculate_baseline_and_std_per_prompt(prompt_ids, r, leave_one_out=False)
        r = r - baseline
    advantages = r.unsqueeze(-1).expand_as(m)  # [B, T]
    if kl_penalty is not None:
        check_tensor("kl_penalty", kl_penalty, shape=tuple(m.shape), floating=True)
        advantages = advantages - kl_penalty
    # No epsilon on Σ M here (an all-zero mask gives NaN, as in NeMo-RL); the variance is floored.
    mean = (advantages * m).sum() / m.sum()
    var = ((advantages - mean).square() * m).sum() / m.sum()
    return (advantages - mean) * torch.rsqrt(var.clamp(min=1e-8))


class ReinforcePlusPlusAdvantageEstimator(Estimator):
    """Reinforce++ with optional KL in the reward (from ``loss_fn.use_kl_in_reward``)."""

    kl_in_reward = True

    @classmethod
    def uses_groups(cls, config: AdvEstimatorConfig) -> bool:
        return config.minus_baseline  # the group mean, else every row is its own

    def advantages(self, prompt_ids, rewards, mask, *, policy, reference, **_unused):
        kl = kl_reward_penalty(self.loss_config, policy, reference,
                               ("logprobs_policy", "logprobs_reference"))
        return reinforce_plus_plus_advantages(
            prompt_ids, rewards, mask, minus_baseline=self.config.minus_baseline, kl_penalty=kl
        )
