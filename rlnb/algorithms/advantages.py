"""Advantage estimators of the GRPO family: GRPO, GDPO, Reinforce++ and on-policy distillation.

    GRPO:        A_i = (r_i - b_i) / (σ_i + 1e-6)                       (σ_i > 0, else r_i - b_i)
    GDPO:        A = whiten_rows(Σ_k w_k · A_k^GRPO)                    (one A_k per reward/<k>)
    Reinforce++: A = whiten_tokens(r_i - mean_g(r) - β·KL_t)
    OPD:         A_t = (log π_teacher - log π_old)_t · m_t

Papers: GRPO https://arxiv.org/abs/2402.03300, RLOO https://arxiv.org/abs/2402.14740,
Reinforce++ https://arxiv.org/abs/2501.03262, GDPO (decoupled multi-reward normalisation)
https://arxiv.org/abs/2601.05242, on-policy distillation https://arxiv.org/abs/2306.13649.

Implementation choices (spec §3):
1) GRPO/GDPO divide by σ + 1e-6 only where σ > 0; rows with σ = 0 keep the raw difference
   (0 for an all-equal group without leave-one-out, ±(r1 - r2) for a loo group of 2).
2) GRPO/GDPO advantages are one number per sequence; the seed-style classes broadcast them to
   ``[B, S]`` with ``expand`` (non-zero at prompt and pad positions too: the loss masks).
3) GDPO whitens the weighted sum over the B rows with the unbiased std and no epsilon; if that
   std is not > 0 (B = 1 gives NaN) it only centres.
4) Reinforce++ uses the *non*-leave-one-out group mean, optionally subtracts β·KL(π_old‖π_ref)
   per token (``use_kl_in_reward``; the loss then uses β = 0), and whitens over all masked
   tokens of the batch with the biased variance floored at 1e-8. The whitening is applied to
   every position, masked ones included, and an all-zero mask gives NaN, as in NeMo-RL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field, field_validator

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.checks import check_mask, check_same_rows, check_tensor, choose
from rlnb.algorithms.kl import calculate_kl
from rlnb.algorithms.masked import masked_mean
from rlnb.config import Config, parse_config

# --------------------------------------------------------------------------- pure functions


def grpo_advantages(
    prompt_ids: torch.Tensor,
    rewards: torch.Tensor,
    *,
    leave_one_out: bool = True,
    normalize_rewards: bool = True,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """GRPO advantage per sequence.

    Args:
        prompt_ids: ``[B, P]`` prompt tokens (equal rows = one group).
        rewards: ``[B]``.
        leave_one_out: RLOO baseline and per-sample leave-one-out std.
        normalize_rewards: divide by the group std where it is > 0.
    Returns:
        ``[B]`` advantages.
    """
    baseline, std = calculate_baseline_and_std_per_prompt(
        prompt_ids, rewards, leave_one_out=leave_one_out
    )
    advantages = rewards.float() - baseline
    if normalize_rewards:
        advantages = torch.where(std > 0, advantages / (std + epsilon), advantages)
    return advantages


def gdpo_advantages(
    prompt_ids: torch.Tensor,
    reward_components: Mapping[str, torch.Tensor],
    *,
    reward_weights: list[float] | None = None,
    leave_one_out: bool = True,
    normalize_rewards: bool = True,
) -> torch.Tensor:
    """GDPO: a GRPO advantage per reward component, weighted, summed and whitened over rows.

    Args:
        prompt_ids: ``[B, P]``.
        reward_components: name -> ``[B]`` rewards; at least two. Components are taken in
            sorted name order, which is the order ``reward_weights`` refers to.
        reward_weights: one weight per component (default all 1).
    Returns:
        ``[B]`` advantages.
    """
    names = sorted(reward_components)
    if len(names) < 2:
        raise ValueError(
            f"GDPO needs at least 2 reward components (batch keys 'reward/<name>'), got {names}"
        )
    weights = [1.0] * len(names) if reward_weights is None else list(reward_weights)
    if len(weights) != len(names):
        raise ValueError(
            f"reward_weights has {len(weights)} entries but there are {len(names)} reward "
            f"components {names} (weights follow this sorted order)"
        )
    total = None
    for name, w in zip(names, weights):
        check_tensor(f"reward_components[{name!r}]", reward_components[name], ndim=1, floating=True)
        a_k = grpo_advantages(
            prompt_ids,
            reward_components[name],
            leave_one_out=leave_one_out,
            normalize_rewards=normalize_rewards,
        )
        total = w * a_k if total is None else total + w * a_k
    centred = total - total.mean()
    if total.numel() < 2:  # unbiased std of one row is NaN, and NaN > 0 is False: only centre
        return centred
    std = total.std()  # unbiased, over rows (not tokens), no epsilon
    return centred / std if bool(std > 0) else centred


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
        prompt_ids: ``[B, P]``.
        rewards: ``[B]``.
        mask: ``[B, T]`` token_mask·sample_mask; whitening statistics are over its ones.
        minus_baseline: subtract the group mean (non-leave-one-out; a group of 1 gets 0).
        kl_penalty: optional ``[B, T]`` per-token β·KL to subtract before whitening (KL in the
            reward; see ``kl_in_reward``).
    Returns:
        ``[B, T]`` advantages (whitened at every position, masked ones included).
    """
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


