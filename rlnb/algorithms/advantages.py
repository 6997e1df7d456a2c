"""GRPO's advantage, and the call contract every estimator of GRPO's loop shares.

    GRPO:  A_i = (r_i - b_i) / (σ_i + 1e-6)         (σ_i > 0, else r_i - b_i)

GRPO https://arxiv.org/abs/2402.03300, RLOO https://arxiv.org/abs/2402.14740, Dr. GRPO (no ÷ std)
https://arxiv.org/abs/2503.20783. The other estimators of the family are modules of their own
(``gdpo.py``, ``reinforce_plus_plus.py``, ``opd.py``); ``estimators.py`` registers them all.
See docs/algorithms.md#grpo-family-advantage-estimators.

Implementation choices:
1) Divide by σ + 1e-6 only where σ > 0; rows with σ = 0 keep the raw difference (0 for an
   all-equal group without leave-one-out, ±(r1 - r2) for a loo group of 2).
2) One number per sequence; the NeMo-RL-style class broadcasts it to ``[B, S]`` with ``expand``
   (non-zero at prompt and pad positions too: the loss masks).
3) Call contract (``Estimator``): every class takes exactly the keywords NeMo-RL's GRPO loop
   passes (``repeated_batch``, ``logprobs_policy``, ``logprobs_reference``, ``teacher_logprobs``,
   ``prev_logprobs``, ``generation_logprobs``, ``sample_mask``) and uses the ones it needs; any
   other keyword is a ``TypeError`` (NeMo-RL swallows them in ``**kwargs``).
4) Deliberate differences from NeMo-RL ("fail loudly instead of training without the KL"):
   NaN/inf rewards raise ``ValueError``; ``use_kl_in_reward`` with an estimator that has no
   KL-in-reward raises at construction.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rlnb.algorithms.advantage_config import AdvEstimatorConfig, KLRewardConfig
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.checks import (
    alias,
    check_finite,
    check_mask,
    check_same_rows,
    check_tensor,
)
from rlnb.config import parse_config

# --------------------------------------------------------------------------- pure functions


def refuse_private_hook(cls: type) -> None:
    """An estimator class that still defines the hook's old private name ``_advantages`` is
    refused when it is defined: it would never be called."""
    if "_advantages" in vars(cls):
        raise TypeError(f"{cls.__name__}._advantages: the estimator hook is public now; rename "
                        "it to advantages (same arguments)")


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


# ------------------------------------------------------------------------ NeMo-RL-style classes


def broadcast_rows(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` -> ``[B, S]`` view (expand, no copy): clone before writing into it."""
    return advantages.unsqueeze(-1).expand(-1, mask.shape[-1])


class Estimator:
    """The base of the GRPO-family estimators: NeMo-RL's call contract (module docstring,
    choice 3) and their capabilities, which the registry (``estimators.py``) reads. A new
    estimator of GRPO's loop subclasses it (or ``GRPOAdvantageEstimator``), sets the
    capabilities that differ and implements ``advantages`` (the hook: CONTRIBUTING.md has a
    ten-line example), which ``compute_advantage`` calls with the inputs checked."""

    loop = "grpo"  # the call contract: GRPO's loop (and async GRPO's)
    needs_groups = True  # the baseline comes from the other responses to the same prompt
    needs_critic = False
    kl_in_reward = False  # True for the estimators that put β·KL into the advantages
    trainable = True  # False: no trainer can feed it yet (OPD's teacher)
    reads_rewards = True  # False: ``rewards`` may be None (GDPO, OPD: as NeMo-RL, never read)
    not_trainable_because = ""  # with trainable = False: what a trainer would have to provide

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        refuse_private_hook(cls)

    @classmethod
    def uses_groups(cls, config: AdvEstimatorConfig) -> bool:
        """Whether, with ``config``, a group of one response would give only zeros."""
        return cls.needs_groups

    def __init__(self, estimator_config: Any = None, loss_config: Any = None):
        self.config = parse_config(AdvEstimatorConfig, estimator_config, "grpo.adv_estimator")
        self.loss_config = parse_config(KLRewardConfig, loss_config, "loss_fn")
        if self.loss_config.use_kl_in_reward and not self.kl_in_reward:
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
            rewards: ``[B]`` finite rewards (unused by GDPO and OPD: None there, or checked).
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
        if rewards is None and self.reads_rewards:
            raise ValueError(f"rewards: None, but {type(self).__name__} reads them; pass the "
                             "[B] rewards")
        if rewards is not None:
            check_tensor("rewards", rewards, ndim=1, floating=True)
            check_finite("rewards", rewards)
        check_tensor("prompt_ids", prompt_ids, ndim=(1, 2))
        check_mask("mask", mask, shape=(None, None))
        check_same_rows(prompt_ids=prompt_ids, rewards=rewards, mask=mask)
        if repeated_batch is not None and not isinstance(repeated_batch, Mapping):
            raise TypeError(
                "repeated_batch must be a mapping (the batch dict), got "
                f"{type(repeated_batch).__name__}; pass log-probs by keyword"
            )
        policy = alias("logprobs_policy", logprobs_policy, "prev_logprobs", prev_logprobs)
        return self.advantages(
            prompt_ids, rewards, mask,
            repeated_batch=repeated_batch, policy=policy, reference=logprobs_reference,
            teacher=teacher_logprobs,
        )

    def advantages(self, prompt_ids, rewards, mask, *, repeated_batch, policy, reference,
                   teacher) -> torch.Tensor:
        """The hook a new estimator implements: ``[B, S]`` advantages from ``prompt_ids
        [B, L]``, ``rewards [B]`` and ``mask [B, S]`` (checked), with what the loop passed:
        ``repeated_batch`` (the batch dict), ``policy``, ``reference`` and ``teacher`` log-probs
        ``[B, S]`` or None. Take the keywords you need and ``**_`` for the rest."""
        raise NotImplementedError(f"{type(self).__name__} implements no advantages()")


class GRPOAdvantageEstimator(Estimator):
    """GRPO / RLOO / Dr. GRPO advantages (``grpo_advantages``) broadcast to ``[B, S]``."""

    def advantages(self, prompt_ids, rewards, mask, **_unused) -> torch.Tensor:
        a = grpo_advantages(
            prompt_ids,
            rewards,
            leave_one_out=self.config.use_leave_one_out_baseline,
            normalize_rewards=self.config.normalize_rewards,
        )
        return broadcast_rows(a, mask)


