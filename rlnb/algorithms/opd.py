"""On-policy distillation (OPD): the teacher-student log-prob gap of each token as its advantage.

    A_t = (log π_teacher - log π_old)_t · m_t

On-policy distillation: https://arxiv.org/abs/2306.13649;
docs/algorithms.md#on-policy-distillation. rlnb's trainers have no teacher model yet, so it is
registered as not trainable: a notebook calls it on tensors.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.advantages import Estimator
from rlnb.algorithms.checks import check_mask, check_tensor
from rlnb.algorithms.masked import masked_mean


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


class OnPolicyDistillationAdvantageEstimator(Estimator):
    """OPD: needs ``teacher_logprobs`` and the student's ``prev_logprobs`` ``[B, S]``; sets
    ``last_metrics``."""

    needs_groups = False
    reads_rewards = False  # pure distillation: rewards may be None, as in NeMo-RL
    trainable = False
    not_trainable_because = ("it needs a teacher model's log-probs, and rlnb's trainers have no "
                             "teacher model yet")

    last_metrics: dict[str, float]

    def advantages(self, prompt_ids, rewards, mask, *, policy, teacher, **_unused):
        if teacher is None or policy is None:
            raise ValueError(
                "OPD needs teacher_logprobs and prev_logprobs (or logprobs_policy), each [B, S]"
            )
        a, self.last_metrics = on_policy_distillation_advantages(teacher, policy, mask)
        return a
