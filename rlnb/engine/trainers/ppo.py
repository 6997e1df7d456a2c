"""PPO with a value model, one stage per method: rollout -> compute_values -> compute_advantages
-> update (ppo_epochs x: update_critic, then update_policy).

    J(θ) = E_t[ min(ρ_t A_t, clip(ρ_t) A_t) ],   A = GAE(r, V; γ, λ),   L_V = ½·E_t[(V_t - R_t)²]

PPO: https://arxiv.org/abs/1707.06347; GAE: https://arxiv.org/abs/1506.02438; critic warm-up and
decoupled λ: VC-PPO https://arxiv.org/abs/2503.01491, VAPO https://arxiv.org/abs/2504.05118. The
formulas and NeMo-RL's order: docs/algorithms.md#the-ppo-step, #ppo-estimators-gae-and-raw-reward,
#value-loss.

Implementation choices:
1) GRPO's loop plus a critic (``rlnb/engine/models/value.py``): the rollout stage, validation,
   the data stream and the save state are shared (``rollout.py``, ``base.py``); this module adds
   the values, the PPO advantages and the two updates.
2) ``compute_values`` gives the critic's values in the stored layout (V_t = value before token
   t, V_0 = 0); ``compute_advantages(batch, values)`` has no side effects, so a frozen batch can be
   replayed through other λ, γ or estimators. Order as NeMo-RL: reward scaling -> shaping ->
   overlong filtering -> log-prob-error masking -> mask = token_mask·sample_mask -> estimator.
3) ``update`` makes ``ppo.ppo_epochs`` passes over the same batch (same ``prev_logprobs``,
   advantages and returns), each the critic first, then the actor (``ClippedPGLossFn``, with the
   sequence ``rewards`` in its data, so VAPO's positive-example NLL works); the actor is skipped
   while the step count is below ``ppo.policy_training_start_step`` (critic warm-up). Its
   metrics are the last pass's (NeMo-RL's), plus ``critic/explained_var_before_update`` from the
   first pass. ``update_critic`` / ``update_policy`` are single passes a notebook can take (or
   dry-run) on its own; only ``update`` ends a step.
4) The critic is built on first use, from the policy as it is then: ``TrainingRun`` warm-starts
   the policy right after building the trainer, so the critic starts from the warm-started
   weights, as NeMo-RL's starts from the policy's checkpoint.
5) ``raw_reward`` advantages ignore the critic; it still learns the Monte-Carlo return (GAE's
   returns with λ = 1), so its metrics stay meaningful and a switch back to GAE between steps
   finds a trained critic (NeMo-RL's raw-reward estimator returns no returns at all).
6) Under ``accelerate`` every rank whitens the advantages over its own tokens (as Reinforce++
   in GRPO); counts, gradients and metrics are reduced over ranks as for GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from pydantic import Field

from rlnb.algorithms.estimators import make_ppo_advantage_estimator
from rlnb.algorithms.gae import PPOAdvEstimatorConfig, gae_advantages
from rlnb.algorithms.masked import masked_stats
from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.algorithms.value_loss import MseValueLossFn, explained_variance
from rlnb.config import cross_field_rule, parse_config
from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch, StepMetrics, UpdateResult
from rlnb.engine.models.value import ValueModel, value_body
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.advantage_inputs import filtered_sample_mask, shaped_rewards
from rlnb.engine.trainers.base import ROLLOUT_STAGE, Trainer, expect_batch
from rlnb.engine.trainers.loop_config import LoopConfig, registered_estimator
from rlnb.engine.trainers.views import CLIP_PANEL, KL_PANEL, REWARD_PANEL, ConfigField, Stage


class PPOEstimatorConfig(PPOAdvEstimatorConfig):
    """``ppo.adv_estimator``: one of the registered PPO-loop estimators."""

    _registered = registered_estimator("ppo")


class PPOConfig(LoopConfig):
    """``ppo``: the loop (NeMo-RL's ``PPOConfig`` keys; sizes as ``grpo``'s CPU default); the
    keys every loop shares are ``LoopConfig``'s."""

    loop = "ppo"
    section = "ppo"

    skip_reference_policy_logprobs_calculation: bool = Field(
        True, description="No reference model (NeMo-RL's PPO default); needs β = 0.")
    max_num_epochs: int | None = Field(
        None, description="Passes over the data; rlnb's tasks stream rows without epochs, so "
        "only null (no limit) is accepted.")
    val_batch_size: int | None = Field(
        None, ge=1, description="Prompts per validation batch; rlnb validates in one batch, so "
        "null or >= max_val_samples.")
    ppo_epochs: int = Field(4, ge=1, description="Passes (critic, then actor) over each batch.")
    adv_estimator: PPOEstimatorConfig = Field(default_factory=PPOEstimatorConfig)
    policy_training_start_step: int = Field(
        0, ge=0, description="Critic warm-up: only the critic trains before this step.")

    @cross_field_rule
    def _consistent(self) -> PPOConfig:
        if self.max_num_epochs is not None:
            raise ValueError(f"ppo.max_num_epochs={self.max_num_epochs}: rlnb's tasks stream "
                             "rows without epoch boundaries; use ppo.max_num_steps (set it null)")
        if self.val_batch_size is not None and self.val_batch_size < (
                self.max_val_samples or float("inf")):
            raise ValueError(f"ppo.val_batch_size={self.val_batch_size} < ppo.max_val_samples="
                             f"{self.max_val_samples}: rlnb validates in one batch (set it null)")
        start = self.policy_training_start_step
        if start > 0 and start >= self.max_num_steps:
            raise ValueError(f"ppo.policy_training_start_step={start} is beyond ppo.max_num_steps="
                             f"{self.max_num_steps}: the policy would never train")
        return self


