"""The async loop's trajectory collector: a thread that samples ahead of training on stale weights.

    collector (thread)                         trainer (caller's thread)
    weights v ── next_target(v) = t ──┐        step c: take P groups meant for c (or wait)
    rows of step t ── generate, score ┤          log-probs with the current policy
    P groups (v, t) ──► replay buffer ┘ ◄──────  advantages, update ── request_refit(c+1)
    no target left for v: wait for weights v' > v, refit, go on

Weights v fill targets v … v + a (a = ``max_trajectory_age_steps``), so generation runs at most
a steps ahead and a trajectory trained on is at most a steps old (docs/algorithms.md#async-grpo,
with why rlnb lets v fill target v itself where NeMo-RL does so only for the first weights).

Implementation choices (the details: docs/algorithms.md#the-collector-thread):
1) A thread, not a process: torch releases the GIL in its kernels and the weights move by a
   copy. Each side sets its own torch thread count, so on 2 cores each takes one.
2) One whole target per generation call: target t's prompts are the rows the synchronous loop
   trains on at step t, so a target lost in flight is generated again from the same rows.
3) ``weights_lock``: the collector never copies half an optimizer step; it refits only between
   generation calls.
4) Stopping is an event that also ends a generation in progress; an error on the collector's
   side is raised in the trainer's thread (after ``max_generation_failures`` retries).
5) No room in the buffer: back off (10 ms, x1.5 each time, NeMo-RL's schedule).
6) ``lockstep``: no thread; the trainer calls ``generate_due(c)`` before taking step c's groups,
   which refits to weights c and generates the targets they may still fill (0 … a at step 0,
   then c + a): every trajectory after the first a steps is exactly a steps old, the order of
   the random draws is fixed, and a seed repeats bit for bit (a study of staleness).
"""

from __future__ import annotations

import collections
import os
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any, Literal

import torch
from pydantic import Field

from rlnb.algorithms.replay_buffer import AsyncGRPOConfig, ReplayBuffer, replay_buffer_capacity
from rlnb.config import cross_field_rule
from rlnb.engine.data.batch_join import concat_rollouts, rollout_to_dict
from rlnb.engine.data.batches import RolloutBatch
from rlnb.engine.trainers.rollout import RolloutInputs, sample_and_score, shape_metrics


