"""Async GRPO: generation runs ahead of training on weights at most a steps old.

    collector thread:  weights v_t ──generate──► groups (v, t) ──► replay buffer
    trainer:           step c takes P groups meant for c (v ≥ c − a), recomputes
                       log π_θc (prev_logprobs), weights the loss by w = π_θc / π_v, updates

Asynchronous off-policy RLHF: https://arxiv.org/abs/2410.18252; the formulas, the buffer's rules
and the defaults' reasons: docs/algorithms.md#async-grpo.

Implementation choices (why each, and what NeMo-RL does: docs/algorithms.md#async-grpo):
1) The stages stay GRPO's: ``rollout()`` takes step c's groups from the replay buffer (waiting
   for the collector) and computes the current policy's log-probs of them; calling it again
   before ``update`` returns the same batch (a re-run notebook cell).
2) ``prev_logprobs`` are the current policy θ_c's, never the generator's, and the loss weights
   every token by w = π_θc / π_v (``use_importance_sampling_correction``, required); with
   ``force_on_policy_ratio`` (choice 3) the update's own forward gives them.
3) ``force_on_policy_ratio`` (NeMo-RL's placeholder) skips the separate forward: with one
   optimizer step per rollout the numbers are the recompute's up to float rounding.
4) The buffer is saved with every checkpoint; a resumed run keeps the complete targets and
   generates the rest again from the same rows. Resume is not bit-exact (thread timing).
5) ``sampler: windowed`` (NeMo-RL's single-controller sampler): the collector generates the
   stream's batches one after another with the newest weights, as far ahead as the buffer's
   room (``max_buffered_rollouts``) allows, and step c takes any P groups made by weights
   c − a … c, evicting older ones (their prompts are never trained on). A resumed run keeps
   the groups a later step may still take and goes on after the last batch generated.
6) ``lockstep`` (rlnb only, for studies of staleness): no collector thread; ``rollout()``
   generates, with this step's weights, the targets they may still fill, then takes step c's,
   so after the first a steps every group is exactly a steps old and a seed repeats bit for
   bit. It admits ``use_importance_sampling_correction=false`` (the uncorrected control).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import torch

from rlnb.algorithms.replay_buffer import AsyncGRPOConfig  # noqa: F401 - NeMo-RL's name, here too
from rlnb.engine.agents.rollouts import agent_metrics
from rlnb.engine.data.batch_join import concat_rollouts, rollout_from_dict
from rlnb.engine.data.batches import RolloutBatch, StepMetrics
from rlnb.engine.models.copy_backend import HFCopyGenerationBackend
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.collector import TrajectoryCollector, new_buffer
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.engine.trainers.rollout import add_logprobs, outcome_metrics
from rlnb.engine.trainers.views import CLIP_PANEL, REWARD_PANEL

BUFFER_FILE = "replay_buffer"  # the checkpoint's replay_buffer.pt


def collector_backend(trainer):
    """The collector's generator: a private copy for the HF backend, vLLM's own engine."""
    generator, p = trainer.generator, trainer.config.policy
    if generator.shares_policy_weights:
        return HFCopyGenerationBackend(trainer.policy.model, trainer.policy.tokenizer,
                                       p.generation, trainer.max_prompt_length)
    if generator.can_refit:
        return generator
    raise ValueError(
        f"grpo.async_grpo.enabled=true needs a generation backend that can load new weights "
        f"while the policy trains; policy.generation.backend={p.generation.backend!r} "
        f"({type(generator).__name__}) cannot refit")


class AsyncGRPOTrainer(GRPOTrainer):
    """GRPO with a trajectory collector running ahead of training (see the module docstring).

    ``AsyncGRPOTrainer(rlnb.load_config("configs/async_tiny.yaml"))``; ``make_trainer`` picks
    it when ``grpo.async_grpo.enabled``. ``close()`` (or the end of ``train``) stops the
    collector.
    """

    # GRPO's stages; the dashboard's plots: the buffer, the groups' ages, the importance
    # weights' spread and who waits for whom
    panels = (
        REWARD_PANEL,
        ("replay buffer (groups after sampling)", ("train/buffer_size",)),
        ("trajectory age (steps)", ("train/avg_trajectory_age", "async/max_trajectory_age")),
        ("importance weights (the loss's)", ("train/sampling_importance_ratio",
                                             "train/token_mult_prob_error")),
        CLIP_PANEL,
        ("waiting (s)", ("timing/train/wait_for_trajectories",
                         "timing/async/collector_wait_for_weights")),
    )
    # the funnel of each step; no memory check (the plan covers the synchronous loop)
    measures = ("funnel",)

    def __init__(self, config, **kwargs):
        super().__init__(config, **kwargs)
        if not self.config.grpo.async_grpo.enabled:
            raise ValueError("AsyncGRPOTrainer needs grpo.async_grpo.enabled=true (the "
                             "synchronous loop is GRPOTrainer)")
        gen = collector_backend(self)
        loop = self.config.grpo
        self.buffer = new_buffer(loop)
        local_prompts = len(self.dist.shard(list(range(loop.num_prompts_per_step))))
        self.collector = TrajectoryCollector(
            loop, self.rollout_inputs(tokenizer=gen.tokenizer), self.prompt_rows_at,
            local_prompts, gen, self.policy.model, self.buffer, version=self.step_count)
        self._taken: tuple[int, RolloutBatch] | None = None  # choice 1: a re-run cell
        self._main_threads: int | None = None

    # ------------------------------------------------------------------ the collector
    def start_collector(self) -> None:
        """Start the collector on the policy's current weights (a no-op if it runs)."""
        c = self.collector
        if c.running:
            return
        with c.cond:
            c.latest = self.step_count
        c.refit()  # the policy may have changed since (a warm start, a resume, steps by hand)
        with c.cond:
            c.refits = 0  # this start-up sync is not a step's refit
        collector_threads, trainer_threads = self.config.grpo.async_grpo.threads()
        self._main_threads = torch.get_num_threads()
        torch.set_num_threads(trainer_threads)
        c.start()

    def close(self) -> None:
        """Stop the collector (its unfinished generation is dropped, the buffer is kept)."""
        self.collector.stop()
        if self._main_threads is not None:
            torch.set_num_threads(self._main_threads)
            self._main_threads = None

    def refit(self) -> None:
        """The collector refits to this step's weights before its next generation."""
        self.collector.request_refit(self.step_count)

    # ------------------------------------------------------------------ stage 1: rollout
    def rollout(self, rows: list[dict[str, Any]] | None = None) -> RolloutBatch:
        """Stage 1: step c's P groups from the replay buffer, with the current policy's
        log-probs and the async metrics
        (docs/metrics.md#async-grpo-loop-metrics-emitted-by-asyncgrpotrainer)."""
        if rows is not None:
            raise ValueError("AsyncGRPOTrainer.rollout() takes step c's groups from the replay "
                             "buffer and no rows (GRPOTrainer.rollout(rows) samples given rows)")
        if self._taken is not None and self._taken[0] == self.step_count:
            return self._taken[1]
        elapsed, c = timer(), self.step_count
        if self.config.grpo.async_grpo.lockstep:  # choice 6: generated here, in order
            self.collector.generate_due(c)
        else:
            self.start_collector()
        groups, versions, evicted, waited = self.collector.take(c)
        counters = self.collector.pop_counters()
        pad = self.policy.tokenizer.pad_token_id
        batch = concat_rollouts(groups, torch.arange(sum(len(g) for g in groups)), pad)
        batch.group = torch.arange(len(groups)).repeat_interleave(
            torch.tensor([len(g) for g in groups]))
        batch.step, batch.weight_version = c, min(versions)
        batch.metrics = merge_group_metrics([g.metrics for g in groups])
        if self._loss_computes_prev_logprobs():  # choice 3: the update's forward gives them
            batch.prev_logprobs = torch.zeros_like(batch.generation_logprobs)  # placeholder
            if self.need_reference:
                batch.reference_logprobs = self.policy.logprobs(
                    batch.input_ids, batch.attention_mask, reference=True) * batch.token_mask
        else:
            add_logprobs(self.policy, batch, reuse=False, reference=self.need_reference)
        ages = [c - v for v in versions]
        batch.metrics.update({
            **outcome_metrics(self.dist, batch, correct=self.task.defines_correct),
            **importance_weight_metrics(batch, placeholder=self._loss_computes_prev_logprobs()),
            "train/buffer_size": float(counters["buffer_size"]),
            "train/avg_trajectory_age": sum(ages) / len(ages),
            "async/max_trajectory_age": float(max(ages)),
            "async/evicted": float(evicted),
            "async/groups_generated": float(counters["groups_generated"]),
            "async/generation_failures": float(counters["generation_failures"]),
            "async/refits": float(counters["refits"]),
            "timing/train/wait_for_trajectories": waited,
            "timing/async/collector_wait_for_weights": counters["seconds_waiting_for_weights"],
            "timing/train/rollout": elapsed(),
        })
        if "train/agent/generation_calls" in batch.metrics:  # an agent task's, every rank's
            batch.metrics.update(agent_metrics(self.dist, batch.metrics))
        self.consumed_prompts = (c + 1) * self.config.grpo.num_prompts_per_step
        self._taken = (c, batch)
        return batch

    def _loss_computes_prev_logprobs(self) -> bool:
        """NeMo-RL's placeholder rule: with ``force_on_policy_ratio`` (and no log-prob-error
        masking, which reads them) the loss takes sg(log π_θ) of its own forward as
        ``prev_logprobs``, so none are computed here."""
        return (self.loss_fn.config.force_on_policy_ratio
                and self.config.grpo.seq_logprob_error_threshold is None)

    # ------------------------------------------------------------------ stage 3: update
    def update(self, batch, *, dry_run: bool = False, loss_fn=None):
        """GRPO's update; the collector copies no weights while the optimizer changes them."""
        with self.collector.weights_lock:
            return super().update(batch, dry_run=dry_run, loss_fn=loss_fn)

    # ------------------------------------------------------------------ validation
    @torch.no_grad()
    def validate(self, num_prompts: int | None = None) -> dict[str, float]:
        """Held-out accuracy of the current policy; the collector waits meanwhile (so the
        two do not interleave their draws from torch's global generator, and validation gives
        the same numbers for the same weights). When the collector samples with the trainer's
        own engine (vLLM), the engine gets the current weights first."""
        c = self.collector
        if c.generator is not self.generator:  # HF: validation samples with the policy itself
            with c.generation_lock:
                return super().validate(num_prompts)
        with c.generation_lock:
            with c.weights_lock:
                self.generator.refit(self.policy.model)
            with c.cond:  # the engine's weights are now this step's
                c.version = c.latest = self.step_count
            return super().validate(num_prompts)

    # ------------------------------------------------------------------ the loop
    def train(self, num_steps: int | None = None, *, progress: bool = False
              ) -> Iterator[StepMetrics]:
        """The synchronous loop's ``train``, with the collector running until it ends
        (normally, by an exception, by Ctrl-C or by the consumer closing it: a Stop)."""
        try:
            yield from super().train(num_steps, progress=progress)
        finally:
            self.close()

    # ------------------------------------------------------------------ state
    def load_state(self, state: dict[str, Any]) -> None:
        super().load_state(state)
        self._taken = None

    def checkpoint_files(self) -> dict[str, Any]:
        """``replay_buffer.pt``: the buffer's groups, their versions and the watermark."""
        return {BUFFER_FILE: self.collector.snapshot()}

    def load_checkpoint_files(self, files: dict[str, Any]) -> None:
        """Restore the buffer for resuming at ``step_count`` (choice 4): entries too old for
        their target, targets already trained and incomplete targets are dropped."""
        state = dict(files[BUFFER_FILE])
        state["groups"] = [rollout_from_dict(g) for g in state["groups"]]
        windowed = self.config.grpo.async_grpo.sampler == "windowed"
        with self.collector.cond:
            self.buffer.restore(
                state, resume_step=self.step_count,
                num_prompts_per_step=self.collector.local_prompts,
                max_age_steps=self.config.grpo.async_grpo.max_trajectory_age_steps,
                drop_incomplete_targets=True, window=windowed)
            # windowed: generation goes on after the last batch it finished
            self.collector.next_batch = max(self.step_count, state.get("next_batch", 0))


