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
2) The rollout stage (sampling, scoring, log-probs, dynamic sampling), the loop around the
   stages, validation and the save state are every loop's: the ``Trainer`` base (``base.py``,
   ``rollout.py``); hyperparameter changes between steps: ``hyperparameters.py``.
3) ``compute_advantages`` follows NeMo-RL's order: reward scaling -> shaping -> baselines/std ->
   overlong filtering -> log-prob-error masking -> estimator -> advantage clipping.
4) NeMo-RL's top-level ``grpo.normalize_rewards`` is folded into ``grpo.adv_estimator`` when the
   config loads (NeMo-RL reads it nowhere else: ``grpo_config.py``).
   ``grpo.use_leave_one_out_baseline`` is NeMo-RL's second flag: the baseline and std the loop
   computes for dynamic sampling's filter and the baseline metrics, while
   ``adv_estimator.use_leave_one_out_baseline`` makes the advantages. Given alone, it sets both
   (as NeMo-RL's example configs interpolate it); given beside a different estimator flag, each
   keeps its own (NeMo-RL's ProRL configs).
5) Under ``accelerate`` every rank rolls out its own share of the prompts (whole groups) and
   counts are summed over ranks inside the loss.
6) Two of TRL's choices are options whose defaults are NeMo-RL's numerics: ``update_rows:
   shuffled`` permutes a rollout's rows across prompts before they split into optimizer steps
   (TRL shuffles its generation batch), and ``token_normalizer: rollout_mean`` divides every
   step's token-level loss by the rollout's valid tokens over its steps (TRL's ``dapo`` loss).
   The embedded recipe (``configs/tiny.yaml``) turns both on, with the group baseline
   (docs/algorithms.md#defaults-of-the-embedded-recipe).
"""

from __future__ import annotations

import hashlib

import torch

from rlnb.algorithms.advantage_config import AdvEstimatorConfig
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.estimators import estimator_names, make_advantage_estimator
from rlnb.algorithms.filtering import clip_advantages
from rlnb.algorithms.masked import masked_stats
from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch, StepMetrics, UpdateResult
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.advantage_inputs import filtered_sample_mask, shaped_rewards
from rlnb.engine.trainers.base import ROLLOUT_STAGE, Trainer, expect_batch
from rlnb.engine.trainers.views import (
    CLIP_PANEL,
    COMMON_FIELDS,
    FUNNEL_PANEL,
    KL_PANEL,
    REWARD_PANEL,
    ConfigField,
    Stage,
)


def seeded_order(n: int, key: str) -> torch.Tensor:
    """``[n]``: a random permutation of ``0..n-1`` seeded by the string ``key``."""
    gen = torch.Generator().manual_seed(int.from_bytes(hashlib.sha256(key.encode()).digest()[:8],
                                                       "little") % 2**63)
    return torch.randperm(n, generator=gen)


def shuffled_rows(data: dict[str, torch.Tensor], key: str) -> dict[str, torch.Tensor]:
    """``data``'s ``[B, ...]`` tensors with their rows in one seeded random order (``key``)."""
    B = data["input_ids"].shape[0]
    order = seeded_order(B, key)
    return {k: v[order] if isinstance(v, torch.Tensor) and v.shape[:1] == (B,) else v
            for k, v in data.items()}


class GRPOTrainer(Trainer):
    """Stage-by-stage GRPO on a policy, a task and a generation backend.

    ``GRPOTrainer(rlnb.load_config(None, ["grpo.seed=1"]))``; the loop, validation and state
    are the ``Trainer`` base's.
    """

    loop_section = "grpo"
    # the stepper's buttons (views.py): Rollout -> Advantages -> Update
    stages = (
        ROLLOUT_STAGE,
        Stage("Advantages", "rewards -> per-token advantages (no side effects)",
              "compute_advantages", keeps="advantages", takes=("rollout",),
              needs=(("Rollout", "there is no batch to compute advantages on"),)),
        Stage("Update", "loss and one optimizer step", "update", keeps="result",
              takes=("advantages",),
              needs=(("Advantages", "Update trains on an AdvantageBatch"),)),
    )
    # the dashboard's plots: (title, metric keys)
    panels = (
        REWARD_PANEL, KL_PANEL,
        ("entropy (nats/token)", ("train/approx_entropy",)),
        CLIP_PANEL,
        ("response length (tokens)", ("train/mean_gen_tokens_per_sample",)),
        ("stage timings (s)", (
            "timing/train/generation", "timing/train/policy_and_reference_logprobs",
            "timing/train/advantage_calculation", "timing/train/policy_training")),
        FUNNEL_PANEL,
    )
    # what a run measures on the stages (rlnb.run.training.probes): the sample funnel, the
    # memory peaks of one step beside the plan
    measures = ("funnel", "memory")
    # the config panel's controls: every loop's, then the estimator (a registered one listed)
    config_fields = (
        *COMMON_FIELDS,
        ConfigField("grpo.adv_estimator.name", "estimator", "choice",
                    lambda: tuple(estimator_names("grpo", trainable=True))),
        ConfigField("grpo.normalize_rewards", "÷ group std", "bool"),
        ConfigField("grpo.use_leave_one_out_baseline", "leave-one-out", "bool"),
    )

    # ------------------------------------------------------------------ stage 1: rollout
    # (the Trainer base's: every loop samples the same way)

    # ------------------------------------------------------------------ stage 2: advantages
    def compute_advantages(self, batch: RolloutBatch, adv_estimator: dict | None = None
                           ) -> AdvantageBatch:
        """Stage 2 (no side effects): rewards -> per-token advantages, in NeMo-RL's order.

        ``adv_estimator`` overrides ``grpo.adv_estimator`` for this call (counterfactual replay),
        e.g. ``{"name": "reinforce_plus_plus"}``.
        """
        expect_batch(batch, RolloutBatch, f"{type(self).__name__}.compute_advantages")
        loop, elapsed = self.config.grpo, timer()
        est_cfg = loop.adv_estimator if adv_estimator is None else AdvEstimatorConfig(
            **{**loop.adv_estimator.model_dump(), **adv_estimator})
        rewards, components = shaped_rewards(loop, batch.rewards, batch.reward_components,
                                             batch.truncated, batch.response_lengths)
        loo = loop.use_leave_one_out_baseline  # NeMo-RL's loop flag (choice 4)
        baseline, std = calculate_baseline_and_std_per_prompt(
            batch.prompt_ids, rewards,
            leave_one_out=est_cfg.use_leave_one_out_baseline if loo is None else loo)
        sample_mask, metrics = filtered_sample_mask(loop, batch, rewards)
        mask = batch.token_mask * sample_mask[:, None]  # [B, S]
        estimator = self._estimator(est_cfg)
        advantages = estimator.compute_advantage(
            batch.prompt_ids, rewards, mask,
            repeated_batch={f"reward/{k}": v for k, v in components.items()},
            logprobs_policy=batch.prev_logprobs, logprobs_reference=batch.reference_logprobs,
        )  # [B, S]
        metrics["train/advantages/sum"] = float(advantages.sum())
        if loop.advantage_clip_low is not None or loop.advantage_clip_high is not None:
            advantages = clip_advantages(advantages, loop.advantage_clip_low,
                                         loop.advantage_clip_high)
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
    def _rows_key(self) -> str:
        loop = self.loop_config
        return f"rlnb/update_rows/{loop.seed}/{self.step_count}/{self.dist.rank}"

    def row_order(self, rows: int) -> torch.Tensor:
        """``[rows]``: the order in which the next ``update`` takes this rank's rows of a batch
        into its optimizer steps (``grpo.update_rows``: ``in_order`` 0, 1, ...; ``shuffled``
        one seeded permutation per step), e.g. to recompute its loss by hand."""
        if self.loop_config.update_rows != "shuffled":
            return torch.arange(rows)
        return seeded_order(rows, self._rows_key())

    def update(self, batch: AdvantageBatch, *, dry_run: bool = False,
               loss_fn: ClippedPGLossFn | dict | None = None) -> UpdateResult:
        """Stage 3: the loss and an optimizer step per global batch (none with ``dry_run``).

        ``loss_fn`` (a ClippedPGLossFn or ``loss_fn`` config dict) overrides the trainer's
        for this call, e.g. ``{"ratio_clip_max": 0.28}`` in a dry-run comparison.
        """
        expect_batch(batch, AdvantageBatch, f"{type(self).__name__}.update")
        loop = self.loop_config
        data = batch.train_data()
        if loop.update_rows == "shuffled":  # TRL's split of a generation batch into steps
            data = shuffled_rows(data, self._rows_key())
        metrics = self.policy_pass(data, loss_fn, dry_run,
                                   token_normalizer=loop.token_normalizer)
        t = metrics["timing/train/policy_training"]
        toks = metrics.get("train/global_valid_toks", 0.0)
        metrics["timing/train/valid_tokens_per_sec_per_gpu"] = (
            toks / max(t, 1e-9) / self.dist.world_size)
        if not dry_run:
            self.step_count += 1
            self.total_valid_tokens += int(toks)
            self.refit()
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
    pct_0 = 100 * float((baseline == 0).float().mean())
    pct_1 = 100 * float((baseline == 1).float().mean())
    return {
        **masked_stats("train/advantages", advantages, token_mask),
        "train/baseline_reward/pct_0": pct_0,
        "train/baseline_reward/pct_1": pct_1,
        "train/baseline_reward/pct_mixed": 100 - pct_0 - pct_1,
        "train/num_mask_sample_filtered": float((sample_mask == 0).sum()),
    }