class AsyncLoopConfig(AsyncGRPOConfig):
    """``grpo.async_grpo``: NeMo-RL's ``AsyncGRPOConfig`` keys plus the threads of each side."""

    max_trajectory_age_steps: int = Field(
        1, description="a: a trajectory trained on is at most this many steps old, and the "
        "collector runs at most this many steps ahead (>= 1; the synchronous loop is "
        "enabled=false).")
    sampler: Literal["in_order", "windowed"] = Field(
        "in_order", description="How a step picks its groups (NeMo-RL's single-controller "
        "names): in_order, the P groups generated for it (generation at most a steps ahead); "
        "windowed, any P groups made by weights at most a steps old, with generation running "
        "ahead as far as max_buffered_rollouts allows and older groups evicted.")
    max_buffered_rollouts: int | None = Field(
        None, ge=1, description="windowed: the buffer's capacity in prompt groups, how far "
        "generation may run ahead (None: P × a × 2, the in-order buffer's).")
    sample_freshest_first: bool = Field(
        False, description="windowed: take the groups of the newest weights first (else in "
        "the order they were generated).")
    lockstep: bool = Field(
        False, description="Generate in the trainer's thread, at each step, what the current "
        "weights may fill (in_order): after the first a steps every trajectory is exactly a "
        "steps old, and a run repeats bit for bit. For studies of staleness, not speed (rlnb "
        "only); it also admits loss_fn.use_importance_sampling_correction=false, the "
        "uncorrected control.")
    collector_threads: int | None = Field(
        None, ge=1, description="torch threads of the collector (None: half the cores).")
    trainer_threads: int | None = Field(
        None, ge=1, description="torch threads of the trainer while the collector runs (None: "
        "the other half).")

    @cross_field_rule
    def _supported(self) -> AsyncLoopConfig:
        changed = [k for k, f in type(self).model_fields.items()
                   if k != "enabled" and getattr(self, k) != f.default]
        if not self.enabled and changed:
            raise ValueError("grpo.async_grpo.* settings need grpo.async_grpo.enabled=true (they "
                             "would be ignored)")
        if self.max_trajectory_age_steps < 1:
            raise ValueError(
                f"max_trajectory_age_steps={self.max_trajectory_age_steps}: must be >= 1 (0 "
                "would be the synchronous loop: set grpo.async_grpo.enabled=false)")
        if self.sampler != "windowed":
            for key in ("max_buffered_rollouts", "sample_freshest_first"):
                if getattr(self, key) != type(self).model_fields[key].default:
                    raise ValueError(f"{key} is read by sampler=windowed only (it would be "
                                     "ignored)")
        if self.lockstep:  # no thread, no retries, one target after another
            for key in ("sampler", "collector_threads", "trainer_threads",
                        "max_generation_failures"):
                if getattr(self, key) != type(self).model_fields[key].default:
                    raise ValueError(f"{key}={getattr(self, key)!r} with lockstep=true: lockstep "
                                     "generates in order in the trainer's thread (set one of "
                                     "them back)")
        for key in ("in_flight_weight_updates", "recompute_kv_cache_after_weight_updates"):
            if getattr(self, key):
                raise ValueError(
                    f"{key}=true is not supported: rlnb's collector loads new weights only "
                    "between two generation calls, never into a generation in progress")
        return self

    def threads(self) -> tuple[int, int]:
        """``(collector, trainer)`` torch thread counts."""
        cores = os.cpu_count() or 1
        collector = self.collector_threads or max(1, cores // 2)
        trainer = self.trainer_threads or max(1, cores - collector)
        return collector, trainer


class CollectorStopped(RuntimeError):
    """The collector was stopped while the trainer waited for its data."""


class TrajectoryCollector:
    """Fills a ``ReplayBuffer`` from a background thread (see the module docstring).

    What the thread reads is given here and nothing else: it never touches the trainer.

    Args:
        loop: the ``grpo`` config section (sizes and ``async_grpo``; read, never changed).
        inputs: what sampling and scoring read (``rollout.RolloutInputs``, with a tokenizer of
            the collector's own: a fast tokenizer used from two threads at once can fail).
        rows_at: ``rows_at(start, n)``, rows ``start .. start + n`` of the training stream,
            this rank's share (``Trainer.prompt_rows_at``).
        local_prompts: how many of a step's P prompts are this rank's.
        generator: a backend with weights of its own (``can_refit``).
        policy_model: the module whose weights the collector copies at a refit.
        buffer: the replay buffer (possibly restored from a checkpoint).
        version: the policy version of the weights the generator holds now.
    """

    def __init__(self, loop, inputs: RolloutInputs, rows_at: Callable[[int, int], list],
                 local_prompts: int, generator, policy_model, buffer: ReplayBuffer, *,
                 version: int):
        self.inputs, self.rows_at = inputs, rows_at
        self.generator, self.policy_model = generator, policy_model
        self.buffer = buffer
        self.max_age = loop.async_grpo.max_trajectory_age_steps
        self.sampler = loop.async_grpo.sampler
        self.freshest_first = loop.async_grpo.sample_freshest_first
        self.next_batch = version  # windowed: the next batch of the stream to generate
        self.max_failures = loop.async_grpo.max_generation_failures
        self.threads = loop.async_grpo.threads()[0]
        self.num_prompts = loop.num_prompts_per_step  # P: a target's rows in the stream
        self.local_prompts = local_prompts
        self.generations = loop.num_generations_per_prompt
        self.version = version  # the weights the generator holds
        self.latest = version  # the newest weights the trainer has
        self.cond = threading.Condition()  # guards the buffer, versions, error, counters
        self.weights_lock = threading.Lock()  # held by the trainer while weights change
        self.generation_lock = threading.Lock()  # held while the generator samples or refits
        self.stop_event = threading.Event()
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.generating: int | None = None  # the target being generated now
        # counters the trainer reads (and resets) once per step
        # (seconds, "add" | "take", target step, buffer size after, weight versions): the
        # buffer filling and draining over time, for plots (notebook 06)
        self.events: collections.deque = collections.deque(maxlen=100_000)
        self.clock = time.perf_counter
        self.seconds_waiting_for_weights = 0.0
        self.groups_generated = 0
        self.generation_failures = 0
        self.refits = 0

    # ------------------------------------------------------------------ control
    @property
    def running(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def start(self) -> None:
        if self.running:
            return
        self.stop_event.clear()
        self.error = None
        if hasattr(self.generator, "interrupt"):  # HF: stop mid-generation (choice 4)
            self.generator.interrupt = self.stop_event
        self.thread = threading.Thread(target=self._run, name="rlnb-trajectory-collector",
                                       daemon=True)
        self.thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the thread and wait for it (a generation in progress is abandoned)."""
        self.stop_event.set()
        with self.cond:
            self.cond.notify_all()
        if self.thread is not None:
            self.thread.join(timeout)
            if self.thread.is_alive():  # pragma: no cover - a backend that ignores the event
                warnings.warn(f"the trajectory collector did not stop within {timeout:.0f} s",
                              stacklevel=2)
            self.thread = None

    def request_refit(self, version: int) -> None:
        """The trainer's weights are now ``version`` (after each optimizer step): the collector
        refits before its next generation."""
        with self.cond:
            self.latest = version
            self.cond.notify_all()

    # ------------------------------------------------------------------ the trainer's side
    def take(self, step: int, poll: float = 0.1) -> tuple[list[RolloutBatch], list[int], int,
                                                          float]:
        """Wait for the P groups meant for ``step``; ``(groups, versions, evicted, seconds)``.

        Raises the collector's error if it failed, ``CollectorStopped`` if it was stopped."""
        start = time.perf_counter()
        with self.cond:
            while True:
                if self.error is not None:
                    raise RuntimeError(
                        f"the trajectory collector failed while generating for step "
                        f"{self.generating if self.generating is not None else step}: "
                        f"{type(self.error).__name__}: {self.error}") from self.error
                before = len(self.buffer)
                if self.sampler == "windowed":
                    sampled = self.buffer.sample_window(
                        self.local_prompts, current_weight_version=step,
                        max_age_steps=self.max_age, freshest_first=self.freshest_first)
                else:
                    sampled = self.buffer.sample(self.local_prompts, current_weight_version=step,
                                                 max_age_steps=self.max_age)
                evicted = before - len(self.buffer) - (self.local_prompts if sampled else 0)
                if sampled is not None:
                    self.events.append((self.clock(), "take", step, len(self.buffer),
                                        list(sampled.weight_versions)))
                    self.cond.notify_all()  # room for the next target
                    return (sampled.groups, sampled.weight_versions, evicted,
                            time.perf_counter() - start)
                if not self.running:
                    raise CollectorStopped(f"no trajectories for step {step} and the collector "
                                           "is not running")
                self.cond.wait(poll)  # short waits: Ctrl-C reaches the caller's thread

    def snapshot(self) -> dict[str, Any]:
        """The buffer's state for a checkpoint (its groups as plain data)."""
        with self.cond:
            state = self.buffer.state_dict()
            state["next_batch"] = self.next_batch
        state["groups"] = [rollout_to_dict(g) for g in state["groups"]]
        return state

    def pop_counters(self) -> dict[str, float]:
        """Counters since the last call (one step): generated groups, failures, refits, the
        seconds the collector waited for new weights."""
        with self.cond:
            out = {"groups_generated": self.groups_generated,
                   "generation_failures": self.generation_failures, "refits": self.refits,
                   "seconds_waiting_for_weights": self.seconds_waiting_for_weights,
                   "buffer_size": len(self.buffer)}
            self.groups_generated = self.generation_failures = self.refits = 0
            self.seconds_waiting_for_weights = 0.0
        return out

    def refit(self) -> None:
        """Load the trainer's newest weights into the generator (between generations)."""
        with self.generation_lock, self.weights_lock:
            latest = self.latest
            self.generator.refit(self.policy_model)
        with self.cond:
            self.version = latest
            self.refits += 1

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        torch.set_num_threads(self.threads)  # this thread's own count (choice 1)
        failures, backoff = 0, 0.01
        try:
            while not self.stop_event.is_set():
                if self.latest > self.version:
                    self.refit()
                with self.cond:
                    target = self._next_target()
                    if target is None:  # nothing left to make with these weights: wait
                        start = time.perf_counter()
                        self.cond.wait_for(
                            lambda: self.stop_event.is_set() or self.latest > self.version)
                        self.seconds_waiting_for_weights += time.perf_counter() - start
                        continue
                    if len(self.buffer) + self.local_prompts > self.buffer.max_size:
                        self.cond.wait(backoff)  # choice 5
                        backoff *= 1.5
                        continue
                    backoff = 0.01
                    self.generating, version = target, self.version
                try:
                    groups = self._generate(target, version)
                except Exception as err:  # choice 4: retry up to max_generation_failures
                    failures += 1
                    with self.cond:
                        self.generation_failures += 1
                    if failures > self.max_failures:
                        raise
                    warnings.warn(f"generation for step {target} failed ({failures} in a row, "
                                  f"{self.max_failures} allowed): {type(err).__name__}: {err}",
                                  stacklevel=1)
                    continue
                failures = 0
                if groups is None:  # stopped mid-generation: nothing is kept
                    break
                self._store(groups, target, version)
        except BaseException as err:  # noqa: BLE001 - handed to the trainer's thread
            with self.cond:
                self.error = err
                self.cond.notify_all()

    def _store(self, groups: list[RolloutBatch], target: int, version: int) -> None:
        with self.cond:
            for group in groups:
                self.buffer.add(group, weight_version=version, target_weight_version=target)
            if self.sampler == "windowed":
                self.next_batch = target + 1
            self.groups_generated += len(groups)
            self.generating = None
            self.events.append((self.clock(), "add", target, len(self.buffer),
                                [version] * len(groups)))
            self.cond.notify_all()

    def generate_due(self, step: int) -> None:
        """``lockstep`` (choice 6), in the caller's thread: load the trainer's weights ``step``
        and generate every target they may still fill, so step c trains on weights
        max(0, c − a)."""
        self.stop_event.clear()  # a finished ``train`` set it; nothing runs in the background
        with self.cond:
            self.latest = step
        self.refit()  # every step: the weights may also have changed by hand or by a resume
        while True:
            with self.cond:
                target = self._next_target()
            if target is None:
                return
            self._store(self._generate(target, step), target, step)

    def _next_target(self) -> int | None:
        """The batch of the stream to generate next (under ``cond``): in order, the first of
        the targets v … v + a still short of groups (None: wait for newer weights); windowed,
        the next batch, however far ahead (only the buffer's room stops it)."""
        if self.sampler == "windowed":
            return self.next_batch
        return self.buffer.next_target(self.version, initial_weight_version=self.version,
                                       max_trajectory_age_steps=self.max_age,
                                       num_prompts_per_step=self.local_prompts)

    def _generate(self, target: int, version: int) -> list[RolloutBatch] | None:
        """Target ``target``'s P groups, sampled with weights ``version`` (None if stopped)."""
        rows = self.rows_at(target * self.num_prompts, self.num_prompts)  # choice 2
        with self.generation_lock:
            batch = sample_and_score(self.inputs, self.generator, rows, self.generations, target)
        if self.stop_event.is_set():
            return None
        batch.weight_version = version
        batch.weight_versions = torch.full((len(batch),), version, dtype=torch.long)
        pad = self.inputs.tokenizer.pad_token_id
        groups = []
        for g in range(len(rows)):
            group = concat_rollouts([batch], (batch.group == g).nonzero().flatten(), pad)
            group.group = torch.zeros_like(group.group)
            group.metrics.update(shape_metrics(group))  # the group's own lengths
            groups.append(group)
        return groups


def new_buffer(loop_config) -> ReplayBuffer:
    """An empty buffer of NeMo-RL's capacity, P × a × 2 prompt groups (windowed:
    ``max_buffered_rollouts`` when given)."""
    given = loop_config.async_grpo.max_buffered_rollouts
    return ReplayBuffer(given or replay_buffer_capacity(
        num_prompts_per_step=loop_config.num_prompts_per_step,
        max_trajectory_age_steps=loop_config.async_grpo.max_trajectory_age_steps))
