"""GRPO, one stage per method: rollout -> compute_advantages -> update.

    J(θ) = E_x E_{y_1..G ~ π_old} [ 1/N Σ_i Σ_t min(ρ_it A_i, clip(ρ_it) A_i) ] - β KL(π_θ‖π_ref)

GRPO: https://arxiv.org/abs/2402.03300; DAPO (dynamic sampling, overlong filtering and shaping,
token-level loss) https://arxiv.org/abs/2503.14476. The formulas and NeMo-RL's order of
operations: docs/algorithms.md#the-grpo-step.

Implementation choices:
1) Each stage is a method a notebook cell can call on its own and returns a plain object
   (``RolloutBatch``, ``AdvantageBatch``, ``UpdateResult``). ``compute_advantages`` and
   ``update(dry_run=True)`` have no side effects, so one frozen batch can be replayed through
   other estimators, KL settings and clipping (counterfactual replay).
2) The rollout stage (sampling, scoring, log-probs, dynamic sampling) is shared with the other
   loops: ``rollout.py``. The loop around the stages, validation and the save state are the
   ``Trainer`` base (``base.py``); hyperparameter changes between steps: ``hyperparameters.py``.
3) ``compute_advantages`` follows NeMo-RL's order: reward scaling -> shaping -> baselines/std ->
   overlong filtering -> log-prob-error masking -> estimator -> advantage clipping.
4) NeMo-RL's top-level ``grpo.normalize_rewards`` / ``grpo.use_leave_one_out_baseline`` are
   folded into ``grpo.adv_estimator`` when the config loads: one setting, one place.
5) Under ``accelerate`` every rank rolls out its own share of the prompts (whole groups) and
   counts are summed over ranks inside the loss.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlnb.algorithms.advantages import AdvEstimatorConfig, make_advantage_estimator
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.filtering import clip_advantages
from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.algorithms.rewards import RewardScalingConfig, RewardShapingConfig
from rlnb.config import Config
from rlnb.engine.batches import AdvantageBatch, RolloutBatch, StepMetrics, UpdateResult
from rlnb.engine.trainers.base import Trainer, expect_batch
from rlnb.engine.trainers.collector import AsyncLoopConfig
from rlnb.engine.trainers.rollout import (
    filtered_sample_mask,
    sample_rollout,
    shaped_rewards,
    timer,
)

FOLDED_KEYS = ("normalize_rewards", "use_leave_one_out_baseline")
# a dotted override of the top-level name sets the one place the setting lives (choice 4)
OVERRIDE_ALIASES = {f"grpo.{k}": f"grpo.adv_estimator.{k}" for k in FOLDED_KEYS}


class GRPOConfig(Config):
    """``grpo``: the loop (NeMo-RL key names and defaults, smaller sizes for the CPU default)."""

    num_prompts_per_step: int = Field(16, ge=1, strict=True, description="P: prompts per step.")
    num_generations_per_prompt: int = Field(
        16, ge=1, strict=True,
        description="G: responses per prompt (>= 2 for a group baseline: with G = 1 every "
        "GRPO/GDPO advantage is 0).")
    max_num_steps: int = Field(200, ge=0, strict=True, description="Training steps.")
    adv_estimator: AdvEstimatorConfig = Field(default_factory=AdvEstimatorConfig)
    overlong_filtering: bool = Field(False, description="Drop truncated responses from the loss.")
    use_dynamic_sampling: bool = Field(False, description="DAPO: keep only rows with signal.")
    dynamic_sampling_max_gen_batches: int = Field(10, ge=1, description="Give up after this.")
    batch_multiplier: float = Field(1.0, ge=1, description="Prompts per generation batch factor.")
    reward_scaling: RewardScalingConfig = Field(default_factory=RewardScalingConfig)
    reward_shaping: RewardShapingConfig = Field(default_factory=RewardShapingConfig)
    advantage_clip_low: float | None = Field(None, description="Clamp advantages below.")
    advantage_clip_high: float | None = Field(None, description="Clamp advantages above.")
    seq_logprob_error_threshold: float | None = Field(
        None, gt=0, description="Mask rows whose mean exp|log π_gen - log π_old| exceeds it.")
    skip_reference_policy_logprobs_calculation: bool = Field(False, description="No ref model.")
    reuse_generation_logprobs: bool | Literal["auto"] = Field(
        "auto",
        description="rlnb extra: take prev_logprobs from generation (same weights, full-vocab "
        "log-softmax) instead of a second forward. 'auto' decides when the config loads: true "
        "where the backend samples with the policy's own module (hf) in float32 in the "
        "synchronous loop, else false; true with vllm or async is refused.",
    )
    val_period: int = Field(10, ge=0, description="Validate every k steps (0: never).")
    val_at_start: bool = Field(True, description="Validate before the first step.")
    val_at_end: bool = Field(True, description="Validate after the last step.")
    val_num_generations_per_prompt: int = Field(1, ge=1, description="k for pass@k.")
    max_val_samples: int = Field(200, ge=1, description="Held-out prompts per validation.")
    max_rollout_turns: int = Field(1, ge=1, description="Assistant turns per conversation.")
    seed: int = Field(0, description="Seeds model init, data order and sampling.")
    async_grpo: AsyncLoopConfig = Field(
        default_factory=AsyncLoopConfig,
        description="Async GRPO: generation runs ahead of training (async_grpo.py).")

    @model_validator(mode="before")
    @classmethod
    def _fold_top_level_flags(cls, data: Any) -> Any:
        # choice 4: NeMo-RL's example configs interpolate these into the estimator
        if not isinstance(data, dict) or not any(k in data for k in FOLDED_KEYS):
            return data
        data = dict(data)
        est = data.get("adv_estimator") or {}
        est = est.model_dump() if hasattr(est, "model_dump") else dict(est)
        for key in FOLDED_KEYS:
            if key in data:
                value = data.pop(key)
                if key in est and est[key] != value:
                    raise ValueError(
                        f"grpo.{key}={value!r} contradicts grpo.adv_estimator.{key}={est[key]!r} "
                        "(they are one setting: give one)")
                est[key] = value
        data["adv_estimator"] = est
        return data

    @model_validator(mode="after")
    def _consistent(self) -> GRPOConfig:
        if self.batch_multiplier != 1 and not self.use_dynamic_sampling:
            raise ValueError("grpo.batch_multiplier != 1 needs grpo.use_dynamic_sampling")
        est = self.adv_estimator
        baseline_needs_group = est.name in ("grpo", "gdpo") or (
            est.name == "reinforce_plus_plus" and est.minus_baseline)
        if self.num_generations_per_prompt == 1 and baseline_needs_group:
            raise ValueError(
                f"grpo.num_generations_per_prompt=1 with grpo.adv_estimator.name={est.name!r}: "
                "a group of one is its own baseline, so every advantage would be 0 (use G >= 2)")
        if est.name == "opd":
            raise ValueError(
                "grpo.adv_estimator.name='opd' (on-policy distillation) needs a teacher model's "
                "log-probs, and rlnb's trainers have no teacher model yet; the estimator itself "
                "is rlnb.OnPolicyDistillationAdvantageEstimator")
        return self

    @property
    def normalize_rewards(self) -> bool:
        """NeMo-RL's top-level name for ``adv_estimator.normalize_rewards``."""
        return self.adv_estimator.normalize_rewards

    @property
    def use_leave_one_out_baseline(self) -> bool:
        """NeMo-RL's top-level name for ``adv_estimator.use_leave_one_out_baseline``."""
        return self.adv_estimator.use_leave_one_out_baseline


