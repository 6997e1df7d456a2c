"""NeMo-RL's ``nemo_rl.algorithms.advantage_estimator``: its classes with its exact
``compute_advantage`` signatures, each a subclass of rlnb's estimator of the same name.

    est = GRPOAdvantageEstimator(AdvEstimatorConfig(), ClippedPGLossConfig())
    adv = est.compute_advantage(prompt_ids, rewards, mask)             # [B, S]
    adv, returns = GeneralizedAdvantageEstimator(cfg, loss_cfg).compute_advantage(
        prompt_ids, rewards, mask, values, lengths=lengths)            # NeMo-RL's PPO call

The numbers are rlnb's (``rlnb.algorithms.advantages``, ``gdpo``, ``reinforce_plus_plus``,
``opd``, ``gae``), which match NeMo-RL's; see
docs/algorithms.md#grpo-family-advantage-estimators.

Implementation choices:
1) Positional order is NeMo-RL's per class (``GDPOAdvantageEstimator``: ``repeated_batch``
   fourth; ``ReinforcePlusPlusAdvantageEstimator``: ``logprobs_policy`` fourth; GAE: ``values``
   fourth, then ``reference_logprobs``, ``logprobs``). rlnb's own classes share one order.
2) ``**kwargs``: every keyword NeMo-RL's GRPO and PPO loops (and its tests) pass to whichever
   estimator is configured is accepted and ignored where the estimator does not read it, as in
   NeMo-RL (``lengths=``, ``values=``, ``teacher_logprobs=``, ...). Deliberate difference: any
   other keyword is a ``TypeError`` naming it, where NeMo-RL would silently drop a typo.
3) Deliberate differences kept from rlnb's classes (docs/nemo_rl_names.md): ``use_kl_in_reward``
   with an estimator that has no KL-in-reward (GRPO, GDPO, OPD) is refused at construction
   (NeMo-RL trains without any KL); Reinforce++/GAE with ``use_kl_in_reward`` and β > 0 refuse
   a call without both log-prob tensors (NeMo-RL skips the KL silently); non-finite rewards and
   masks that are not 0/1 are refused.
"""

from __future__ import annotations

from typing import Any

import torch

from rlnb.algorithms import advantages, gae, gdpo, opd, reinforce_plus_plus
from rlnb.algorithms.advantage_config import AdvEstimatorConfig
from rlnb.algorithms.checks import check_mask
from rlnb.algorithms.estimators import estimator_class

__all__ = ["AdvEstimatorConfig", "GDPOAdvantageEstimator", "GRPOAdvantageEstimator",
           "GeneralizedAdvantageEstimator", "OPDAdvantageEstimator",
           "RawRewardAdvantageEstimator", "ReinforcePlusPlusAdvantageEstimator"]

# What NeMo-RL's loops and tests pass to any estimator (choice 2).
LOOP_KEYWORDS = frozenset({
    "repeated_batch", "logprobs_policy", "logprobs_reference", "teacher_logprobs",
    "prev_logprobs", "generation_logprobs", "sample_mask", "values", "reference_logprobs",
    "logprobs", "lengths",
})


def check_loop_keywords(owner: str, kwargs: dict[str, Any]) -> None:
    """Refuse a keyword that no NeMo-RL loop passes (choice 2)."""
    unknown = sorted(set(kwargs) - LOOP_KEYWORDS)
    if unknown:
        raise TypeError(f"{owner}.compute_advantage() got an unexpected keyword argument "
                        f"{unknown[0]!r} (accepted and ignored: {sorted(LOOP_KEYWORDS)})")


class GRPOAdvantageEstimator(advantages.GRPOAdvantageEstimator):
    """GRPO / RLOO / Dr. GRPO advantages ``[B, S]`` (a broadcast of one value per row)."""

    def compute_advantage(self, prompt_ids, rewards, mask, **kwargs):
        check_loop_keywords(type(self).__name__, kwargs)
        return super().compute_advantage(prompt_ids, rewards, mask)


