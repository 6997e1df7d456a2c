"""``grpo``: GRPO's loop section (NeMo-RL's key names and defaults, smaller sizes for the CPU
default), what ``GRPOTrainer`` (``grpo.py``) reads.

    grpo: {num_prompts_per_step: 16, num_generations_per_prompt: 16,
           adv_estimator: {name: grpo, use_leave_one_out_baseline: false},
           update_rows: shuffled, token_normalizer: rollout_mean}

Implementation choices:
1) The keys every loop shares are ``LoopConfig``'s (``loop_config.py``); these are GRPO's own:
   the estimator (a registered name, ``grpo.adv_estimator.name``), advantage clipping, the
   async section, and two of TRL's choices as options whose defaults are NeMo-RL's.
2) NeMo-RL's top-level ``normalize_rewards`` (and ``use_leave_one_out_baseline`` when given
   alone) are folded into ``adv_estimator`` when the config loads, as NeMo-RL's example configs
   interpolate them; ``use_leave_one_out_baseline`` given beside a different estimator flag is
   NeMo-RL's loop flag (dynamic sampling's filter and the baseline metrics) and keeps its own.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlnb.algorithms.advantage_config import AdvEstimatorConfig
from rlnb.engine.trainers.collector import AsyncLoopConfig
from rlnb.engine.trainers.loop_config import FOLDED_KEYS, LoopConfig, registered_estimator


class GRPOEstimatorConfig(AdvEstimatorConfig):
    """``grpo.adv_estimator``: one of the registered GRPO-loop estimators."""

    _registered = registered_estimator("grpo")


class GRPOConfig(LoopConfig):
    """``grpo``: the loop (NeMo-RL key names and defaults, smaller sizes for the CPU default);
    the keys every loop shares are ``LoopConfig``'s."""

    adv_estimator: GRPOEstimatorConfig = Field(default_factory=GRPOEstimatorConfig)
    advantage_clip_low: float | None = Field(None, description="Clamp advantages below.")
    advantage_clip_high: float | None = Field(None, description="Clamp advantages above.")
    async_grpo: AsyncLoopConfig = Field(
        default_factory=AsyncLoopConfig,
        description="Async GRPO: generation runs ahead of training (async_grpo.py).")
    update_rows: Literal["in_order", "shuffled"] = Field(
        "in_order", description="rlnb extra: how a rollout's rows split into optimizer steps "
        "(policy.train_global_batch_size each): in_order (NeMo-RL: the first rows, then the "
        "next) or shuffled (TRL: rows permuted across prompts first, seeded by grpo.seed and "
        "the step).")
    token_normalizer: Literal["global_batch", "rollout_mean"] = Field(
        "global_batch", description="rlnb extra: what the token-level loss divides by: each "
        "optimizer step's valid tokens (NeMo-RL) or the rollout's over its optimizer steps "
        "(TRL's dapo: one divisor for every step of a rollout).")
    use_leave_one_out_baseline: bool | None = Field(
        None, description="NeMo-RL's loop flag: leave-one-out in the baseline and std of "
        "dynamic sampling's filter and the baseline metrics; None: the estimator's "
        "(adv_estimator.use_leave_one_out_baseline), which makes the advantages (choice 4).")

    @model_validator(mode="before")
    @classmethod
    def _fold_top_level_flags(cls, data: Any) -> Any:
        # choice 4: NeMo-RL's example configs interpolate these into the estimator
        if not isinstance(data, dict) or not any(k in data for k in FOLDED_KEYS):
            return data
        data = dict(data)
        est = data.get("adv_estimator") or {}
        est = est.model_dump() if hasattr(est, "model_dump") else dict(est)
        changed = False
        for key in FOLDED_KEYS:
            if key not in data:
                continue
            if key == "use_leave_one_out_baseline":  # a field too: NeMo-RL's loop flag
                if data[key] is not None and key not in est:
                    est[key], changed = data[key], True  # alone, it sets both
                continue
            value = data.pop(key)
            if key in est and est[key] != value:
                raise ValueError(
                    f"grpo.{key}={value!r} contradicts grpo.adv_estimator.{key}={est[key]!r} "
                    "(they are one setting: give one)")
            est[key], changed = value, True
        if changed:  # (an assignment's check passes the estimator as a model: left as it is)
            data["adv_estimator"] = est
        return data

    @property
    def asynchronous(self) -> bool:
        return self.async_grpo.enabled

    @property
    def leave_one_out(self) -> bool:
        """The loop's flag (baseline and std of dynamic sampling and the metrics)."""
        if self.use_leave_one_out_baseline is not None:
            return self.use_leave_one_out_baseline
        return self.adv_estimator.use_leave_one_out_baseline

    @property
    def normalize_rewards(self) -> bool:
        """NeMo-RL's top-level name for ``adv_estimator.normalize_rewards``."""
        return self.adv_estimator.normalize_rewards