def merge_group_metrics(per_group: list[dict[str, float]]) -> dict[str, float]:
    """One batch's metrics from its groups' (each G rows): means of means (equal group sizes),
    ``*max*`` keys the max, token totals the sum, timings the mean (one generation call made
    every group of a target)."""
    out: dict[str, float] = {}
    for key in per_group[0]:
        values = [m[key] for m in per_group if key in m]
        if "max_" in key:
            out[key] = max(values)
        elif key == "train/total_num_tokens":
            out[key] = sum(values)
        else:
            out[key] = sum(values) / len(values)
    return out


@torch.no_grad()
def importance_weight_metrics(batch: RolloutBatch, placeholder: bool = False
                              ) -> dict[str, float]:
    """Mean, std, min and max over generated tokens of the raw importance weights
    w = exp(prev_logprobs − generation_logprobs), before the loss truncates them (NaN when
    ``prev_logprobs`` is a placeholder the loss replaces: see its ``sampling_importance_ratio``
    and ``token_mult_prob_error``)."""
    mask = batch.token_mask > 0
    w = torch.exp(batch.prev_logprobs - batch.generation_logprobs)[mask].double()
    if w.numel() == 0 or placeholder:
        return {f"async/importance_weight/{k}": math.nan for k in ("mean", "std", "min", "max")}
    return {
        "async/importance_weight/mean": float(w.mean()),
        "async/importance_weight/std": float(w.std(unbiased=False)),
        "async/importance_weight/min": float(w.min()),
        "async/importance_weight/max": float(w.max()),
    }
