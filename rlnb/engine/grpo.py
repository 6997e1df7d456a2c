"""GRPO, one stage per method: rollout -> compute_advantages -> update, and the loop around them.

    J(θ) = E_x E_{y_1..G ~ π_old} [ 1/N Σ_i Σ_t min(ρ_it A_i, clip(ρ_it) A_i) ] - β KL(π_θ‖π_ref)

GRPO: https://arxiv.org/abs/2402.03300; DAPO (dynamic sampling, overlong filtering and shaping,
token-level loss) https://arxiv.org/abs/2503.14476.

Implementation choices (spec §6):
1) Each stage is a method a notebook cell can call on its own and returns a plain object
   (``RolloutBatch``, ``AdvantageBatch``, ``UpdateResult``). ``compute_advantages`` and
   ``update(dry_run=True)`` have no side effects, so one frozen batch can be replayed through
   other estimators, KL settings and clipping (counterfactual replay).
2) ``rollout`` samples G responses for each of P prompts, scores them, and computes the
   previous-policy and reference log-probs right away, so a RolloutBatch is complete and a
   replay after an update still uses the log-probs of the policy that generated it.
3) Dynamic sampling generates, so it lives in ``rollout``: generation batches are filtered by the
   per-sample std (after reward scaling and shaping, as in spec §6) until P·G rows survive; the
   advantage stage then recomputes baselines on the surviving rows.
4) ``compute_advantages`` follows spec §6's order: reward scaling -> shaping -> baselines/std ->
   overlong filtering -> log-prob-error masking -> estimator -> advantage clipping.
5) Under ``accelerate`` every rank rolls out its own share of the prompts (whole groups), counts
   are summed over ranks inside the loss, and only the main process logs and writes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from typing import Any

import torch
from pydantic import Field, model_validator

from rlnb.algorithms.advantages import AdvEstimatorConfig, make_advantage_estimator
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.dynamic_sampling import DynamicSamplingState, dynamic_sampling
from rlnb.algorithms.filtering import clip_advantages, overlong_filter, seq_logprob_error_mask
from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.algorithms.rewards import (
    RewardScalingConfig,
    RewardShapingConfig,
    scale_rewards,
    shape_rewards,
)
from rlnb.config import Config
from rlnb.engine.batches import AdvantageBatch, RolloutBatch, UpdateResult, concat_rollouts
from rlnb.engine.distributed import Distributed
from rlnb.engine.environments import check_rewards
from rlnb.engine.generation import make_generation_backend
from rlnb.engine.multiturn import sample_conversations


class GRPOConfig(Config):
    """``grpo``: the loop (NeMo-RL key names and defaults, smaller sizes for the CPU default)."""

    num_prompts_per_step: int = Field(16, ge=1, description="P: prompts per step.")
    num_generations_per_prompt: int = Field(16, ge=1, description="G: responses per prompt.")
    max_num_steps: int = Field(200, ge=0, description="Training steps.")
    normalize_rewards: bool = Field(True, description="Divide by the group std.")
    use_leave_one_out_baseline: bool = Field(True, description="RLOO baseline.")
    adv_estimator: AdvEstimatorConfig = Field(default_factory=AdvEstimatorConfig)
    overlong_filtering: bool = Field(False, description="Drop truncated responses from the loss.")
    use_dynamic_sampling: bool = Field(False, description="DAPO: keep only rows with signal.")
    dynamic_sampling_max_gen_batches: int = Field(10, ge=1, description="Give up after this.")
    batch_multiplier: float = Field(1.0, ge=1, description="Prompts per generation batch factor.")
    reward_scaling: RewardScalingConfig = Field(default_factory=RewardScalingConfig)
    reward_shaping: RewardShapingConfig = Field(default_factory=RewardShapingConfig)
    advantage_clip_low: float | None = Field(None, description="Clamp advantages below.")
    advantage_clip_high: float | None = Field(None, description="Clamp advantages above.")
    seq_logprob_error_threshold: float | None = Field(None, description="Mask rows above it.")
    skip_reference_policy_logprobs_calculation: bool = Field(False, description="No ref model.")
    reuse_generation_logprobs: bool = Field(
        False,
        description="rlnb extra: take prev_logprobs from generation (same weights, full-vocab "
        "log-softmax) instead of a second forward; needs a backend that generates with the "
        "policy's own module (hf).",
    )
    val_period: int = Field(10, ge=0, description="Validate every k steps (0: never).")
    val_at_start: bool = Field(True, description="Validate before the first step.")
    val_at_end: bool = Field(True, description="Validate after the last step.")
    val_num_generations_per_prompt: int = Field(1, ge=1, description="k for pass@k.")
    max_val_samples: int = Field(200, ge=1, description="Held-out prompts per validation.")
    max_rollout_turns: int = Field(1, ge=1, description="Assistant turns per conversation.")
    seed: int = Field(0, description="Seeds model init, data order and sampling.")

    @model_validator(mode="after")
    def _estimator_follows_top_level_flags(self) -> GRPOConfig:
        # NeMo-RL's example configs interpolate these two into the estimator (spec §3).
        if "adv_estimator" not in self.model_fields_set:
            object.__setattr__(
                self,
                "adv_estimator",
                AdvEstimatorConfig(
                    normalize_rewards=self.normalize_rewards,
                    use_leave_one_out_baseline=self.use_leave_one_out_baseline,
                ),
            )
        if self.batch_multiplier != 1 and not self.use_dynamic_sampling:
            raise ValueError("grpo.batch_multiplier != 1 needs grpo.use_dynamic_sampling")
        return self


def _timer():
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


class GRPOTrainer:
    """Stage-by-stage GRPO on a policy, a task and a generation backend.

    Build it with ``GRPOTrainer(config)`` (an ``RLNBConfig``, dict or YAML path) or from parts.
    """

    def __init__(self, config, *, policy=None, task=None, accelerator=None, run=None):
        from rlnb.engine.policy import Policy
        from rlnb.engine.tasks import build_task
        from rlnb.run.config import load_config

        self.config = config = load_config(config) if not hasattr(config, "grpo") else config
        self.dist = Distributed(accelerator)
        g = config.grpo
        torch.manual_seed(g.seed + 1000 * self.dist.rank)
        self.loss_fn = ClippedPGLossFn(config.loss_fn)
        self.need_reference = (
            self.loss_fn.config.reference_policy_kl_penalty > 0
            and not g.skip_reference_policy_logprobs_calculation
        )
        self.policy = policy or Policy(
            config.policy, seed=g.seed, need_reference=self.need_reference, dist=self.dist
        )
        self.task = task or build_task(config.data)
        self.env = config.env.build(self.task)  # what steps multi-turn conversations
        if self.env is not self.task and g.max_rollout_turns == 1:
            raise ValueError(
                f"env.name={config.env.name!r} is a multi-turn environment, but "
                "grpo.max_rollout_turns is 1 (it would never be asked a second turn)"
            )
        p = config.policy
        self.max_prompt_length = p.max_total_sequence_length - p.generation.max_new_tokens
        self.generator = make_generation_backend(
            self.policy.model, self.policy.tokenizer, p.generation, self.max_prompt_length
        )
        if g.reuse_generation_logprobs and not getattr(
            self.generator, "shares_policy_weights", False
        ):
            raise ValueError(
                "grpo.reuse_generation_logprobs needs a generation backend that samples with the "
                f"policy's own weights; policy.generation.backend={p.generation.backend!r} does "
                "not (set grpo.reuse_generation_logprobs=false)"
            )
        self.run = run
        self.step_count = 0  # completed optimizer steps (GRPOSaveState.current_step)
        self.consumed_prompts = 0  # data position in the task's training stream
        self._stream: list[dict[str, Any]] = []
        self.total_valid_tokens = 0  # GRPOSaveState.total_valid_tokens: tokens trained on
        self.last_validation: dict[str, float] = {}

    # ------------------------------------------------------------------ data
    def next_prompt_rows(self, n: int | None = None) -> list[dict[str, Any]]:
        """The next ``n`` training rows for this rank (advances the data position)."""
        n = n or self.config.grpo.num_prompts_per_step
        start = self.consumed_prompts
        if len(self._stream) < start + n:  # the task's seeded stream, grown by doubling
            self._stream = self.task.train_rows(2 * (start + n), self.config.grpo.seed)
        rows = self._stream[start : start + n]  # position = consumed_prompts: resumable
        self.consumed_prompts += n
        return self.dist.shard(rows)

    def format_prompt(self, row: dict[str, Any]) -> str:
        from rlnb.engine.tasks import format_prompt

        return format_prompt(row, self.policy.tokenizer, self.config.policy.chat_template)

    # ------------------------------------------------------------------ stage 1: rollout
    def generate_and_score(
        self, rows: list[dict[str, Any]], generations: int, step: int
    ) -> RolloutBatch:
        """Sample ``generations`` responses per row, score them, compute log-probs."""
        rep_rows = [r for r in rows for _ in range(generations)]
        prompts = [self.format_prompt(r) for r in rep_rows]
        g, p = self.config.grpo, self.config.policy
        extra: dict[str, float] = {}
        if g.max_rollout_turns > 1:  # prompt | turn | observation | turn ... (multiturn.py)
            conv = sample_conversations(
                self.generator, self.env, self.policy.tokenizer, prompts, rep_rows,
                max_turns=g.max_rollout_turns, max_new_tokens=p.generation.max_new_tokens,
                max_total_length=p.max_total_sequence_length,
                max_prompt_length=self.max_prompt_length,
            )
            gens, rewards, generated = conv.generations, conv.rewards, conv.token_mask
            t_gen, t_reward = conv.seconds_generation, conv.seconds_environment
            extra["train/mean_turns"] = float(conv.turns.float().mean())
        else:
            elapsed = _timer()
            gens = self.generator.generate(prompts)
            t_gen = elapsed()
            elapsed = _timer()
            rewards = check_rewards(
                self.task.score(prompts, gens.texts, rep_rows), len(prompts), self.task.name
            )
            t_reward = elapsed()
            generated = gens.response_mask.float()
        input_ids = torch.cat([gens.prompt_ids, gens.response_ids], dim=1)  # [B, S]
        attention_mask = torch.cat([gens.prompt_mask, gens.response_mask], dim=1)
        zeros = torch.zeros_like(gens.prompt_ids, dtype=torch.float32)
        token_mask = torch.cat([zeros, generated], dim=1)  # 1 on generated tokens only
        gen_lp = torch.cat([zeros, gens.generation_logprobs], dim=1)
        elapsed = _timer()
        if self.config.grpo.reuse_generation_logprobs:
            # the generator sampled with these very weights: its log-probs are π_old's (they
            # match a training forward to ~1e-6; the gap is a KV-cache vs full-pass rounding)
            prev = gen_lp * token_mask
        else:
            prev = self.policy.logprobs(input_ids, attention_mask) * token_mask
        ref = (
            self.policy.logprobs(input_ids, attention_mask, reference=True) * token_mask
            if self.need_reference
            else None
        )
        t_lp = elapsed()
        lengths = generated.sum(dim=1).long()  # generated tokens (observations excluded)
        group = torch.arange(len(rows)).repeat_interleave(generations)
        metrics = {
            "timing/train/generation": t_gen,
            "timing/train/reward_calculation": t_reward,
            "timing/train/policy_and_reference_logprobs": t_lp,
            "train/mean_gen_tokens_per_sample": float(lengths.float().mean()),
            "train/max_gen_tokens_per_sample": float(lengths.max()),
            "train/truncation_rate": float(gens.truncated.float().mean()),
            "train/natural_termination_rate": float(1 - gens.truncated.float().mean()),
            "train/mean_prompt_length": float(gens.prompt_mask.sum(1).float().mean()),
            "train/total_num_tokens": float(attention_mask.sum()),
            **extra,
        }
        return RolloutBatch(
            step=step,
            rows=rep_rows,
            prompts=prompts,
            responses=gens.texts,
            group=group,
            prompt_ids=gens.prompt_ids,
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_mask=token_mask,
            sample_mask=torch.ones(len(prompts)),
            generation_logprobs=gen_lp,
            prev_logprobs=prev,
            reference_logprobs=ref,
            rewards=rewards.total.float(),
            reward_components=dict(rewards.components),
            correct=rewards.correct.bool(),
            truncated=gens.truncated,
            response_lengths=lengths,
            metrics=metrics,
        )

    def rollout(self, rows: list[dict[str, Any]] | None = None) -> RolloutBatch:
        """Stage 1: P prompts x G responses, rewards, log-probs (dynamic sampling if enabled)."""
        g = self.config.grpo
        elapsed = _timer()
        if not g.use_dynamic_sampling:
            batch = self.generate_and_score(
                rows or self.next_prompt_rows(), g.num_generations_per_prompt, self.step_count
            )
        else:
            batch = self._dynamic_sampling_rollout(rows)
        batch.metrics["timing/train/rollout"] = elapsed()
        r = batch.rewards.double()
        moments = self.dist.mean_dict({"r": float(r.mean()), "r2": float((r * r).mean())})
        batch.metrics["train/reward"] = moments["r"]
        batch.metrics["train/reward_std"] = math.sqrt(max(moments["r2"] - moments["r"] ** 2, 0.0))
        return batch

    def _shaped(self, rewards, components, truncated, lengths):
        """Reward scaling then shaping (spec §6.3-6.4): pure functions of the raw rewards."""
        g = self.config.grpo
        if g.reward_scaling.enabled:
            kw = g.reward_scaling.model_dump(exclude={"enabled"})
            rewards = scale_rewards(rewards, **kw)
            components = {k: scale_rewards(v, **kw) for k, v in components.items()}
        if g.reward_shaping.enabled:
            kw = g.reward_shaping.model_dump(exclude={"enabled"})
            rewards = shape_rewards(rewards, truncated=truncated, response_lengths=lengths, **kw)
        return rewards, components

    def _dynamic_sampling_rollout(self, rows) -> RolloutBatch:
        g = self.config.grpo
        if self.dist.world_size > 1:  # ranks would need different numbers of batches
            raise ValueError("grpo.use_dynamic_sampling is single-process for now")
        train_size = g.num_prompts_per_step * g.num_generations_per_prompt
        state, parts = DynamicSamplingState(), []
        n_prompts = int(g.num_prompts_per_step * g.batch_multiplier)
        while True:
            part = self.generate_and_score(
                rows or self.next_prompt_rows(n_prompts),
                g.num_generations_per_prompt,
                self.step_count,
            )
            rows = None
            part.group = part.group + sum(int(p.group.max()) + 1 for p in parts)
            parts.append(part)
            shaped, _ = self._shaped(
                part.rewards, part.reward_components, part.truncated, part.response_lengths
            )
            _, std = calculate_baseline_and_std_per_prompt(
                part.prompt_ids, shaped, leave_one_out=g.use_leave_one_out_baseline
            )
            index = torch.arange(len(part)) + sum(len(p) for p in parts[:-1])
            result = dynamic_sampling(
                {"row": index.float(), "total_reward": shaped},
                std=std,
                baseline=torch.zeros_like(std),
                state=state,
                train_size=train_size,
                max_gen_batches=g.dynamic_sampling_max_gen_batches,
            )
            state = result.state
            if result.batch is not None:
                break
        keep = result.batch["row"].long()
        batch = concat_rollouts(parts, keep, self.policy.tokenizer.pad_token_id)
        batch.metrics.update({f"train/{k}": v for k, v in result.metrics.items()})
        return batch

    # ------------------------------------------------------------------ stage 2: advantages
    def compute_advantages(
        self,
        batch: RolloutBatch,
        adv_estimator: dict | None = None,
    ) -> AdvantageBatch:
        """Stage 2 (no side effects): rewards -> per-token advantages, spec §6 order.

        ``adv_estimator`` overrides ``grpo.adv_estimator`` for this call (counterfactual replay),
        e.g. ``{"name": "reinforce_plus_plus"}``.
        """
        g, elapsed = self.config.grpo, _timer()
        est_cfg = (
            g.adv_estimator
            if adv_estimator is None
            else {**g.adv_estimator.model_dump(), **adv_estimator}
        )
        rewards, components = self._shaped(
            batch.rewards, batch.reward_components, batch.truncated, batch.response_lengths
        )
        baseline, std = calculate_baseline_and_std_per_prompt(
            batch.prompt_ids, rewards, leave_one_out=g.use_leave_one_out_baseline
        )
        sample_mask = batch.sample_mask.clone()
        metrics: dict[str, float] = {}
        if g.overlong_filtering:
            sample_mask = overlong_filter(sample_mask, batch.truncated)
        if g.seq_logprob_error_threshold is not None:
            sample_mask, err = seq_logprob_error_mask(
                batch.generation_logprobs,
                batch.prev_logprobs,
                batch.token_mask,
                sample_mask,
                rewards=rewards,
                threshold=g.seq_logprob_error_threshold,
            )
            metrics.update({f"train/{k}": v for k, v in err.items()})
        mask = batch.token_mask * sample_mask[:, None]
        estimator = make_advantage_estimator(est_cfg, self.loss_fn.config)
        advantages = estimator.compute_advantage(
            batch.prompt_ids,
            rewards,
            mask,
            repeated_batch={f"reward/{k}": v for k, v in components.items()},
            logprobs_policy=batch.prev_logprobs,
            logprobs_reference=batch.reference_logprobs,
        )
        metrics["train/advantages/sum"] = float(advantages.sum())
        if g.advantage_clip_low is not None or g.advantage_clip_high is not None:
            advantages = clip_advantages(advantages, g.advantage_clip_low, g.advantage_clip_high)
        valid = batch.token_mask > 0
        adv_valid = advantages[valid]
        metrics.update(
            {
                "train/advantages/mean": float(adv_valid.mean()) if adv_valid.numel() else 0.0,
                "train/advantages/max": float(adv_valid.max()) if adv_valid.numel() else 0.0,
                "train/advantages/min": float(adv_valid.min()) if adv_valid.numel() else 0.0,
                "train/baseline_reward/pct_0": 100 * float((baseline == 0).float().mean()),
                "train/baseline_reward/pct_1": 100 * float((baseline == 1).float().mean()),
                "train/num_mask_sample_filtered": float((sample_mask == 0).sum()),
                "timing/train/advantage_calculation": elapsed(),
            }
        )
        metrics["train/baseline_reward/pct_mixed"] = (
            100 - metrics["train/baseline_reward/pct_0"] - metrics["train/baseline_reward/pct_1"]
        )
        name = est_cfg["name"] if isinstance(est_cfg, dict) else est_cfg.name
        return AdvantageBatch(
            batch, name, rewards, baseline, std, advantages.contiguous(), sample_mask, metrics
        )

    # ------------------------------------------------------------------ stage 3: update
    def update(
        self,
        batch: AdvantageBatch,
        *,
        dry_run: bool = False,
        loss_fn: ClippedPGLossFn | dict | None = None,
    ) -> UpdateResult:
        """Stage 3: the loss and an optimizer step per global batch (none with ``dry_run``).

        ``loss_fn`` (a ClippedPGLossFn or ``loss_fn`` config dict) overrides the trainer's
        for this call, e.g. ``{"ratio_clip_max": 0.28}`` in a dry-run comparison.
        """
        if isinstance(loss_fn, dict):
            loss_fn = ClippedPGLossFn({**self.loss_fn.config.model_dump(), **loss_fn})
        elapsed = _timer()
        raw = self.policy.train(batch.train_data(), loss_fn or self.loss_fn, dry_run=dry_run)
        metrics = {f"train/{k}": v for k, v in self.dist.sum_loss_metrics(raw).items()}
        metrics["timing/train/policy_training"] = t = elapsed()
        toks = metrics.get("train/global_valid_toks", 0.0)
        metrics["timing/train/valid_tokens_per_sec_per_gpu"] = (
            toks / max(t, 1e-9) / self.dist.world_size
        )
        if not dry_run:
            self.generator.refresh_weights(self.policy.model)
            self.step_count += 1
            self.total_valid_tokens += int(metrics.get("train/global_valid_toks", 0))
        return UpdateResult(self.step_count, dry_run, metrics)

    # ------------------------------------------------------------------ the loop
    def step(self) -> dict[str, float]:
        """rollout -> compute_advantages -> update; returns this step's metrics."""
        elapsed = _timer()
        rollout = self.rollout()
        advantages = self.compute_advantages(rollout)
        result = self.update(advantages)
        return self._step_metrics(rollout, advantages, result, elapsed())

    def _step_metrics(self, rollout, advantages, result, seconds: float | None):
        """One step's metrics from its three stage results (kept as ``last_batches``)."""
        self.last_batches = (rollout, advantages, result)
        metrics = {**rollout.metrics, **advantages.metrics, **result.metrics}
        if seconds is not None:
            metrics["timing/train/total_step_time"] = seconds
        return metrics

    @torch.no_grad()
    def validate(self, num_prompts: int | None = None, *, record: bool = False
                 ) -> dict[str, float]:
        """Held-out accuracy: ``validation/accuracy`` (mean reward), ``avg_length``, ``pass_k``.

        ``record=True`` also logs it to the run at the current step (as ``train`` does before
        its first step), e.g. the accuracy before any training in a notebook."""
        g = self.config.grpo
        available = len(self.task.val_rows())
        rows = self.dist.shard(self.task.val_rows(min(num_prompts or g.max_val_samples, available)))
        k = g.val_num_generations_per_prompt
        batch = self.generate_and_score(rows, k, self.step_count)
        rewards = batch.rewards.view(len(rows), k)  # [P, k]
        metrics = {
            "validation/accuracy": float(rewards.mean()),
            "validation/avg_length": float(batch.response_lengths.float().mean()),
        }
        if k > 1:
            metrics["validation/pass_k"] = float((rewards > 0).any(dim=1).float().mean())
        self.last_validation = self.dist.mean_dict(metrics)
        if record:
            self._record({"step": self.step_count, **self.last_validation})
        return self.last_validation

    def train(
        self, num_steps: int | None = None, *, progress: bool = False
    ) -> Iterator[dict[str, float]]:
        """Yield one metrics dict per step (validation folded in at ``val_period``)."""
        g = self.config.grpo
        num_steps = g.max_num_steps if num_steps is None else num_steps
        steps = range(num_steps)
        if progress and self.dist.is_main:
            from tqdm.auto import tqdm

            steps = tqdm(steps, desc="GRPO", unit="step")
        if g.val_at_start and self.step_count == 0 and g.val_period:
            start = {"step": 0, **self.validate()}
            self._record(start)
        for i in steps:
            metrics = self.step()
            last = i == num_steps - 1
            if g.val_period and (self.step_count % g.val_period == 0 or (last and g.val_at_end)):
                metrics.update(self.validate())
            metrics = {"step": self.step_count, **metrics}
            self._record(metrics)
            if progress and self.dist.is_main:
                steps.set_postfix(
                    reward=f"{metrics['train/reward']:.3f}",
                    val=f"{self.last_validation.get('validation/accuracy', math.nan):.3f}",
                )
            yield metrics

    def _record(self, metrics: dict[str, float]) -> None:
        if self.run is not None and self.dist.is_main:
            self.run.log_step(self, metrics)

    def record_step(
        self, rollout: RolloutBatch, advantages: AdvantageBatch, result: UpdateResult,
        seconds: float | None = None,
    ) -> dict[str, float]:
        """Metrics of a step run stage by stage (a notebook calling the three stages itself),
        logged to the run like a ``train`` step; returns them."""
        if result.dry_run:
            raise ValueError("record_step: a dry-run UpdateResult is not a step (no weights moved)")
        metrics = {"step": self.step_count,
                   **self._step_metrics(rollout, advantages, result, seconds)}
        self._record(metrics)
        return metrics

    # ------------------------------------------------------------------ hyperparameters
    RECONFIGURABLE = (
        "loss_fn.", "grpo.adv_estimator.", "grpo.normalize_rewards",
        "grpo.use_leave_one_out_baseline", "grpo.advantage_clip_low", "grpo.advantage_clip_high",
        "grpo.overlong_filtering", "grpo.val_period", "grpo.max_val_samples",
        "policy.optimizer.lr", "policy.max_grad_norm", "policy.generation.temperature",
        "policy.generation.top_p", "policy.generation.top_k",
    )

    def reconfigure(
        self, overrides: dict[str, Any] | list[str], *, dry_run: bool = False
    ) -> dict[str, tuple[Any, Any]]:
        """Change hyperparameters between steps: ``{"loss_fn.ratio_clip_max": 0.28}``.

        Validated like a config file (unknown keys fail with the closest name); only keys that
        can change mid-run are accepted (``RECONFIGURABLE``). Returns ``{key: (old, new)}``;
        ``dry_run=True`` only validates and returns what would change.
        """
        from rlnb.run.config import load_config

        items = (
            [f"{k}={v}" for k, v in overrides.items()] if isinstance(overrides, dict)
            else list(overrides)
        )
        for item in items:
            key = item.split("=", 1)[0]
            if not any(key == p or (p.endswith(".") and key.startswith(p))
                       for p in self.RECONFIGURABLE):
                raise ValueError(
                    f"reconfigure: '{key}' cannot change between steps (it changes shapes, the "
                    f"model or the data); these can: {', '.join(self.RECONFIGURABLE)}"
                )
        new = load_config(self.config.model_dump(mode="json"), items)
        need_ref = new.loss_fn.reference_policy_kl_penalty > 0 and not (
            new.grpo.skip_reference_policy_logprobs_calculation
        )
        if need_ref and self.policy.reference_model is None:
            raise ValueError(
                "reconfigure: loss_fn.reference_policy_kl_penalty > 0 needs a reference model, "
                "and this trainer was built without one; rebuild it with a KL penalty > 0"
            )
        old_flat, new_flat = _flat(self.config.model_dump()), _flat(new.model_dump())
        changed = {k: (old_flat.get(k), v) for k, v in new_flat.items() if old_flat.get(k) != v}
        if dry_run:
            return changed
        self.config = new
        self.need_reference = need_ref
        self.loss_fn = ClippedPGLossFn(new.loss_fn)
        self.policy.config = new.policy
        self.generator.config = new.policy.generation
        lr = new.policy.optimizer.lr
        for group in self.policy.optimizer.param_groups:
            group["initial_lr"] = lr
        if hasattr(self.policy.scheduler, "base_lrs"):  # warm-up multiplies these
            scale = [lr / b if b else 1.0 for b in self.policy.scheduler.base_lrs]
            self.policy.scheduler.base_lrs = [lr] * len(self.policy.scheduler.base_lrs)
            for group, s in zip(self.policy.optimizer.param_groups, scale):
                group["lr"] *= s
        return changed

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """The GRPOSaveState fields plus the data position (for checkpoints)."""
        g = self.config.grpo
        return {
            "current_step": self.step_count,
            "total_steps": self.step_count,
            "consumed_samples": self.consumed_prompts * g.num_generations_per_prompt,
            "current_epoch": 0,
            "total_valid_tokens": self.total_valid_tokens,
            "val_reward": self.last_validation.get("validation/accuracy"),
            "data_position": {"consumed_prompts": self.consumed_prompts},
        }

    def load_state(self, state: dict[str, Any]) -> None:
        self.step_count = state["current_step"]
        self.total_valid_tokens = state["total_valid_tokens"]
        self.consumed_prompts = state["data_position"]["consumed_prompts"]


def _flat(cfg: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in cfg.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