@dataclass(repr=False)  # the summary, as AdvantageBatch's
class PPOAdvantageBatch(AdvantageBatch):
    """Stage 3 for PPO: an ``AdvantageBatch`` plus the critic's inputs and targets.

    ``baseline`` is V at each row's first generated token (the critic's value of the prompt,
    PPO's baseline); ``std`` is unused (zeros). ``values`` ``[B, S]`` are the rollout-time values
    (the value loss's clipping centre), ``returns`` ``[B, S]`` its targets.
    """

    values: torch.Tensor | None = None
    returns: torch.Tensor | None = None

    def train_data(self) -> dict[str, torch.Tensor]:
        """The actor's data (NeMo-RL's keys), with ``rewards`` (VAPO's NLL reads it)."""
        return {**super().train_data(), "rewards": self.rewards}

    def critic_data(self) -> dict[str, torch.Tensor]:
        """The critic's data: masks, ``returns`` and the rollout-time ``values``."""
        r = self.rollout
        return {"input_ids": r.input_ids, "attention_mask": r.attention_mask,
                "token_mask": r.token_mask.float(), "sample_mask": self.sample_mask,
                "returns": self.returns, "values": self.values}

    def to_frame(self):
        frame = super().to_frame().drop(columns=["std"]).rename(columns={"baseline": "value"})
        first = self.rollout.token_mask.argmax(dim=1, keepdim=True)  # [B, 1]
        frame["return"] = self.returns.gather(1, first).squeeze(1).tolist()
        return frame

    def summary(self) -> str:
        return super().summary().replace("AdvantageBatch(", "PPOAdvantageBatch(", 1) + (
            f"\n  value of the prompts mean {self.baseline.mean():+.3f}   return mean "
            f"{self.metrics.get('train/returns/mean', float('nan')):+.3f}")


class PPOUpdateResult(UpdateResult):
    """An ``UpdateResult`` whose summary shows the critic's loss and explained variance too."""

    KEYS = ("train/loss", "train/probs_ratio", "train/kl_penalty", "train/grad_norm",
            "train/approx_entropy", "critic/loss", "critic/explained_var")


def values_view(values: torch.Tensor, batch: RolloutBatch):
    """The stepper's view of ``compute_values``: one line and the rollout's table with each
    response's value of the prompt (V at its first token) and mean value."""
    tm = batch.token_mask
    first = tm.argmax(dim=1, keepdim=True)  # [B, 1]: each response's first token
    frame = batch.to_frame()
    frame.insert(0, "value of the prompt", values.gather(1, first).squeeze(1).tolist())
    frame.insert(1, "mean value", ((values * tm).sum(1) / tm.sum(1).clamp(min=1)).tolist())
    text = (f"values [B, S] = {tuple(values.shape)}: V_t = the critic's value before "
            f"token t (V_0 = 0); mean over response tokens "
            f"{float((values * tm).sum() / tm.sum().clamp(min=1)):+.3f}")
    return text, frame


