"""Reward scaling and DAPO overlong reward shaping, applied to the rewards before advantages.

    scaling:  r' = t_min + (clamp(r, s_min, s_max) − s_min) / (s_max − s_min) · (t_max − t_min)
    shaping:  r' = r + min(−(ℓ − (L_max − L_buf)) / L_buf · penalty, 0)      (DAPO paper, Sec. 3.4)
              r' = r · κ if truncated else r                        (stop-properly multiplier)

Papers: DAPO, overlong reward shaping https://arxiv.org/abs/2503.14476 (Section 3.4).

See docs/algorithms.md#reward-scaling-and-shaping.

Implementation choices:
1) Pure functions over ``[B]`` tensors that return new tensors; the inputs are never edited in
   place, so the caller keeps the unshaped rewards (NeMo-RL's ``unshaped_total_reward``) for
   free. The configs below are separate pydantic models that the caller unpacks.
2) Scaling clamps into the source range first; rewards outside it only raise a
   ``warnings.warn`` (NeMo-RL prints), never an error.
3) Shaping with ``stop_properly_penalty_coef`` set multiplies the rewards of truncated rows by κ
   and ignores the DAPO parameters (warning if any is set), as NeMo-RL does.
4) The DAPO penalty is linear and **unbounded**: a response past ``max_response_length`` keeps
   losing reward (ℓ=20, max=16, buffer=4, penalty=1 → −2), again as NeMo-RL; the DAPO paper
   caps it at −penalty. It is computed in float64 (NeMo-RL uses Python floats) and cast to the
   reward dtype before the add.
5) Deliberate differences: ``overlong_buffer_length`` must be > 0 (NeMo-RL would divide by 0)
   and ``source_max`` > ``source_min``; κ outside [0, 1] or a negative penalty raise
   ``ValueError`` rather than ``assert``; and an enabled ``RewardShapingConfig`` without κ or
   all three DAPO parameters fails at load time, not at the first step.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import torch
from pydantic import Field

from rlnb.algorithms.checks import check_mask, check_same_rows, check_tensor
from rlnb.config import Config, cross_field_rule

# --------------------------------------------------------------------------------------------
# configs


class RewardScalingConfig(Config):
    """``grpo.reward_scaling`` / ``ppo.reward_scaling``: map rewards linearly between ranges."""

    enabled: bool = Field(False, description="Apply the linear map to the rewards.")
    source_min: float = Field(0.0, description="Lower end of the reward range the env emits.")
    source_max: float = Field(1.0, description="Upper end of the reward range the env emits.")
    target_min: float = Field(0.0, description="Value that source_min is mapped to.")
    target_max: float = Field(1.0, description="Value that source_max is mapped to.")

    @cross_field_rule
    def _source_range_not_empty(self) -> RewardScalingConfig:
        fields = type(self).model_fields
        moved = [k for k in ("source_min", "source_max", "target_min", "target_max")
                 if getattr(self, k) != fields[k].default]
        if not self.enabled and moved:
            raise ValueError(f"{', '.join(moved)} set but enabled is false (they would be "
                             "ignored)")
        if not self.source_max > self.source_min:
            raise ValueError(
                f"source_max ({self.source_max}) must be greater than source_min "
                f"({self.source_min})"
            )
        return self


class RewardShapingConfig(Config):
    """``reward_shaping``: DAPO overlong penalty or the stop-properly multiplier."""

    enabled: bool = Field(False, description="Shape total_reward after scaling.")
    overlong_buffer_length: int | None = Field(
        None,
        gt=0,
        description="DAPO L_buffer: tokens before max_response_length where the "
        "penalty ramps in (DAPO uses 4096 with a 20480 max).",
    )
    overlong_buffer_penalty: float | None = Field(
        None,
        ge=0,
        description="Penalty reached at max_response_length (DAPO uses 1.0).",
    )
    max_response_length: int | None = Field(
        None,
        gt=0,
        description="DAPO L_max: response length where the penalty equals "
        "overlong_buffer_penalty; it keeps growing linearly past it.",
    )
    stop_properly_penalty_coef: float | None = Field(
        None,
        ge=0,
        le=1,
        description="κ in [0, 1]: truncated responses get κ·reward. When set, "
        "the DAPO parameters are ignored.",
    )

    @cross_field_rule
    def _dapo_parameters_complete(self) -> RewardShapingConfig:
        # Fail at load time what shape_rewards would only reject at the first step, and refuse
        # what it would silently ignore (rlnb's rule: an accepted option always acts).
        dapo = ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")
        given = [k for k in (*dapo, "stop_properly_penalty_coef") if getattr(self, k) is not None]
        if not self.enabled and given:
            raise ValueError(f"{', '.join(given)} set but enabled is false (they would be "
                             "ignored)")
        if self.stop_properly_penalty_coef is not None and set(given) & set(dapo):
            raise ValueError(f"stop_properly_penalty_coef replaces the DAPO penalty: "
                             f"{', '.join(k for k in given if k in dapo)} would be ignored")
        if self.enabled and self.stop_properly_penalty_coef is None:
            dapo = ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")
            missing = [k for k in dapo if getattr(self, k) is None]
            if missing:
                raise ValueError(
                    "enabled reward shaping needs stop_properly_penalty_coef or all three DAPO "
                    f"parameters; missing: {', '.join(missing)}"
                )
        return self


# --------------------------------------------------------------------------------------------
# scaling


def scale_rewards(
    rewards: torch.Tensor,
    *,
    source_min: float = 0.0,
    source_max: float = 1.0,
    target_min: float = 0.0,
    target_max: float = 1.0,
) -> torch.Tensor:
    """Clamp ``rewards`` into [source_min, source_max] and map that range onto the target one.

    Args:
        rewards: ``[B]`` floating rewards.
    Returns:
        ``[B]`` new tensor, same dtype. Values outside the source range emit a warning.
    """
    check_tensor("rewards", rewards, ndim=1, floating=True)
    if not source_max > source_min:
        raise ValueError(
            f"source_max ({source_max}) must be greater than source_min ({source_min})"
        )
    outside = (rewards < source_min) | (rewards > source_max)
    if bool(outside.any()):  # CPU-GPU sync, once per batch
        warnings.warn(
            f"{int(outside.sum())} of {rewards.numel()} rewards lie outside the reward_scaling "
            f"source range [{source_min}, {source_max}] and are clamped into it",
            stacklevel=2,
        )
    clamped = rewards.clamp(source_min, source_max)
    return target_min + (clamped - source_min) / (source_max - source_min) * (
        target_max - target_min
    )


def scale_batch_rewards(batch: Mapping[str, torch.Tensor], **scaling) -> dict[str, torch.Tensor]:
    """``scale_rewards`` applied to ``total_reward`` and every ``reward/*`` component (GDPO).

    Returns a new dict (other keys shared, not copied); ``scaling`` are the keyword arguments of
    ``scale_rewards``.
    """
    return {
        k: scale_rewards(v, **scaling) if k == "total_reward" or k.startswith("reward/") else v
        for k, v in batch.items()
    }


# --------------------------------------------------------------------------------------------
# shaping


def dapo_overlong_penalty(
    response_lengths: torch.Tensor,
    *,
    overlong_buffer_length: int,
    overlong_buffer_penalty: float,
    max_response_length: int,
) -> torch.Tensor:
    """DAPO's soft overlong penalty, ``min(−(ℓ − L_exp)/L_buf · penalty, 0)``; ≤ 0, unbounded.

    Args:
        response_lengths: ``[B]`` generated-token count per sample.
    Returns:
        ``[B]`` float64 penalties (0 for ℓ ≤ max_response_length − overlong_buffer_length).
    """
    check_tensor("response_lengths", response_lengths, ndim=1)
    if overlong_buffer_length <= 0:
        raise ValueError(f"overlong_buffer_length must be > 0, got {overlong_buffer_length}")
    if overlong_buffer_penalty < 0:
        raise ValueError(f"overlong_buffer_penalty must be >= 0, got {overlong_buffer_penalty}")
    expected_length = max_response_length - overlong_buffer_length  # L_exp in the paper
    exceed = response_lengths.to(torch.float64) - expected_length
    return (-exceed / overlong_buffer_length * overlong_buffer_penalty).clamp(max=0.0)


def shape_rewards(
    rewards: torch.Tensor,
    *,
    truncated: torch.Tensor | None = None,
    response_lengths: torch.Tensor | None = None,
    overlong_buffer_length: int | None = None,
    overlong_buffer_penalty: float | None = None,
    max_response_length: int | None = None,
    stop_properly_penalty_coef: float | None = None,
) -> torch.Tensor:
    """Stop-properly multiplier (if κ is given) else the DAPO overlong penalty.

    Args:
        rewards: ``[B]`` floating rewards (after scaling).
        truncated: ``[B]`` 0/1, 1 where the response hit the token limit without a stop token;
            needed only with ``stop_properly_penalty_coef``.
        response_lengths: ``[B]`` generated tokens per sample; needed only for DAPO.
    Returns:
        ``[B]`` new tensor of shaped rewards, same dtype as ``rewards``.
    """
    check_tensor("rewards", rewards, ndim=1, floating=True)
    dapo = {
        "overlong_buffer_length": overlong_buffer_length,
        "overlong_buffer_penalty": overlong_buffer_penalty,
        "max_response_length": max_response_length,
    }
    if stop_properly_penalty_coef is not None:
        if not 0.0 <= stop_properly_penalty_coef <= 1.0:
            raise ValueError(
                f"stop_properly_penalty_coef must be in [0, 1], got {stop_properly_penalty_coef}"
            )
        ignored = [k for k, v in dapo.items() if v is not None]
        if ignored:
            warnings.warn(
                f"stop_properly_penalty_coef is set, so {', '.join(ignored)} are ignored",
                stacklevel=2,
            )
        if truncated is None:
            raise ValueError("truncated ([B] 0/1) is required with stop_properly_penalty_coef")
        is_truncated = check_mask("truncated", truncated, shape=(None,)).bool()
        check_same_rows(rewards=rewards, truncated=truncated)
        return torch.where(is_truncated, rewards * stop_properly_penalty_coef, rewards)

    missing = [k for k, v in dapo.items() if v is None]
    if missing:
        raise ValueError(
            "reward shaping needs either stop_properly_penalty_coef or all three DAPO "
            f"parameters; missing: {', '.join(missing)}"
        )
    if response_lengths is None:
        raise ValueError("response_lengths ([B] token counts) is required for DAPO shaping")
    check_tensor("response_lengths", response_lengths, ndim=1)
    check_same_rows(rewards=rewards, response_lengths=response_lengths)
    penalty = dapo_overlong_penalty(response_lengths, **dapo)  # [B] float64
    return rewards + penalty.to(rewards.dtype)
