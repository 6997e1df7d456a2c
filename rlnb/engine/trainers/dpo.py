"""DPO, one stage per method: pairs -> reference_logprobs -> compute_loss -> update.

    L_DPO = -E_(x, y_c, y_r) log σ(β·(ρ(y_c) - ρ(y_r))),   ρ(y) = log π(y|x) - log π_ref(y|x)

DPO: https://arxiv.org/abs/2305.18290; on-policy pairs from a reward (online / iterative DPO):
https://arxiv.org/abs/2312.11456, https://arxiv.org/abs/2404.14367. The loss, its data layout and
NeMo-RL's order of operations: docs/algorithms.md#the-dpo-loop.

Implementation choices:
1) Each stage is a method a notebook cell can call and returns a plain object
   (``PreferenceBatch``, ``PreferenceScores``, ``DPOUpdateResult``); ``compute_loss`` and
   ``update(dry_run=True)`` change nothing, so one frozen batch can be replayed with another β.
2) Pairs come from ``dpo.pairs.source``: ``on_policy`` samples G responses per prompt from the
   current policy every step and pairs them by the task's reward; ``warm_start`` does the same
   once, on ``pool_prompts`` prompts, when training starts (after the warm start), and cycles
   through that pool; ``dataset`` reads prompt/chosen/rejected rows. A pool or a dataset is read
   in a reshuffled order each pass; the position is the save state, and a sampled pool is saved
   with each checkpoint (``preference_pool.pt``), so a resumed run trains on the same pairs.
3) The reference is the policy's frozen copy, synced by the warm start: the warm-started policy,
   as NeMo-RL's DPO starts from its initial checkpoint. A policy built without one gets a copy
   here; a policy that cannot be copied is refused.
4) ``update`` is one ``Policy.optimizer_step`` over the rows with ``DPOLossFn``, the reference
   log-probs handed over rolled left by one (NeMo-RL's layout; ``PreferenceBatch.train_data``).
   Pairs stay whole in every micro-batch (even batch sizes, ``dpo_config.py``), and a pair slot
   without a pair has sample mask 0, so every rank trains on as many rows.
5) Validation is held-out accuracy on the task (``Trainer.validate``), as for GRPO and PPO, so
   the loops' curves compare.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from rlnb.algorithms.preference import DPOLossFn
from rlnb.engine.data.batches import StepMetrics
from rlnb.engine.data.preference_batch import DPOUpdateResult, PreferenceBatch, PreferenceScores
from rlnb.engine.data.preference_data import (
    TokenPair,
    collate_pairs,
    digest,
    load_pair_rows,
    sampled_pairs,
    tokenize_pairs,
)
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.advantage_inputs import groups_with_signal
from rlnb.engine.trainers.base import Trainer, expect_batch
from rlnb.engine.trainers.dpo_config import DPOConfig
from rlnb.engine.trainers.dpo_scores import score_pairs
from rlnb.engine.trainers.rollout import reward_metrics, sample_and_score
from rlnb.engine.trainers.validation import isolated_rng
from rlnb.engine.trainers.views import REWARD_PANEL, ConfigField, Stage

__all__ = ["DPOConfig", "DPOTrainer"]
POOL_FILE = "preference_pool"  # the sampled pool in a checkpoint (choice 2)


def reference_view(batch: PreferenceBatch, *_):
    """The stepper's view of ``reference_logprobs``: the pairs' table with log π_ref summed
    over each chosen and rejected response."""
    per_row = (batch.reference_logprobs * batch.token_mask).sum(1)  # [B]
    frame = batch.to_frame()
    frame["ref logprob chosen"] = per_row[0::2].tolist()
    frame["ref logprob rejected"] = per_row[1::2].tolist()
    return (f"log π_ref [B, S] = {tuple(batch.reference_logprobs.shape)}: summed over each "
            "response", frame)


class DPOTrainer(Trainer):
    """Stage-by-stage DPO: ``DPOTrainer(rlnb.load_config("configs/dpo_tiny.yaml"))``; the loop,
    validation and state are the ``Trainer`` base's.

    Args:
        pairs: with ``dpo.pairs.source: dataset``, the rows (a list of dicts, a
            ``datasets.Dataset``, a DataFrame or a file) instead of ``dpo.pairs.dataset``.
    """

    loop_section = "dpo"
    # the stepper's buttons (views.py): Pairs -> Reference -> Loss -> Update; the pairs are kept
    # as the step's rollout (the reference adds its log-probs to them), their scores as its
    # advantages
    stages = (
        Stage("Pairs", "this step's chosen/rejected pairs (sampled and scored, or read)", "pairs",
              keeps="rollout"),
        Stage("Reference", "the reference policy's log-probs of the pairs",
              "reference_logprobs", keeps="rollout", takes=("rollout",),
              needs=(("Pairs", "there are no pairs to score"),), view=reference_view),
        Stage("Loss", "implicit rewards, margins and the loss now (no side effects)",
              "compute_loss", keeps="advantages", takes=("rollout",),
              needs=(("Reference", "the loss compares the policy with the reference's "
                      "log-probs"),)),
        Stage("Update", "the DPO loss and an optimizer step", "update", keeps="result",
              takes=("rollout",), needs=(("Loss", "Update trains on the scored pairs"),)),
    )
    # the dashboard's plots: the pairs' loss, implicit rewards and log-probs, preference
    # accuracy, KL to the reference (the reward: the sampled answers' and held-out accuracy)
    panels = (
        REWARD_PANEL,
        ("preference loss", ("train/preference_loss",)),
        ("implicit reward (without β)", ("train/rewards_chosen_mean",
                                         "train/rewards_rejected_mean", "train/reward_margin")),
        ("log-prob of the pairs (nats/response)", ("train/logprobs_chosen",
                                                   "train/logprobs_rejected")),
        ("preference accuracy", ("train/accuracy",)),
        ("KL to the reference (nats/token)", ("train/kl_to_reference",)),
    )
    # the config panel's controls: the learning rate, DPO's β and the two losses' weights
    config_fields = (
        ConfigField("policy.optimizer.lr", "learning rate", "float"),
        ConfigField("dpo.reference_policy_kl_penalty", "β", "float"),
        ConfigField("dpo.preference_loss_weight", "preference weight", "float"),
        ConfigField("dpo.sft_loss_weight", "SFT weight", "float"),
    )

    def __init__(self, config, *, policy=None, task=None, accelerator=None, pairs=None):
        super().__init__(config, policy=policy, task=task, accelerator=accelerator)
        loop, world = self.loop_config, self.dist.world_size
        self.loss_fn = DPOLossFn(loop.loss_config)
        gbs = config.policy.train_global_batch_size
        if (gbs // world) % 2:
            raise ValueError(f"policy.train_global_batch_size={gbs} over {world} processes gives "
                             f"{gbs // world} rows per process: make it an even number (pairs "
                             "stay whole)")
        for key, n in (("num_prompts_per_step", loop.num_prompts_per_step),
                       ("pairs.pool_prompts", loop.pairs.pool_prompts)):
            if n % world:
                raise ValueError(f"dpo.{key}={n} must be divisible by the number of processes "
                                 f"({world})")
        if self.policy.reference_model is None:  # choice 3: a policy built elsewhere
            try:
                self.policy.reference_model = self.policy.make_reference()
            except Exception as err:  # a user's model object that deepcopy cannot copy
                raise ValueError(f"DPO cannot build its reference policy (a frozen copy of the "
                                 f"policy's model): {type(err).__name__}: {err}") from None
        source = loop.pairs.source
        if pairs is not None and source != "dataset":
            raise ValueError(f"pairs= is read with dpo.pairs.source=dataset only, not "
                             f"{source!r}")
        self._offline: list[TokenPair] | None = None  # the pool or the dataset's pairs
        self._order: list[int] = []  # the offline pairs' reading order, pass after pass
        self._pairs_digest = None
        if source == "dataset":
            given = pairs if pairs is not None else loop.pairs.dataset
            where = "pairs" if pairs is not None else "dpo.pairs.dataset"
            if given is None:
                raise ValueError("dpo.pairs.source=dataset needs pairs: set dpo.pairs.dataset (a "
                                 ".jsonl/.json/.parquet file of prompt/chosen/rejected rows) or "
                                 "pass DPOTrainer(config, pairs=rows)")
            rows = load_pair_rows(given, where)
            self._offline = tokenize_pairs(rows, self.policy.tokenizer, where=where,
                                           max_length=config.policy.max_total_sequence_length)
            self._pairs_digest = digest(rows)

    # ------------------------------------------------------------------ stage 1: pairs
    def generate_batch(self, rows: list[dict[str, Any]], generations: int):
        """``generations`` responses per row, scored (DPO needs no π_old log-probs of them)."""
        return sample_and_score(self.rollout_inputs(), self.generator, rows, generations,
                                self.step_count)

    def pairs(self, rows: list[dict[str, Any]] | None = None) -> PreferenceBatch:
        """Stage 1: this step's pairs (choice 2). ``on_policy``: P prompts (``rows``, or the
        next ones of the task) x G samples -> ``pairs_per_prompt`` pairs each; otherwise the
        next P pairs of the pool or the dataset."""
        loop, elapsed = self.loop_config, timer()
        if loop.pairs.source == "on_policy":
            rows = rows if rows is not None else self.next_prompt_rows()
            samples = self.generate_batch(rows, loop.num_generations_per_prompt)
            found, kept = sampled_pairs(samples, loop.pairs.pairs_per_prompt)
            batch = self._collate(found, kept, samples)
            with_signal, groups = groups_with_signal(samples.group, samples.rewards)
            batch.metrics.update({
                **samples.metrics, **reward_metrics(self.dist, samples.rewards),
                **self.dist.mean_dict({"train/groups_with_signal": with_signal / groups})})
        else:
            if rows is not None:
                raise ValueError(f"pairs(rows=...) samples pairs from the task's rows: it needs "
                                 f"dpo.pairs.source=on_policy, not {loop.pairs.source!r}")
            found = self.offline_rows(self.consumed_prompts, loop.num_prompts_per_step)
            self.consumed_prompts += loop.num_prompts_per_step
            batch = self._collate(found, torch.ones(len(found), dtype=torch.bool))
        batch.metrics["timing/train/pairs"] = elapsed()
        return batch

    def _collate(self, found, kept, samples=None) -> PreferenceBatch:
        return collate_pairs(found, kept, self.policy.tokenizer.pad_token_id,
                             step=self.step_count, source=self.loop_config.pairs.source,
                             samples=samples)

    @property
    def offline_pairs(self) -> list[TokenPair]:
        """The pairs a ``warm_start`` or ``dataset`` source reads (the pool is sampled on first
        use, from the policy as it is then: choice 2)."""
        if self._offline is None:
            self._offline = self.sample_pool()
        return self._offline

    def offline_rows(self, start: int, n: int) -> list[TokenPair]:
        """Pairs ``start .. start + n`` of the offline stream (a fresh shuffle every pass),
        this rank's share (the data position does not move)."""
        pool, seed = self.offline_pairs, self.loop_config.seed
        while len(self._order) < start + n:  # the same order in every process
            order = list(range(len(pool)))
            random.Random(f"rlnb/dpo/order/{seed}/{len(self._order) // len(pool)}").shuffle(order)
            self._order += order
        return self.dist.shard([pool[i] for i in self._order[start : start + n]])

    def sample_pool(self) -> list[TokenPair]:
        """``warm_start``: pairs from G samples on each of ``pool_prompts`` task prompts, drawn
        from the policy now on a random state of their own; every rank samples its share and
        all ranks hold the whole pool."""
        loop = self.loop_config
        rows = self.dist.shard(self.task.train_rows(loop.pairs.pool_prompts, loop.seed))
        chunk, local = loop.num_prompts_per_step, []
        with isolated_rng(loop.seed * 1_000_003 + 31 + self.dist.rank, self.policy.device):
            for i in range(0, len(rows), chunk):
                samples = self.generate_batch(rows[i : i + chunk],
                                              loop.num_generations_per_prompt)
                found, kept = sampled_pairs(samples, loop.pairs.pairs_per_prompt)
                local += [p for p, ok in zip(found, kept.tolist()) if ok]
        pool = [p for part in self.dist.gather_object(local) for p in part]
        if not pool:
            raise ValueError(
                f"dpo.pairs.source=warm_start: no pair in {loop.pairs.pool_prompts} prompts x "
                f"{loop.num_generations_per_prompt} samples (every prompt's responses got the "
                "same reward): the policy is always right or always wrong on this task")
        return pool

    # ------------------------------------------------------------------ stage 2: reference
    def reference_logprobs(self, batch: PreferenceBatch) -> PreferenceBatch:
        """Stage 2: log π_ref of every response token, ``[B, S]``, into ``batch`` (NeMo-RL's
        ``add_ref_logprobs_to_data``); returns it."""
        expect_batch(batch, PreferenceBatch, "DPOTrainer.reference_logprobs")
        elapsed = timer()
        batch.reference_logprobs = self.policy.logprobs(
            batch.input_ids, batch.attention_mask, reference=True) * batch.token_mask
        batch.metrics["timing/train/reference_logprobs"] = elapsed()
        return batch

    # ------------------------------------------------------------------ stage 3: loss
    def compute_loss(self, batch: PreferenceBatch, loss_fn: dict | None = None
                     ) -> PreferenceScores:
        """Stage 3 (no side effects): the policy's log-probs of the pairs, implicit rewards,
        margins, per-pair losses and the exact KL to the reference (``dpo_scores.py``);
        ``loss_fn`` overrides ``dpo`` loss keys for this call, e.g.
        ``{"reference_policy_kl_penalty": 0.5}``."""
        expect_batch(batch, PreferenceBatch, "DPOTrainer.compute_loss")
        elapsed = timer()
        scores = score_pairs(self.policy, batch, self._loss_config(loss_fn), self.dist)
        scores.metrics["timing/train/compute_loss"] = elapsed()
        return scores

    def _loss_config(self, override: dict | None):
        cfg = self.loop_config.loss_config
        if override is None:
            return cfg
        return type(cfg)(**{**cfg.model_dump(), **override})

    # ------------------------------------------------------------------ stage 4: update
    def update(self, batch: PreferenceBatch, *, dry_run: bool = False,
               loss_fn: DPOLossFn | dict | None = None) -> DPOUpdateResult:
        """Stage 4: the DPO loss and an optimizer step per global batch of rows (none with
        ``dry_run``); ``loss_fn`` (a ``DPOLossFn`` or a dict of ``dpo`` loss keys) overrides
        the trainer's for this call."""
        expect_batch(batch, PreferenceBatch, f"{type(self).__name__}.update")
        if isinstance(loss_fn, dict):
            loss_fn = DPOLossFn(self._loss_config(loss_fn))
        metrics = self.policy_pass(batch.train_data(), loss_fn, dry_run)
        if not dry_run:
            self.step_count += 1
            self.total_valid_tokens += int(metrics.get("train/global_valid_toks", 0))
            self.refit()
        return DPOUpdateResult(self.step_count, dry_run, metrics)

    # ------------------------------------------------------------------ one step
    def step(self) -> StepMetrics:
        """pairs -> reference_logprobs -> compute_loss -> update; this step's metrics (the
        ``StepMetrics`` carry the PreferenceBatch as ``rollout``, the scores as
        ``advantages``)."""
        elapsed = timer()
        batch = self.reference_logprobs(self.pairs())
        scores = self.compute_loss(batch)
        return self.record_step(batch, scores, self.update(batch), elapsed())

    # ------------------------------------------------------------------ hyperparameters, state
    def reconfigure(self, overrides, *, dry_run: bool = False):
        changed = super().reconfigure(overrides, dry_run=dry_run)
        if not dry_run:
            self.loss_fn = DPOLossFn(self.loop_config.loss_config)
        return changed

    def state(self) -> dict[str, Any]:
        """GRPO's save state (``consumed_samples`` counts pairs) plus NeMo-RL's DPOSaveState
        fields ``epoch`` and ``step`` (passes over a pool or a dataset, steps into this pass)."""
        loop, state = self.loop_config, super().state()
        per_prompt = loop.pairs.pairs_per_prompt if loop.pairs.source == "on_policy" else 1
        epoch, step = 0, self.step_count
        if self._offline:
            epoch = self.consumed_prompts // len(self._offline)
            step = (self.consumed_prompts % len(self._offline)) // loop.num_prompts_per_step
        state.update(consumed_samples=self.consumed_prompts * per_prompt, current_epoch=epoch,
                     epoch=epoch, step=step)
        if self._pairs_digest is not None:
            state["data_position"]["pairs_digest"] = self._pairs_digest
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        saved = state["data_position"].get("pairs_digest")
        if saved is not None and saved != self._pairs_digest:
            raise ValueError(f"the preference pairs differ from the run's (digest {saved}, now "
                             f"{self._pairs_digest}): resume with the dataset it trained on")
        super().load_state(state)

    def checkpoint_files(self) -> dict[str, Any]:
        """``preference_pool.pt``: a ``warm_start`` pool (None while not yet sampled)."""
        if self.loop_config.pairs.source != "warm_start":
            return {}
        pool = None if self._offline is None else [p.to_dict() for p in self._offline]
        return {POOL_FILE: pool}

    def load_checkpoint_files(self, files: dict[str, Any]) -> None:
        pool = files.get(POOL_FILE)
        if pool is not None:
            self._offline = [TokenPair(**p) for p in pool]
            self._order = []