class PPOTrainer(Trainer):
    """Stage-by-stage PPO with a value model: ``PPOTrainer(rlnb.load_config(path))`` with
    ``algorithm: ppo``; the loop, validation and state are the ``Trainer`` base's."""

    loop_section = "ppo"
    # the stepper's buttons (views.py): Rollout -> Values -> Advantages -> Update
    stages = (
        ROLLOUT_STAGE,
        Stage("Values", "the critic's value of every token (no side effects)", "compute_values",
              keeps="values", takes=("rollout",),
              needs=(("Rollout", "there is no batch to compute values on"),), view=values_view),
        Stage("Advantages", "rewards -> per-token advantages (no side effects)",
              "compute_advantages", keeps="advantages", takes=("rollout", "values"),
              needs=(("Rollout", "there is no batch to compute advantages on"),
                     ("Values", "PPO's advantages need the critic's values"))),
        Stage("Update", lambda t: f"{t.loop_config.ppo_epochs} passes of the critic, then the "
              "policy", "update", keeps="result", takes=("advantages",),
              needs=(("Advantages", "Update trains on an AdvantageBatch"),)),
    )
    # the dashboard's plots: the critic's value loss and explained variance take the entropy
    # and length panels' place (the explained variance's fixed axis: rlnb.widgets.panels)
    panels = (
        REWARD_PANEL, KL_PANEL,
        ("value loss (critic)", ("critic/loss",)),
        ("explained variance (critic)", ("critic/explained_var",)),
        CLIP_PANEL,
        ("stage timings (s)", (
            "timing/train/generation", "timing/train/value_inference",
            "timing/train/advantage_calculation", "timing/train/value_training",
            "timing/train/policy_training")),
    )
    # the config panel's controls: both learning rates, GAE's λ, the clip
    config_fields = (
        ConfigField("policy.optimizer.lr", "policy lr", "float"),
        ConfigField("value.optimizer.lr", "critic lr", "float"),
        ConfigField("ppo.adv_estimator.gae_lambda", "GAE λ", "float"),
        ConfigField("loss_fn.ratio_clip_max", "clip ε high", "float"),
    )

    def __init__(self, config, *, policy=None, task=None, accelerator=None, critic=None,
                 **user_data):
        super().__init__(config, policy=policy, task=task, accelerator=accelerator, **user_data)
        value_body(self.policy.model)  # fail now, not at the first step, if there is no body
        self.value_loss_fn = MseValueLossFn(config.value_loss_fn)
        self._critic = critic

    @property
    def critic(self) -> ValueModel:
        """The value model (choice 4: built on first use from the policy as it is then)."""
        if self._critic is None:
            self._critic = ValueModel(self.config.value, self.policy,
                                      seed=self.loop_config.seed, dist=self.dist)
        return self._critic

    def checkpoint_parts(self) -> dict[str, tuple[Any, Any, Any]]:
        """The critic's weights, optimizer and scheduler (saved as ``value/`` in checkpoints)."""
        c = self.critic
        return {"value": (c.model, c.optimizer, c.scheduler)}

    # ------------------------------------------------------------------ stage 1: rollout
    # (the Trainer base's: every loop samples the same way)

    # ------------------------------------------------------------------ stage 2: values
    def compute_values(self, batch: RolloutBatch) -> torch.Tensor:
        """Stage 2: the critic's ``[B, S]`` values, V_t = value before token t, V_0 = 0."""
        expect_batch(batch, RolloutBatch, "PPOTrainer.compute_values")
        return self.critic.values(batch.input_ids, batch.attention_mask)

    # ------------------------------------------------------------------ stage 3: advantages
    def compute_advantages(self, batch: RolloutBatch, values: torch.Tensor,
                           estimator: dict | None = None) -> PPOAdvantageBatch:
        """Stage 3 (no side effects): rewards and values -> advantages and returns ``[B, S]``.

        ``estimator`` overrides ``ppo.adv_estimator`` for this call, e.g. ``{"gae_lambda": 0.5}``
        or ``{"name": "raw_reward"}`` (counterfactual replay on a frozen batch).
        """
        expect_batch(batch, RolloutBatch, "PPOTrainer.compute_advantages")
        loop, elapsed = self.config.ppo, timer()
        est = loop.adv_estimator if estimator is None else parse_config(
            PPOEstimatorConfig, {**loop.adv_estimator.model_dump(), **estimator},
            "ppo.adv_estimator")
        rewards, _ = shaped_rewards(loop, batch.rewards, batch.reward_components,
                                    batch.truncated, batch.response_lengths)
        sample_mask, metrics = filtered_sample_mask(loop, batch, rewards)
        mask = batch.token_mask * sample_mask[:, None]  # [B, S]
        if not mask.any():
            raise ValueError("PPO has no valid response tokens after filtering (check "
                             "ppo.overlong_filtering and ppo.seq_logprob_error_threshold)")
        advantages, returns = make_ppo_advantage_estimator(est, self.loss_fn.config)\
            .compute_advantage(batch.prompt_ids, rewards, mask, values=values,
                               reference_logprobs=batch.reference_logprobs,
                               logprobs=batch.prev_logprobs)  # [B, S] each
        if returns is None:  # choice 5: raw_reward -> the critic learns the Monte-Carlo return
            returns = gae_advantages(rewards, values, mask, gae_gamma=est.gae_gamma,
                                     gae_lambda=1.0, normalize_advantages=False)[1]
        metrics.update(masked_stats("train/advantages", advantages, mask))
        metrics.update(masked_stats("train/returns", returns, mask))
        metrics["timing/train/advantage_calculation"] = elapsed()
        first = batch.token_mask.argmax(dim=1, keepdim=True)  # [B, 1]: first generated token
        return PPOAdvantageBatch(
            batch, est.name, rewards, values.gather(1, first).squeeze(1),
            torch.zeros_like(rewards), advantages.contiguous(), sample_mask, metrics,
            values=values, returns=returns)

    # ------------------------------------------------------------------ stage 4: update
    def update_critic(self, batch: PPOAdvantageBatch, *, dry_run: bool = False
                      ) -> PPOUpdateResult:
        """One pass of the value loss over the batch (an optimizer step per global batch of
        ``value.train_global_batch_size`` rows; none with ``dry_run``). Does not end the step."""
        expect_batch(batch, PPOAdvantageBatch, "PPOTrainer.update_critic")
        elapsed = timer()
        raw = self.critic.optimizer_step(batch.critic_data(), self.value_loss_fn, dry_run=dry_run)
        metrics = {f"critic/{k}": v for k, v in self.dist.sum_loss_metrics(raw).items()}
        metrics["critic/explained_var"] = explained_variance(metrics, prefix="critic/")
        metrics["timing/train/value_training"] = elapsed()
        return PPOUpdateResult(self.step_count, dry_run, metrics)

    def update_policy(self, batch: PPOAdvantageBatch, *, dry_run: bool = False,
                      loss_fn: ClippedPGLossFn | dict | None = None) -> PPOUpdateResult:
        """One pass of the clipped policy loss over the batch (none with ``dry_run``); ``loss_fn``
        overrides the trainer's for this call. Does not end the step."""
        expect_batch(batch, PPOAdvantageBatch, "PPOTrainer.update_policy")
        result = self._policy_pass(batch, dry_run, loss_fn)
        if not dry_run:
            self.refit()
        return result

    def update(self, batch: PPOAdvantageBatch, *, dry_run: bool = False) -> PPOUpdateResult:
        """Stage 4, the step's update: ``ppo.ppo_epochs`` x (critic pass, then actor pass, the
        actor skipped before ``ppo.policy_training_start_step``); then the step ends. A dry run
        makes one pass of each and changes nothing."""
        expect_batch(batch, PPOAdvantageBatch, "PPOTrainer.update")
        loop = self.config.ppo
        train_actor = self.step_count >= loop.policy_training_start_step
        critic_s = actor_s = 0.0
        actor, passes = None, 1 if dry_run else loop.ppo_epochs
        for epoch in range(passes):
            critic = self.update_critic(batch, dry_run=dry_run)
            critic_s += critic.metrics["timing/train/value_training"]
            if epoch == 0:  # the critic has not trained on this batch yet: a held-out EV
                before = critic.metrics["critic/explained_var"]
            if train_actor:
                actor = self._policy_pass(batch, dry_run, None)
                actor_s += actor.metrics["timing/train/policy_training"]
        metrics = {**critic.metrics, "critic/explained_var_before_update": before,
                   "timing/train/value_training": critic_s}
        if actor is not None:
            toks = actor.metrics.get("train/global_valid_toks", 0.0)
            metrics.update(actor.metrics)
            metrics["timing/train/policy_training"] = actor_s
            metrics["timing/train/valid_tokens_per_sec_per_gpu"] = (
                toks * passes / max(actor_s, 1e-9) / self.dist.world_size)
        if not dry_run:
            if actor is not None:
                self.refit()
                self.total_valid_tokens += int(actor.metrics.get("train/global_valid_toks", 0))
            self.step_count += 1
        return PPOUpdateResult(self.step_count, dry_run, metrics)

    def _policy_pass(self, batch, dry_run, loss_fn) -> PPOUpdateResult:
        return PPOUpdateResult(self.step_count, dry_run,
                               self.policy_pass(batch.train_data(), loss_fn, dry_run))

    # ------------------------------------------------------------------ one step
    def step(self) -> StepMetrics:
        """rollout -> compute_values -> compute_advantages -> update; this step's metrics."""
        elapsed = timer()
        rollout = self.rollout()
        t_values = timer()
        values = self.compute_values(rollout)
        rollout.metrics["timing/train/value_inference"] = t_values()
        advantages = self.compute_advantages(rollout, values)
        return self.record_step(rollout, advantages, self.update(advantages), elapsed())
