"""What the advantage estimators are configured by: ``grpo.adv_estimator`` (which estimator, and
its flags) and the part of ``loss_fn`` they read, the KL in the reward, with the penalty it
adds to each token's reward (Reinforce++'s and PPO's GAE's ``use_kl_in_reward``).

    AdvEstimatorConfig(name="grpo", normalize_rewards=False)        # Dr. GRPO
    kl_reward_penalty(KLRewardConfig(use_kl_in_reward=True), logprobs, reference_logprobs, names)

See docs/algorithms.md#grpo-family-advantage-estimators; the estimators are ``advantages.py``
and the modules ``estimators.py`` registers.
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlnb.algorithms.kl import kl_in_reward
from rlnb.config import Config


class AdvEstimatorConfig(Config):
    """``grpo.adv_estimator``: which estimator turns rewards into advantages."""

    name: str = Field("grpo", description="grpo | gdpo | reinforce_plus_plus | opd | a "
                      "registered estimator (rlnb.algorithms.estimators)")
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


class KLRewardConfig(Config):
    """The part of ``loss_fn`` the estimators read (KL in the reward)."""

    model_config = {**Config.model_config, "extra": "ignore"}
    use_kl_in_reward: bool = False
    reference_policy_kl_penalty: float = 0.01
    reference_policy_kl_type: str = "k3"


def kl_reward_penalty(loss_config: KLRewardConfig, logprobs, reference_logprobs,
                      names: tuple[str, str]) -> torch.Tensor | None:
    """``[B, S]`` β·KL(π_old ‖ π_ref) per token when ``loss_config`` puts the KL into the reward
    (``use_kl_in_reward`` and β > 0), else None. A missing log-prob tensor raises, naming it as
    the caller's keywords ``names`` do (NeMo-RL would silently train without the KL)."""
    if not (loss_config.use_kl_in_reward and loss_config.reference_policy_kl_penalty > 0):
        return None
    if logprobs is None or reference_logprobs is None:
        raise ValueError(f"use_kl_in_reward=True needs {names[0]} and {names[1]} [B, S] "
                         "(NeMo-RL would silently train without the KL)")
    return kl_in_reward(logprobs, reference_logprobs,
                        reference_policy_kl_penalty=loss_config.reference_policy_kl_penalty,
                        reference_policy_kl_type=loss_config.reference_policy_kl_type)
