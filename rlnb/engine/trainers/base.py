"""What every training loop shares: its parts, its data stream, the rollout stage's plumbing and
the loop (its save state: ``save_state.py``; its validation: ``validation.py``).

    trainer = GRPOTrainer(config)             # a loop = this base + its stage methods
    for metrics in trainer.train(100): ...    # one StepMetrics per step (plus validation)

A loop (GRPO, PPO, async GRPO) subclasses ``Trainer`` and writes its stages (``rollout``,
``compute_advantages``, ``update``, ...) and ``step``, and declares what the UI shows of it
(``stages``: the stepper's buttons, ``panels``: the dashboard's plots; ``views.py``); this
module holds the plumbing around them, so a loop's own module reads as its algorithm.

Implementation choices:
1) The trainer knows nothing of run directories, loggers or widgets (they live in higher
   layers): ``train`` yields ``StepMetrics`` (the metrics, and the step's stage results) and the
   consumer (``rlnb.run.training.session.TrainingRun``, the dashboard) logs, checkpoints and
   plots them.
2) The loop's section of the config (``grpo`` or ``ppo``) is ``loop_config``, a ``LoopConfig``
   (``loop_config.py``): every loop reads the same keys from it. The rules between sections are
   the config layer's (``check_loop_rules``), run again on the config given when the trainer is
   built (``setup.py``, with what needs the live world: the number of ranks).
3) Validation (``validation.py``, a mixin) samples on its own random state, so it never draws
   from the training stream: a run validated at other steps, or resumed, trains exactly the
   same.
4) The data stream is the task's seeded row stream; the position (``consumed_prompts``) is the
   save state, so a resumed run reads exactly the rows it would have read.
5) A loop that validates (``val_period`` > 0) on a task with no held-out rows (an ``AgentTask``
   built without ``val=``) is refused when it is built (``setup.py``), naming both ways out,
   rather than failing at its first validation.
6) What measures a step without being the algorithm (the sample funnel, memory peaks) hangs on
   it from outside: a run attaches *probes* (``rlnb.run.training.probes``), which the stages
   enter around their blocks (``measured``: generation, logprobs, update) and which add their
   metrics to the step's record (``record_step``). A loop declares what may be measured on it
   (``measures``); with no probe attached a step runs only its own code.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.engine.agents.rollouts import agent_metrics
from rlnb.engine.data.batches import RolloutBatch, StepMetrics
from rlnb.engine.environments.prompts import format_prompt
from rlnb.engine.models.generation import make_generation_backend
from rlnb.engine.models.policy import Policy
from rlnb.engine.runtime.distributed import Distributed
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.dynamic_rollout import dynamic_sampling_rollout
from rlnb.engine.trainers.hyperparameters import reconfigure
from rlnb.engine.trainers.loop_config import needs_reference
from rlnb.engine.trainers.rollout import (
    RolloutInputs,
    add_logprobs,
    outcome_metrics,
    sample_and_score,
)
from rlnb.engine.trainers.save_state import SaveState
from rlnb.engine.trainers.setup import checked_config, task_and_environment
from rlnb.engine.trainers.validation import Validation
from rlnb.engine.trainers.views import COMMON_FIELDS, ConfigField, PanelSpec, Stage, check_stages

# stage 1 of every loop that samples and scores (``Trainer.rollout``), as the stepper shows it
ROLLOUT_STAGE = Stage("Rollout", "sample P prompts x G responses and score them", "rollout",
                      keeps="rollout")


def expect_batch(batch, kind: type, stage: str) -> None:
    """A stage takes what the stage before it returns: anything else is a ``TypeError`` naming
    both (not an ``AttributeError`` from deep inside the stage)."""
    if not isinstance(batch, kind):
        raise TypeError(f"{stage} takes the {kind.__name__} that the stage before it returns, "
                        f"got {type(batch).__name__}")


class Trainer(SaveState, Validation):
    """The parts and plumbing of a loop; subclasses add the stages and ``step``.

    Args:
        config: the run's config (``rlnb.load_config(...)``, a ``MasterConfig``).
        policy, task: pre-built parts (default: built from the config).
        accelerator: an ``accelerate.Accelerator`` for several processes, else None.
        reward_funcs, reward_weights, train_dataset, eval_dataset: a user's reward functions
            and data, TRL's names (``environments/run_task.py``); recorded in ``self.config``.
        environment: a verifiers environment (a ``Taskset`` or ``Env`` of ``verifiers.v1``):
            its prompts and rubric (``environments/verifiers_task.py``), in place of those.
    """

    loop_section = "grpo"  # the config section with the loop's keys
    # what the UI shows (views.py): the stepper's stages in order, the dashboard's panels
    stages: tuple[Stage, ...] = ()
    panels: tuple[PanelSpec, ...] = ()
    # what a run may measure on the loop's stages (rlnb.run.training.probes): "funnel", "memory"
    measures: tuple[str, ...] = ()
    config_fields: tuple[ConfigField, ...] = COMMON_FIELDS  # the config panel's controls

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        check_stages(cls)  # a declaration that does not fit fails at import (views.py)

    def __init__(self, config, *, policy=None, task=None, accelerator=None, reward_funcs=None,
                 reward_weights=None, train_dataset=None, eval_dataset=None, environment=None):
        user = {"reward_funcs": reward_funcs, "reward_weights": reward_weights,
                "train_dataset": train_dataset, "eval_dataset": eval_dataset,
                "environment": environment}
        self.dist = Distributed(accelerator)
        self.config = config = checked_config(type(self), config, self.dist, user)  # choice 2
        loop = self.loop_config
        torch.manual_seed(loop.seed + 1000 * self.dist.rank)
        self.loss_fn = ClippedPGLossFn(config.loss_fn)
        self.need_reference = needs_reference(config)
        self.policy = policy or Policy(
            config.policy, seed=loop.seed, need_reference=self.need_reference, dist=self.dist
        )
        self.task, self.env = task_and_environment(config, self.loop_section, task,
                                                   self.policy.tokenizer, user)
        p = config.policy
        self.max_prompt_length = (p.max_total_sequence_length - 1 if p.generation.fill_context
                                  else p.max_total_sequence_length - p.generation.max_new_tokens)
        self.generator = make_generation_backend(
            self.policy.model, self.policy.tokenizer, p.generation, self.max_prompt_length
        )
        # what the run hangs on the stages to measure them (rlnb.run.training.probes): none
        # unless a run or a dashboard attaches them (choice 6)
        self.probes: list = []
        self.step_count = 0  # completed steps (the save state's current_step)
        self.consumed_prompts = 0  # data position in the task's training stream
        self._stream: list[dict[str, Any]] = []
        self.total_valid_tokens = 0  # tokens trained on (save state)
        self.last_validation: dict[str, float] = {}

    @property
    def loop_config(self):
        """The config section of this loop (``grpo`` or ``ppo``)."""
        return getattr(self.config, self.loop_section)

    # ------------------------------------------------------------------ data
    def next_prompt_rows(self, n: int | None = None) -> list[dict[str, Any]]:
        """The next ``n`` training rows for this rank (advances the data position)."""
        n = n or self.loop_config.num_prompts_per_step
        rows = self.prompt_rows_at(self.consumed_prompts, n)  # position: resumable
        self.consumed_prompts += n
        return rows

    def prompt_rows_at(self, start: int, n: int) -> list[dict[str, Any]]:
        """Rows ``start .. start + n`` of the training stream, this rank's share (the data
        position does not move)."""
        stream = self._stream
        if len(stream) < start + n:  # the task's seeded stream, grown by doubling
            stream = self._stream = self.task.train_rows(2 * (start + n), self.loop_config.seed)
        return self.dist.shard(stream[start : start + n])

    def format_prompt(self, row: dict[str, Any]) -> str:
        """The text the policy generates from for a task row (its chat template if set)."""
        return format_prompt(row, self.policy.tokenizer, self.config.policy.chat_template)

    # ------------------------------------------------------------------ stage 1: rollout
    def rollout_inputs(self, tokenizer=None) -> RolloutInputs:
        """What the rollout stage reads (``rollout.RolloutInputs``), with the policy's tokenizer
        or ``tokenizer``."""
        p = self.config.policy
        return RolloutInputs(
            task=self.task, env=self.env, tokenizer=tokenizer or self.policy.tokenizer,
            chat_template=p.chat_template, max_rollout_turns=self.loop_config.max_rollout_turns,
            max_new_tokens=p.generation.max_new_tokens,
            max_total_length=p.max_total_sequence_length,
            max_prompt_length=self.max_prompt_length, fill_context=p.generation.fill_context)

    def generate_batch(self, rows: list[dict[str, Any]], generations: int) -> RolloutBatch:
        """``generations`` responses per row, scored, with their log-probs (rollout.py)."""
        with self.measured("generation"):
            batch = sample_and_score(self.rollout_inputs(), self.generator, rows, generations,
                                     self.step_count)
        with self.measured("logprobs"):
            return add_logprobs(self.policy, batch,
                                reuse=self.loop_config.reuse_generation_logprobs is True,
                                reference=self.need_reference)

    def rollout(self, rows: list[dict[str, Any]] | None = None) -> RolloutBatch:
        """Stage 1: P prompts x G responses, rewards, π_old (and π_ref) log-probs (dynamic
        sampling if enabled), with the reward metrics."""
        loop, elapsed = self.loop_config, timer()
        if loop.use_dynamic_sampling:  # it logs the signal of every group it generated
            batch = dynamic_sampling_rollout(loop, self.generate_batch, self.next_prompt_rows,
                                             self.policy.tokenizer.pad_token_id, rows)
        else:
            batch = self.generate_batch(rows or self.next_prompt_rows(),
                                        loop.num_generations_per_prompt)
        observe = getattr(self.task, "observe", None)
        if observe is not None and rows is None:  # a task's curriculum sees the training stream:
            parts = self.dist.gather_object((batch.rows, batch.correct.cpu()))  # every rank's
            batch.metrics.update(observe([r for p, _ in parts for r in p],
                                         torch.cat([c for _, c in parts])))
        batch.metrics["timing/train/rollout"] = elapsed()
        batch.metrics.update(outcome_metrics(self.dist, batch,
                                             signal=not loop.use_dynamic_sampling,
                                             correct=self.task.defines_correct))
        if "train/agent/generation_calls" in batch.metrics:  # an agent task's, every rank's
            batch.metrics.update(agent_metrics(self.dist, batch.metrics))
        return batch

    # ------------------------------------------------------------------ the loop
    def step(self) -> StepMetrics:  # pragma: no cover - every loop defines it
        raise NotImplementedError

    @contextlib.contextmanager
    def measured(self, stage: str):
        """A stage's block, which the attached probes measure (choice 6); a no-op without."""
        with contextlib.ExitStack() as probes:
            for probe in self.probes:
                probes.enter_context(probe.stage(stage))
            yield

    def policy_pass(self, train_data: dict, loss_fn, dry_run: bool,
                    token_normalizer: str = "global_batch") -> dict[str, float]:
        """The policy's optimizer steps over one batch (none with ``dry_run``): its loss
        metrics summed over ranks under ``train/``, and ``timing/train/policy_training``.
        ``loss_fn`` (a ``ClippedPGLossFn``, a ``loss_fn`` config dict, or None: the trainer's);
        ``token_normalizer``: ``Policy.optimizer_step``'s."""
        if isinstance(loss_fn, dict):
            loss_fn = ClippedPGLossFn({**self.loss_fn.config.model_dump(), **loss_fn})
        elapsed = timer()
        with self.measured("update"):
            raw = self.policy.optimizer_step(train_data, loss_fn or self.loss_fn,
                                             dry_run=dry_run, token_normalizer=token_normalizer)
        metrics = {f"train/{k}": v for k, v in self.dist.sum_loss_metrics(raw).items()}
        metrics["timing/train/policy_training"] = elapsed()
        return metrics

    def refit(self) -> None:
        """After an optimizer step: hand the policy's new weights to generation (NeMo-RL's
        refit; only a count when the generator samples with the policy's own module)."""
        self.generator.refit(self.policy.model)

    def close(self) -> None:
        """Stop background work (the async loop's collector); nothing for synchronous loops."""

    def record_step(self, rollout, advantages, result, seconds: float | None = None
                    ) -> StepMetrics:
        """The ``StepMetrics`` of a step from its three stage results; also for a step a
        notebook took stage by stage (log it with ``TrainingRun.log``)."""
        if result.dry_run:
            raise ValueError("record_step: a dry-run UpdateResult is not a step (no weights moved)")
        metrics = StepMetrics({"step": result.step, **rollout.metrics, **advantages.metrics,
                               **result.metrics}, rollout=rollout, advantages=advantages,
                              result=result)
        if seconds is not None:
            metrics["timing/train/total_step_time"] = seconds
        metrics.update(self.policy.compile_metrics())  # {} unless policy.compile.enabled
        for probe in self.probes:  # choice 6: the run's measurement of the step
            metrics.update(probe.step_metrics(metrics))
        return metrics

    def train(self, num_steps: int | None = None, *, progress: bool = False
              ) -> Iterator[StepMetrics]:
        """Yield one ``StepMetrics`` per step, validation folded in at ``val_period`` (and a
        validation-only record for step 0 when ``val_at_start``)."""
        loop = self.loop_config
        num_steps = loop.max_num_steps if num_steps is None else num_steps
        if num_steps < 0:
            raise ValueError(f"num_steps must be >= 0, got {num_steps}")
        bar = None
        if progress and self.dist.is_main:
            from rlnb.engine.runtime.progress import progress_bar

            bar = progress_bar(total=num_steps, desc=type(self).__name__.removesuffix("Trainer"))
        try:  # the bar ends however the loop does: done, stopped early, or an error
            if loop.val_at_start and self.step_count == 0 and loop.val_period:
                yield StepMetrics({"step": 0, **self.validate()})
            for i in range(num_steps):
                metrics = self.step()
                last = i == num_steps - 1
                if loop.val_period and (self.step_count % loop.val_period == 0
                                        or (last and loop.val_at_end)):
                    metrics.update(self.validate())
                if bar is not None:
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{metrics.get('train/reward', math.nan):.3f}",
                        val=f"{self.last_validation.get('validation/accuracy', math.nan):.3f}")
                yield metrics
        finally:
            if bar is not None:
                bar.close()

    # ------------------------------------------------------------------ hyperparameters
    def reconfigure(self, overrides: dict[str, Any] | list[str], *, dry_run: bool = False
                    ) -> dict[str, tuple[Any, Any]]:
        """Change hyperparameters between steps (see ``hyperparameters.reconfigure``)."""
        return reconfigure(self, overrides, dry_run=dry_run)

