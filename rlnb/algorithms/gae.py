"""PPO advantage estimators: generalised advantage estimation (GAE) and the raw reward.

    δ_t = R_t + γ·V_{t+1} - V_t,    A_t = Σ_l (γλ)^l δ_{t+l},    returns_t = A_t + V_t

GAE: https://arxiv.org/abs/1506.02438; PPO: https://arxiv.org/abs/1707.06347; decoupled
value/policy λ and length-adaptive λ_policy = 1 - 1/(α·L) come from VAPO
(https://arxiv.org/abs/2504.05118) / VC-PPO (https://arxiv.org/abs/2503.01491).

See docs/algorithms.md#ppo-estimators-gae-and-raw-reward.

Implementation choices:
1) Token rewards are 0 except the sequence reward at the row's *last* valid token (the last
   generated token, even if env tokens follow in multi-turn), optionally minus β·KL at every
   token (``use_kl_in_reward``), then masked.
2) The recursion runs right to left with carry-forward masking: masked positions advance
   neither the bootstrap value nor the accumulator, so gaps between turns are skipped; the
   value past the last valid token is 0 (terminal). Vectorised over rows; the loop over T
   is inherent to GAE.
3) If λ_value, λ_policy or α is set, the recursion runs twice: returns from the λ_value pass,
   advantages from the λ_policy pass. Returns = raw A + V and are *not* masked.
4) Whitening uses the masked mean and the Bessel-corrected masked variance:
   (A - μ)·rsqrt(σ² + 1e-8). One valid token gives NaN (as NeMo-RL). A is then zeroed
   wherever mask = 0, with or without whitening.
5) Values are the critic's head output shifted right by one (``shift_values``): V_t is the
   value of the state *before* token t.
6) Raw reward: A = r on every token, whitened with mean/var over Σ M floored at 1 and the
   variance floored at 1e-8 (an all-zero mask gives r·1e4, as NeMo-RL); returns None.
7) Call contract: NeMo-RL's PPO loop calls ``compute_advantage(prompt_ids, rewards, mask,
   values, reference_logprobs=..., logprobs=...)`` (reference first); both classes take those
   names in that order. rlnb's older names ``logprobs_policy`` / ``logprobs_reference`` are
   accepted as keyword aliases. Any other keyword is a ``TypeError`` (NeMo-RL swallows unknown
   keywords, which is how a caller using the GRPO names silently trained without the KL).
8) Deliberate differences: NaN/inf rewards raise ``ValueError``; with ``use_kl_in_reward``
   and β > 0, GAE raises when a log-prob tensor is missing instead of dropping the KL.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import Field

from rlnb.algorithms.advantage_config import KLRewardConfig, kl_reward_penalty
from rlnb.algorithms.advantages import refuse_private_hook
from rlnb.algorithms.checks import (
    alias,
    check_finite,
    check_mask,
    check_same_rows,
    check_tensor,
)
from rlnb.algorithms.masked import masked_mean, masked_var
from rlnb.config import Config, parse_config


def shift_values(head_output: torch.Tensor) -> torch.Tensor:
    """Critic output ``[B, S]`` (or ``[B, S, 1]``) -> ``V [B, S]`` with V_t = out_{t-1}, V_0 = 0."""
    if head_output.ndim == 3 and head_output.shape[-1] == 1:
        head_output = head_output.squeeze(-1)
    check_tensor("head_output", head_output, ndim=2, floating=True)
    return torch.nn.functional.pad(head_output[:, :-1], (1, 0))


def token_level_rewards(
    rewards: torch.Tensor, mask: torch.Tensor, kl_penalty: torch.Tensor | None = None
) -> torch.Tensor:
    """Sequence reward at the last valid token, minus optional per-token β·KL, masked.

    Args:
        rewards: ``[B]``; mask: ``[B, S]`` 0/1; kl_penalty: optional ``[B, S]`` β·KL.
    Returns: ``[B, S]``.
    """
    token_rewards = torch.zeros_like(mask, dtype=rewards.dtype)
    if kl_penalty is not None:
        token_rewards = token_rewards - kl_penalty
    positions = torch.arange(mask.shape[1], device=mask.device)
    last = torch.where(mask > 0, positions, -1).max(dim=1).values  # [B], -1 if no valid token
    rows = torch.nonzero(last >= 0).squeeze(-1)
    token_rewards = token_rewards.index_put((rows, last[rows]), rewards[rows], accumulate=True)
    return token_rewards * mask


def gae_recursion(
    token_rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gamma: float,
    lam: float | torch.Tensor,
) -> torch.Tensor:
    """Raw (un-whitened) GAE advantages with carry-forward masking.

    Args:
        token_rewards, values, mask: ``[B, S]``.
        gamma: discount γ.
        lam: λ, a float or a per-row ``[B]`` tensor.
    Returns: ``[B, S]``.
    """
    B, S = values.shape
    lam = torch.as_tensor(lam, dtype=values.dtype, device=values.device).expand(B)  # [B]
    next_value = torch.zeros(B, dtype=values.dtype, device=values.device)
    running = torch.zeros_like(next_value)
    out = torch.empty_like(values)
    for t in range(S - 1, -1, -1):
        m = mask[:, t]
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        candidate = delta + gamma * lam * running
        next_value = m * values[:, t] + (1 - m) * next_value
        running = m * candidate + (1 - m) * running
        out[:, t] = running
    return out


def whiten(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(A - μ)·rsqrt(σ² + 1e-8), μ/σ² masked (σ² Bessel-corrected). ``[B, S]`` -> ``[B, S]``."""
    mean = masked_mean(advantages, mask)
    var = masked_var(advantages, mask, mean=mean, unbiased=True)
    return (advantages - mean) * torch.rsqrt(var + 1e-8)


