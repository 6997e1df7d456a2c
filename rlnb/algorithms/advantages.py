"""Advantage estimators of the GRPO family: GRPO, GDPO, Reinforce++ and on-policy distillation.

    GRPO:        A_i = (r_i - b_i) / (σ_i + 1e-6)                       (σ_i > 0, else r_i - b_i)
    GDPO:        A = whiten_rows(Σ_k w_k · A_k^GRPO)               (one A_k per reward component)
    Reinforce++: A = whiten_tokens(r_i - mean_g(r) - β·KL_t)
    OPD:         A_t = (log π_teacher - log π_old)_t · m_t

Papers: GRPO https://arxiv.org/abs/2402.03300, RLOO https://arxiv.org/abs/2402.14740,
Reinforce++ https://arxiv.org/abs/2501.03262, GDPO (decoupled multi-reward normalisation)
https://arxiv.org/abs/2601.05242, on-policy distillation https://arxiv.org/abs/2306.13649.
See docs/algorithms.md#grpo-family-advantage-estimators.

Implementation choices:
1) GRPO/GDPO divide by σ + 1e-6 only where σ > 0; rows with σ = 0 keep the raw difference
   (0 for an all-equal group without leave-one-out, ±(r1 - r2) for a loo group of 2).
2) GRPO/GDPO advantages are one number per sequence; the NeMo-RL-style classes broadcast them to
   ``[B, S]`` with ``expand`` (non-zero at prompt and pad positions too: the loss masks).
3) GDPO whitens the weighted sum over the B rows with the unbiased std and no epsilon; if that
   std is not > 0 (B = 1 gives NaN) it only centres. Components come from ``repeated_batch``:
   keys ``reward/<name>`` (NeMo-RL's code), or ``reward1, reward2, ...`` (NeMo-RL's docs page);
   when both kinds are present the ``reward/<name>`` keys win and the others are ignored.
4) Reinforce++ uses the *non*-leave-one-out group mean, optionally subtracts β·KL(π_old‖π_ref)
   per token (``use_kl_in_reward``; the loss then uses β = 0), and whitens over all masked
   tokens of the batch with the biased variance floored at 1e-8. The whitening is applied to
   every position, masked ones included, and an all-zero mask gives NaN, as in NeMo-RL.
5) Call contract: every estimator class takes exactly the keywords NeMo-RL's GRPO loop passes
   (``repeated_batch``, ``logprobs_policy``, ``logprobs_reference``, ``teacher_logprobs``,
   ``prev_logprobs``, ``generation_logprobs``, ``sample_mask``) and uses the ones it needs; any
   other keyword is a ``TypeError`` naming it (NeMo-RL swallows them in ``**kwargs``).
6) Deliberate differences from NeMo-RL, all of them "fail loudly instead of training without
   the KL": NaN/inf rewards raise ``ValueError``; ``use_kl_in_reward`` with an estimator that
   has no KL-in-reward (GRPO, GDPO, OPD) raises at construction; Reinforce++ with
   ``use_kl_in_reward`` and β > 0 raises when a log-prob tensor is missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field, field_validator

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.checks import (
    alias,
    check_finite,
    check_mask,
    check_same_rows,
    check_tensor,
    choose,
)
from rlnb.algorithms.kl import kl_in_reward
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
        prompt_ids: ``[B, L]`` prompt tokens (equal rows = one group).
        rewards: ``[B]``, finite.
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


_NUMBERED = re.compile(r"reward(\d+)")


def _component_order(name: str) -> tuple:
    """Sort key of reward components: ``reward<N>`` by N (reward2 before reward10), else name."""
    numbered = _NUMBERED.fullmatch(name)
    return (0, int(numbered.group(1)), name) if numbered else (1, 0, name)


def gdpo_reward_components(repeated_batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The reward components of a batch: its ``reward/<name>`` keys (NeMo-RL's code) or, if it
    has none, its ``reward1, reward2, ...`` keys (NeMo-RL's docs page). When both kinds are
    present only the ``reward/<name>`` keys are used."""
    keys = [k for k in repeated_batch if isinstance(k, str) and k.startswith("reward/")]
    if not keys:
        keys = [k for k in repeated_batch if isinstance(k, str) and _NUMBERED.fullmatch(k)]
    return {k: repeated_batch[k] for k in sorted(keys, key=_component_order)}


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
        prompt_ids: ``[B, L]``.
        reward_components: name -> ``[B]`` rewards; at least two, taken in sorted name order
            (``reward<N>`` by N), which is the order ``reward_weights`` refers to.
        reward_weights: one weight per component (default all 1).
    Returns:
        ``[B]`` advantages.
    """
    names = sorted(reward_components, key=_component_order)
    if len(names) < 2:
        raise ValueError(
            "GDPO needs at least 2 reward components (batch keys 'reward/<name>' or "
            f"'reward1', 'reward2', ...), got {names}"
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
        check_finite(f"reward_components[{name!r}]", reward_components[name])
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


def on_policy_distillation_advantages(
    teacher_logprobs: torch.Tensor, prev_logprobs: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, dict[str, float]]:
    """OPD: the per-token teacher-student log-prob gap as the advantage (no gradient).

    Args: ``[B, T]`` each. Returns ``([B, T] advantages, metrics)``: the mean gap over valid
    tokens and the mean / unbiased std of the advantages there
    (docs/algorithms.md#on-policy-distillation).
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
        None, description="GDPO weight per reward component, in component order (choice 3)."
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


# ------------------------------------------------------------------------ NeMo-RL-style classes


def _broadcast_rows(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, S]`` view (expand, no copy): clone before writing into it."""
    return advantages.unsqueeze(-1).expand(-1, mask.shape[-1])


class _Estimator:
    """The call contract shared by the GRPO-family estimators (module docstring, choice 5)."""

    has_kl_in_reward = False  # True for the estimators that put β·KL into the advantages

    def __init__(self, estimator_config: Any = None, loss_config: Any = None):
        self.config = parse_config(AdvEstimatorConfig, estimator_config, "grpo.adv_estimator")
        self.loss_config = parse_config(_KLRewardConfig, loss_config, "loss_fn")
        if self.loss_config.use_kl_in_reward and not self.has_kl_in_reward:
            raise ValueError(
                f"loss_fn.use_kl_in_reward=True, but {type(self).__name__} has no KL-in-reward "
                "(only 'reinforce_plus_plus' and PPO's 'gae' have one), so training would "
                "have no KL at all; set use_kl_in_reward=False to keep the KL in the loss"
            )

    def compute_advantage(
        self,
        prompt_ids: torch.Tensor,
        rewards: torch.Tensor,
        mask: torch.Tensor,
        repeated_batch: Mapping[str, Any] | None = None,
        logprobs_policy: torch.Tensor | None = None,
        logprobs_reference: torch.Tensor | None = None,
        *,
        teacher_logprobs: torch.Tensor | None = None,
        prev_logprobs: torch.Tensor | None = None,
        generation_logprobs: torch.Tensor | None = None,
        sample_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Advantages ``[B, S]`` from NeMo-RL's GRPO-loop call.

        Args:
            prompt_ids: ``[B, L]`` prompt tokens (equal rows = one group).
            rewards: ``[B]`` finite rewards (unused by GDPO and OPD, still checked).
            mask: ``[B, S]`` token_mask·sample_mask.
            repeated_batch: the batch dict; GDPO reads its reward components.
            logprobs_policy: ``[B, S]`` π_old log-probs (Reinforce++'s KL; OPD's student).
            logprobs_reference: ``[B, S]`` reference log-probs (Reinforce++'s KL).
            teacher_logprobs: ``[B, S]`` (OPD).
            prev_logprobs: ``[B, S]``, the same π_old log-probs under the name NeMo-RL's OPD
                uses; give it or ``logprobs_policy`` (or both, the same tensor).
            generation_logprobs, sample_mask: accepted because NeMo-RL's loop passes them;
                no estimator here reads them.
        """
        check_tensor("rewards", rewards, ndim=1, floating=True)
        check_finite("rewards", rewards)
        check_tensor("prompt_ids", prompt_ids, ndim=(1, 2))
        check_mask("mask", mask, shape=(rewards.shape[0], None))
        check_same_rows(prompt_ids=prompt_ids, rewards=rewards, mask=mask)
        if repeated_batch is not None and not isinstance(repeated_batch, Mapping):
            raise TypeError(
                "repeated_batch must be a mapping (the batch dict), got "
                f"{type(repeated_batch).__name__}; pass log-probs by keyword"
            )
        policy = alias("logprobs_policy", logprobs_policy, "prev_logprobs", prev_logprobs)
        return self._advantages(
            prompt_ids, rewards, mask,
            repeated_batch=repeated_batch, policy=policy, reference=logprobs_reference,
            teacher=teacher_logprobs,
        )

    def _advantages(self, prompt_ids, rewards, mask, *, repeated_batch, policy, reference,
                    teacher) -> torch.Tensor:
        raise NotImplementedError


class GRPOAdvantageEstimator(_Estimator):
    """GRPO / RLOO / Dr. GRPO advantages (``grpo_advantages``) broadcast to ``[B, S]``."""

    def _advantages(self, prompt_ids, rewards, mask, **_unused) -> torch.Tensor:
        a = grpo_advantages(
            prompt_ids,
            rewards,
            leave_one_out=self.config.use_leave_one_out_baseline,
            normalize_rewards=self.config.normalize_rewards,
        )
        return _broadcast_rows(a, mask)


class GDPOAdvantageEstimator(_Estimator):
    """GDPO over the reward components of ``repeated_batch``; ``rewards`` is unused."""

    def _advantages(self, prompt_ids, rewards, mask, *, repeated_batch, **_unused):
        if repeated_batch is None:
            raise ValueError("GDPO needs repeated_batch with 'reward/<name>' components")
        a = gdpo_advantages(
            prompt_ids,
            gdpo_reward_components(repeated_batch),
            reward_weights=self.config.reward_weights,
            leave_one_out=self.config.use_leave_one_out_baseline,
            normalize_rewards=self.config.normalize_rewards,
        )
        return _broadcast_rows(a, mask)


class ReinforcePlusPlusAdvantageEstimator(_Estimator):
    """Reinforce++ with optional KL in the reward (from ``loss_fn.use_kl_in_reward``)."""

    has_kl_in_reward = True

    def _advantages(self, prompt_ids, rewards, mask, *, policy, reference, **_unused):
        lc, kl = self.loss_config, None
        if lc.use_kl_in_reward and lc.reference_policy_kl_penalty > 0:
            if policy is None or reference is None:
                raise ValueError(
                    "use_kl_in_reward=True needs logprobs_policy and logprobs_reference [B, S] "
                    "(NeMo-RL would silently train without the KL)"
                )
            kl = kl_in_reward(
                policy,
                reference,
                reference_policy_kl_penalty=lc.reference_policy_kl_penalty,
                reference_policy_kl_type=lc.reference_policy_kl_type,
            )
        return reinforce_plus_plus_advantages(
            prompt_ids, rewards, mask, minus_baseline=self.config.minus_baseline, kl_penalty=kl
        )


class OnPolicyDistillationAdvantageEstimator(_Estimator):
    """OPD: needs ``teacher_logprobs`` and the student's ``prev_logprobs`` ``[B, S]``; sets
    ``last_metrics``."""

    last_metrics: dict[str, float]

    def _advantages(self, prompt_ids, rewards, mask, *, policy, teacher, **_unused):
        if teacher is None or policy is None:
            raise ValueError(
                "OPD needs teacher_logprobs and prev_logprobs (or logprobs_policy), each [B, S]"
            )
        a, self.last_metrics = on_policy_distillation_advantages(teacher, policy, mask)
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