class GDPOAdvantageEstimator(gdpo.GDPOAdvantageEstimator):
    """GDPO over ``repeated_batch``'s ``reward/<name>`` components; ``rewards`` is unused."""

    def compute_advantage(self, prompt_ids, rewards, mask, repeated_batch, **kwargs):
        check_loop_keywords(type(self).__name__, kwargs)
        return super().compute_advantage(prompt_ids, rewards, mask, repeated_batch=repeated_batch)


class ReinforcePlusPlusAdvantageEstimator(
        reinforce_plus_plus.ReinforcePlusPlusAdvantageEstimator):
    """Reinforce++ (optional group-mean baseline, optional β·KL in the reward), whitened over
    the valid tokens of the batch."""

    def compute_advantage(self, prompt_ids, rewards, mask, logprobs_policy=None,
                          logprobs_reference=None, **kwargs):
        check_loop_keywords(type(self).__name__, kwargs)
        return super().compute_advantage(prompt_ids, rewards, mask,
                                         logprobs_policy=logprobs_policy,
                                         logprobs_reference=logprobs_reference)


class OPDAdvantageEstimator(opd.OnPolicyDistillationAdvantageEstimator):
    """On-policy distillation: ``(teacher_logprobs − prev_logprobs)·mask``, metrics in
    ``last_metrics``."""

    def __init__(self, estimator_config: Any = None, loss_config: Any = None):
        super().__init__(estimator_config, loss_config)
        self.last_metrics: dict[str, float] = {}

    def compute_advantage(self, prompt_ids, rewards, mask, teacher_logprobs=None,
                          prev_logprobs=None, **kwargs):
        check_loop_keywords(type(self).__name__, kwargs)
        return super().compute_advantage(prompt_ids, rewards, mask,
                                         teacher_logprobs=teacher_logprobs,
                                         prev_logprobs=prev_logprobs)


class RawRewardAdvantageEstimator(gae.RawRewardAdvantageEstimator):
    """A = r broadcast (whitened when ``normalize_advantages``); returns ``(advantages, None)``."""

    def compute_advantage(self, prompt_ids, rewards, mask, **kwargs):
        check_loop_keywords(type(self).__name__, kwargs)
        return super().compute_advantage(prompt_ids, rewards, mask)


class GeneralizedAdvantageEstimator(gae.GeneralizedAdvantageEstimator):
    """GAE over right-shifted critic ``values`` ``[B, S]``; returns ``(advantages, returns)``."""

    def _resolve_lambda_policy(self, mask: torch.Tensor) -> float | torch.Tensor:
        """λ of the advantages: ``[B]`` length-adaptive ``clamp(1 − 1/max(α·L, 1), 0, 1)`` when
        ``length_adaptive_alpha`` > 0, else ``gae_lambda_policy``, else ``gae_lambda``."""
        c = self.config
        return gae.policy_lambda(check_mask("mask", mask, shape=(None, None)),
                                 gae_lambda=c.gae_lambda, gae_lambda_policy=c.gae_lambda_policy,
                                 length_adaptive_alpha=c.length_adaptive_alpha)

    def _resolve_lambda_value(self) -> float:
        """λ of the value returns: ``gae_lambda_value`` if set, else ``gae_lambda``."""
        c = self.config
        return c.gae_lambda if c.gae_lambda_value is None else c.gae_lambda_value

    def compute_advantage(self, prompt_ids, rewards, mask, values, reference_logprobs=None,
                          logprobs=None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
        check_loop_keywords(type(self).__name__, kwargs)
        return super().compute_advantage(prompt_ids, rewards, mask, values,
                                         reference_logprobs=reference_logprobs,
                                         logprobs=logprobs)


def with_nemo_signature(name: str, loop: str) -> type:
    """The registered estimator ``name`` of ``loop`` (``rlnb.algorithms.estimators``), as its
    class here when it has one (NeMo-RL's call signature), else as registered."""
    cls = estimator_class(name, loop)
    adapters = [GRPOAdvantageEstimator, GDPOAdvantageEstimator,
                ReinforcePlusPlusAdvantageEstimator, OPDAdvantageEstimator,
                RawRewardAdvantageEstimator, GeneralizedAdvantageEstimator]
    return next((a for a in adapters if a.__bases__[0] is cls), cls)