class GRPOTrainer(Trainer):
    """Stage-by-stage GRPO on a policy, a task and a generation backend.

    ``GRPOTrainer(rlnb.load_config(None, ["grpo.seed=1"]))``; the loop, validation and state
    are the ``Trainer`` base's.
    """

    loop_section = "grpo"

    # ------------------------------------------------------------------ stage 1: rollout
    def rollout(self, rows: list[dict[str, Any]] | None = None) -> RolloutBatch:
        """Stage 1: P prompts x G responses, rewards, log-probs (dynamic sampling if enabled)."""
        return sample_rollout(self, rows)

    # ------------------------------------------------------------------ stage 2: advantages
    def compute_advantages(self, batch: RolloutBatch, adv_estimator: dict | None = None
                           ) -> AdvantageBatch:
        """Stage 2 (no side effects): rewards -> per-token advantages, in NeMo-RL's order.

        ``adv_estimator`` overrides ``grpo.adv_estimator`` for this call (counterfactual replay),
        e.g. ``{"name": "reinforce_plus_plus"}``.
        """
        expect_batch(batch, RolloutBatch, f"{type(self).__name__}.compute_advantages")
        g, elapsed = self.config.grpo, timer()
        est_cfg = g.adv_estimator if adv_estimator is None else AdvEstimatorConfig(
            **{**g.adv_estimator.model_dump(), **adv_estimator})
        rewards, components = shaped_rewards(g, batch.rewards, batch.reward_components,
                                             batch.truncated, batch.response_lengths)
        baseline, std = calculate_baseline_and_std_per_prompt(
            batch.prompt_ids, rewards, leave_one_out=est_cfg.use_leave_one_out_baseline)
        sample_mask, metrics = filtered_sample_mask(g, batch, rewards)
        mask = batch.token_mask * sample_mask[:, None]  # [B, S]
        estimator = self._estimator(est_cfg)
        advantages = estimator.compute_advantage(
            batch.prompt_ids, rewards, mask,
            repeated_batch={f"reward/{k}": v for k, v in components.items()},
            logprobs_policy=batch.prev_logprobs, logprobs_reference=batch.reference_logprobs,
        )  # [B, S]
        metrics["train/advantages/sum"] = float(advantages.sum())
        if g.advantage_clip_low is not None or g.advantage_clip_high is not None:
            advantages = clip_advantages(advantages, g.advantage_clip_low, g.advantage_clip_high)
        metrics.update(advantage_metrics(advantages, batch.token_mask, baseline, sample_mask))
        metrics["timing/train/advantage_calculation"] = elapsed()
        return AdvantageBatch(batch, est_cfg.name, rewards, baseline, std,
                              advantages.contiguous(), sample_mask, metrics)

    def _estimator(self, est_cfg: AdvEstimatorConfig):
        """The advantage estimator of ``est_cfg``, built once per config (a replay with another
        estimator, or ``reconfigure``, makes a new one)."""
        key = (id(est_cfg), id(self.loss_fn.config))
        if getattr(self, "_estimator_key", None) != key:
            self._estimator_cache = make_advantage_estimator(est_cfg, self.loss_fn.config)
            self._estimator_key = key
        return self._estimator_cache

    # ------------------------------------------------------------------ stage 3: update
    def update(self, batch: AdvantageBatch, *, dry_run: bool = False,
               loss_fn: ClippedPGLossFn | dict | None = None) -> UpdateResult:
        """Stage 3: the loss and an optimizer step per global batch (none with ``dry_run``).

        ``loss_fn`` (a ClippedPGLossFn or ``loss_fn`` config dict) overrides the trainer's
        for this call, e.g. ``{"ratio_clip_max": 0.28}`` in a dry-run comparison.
        """
        expect_batch(batch, AdvantageBatch, f"{type(self).__name__}.update")
        metrics = self.policy_pass(batch.train_data(), loss_fn, dry_run)
        t = metrics["timing/train/policy_training"]
        toks = metrics.get("train/global_valid_toks", 0.0)
        metrics["timing/train/valid_tokens_per_sec_per_gpu"] = (
            toks / max(t, 1e-9) / self.dist.world_size)
        if not dry_run:
            self.step_count += 1
            self.total_valid_tokens += int(toks)
            self.publish_weights()
        return UpdateResult(self.step_count, dry_run, metrics)

    # ------------------------------------------------------------------ one step
    def step(self) -> StepMetrics:
        """rollout -> compute_advantages -> update; returns this step's metrics."""
        elapsed = timer()
        rollout = self.rollout()
        advantages = self.compute_advantages(rollout)
        result = self.update(advantages)
        return self.record_step(rollout, advantages, result, elapsed())


def advantage_metrics(advantages, token_mask, baseline, sample_mask) -> dict[str, float]:
    """``train/advantages/{mean,max,min}`` over generated tokens, ``baseline_reward/pct_*`` and
    ``num_mask_sample_filtered`` (docs/metrics.md)."""
    adv_valid = advantages[token_mask > 0]
    has = adv_valid.numel() > 0
    pct_0 = 100 * float((baseline == 0).float().mean())
    pct_1 = 100 * float((baseline == 1).float().mean())
    return {
        "train/advantages/mean": float(adv_valid.mean()) if has else 0.0,
        "train/advantages/max": float(adv_valid.max()) if has else 0.0,
        "train/advantages/min": float(adv_valid.min()) if has else 0.0,
        "train/baseline_reward/pct_0": pct_0,
        "train/baseline_reward/pct_1": pct_1,
        "train/baseline_reward/pct_mixed": 100 - pct_0 - pct_1,
        "train/num_mask_sample_filtered": float((sample_mask == 0).sum()),
    }
