"""What every training loop shares: its parts, its data stream, validation, the loop (its save
state: ``save_state.py``).

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
   the config layer's (``check_loop_rules``), run again here on the config given; the trainer
   itself checks only what needs the live world (the number of ranks).
3) Validation samples on its own random state (seeded by the seed and the step), so it never
   draws from the training stream: a run validated at other steps, or resumed, trains exactly
   the same.
4) The data stream is the task's seeded row stream; the position (``consumed_prompts``) is the
   save state, so a resumed run reads exactly the rows it would have read.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.config import Config
from rlnb.engine.agents.templates import check_agent_task
from rlnb.engine.agents.verifiers_agent import VerifiersAgentTask
from rlnb.engine.data.batches import RolloutBatch, StepMetrics
from rlnb.engine.environments.prompts import format_prompt
from rlnb.engine.environments.run_task import build_run_task, with_user_data
from rlnb.engine.models.generation import make_generation_backend
from rlnb.engine.models.policy import Policy
from rlnb.engine.runtime.distributed import Distributed
from rlnb.engine.runtime.memory import StageMemory
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.dynamic_rollout import dynamic_sampling_rollout
from rlnb.engine.trainers.hyperparameters import reconfigure
from rlnb.engine.trainers.loop_config import check_loop_rules, needs_reference
from rlnb.engine.trainers.rollout import (
    RolloutInputs,
    add_logprobs,
    outcome_metrics,
    sample_and_score,
)
from rlnb.engine.trainers.save_state import SaveState
from rlnb.engine.trainers.views import PanelSpec, Stage, check_stages

# stage 1 of every loop that samples and scores (``Trainer.rollout``), as the stepper shows it
ROLLOUT_STAGE = Stage("Rollout", "sample P prompts x G responses and score them", "rollout",
                      keeps="rollout")


def expect_batch(batch, kind: type, stage: str) -> None:
    """A stage takes what the stage before it returns: anything else is a ``TypeError`` naming
    both (not an ``AttributeError`` from deep inside the stage)."""
    if not isinstance(batch, kind):
        raise TypeError(f"{stage} takes the {kind.__name__} that the stage before it returns, "
                        f"got {type(batch).__name__}")


@contextlib.contextmanager
def isolated_rng(seed: int, device: torch.device | None = None):
    """Run the block on its own seeded random state; the caller's state is untouched after."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class Trainer(SaveState):
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

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        check_stages(cls)  # a declaration that does not fit fails at import (views.py)

    def __init__(self, config, *, policy=None, task=None, accelerator=None, reward_funcs=None,
                 reward_weights=None, train_dataset=None, eval_dataset=None, environment=None):
        if not all(hasattr(config, s) for s in (self.loop_section, "policy", "loss_fn", "data")):
            raise TypeError(
                f"{type(self).__name__} takes a loaded config, got {type(config).__name__}: "
                f"build one with rlnb.load_config(path_or_dict_or_None, overrides)")
        if getattr(config, self.loop_section) is None:  # a config of another loop
            raise ValueError(
                f"{type(self).__name__} needs a config with algorithm: {self.loop_section}; this "
                f"one has algorithm: {getattr(config, 'algorithm', 'grpo')!r} "
                "(rlnb.engine.trainers.loops.make_trainer builds the loop a config names)")
        if isinstance(config, Config):  # fields may have been assigned one by one since it
            config.check()               # was built: its rules across fields run again here
        user = {"reward_funcs": reward_funcs, "reward_weights": reward_weights,
                "train_dataset": train_dataset, "eval_dataset": eval_dataset,
                "environment": environment}
        self.config = config = with_user_data(config, **user)
        self.dist = Distributed(accelerator)
        loop = self.loop_config
        check_loop_rules(config)  # choice 2: fields may have been assigned since it loaded
        if loop.use_dynamic_sampling and self.dist.world_size > 1:
            # each rank would need its own number of generation batches (dynamic_sampling.py)
            raise ValueError(
                f"{self.loop_section}.use_dynamic_sampling=true runs in one process only, but "
                f"{self.dist.world_size} were launched (ranks would draw different numbers of "
                "generation batches): set it to false or run one process")
        torch.manual_seed(loop.seed + 1000 * self.dist.rank)
        self.loss_fn = ClippedPGLossFn(config.loss_fn)
        self.need_reference = needs_reference(config)
        self.policy = policy or Policy(
            config.policy, seed=loop.seed, need_reference=self.need_reference, dist=self.dist
        )
        self.task = task or build_run_task(config, self.policy.tokenizer, **user)
        if getattr(self.task, "multi_turn", False) and getattr(self.task, "taskset", None):
            # a verifiers environment with tools: its episodes run as agent code
            self.task = VerifiersAgentTask(self.task, max_turns=loop.max_rollout_turns)
        self.env = config.env.build(self.task)  # what steps multi-turn conversations
        if getattr(self.task, "agent", None) is not None:  # its turns are one sample each
            check_agent_task(self.task, self.policy.tokenizer, config)
        p = config.policy
        self.max_prompt_length = (p.max_total_sequence_length - 1 if p.generation.fill_context
                                  else p.max_total_sequence_length - p.generation.max_new_tokens)
        self.generator = make_generation_backend(
            self.policy.model, self.policy.tokenizer, p.generation, self.max_prompt_length
        )
        # per-stage memory peaks of an armed step (GRPO's second: trainers/memory_check.py)
        self.memory = StageMemory(self.policy.device)
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
        with self.memory.stage("generation"):
            batch = sample_and_score(self.rollout_inputs(), self.generator, rows, generations,
                                     self.step_count)
        with self.memory.stage("logprobs"):
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
        return batch

    # ------------------------------------------------------------------ validation
    @torch.no_grad()
    def validate(self, num_prompts: int | None = None) -> dict[str, float]:
        """Held-out results: ``validation/reward`` (mean reward), ``avg_length``, and when the
        task defines ``correct``, ``accuracy`` (share correct) and ``pass_k``."""
        loop = self.loop_config
        available = len(self.task.val_rows())
        wanted = num_prompts or loop.max_val_samples or available  # null: every held-out row
        rows = self.dist.shard(self.task.val_rows(min(wanted, available)))
        k = loop.val_num_generations_per_prompt
        # choice 3: its own random state, so validating never shifts the training stream
        with isolated_rng(loop.seed * 1_000_003 + self.step_count + 7, self.policy.device):
            batch = self.generate_batch(rows, k)
        correct = batch.correct.view(len(rows), k).float()  # [P, k]
        metrics = {
            "validation/reward": float(batch.rewards.mean()),
            "validation/avg_length": float(batch.response_lengths.float().mean()),
        }
        if self.task.defines_correct:  # (the built-in tasks: reward = correct, 0 or 1)
            metrics["validation/accuracy"] = float(correct.mean())
            if k > 1:
                metrics["validation/pass_k"] = float(correct.amax(dim=1).mean())
        breakdown = getattr(self.task, "validation_breakdown", None)
        if breakdown is not None:  # a task's held-out results by part (a mix's data sets)
            metrics.update({f"validation/{k}": v
                            for k, v in breakdown(batch.rows, batch.correct).items()})
        self.last_validation = self.dist.mean_dict(metrics)
        return self.last_validation

    # ------------------------------------------------------------------ the loop
    def step(self) -> StepMetrics:  # pragma: no cover - every loop defines it
        raise NotImplementedError

    def policy_pass(self, train_data: dict, loss_fn, dry_run: bool,
                    token_normalizer: str = "global_batch") -> dict[str, float]:
        """The policy's optimizer steps over one batch (none with ``dry_run``): its loss
        metrics summed over ranks under ``train/``, and ``timing/train/policy_training``.
        ``loss_fn`` (a ``ClippedPGLossFn``, a ``loss_fn`` config dict, or None: the trainer's);
        ``token_normalizer``: ``Policy.optimizer_step``'s."""
        if isinstance(loss_fn, dict):
            loss_fn = ClippedPGLossFn({**self.loss_fn.config.model_dump(), **loss_fn})
        elapsed = timer()
        with self.memory.stage("update"):
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