def policy_lambda(
    mask: torch.Tensor,
    *,
    gae_lambda: float = 0.95,
    gae_lambda_policy: float | None = None,
    length_adaptive_alpha: float = 0.0,
) -> float | torch.Tensor:
    """λ of the advantages' pass: with α > 0, VAPO's length-adaptive ``[B]`` tensor
    ``clamp(1 − 1/max(α·L, 1), 0, 1)`` with L the row's valid tokens; else ``gae_lambda_policy``
    if set; else ``gae_lambda`` (NeMo-RL's ``_resolve_lambda_policy``).

    Args:
        mask: ``[B, S]`` 0/1 response mask (L = its row sums).
    """
    if length_adaptive_alpha > 0:
        lengths = mask.sum(dim=1).float()  # [B]
        return (1 - 1 / (length_adaptive_alpha * lengths).clamp(min=1)).clamp(0, 1)
    if gae_lambda_policy is not None:
        return gae_lambda_policy
    return gae_lambda


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor,
    *,
    gae_gamma: float = 1.0,
    gae_lambda: float = 0.95,
    normalize_advantages: bool = True,
    gae_lambda_value: float | None = None,
    gae_lambda_policy: float | None = None,
    length_adaptive_alpha: float = 0.0,
    kl_penalty: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE advantages and returns for PPO.

    Args:
        rewards: ``[B]`` sequence rewards.
        values: ``[B, S]`` right-shifted critic values (``shift_values``).
        mask: ``[B, S]`` token_mask·sample_mask.
        kl_penalty: optional ``[B, S]`` β·KL subtracted from the token rewards.
    Returns:
        ``(advantages [B, S], returns [B, S])``.
    """
    m = check_mask("mask", mask, shape=tuple(values.shape))
    check_tensor("rewards", rewards, shape=(values.shape[0],), floating=True)
    check_finite("rewards", rewards)
    check_tensor("values", values, ndim=2, floating=True)
    token_rewards = token_level_rewards(rewards, m, kl_penalty)
    lam_value = gae_lambda if gae_lambda_value is None else gae_lambda_value
    lam_policy = policy_lambda(m, gae_lambda=gae_lambda, gae_lambda_policy=gae_lambda_policy,
                               length_adaptive_alpha=length_adaptive_alpha)
    decoupled = (
        gae_lambda_value is not None or gae_lambda_policy is not None or length_adaptive_alpha > 0
    )
    raw_value = gae_recursion(token_rewards, values, m, gamma=gae_gamma, lam=lam_value)
    raw_policy = (
        gae_recursion(token_rewards, values, m, gamma=gae_gamma, lam=lam_policy)
        if decoupled
        else raw_value
    )
    returns = raw_value + values
    advantages = whiten(raw_policy, m) if normalize_advantages else raw_policy
    return torch.where(m > 0, advantages, torch.zeros_like(advantages)), returns


def raw_reward_advantages(
    rewards: torch.Tensor, mask: torch.Tensor, *, normalize_advantages: bool = True
) -> torch.Tensor:
    """A = r on every token, optionally whitened over masked tokens.

    Args: rewards ``[B]``, mask ``[B, S]``. Returns ``[B, S]``.
    """
    check_tensor("rewards", rewards, ndim=1, floating=True)
    check_finite("rewards", rewards)
    m = check_mask("mask", mask, shape=(rewards.shape[0], None))
    advantages = rewards.float().unsqueeze(-1).expand_as(m)
    if not normalize_advantages:
        return advantages
    count = m.sum().clamp(min=1)
    mean = (advantages * m).sum() / count
    var = ((advantages - mean).square() * m).sum() / count
    return (advantages - mean) * torch.rsqrt(var.clamp(min=1e-8))


class PPOAdvEstimatorConfig(Config):
    """``ppo.adv_estimator``: GAE (with VAPO's decoupled/length-adaptive λ) or the raw reward."""

    name: str = Field("gae", description="gae | raw_reward | a registered estimator "
                      "(rlnb.algorithms.estimators)")
    gae_lambda: float = Field(0.95, ge=0, le=1, description="GAE λ (PPO default 0.95).")
    gae_gamma: float = Field(1.0, ge=0, le=1, description="Discount γ; 1.0 for LM episodes.")
    normalize_advantages: bool = Field(True, description="Whiten advantages over valid tokens.")
    gae_lambda_value: float | None = Field(
        None, ge=0, le=1, description="λ for the returns (VAPO uses 1.0)."
    )
    gae_lambda_policy: float | None = Field(None, ge=0, le=1, description="λ for the advantages.")
    length_adaptive_alpha: float = Field(
        0.0, ge=0, description="VAPO λ_policy = 1 - 1/(α·L); VAPO recommends α = 0.05."
    )


class _PPOEstimator:
    """The call contract shared by the PPO estimators (module docstring, choice 7), and their
    capabilities, which the registry (``estimators.py``) reads."""

    loop = "ppo"  # the call contract: PPO's loop
    needs_groups = False
    needs_critic = True  # advantages from the critic's values
    kl_in_reward = True  # use_kl_in_reward subtracts β·KL from the token rewards
    trainable = True

    @classmethod
    def uses_groups(cls, config: PPOAdvEstimatorConfig) -> bool:
        return False

    def __init__(self, estimator_config: Any = None, loss_config: Any = None):
        self.config = parse_config(PPOAdvEstimatorConfig, estimator_config, "ppo.adv_estimator")
        self.loss_config = parse_config(KLRewardConfig, loss_config, "loss_fn")

    def compute_advantage(
        self,
        prompt_ids: torch.Tensor | None,
        rewards: torch.Tensor,
        mask: torch.Tensor,
        values: torch.Tensor | None = None,
        reference_logprobs: torch.Tensor | None = None,
        logprobs: torch.Tensor | None = None,
        *,
        logprobs_policy: torch.Tensor | None = None,
        logprobs_reference: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(advantages [B, S], returns [B, S] or None)`` from NeMo-RL's PPO-loop call.

        Args:
            prompt_ids: ``[B, L]`` (unused: PPO has no groups; may be None).
            rewards: ``[B]`` finite sequence rewards.
            mask: ``[B, S]`` token_mask·sample_mask.
            values: ``[B, S]`` right-shifted critic values (GAE; the raw reward ignores them).
            reference_logprobs: ``[B, S]`` reference log-probs (KL in the reward, GAE only).
            logprobs: ``[B, S]`` π_old log-probs (KL in the reward, GAE only).
            logprobs_policy, logprobs_reference: rlnb's older names for ``logprobs`` and
                ``reference_logprobs``.
        """
        check_tensor("rewards", rewards, ndim=1, floating=True)
        check_finite("rewards", rewards)
        check_mask("mask", mask, shape=(rewards.shape[0], None))
        check_same_rows(prompt_ids=prompt_ids, rewards=rewards, mask=mask)
        logprobs = alias("logprobs", logprobs, "logprobs_policy", logprobs_policy)
        reference = alias(
            "reference_logprobs", reference_logprobs, "logprobs_reference", logprobs_reference
        )
        return self.advantages(rewards, mask, values, logprobs, reference)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        refuse_private_hook(cls)

    def advantages(self, rewards, mask, values, logprobs, reference):
        """The hook a new PPO-loop estimator implements: ``(advantages [B, S], returns [B, S] or
        None)`` from ``rewards [B]``, ``mask [B, S]``, the critic's ``values [B, S]`` and the
        π_old / reference log-probs ``[B, S]`` (None when not computed)."""
        raise NotImplementedError(f"{type(self).__name__} implements no advantages()")


class GeneralizedAdvantageEstimator(_PPOEstimator):
    """GAE for PPO; ``compute_advantage`` returns ``(advantages [B, S], returns [B, S])``."""

    def advantages(self, rewards, mask, values, logprobs, reference):
        if values is None:
            raise ValueError("GAE needs values [B, S] (the right-shifted critic predictions)")
        c = self.config
        kl = kl_reward_penalty(self.loss_config, logprobs, reference,
                               ("logprobs", "reference_logprobs"))
        return gae_advantages(
            rewards,
            values,
            mask,
            gae_gamma=c.gae_gamma,
            gae_lambda=c.gae_lambda,
            normalize_advantages=c.normalize_advantages,
            gae_lambda_value=c.gae_lambda_value,
            gae_lambda_policy=c.gae_lambda_policy,
            length_adaptive_alpha=c.length_adaptive_alpha,
            kl_penalty=kl,
        )


class RawRewardAdvantageEstimator(_PPOEstimator):
    """A = r (optionally whitened); returns ``(advantages [B, S], None)``. Values and log-probs
    are accepted (NeMo-RL's loop passes them) and not used."""

    needs_critic = False  # (PPO's loop still trains the critic on the returns)
    kl_in_reward = False

    def advantages(self, rewards, mask, values, logprobs, reference):
        a = raw_reward_advantages(
            rewards, mask, normalize_advantages=self.config.normalize_advantages
        )
        return a, None