def kl_in_reward(
    prev_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor,
    *,
    reference_policy_kl_penalty: float,
    reference_policy_kl_type: str = "k3",
) -> torch.Tensor:
    """β·KL(π_old ‖ π_ref) per token with the default clamps (20 / 10), for KL-in-reward.

    Args: ``[B, T]`` log-probs of the sampled tokens. Returns ``[B, T]``.
    """
    kl = calculate_kl(prev_logprobs, reference_logprobs, reference_policy_kl_type)
    return reference_policy_kl_penalty * kl


def on_policy_distillation_advantages(
    teacher_logprobs: torch.Tensor, prev_logprobs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """OPD: the per-token teacher-student log-prob gap as the advantage (no gradient).

    Args: ``[B, T]`` each. Returns ``([B, T] advantages, metrics)`` with the spec §3.4 keys.
    """
    m = check_mask("mask", mask, shape=tuple(prev_logprobs.shape))
    check_tensor("teacher_logprobs", teacher_logprobs, shape=tuple(m.shape), floating=True)
    gap = (teacher_logprobs - prev_logprobs).detach()
    advantages = gap * m
    valid = advantages[m.bool()]
    prefix = "on_policy_distillation/"
    metrics = {
        prefix + "teacher_student_logprob_gap_mean": float(masked_mean(gap, m)),
        prefix + "adv_mean": float(valid.mean()) if valid.numel() else 0.0,
        prefix + "adv_std": float(valid.std()) if valid.numel() > 1 else 0.0,
    }
    return advantages, metrics


# --------------------------------------------------------------------------- configs


class AdvEstimatorConfig(Config):
    """``grpo.adv_estimator``: which estimator turns rewards into advantages."""

    name: str = Field("grpo", description="grpo | gdpo | reinforce_plus_plus | opd")
    normalize_rewards: bool = Field(
        True, description="Divide by the group std (GRPO/GDPO); Dr. GRPO sets it False."
    )
    use_leave_one_out_baseline: bool = Field(
        True, description="RLOO baseline: mean of the other responses to the same prompt."
    )
    reward_weights: list[float] | None = Field(
        None, description="GDPO weight per reward/<name> component, in sorted name order."
    )
    minus_baseline: bool = Field(True, description="Reinforce++: subtract the group mean.")

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        choose(ADVANTAGE_ESTIMATORS, name, "advantage estimator")
        return name


class _KLRewardConfig(Config):
    """The part of ``loss_fn`` the estimators read (KL in the reward)."""

    model_config = {**Config.model_config, "extra": "ignore"}
    use_kl_in_reward: bool = False
    reference_policy_kl_penalty: float = 0.01
    reference_policy_kl_type: str = "k3"


# --------------------------------------------------------------------------- seed-style classes


def _broadcast_rows(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, S]`` view (expand, no copy): clone before writing into it."""
    return advantages.unsqueeze(-1).expand(-1, mask.shape[-1])


class _Estimator:
    def __init__(self, estimator_config: Any = None, loss_config: Any = None):
        self.config = parse_config(AdvEstimatorConfig, estimator_config, "grpo.adv_estimator")
        self.loss_config = parse_config(_KLRewardConfig, loss_config, "loss_fn")

    def _check(self, prompt_ids, rewards, mask):
        check_tensor("rewards", rewards, ndim=1, floating=True)
        check_tensor("prompt_ids", prompt_ids, ndim=(1, 2))
        check_mask("mask", mask, shape=(rewards.shape[0], None))
        check_same_rows(prompt_ids=prompt_ids, rewards=rewards, mask=mask)


class GRPOAdvantageEstimator(_Estimator):
    """GRPO / RLOO / Dr. GRPO advantages (``grpo_advantages``) broadcast to ``[B, S]``."""

    def compute_advantage(self, prompt_ids, rewards, mask, **kwargs) -> torch.Tensor:
        """``prompt_ids [B, P]``, ``rewards [B]``, ``mask [B, S]`` -> ``[B, S]``."""
        self._check(prompt_ids, rewards, mask)
        a = grpo_advantages(
            prompt_ids,
            rewards,
            leave_one_out=self.config.use_leave_one_out_baseline,
            normalize_rewards=self.config.normalize_rewards,
        )
        return _broadcast_rows(a, mask)


class GDPOAdvantageEstimator(_Estimator):
    """GDPO over the ``reward/<name>`` entries of ``repeated_batch``; ``rewards`` is unused."""

    def compute_advantage(
        self, prompt_ids, rewards, mask, repeated_batch: Mapping[str, Any] | None = None, **kwargs
    ) -> torch.Tensor:
        """``repeated_batch`` holds ``reward/<name>`` tensors ``[B]``; returns ``[B, S]``."""
        self._check(prompt_ids, rewards, mask)
        if repeated_batch is None:
            raise ValueError("GDPO needs repeated_batch with 'reward/<name>' components")
        components = {k: v for k, v in repeated_batch.items() if k.startswith("reward/")}
        a = gdpo_advantages(
            prompt_ids,
            components,
            reward_weights=self.config.reward_weights,
            leave_one_out=self.config.use_leave_one_out_baseline,
            normalize_rewards=self.config.normalize_rewards,
        )
        return _broadcast_rows(a, mask)


class ReinforcePlusPlusAdvantageEstimator(_Estimator):
    """Reinforce++ with optional KL in the reward (from ``loss_fn.use_kl_in_reward``)."""

    def compute_advantage(
        self, prompt_ids, rewards, mask, logprobs_policy=None, logprobs_reference=None, **kwargs
    ) -> torch.Tensor:
        """``logprobs_policy`` / ``logprobs_reference``: ``[B, S]`` prev and reference log-probs."""
        self._check(prompt_ids, rewards, mask)
        kl = None
        lc = self.loss_config
        if lc.use_kl_in_reward and logprobs_policy is not None and logprobs_reference is not None:
            kl = kl_in_reward(
                logprobs_policy,
                logprobs_reference,
                reference_policy_kl_penalty=lc.reference_policy_kl_penalty,
                reference_policy_kl_type=lc.reference_policy_kl_type,
            )
        return reinforce_plus_plus_advantages(
            prompt_ids, rewards, mask, minus_baseline=self.config.minus_baseline, kl_penalty=kl
        )


class OnPolicyDistillationAdvantageEstimator(_Estimator):
    """OPD: needs ``teacher_logprobs`` and ``logprobs_policy`` ``[B, S]``; sets ``last_metrics``."""

    last_metrics: dict[str, float]

    def compute_advantage(
        self, prompt_ids, rewards, mask, logprobs_policy=None, teacher_logprobs=None, **kwargs
    ) -> torch.Tensor:
        self._check(prompt_ids, rewards, mask)
        if teacher_logprobs is None or logprobs_policy is None:
            raise ValueError("OPD needs teacher_logprobs and logprobs_policy, each [B, S]")
        a, self.last_metrics = on_policy_distillation_advantages(
            teacher_logprobs, logprobs_policy, mask
        )
        return a


ADVANTAGE_ESTIMATORS = {
    "grpo": GRPOAdvantageEstimator,
    "gdpo": GDPOAdvantageEstimator,
    "reinforce_plus_plus": ReinforcePlusPlusAdvantageEstimator,
    "opd": OnPolicyDistillationAdvantageEstimator,
}


def make_advantage_estimator(estimator_config: Any = None, loss_config: Any = None) -> _Estimator:
    """Build the estimator named by ``estimator_config['name']`` (see ``ADVANTAGE_ESTIMATORS``)."""
    cfg = parse_config(AdvEstimatorConfig, estimator_config, "grpo.adv_estimator")
    cls = choose(ADVANTAGE_ESTIMATORS, cfg.name, "advantage estimator (grpo.adv_estimator.name)")
    return cls(cfg, loss_config)
