"""A training run on disk: trainer + run directory + loggers + checkpoints + resume.

    run = TrainingRun(config, run_dir="runs/x", accelerator=auto_accelerator())
    run.train()                                       # what `rlnb train` does
    run.close()

Implementation choices:
1) Only the main process writes (config, metrics.jsonl, rollouts, checkpoints, loggers).
2) Every step's token-level rollouts go to ``rollouts/step_XXXXXX.parquet``: token ids, masks,
   rewards, advantages, and generation / previous / reference log-probs, one row per response.
3) Resume: the warm start is rebuilt first (from its cache; it is also the KL reference), then
   the latest checkpoint restores weights, optimizer, scheduler, RNG states and the data
   position, and metrics past the checkpoint are dropped, so steps k+1.. repeat exactly.
4) A run directory that fails to start (bad config, unreadable model, mismatched resume) is not
   left behind half-written (``RunDir`` creates it atomically).
5) Several processes: ``auto_accelerator()`` builds the Accelerator only when a launcher started
   them, and ``close()`` makes the ranks leave the process group together.
"""

from __future__ import annotations

import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from rlnb.run.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from rlnb.run.config import RLNBConfig, load_config


def auto_accelerator():
    """An ``accelerate.Accelerator`` when a launcher started several processes (``WORLD_SIZE`` > 1,
    as under ``accelerate launch`` or ``rlnb launch``), else None: one process needs none."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator

    # without cpu=True on a machine with no GPU, every launched process is rank 0 of 1
    return Accelerator(cpu=not torch.cuda.is_available())


class TrainingRun:
    """Owns a ``GRPOTrainer`` and everything it writes."""

    def __init__(
        self,
        config: RLNBConfig | str | dict | None = None,
        *,
        overrides=(),
        run_dir: str | Path | None = None,
        resume: bool = False,
        accelerator=None,
        progress: bool = True,
        log=print,
    ):
        from rlnb.engine.distributed import Distributed
        from rlnb.engine.grpo import GRPOTrainer
        from rlnb.engine.sft import warm_start
        from rlnb.run.loggers import make_loggers
        from rlnb.run.rundir import RunDir

        self.config = load_config(config, overrides)
        self.progress, self.log = progress, log
        self.dist = Distributed(accelerator)
        path = Path(run_dir) if run_dir is not None else RunDir.new_default_path()
        if resume and not (path / RunDir.CONFIG).exists():
            raise ValueError(f"cannot resume: {path} is not a run directory (no config.yaml)")
        self.run_dir = None
        created = not path.exists()
        if self.dist.is_main:
            self.run_dir = RunDir(path, config=self.config.model_dump(mode="json"), resume=resume)
        self.path = path
        try:
            self.trainer = GRPOTrainer(self.config, accelerator=accelerator, run=self)
            self.warm_start = None
            if self.config.sft.enabled:
                # seeded by grpo.seed on its own random state: the same on every rank
                self.warm_start = warm_start(
                    self.trainer,
                    self.config.sft,
                    progress=progress and self.dist.is_main,
                    log=log if self.dist.is_main else _quiet,
                )
        except Exception:
            if self.run_dir is not None and created:  # leave nothing half-written behind
                shutil.rmtree(path, ignore_errors=True)
            raise
        self.loggers = make_loggers(self.config.logger, self.run_dir) if self.run_dir else []
        self._loggers_open, self._left_group = True, False
        if resume:
            self._resume()

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_root(self) -> Path:
        c = self.config.checkpointing
        return Path(c.checkpoint_dir) if c.checkpoint_dir else self.path / "checkpoints"

    def save(self) -> Path | None:
        if not self.dist.is_main:
            return None
        t, c = self.trainer, self.config.checkpointing
        return save_checkpoint(
            self.checkpoint_root,
            t.step_count,
            model=t.policy.model,
            optimizer=t.policy.optimizer,
            scheduler=t.policy.scheduler,
            tokenizer=t.policy.tokenizer,
            trainer_state=t.state(),
            keep_last=c.keep_top_k,
        )

    def _resume(self) -> None:
        ckpt = latest_checkpoint(self.checkpoint_root)
        if ckpt is None:
            raise ValueError(f"cannot resume {self.path}: no checkpoint in {self.checkpoint_root}")
        t = self.trainer
        state = load_checkpoint(
            ckpt, model=t.policy.model, optimizer=t.policy.optimizer, scheduler=t.policy.scheduler
        )
        t.load_state(state)
        if self.run_dir is not None:
            self.run_dir.truncate_metrics(after_step=t.step_count)
        if self.dist.is_main:
            self.log(f"resumed from {ckpt} (step {t.step_count})")

    # ------------------------------------------------------------------ logging
    def log_step(self, trainer, metrics: dict[str, float]) -> None:
        """Called by the trainer on the main process after each step and the first validation."""
        step = int(metrics.get("step", trainer.step_count))
        values = {k: v for k, v in metrics.items() if k != "step"}
        self._loggers_open = True  # a writer closed by an earlier train() reopens on write
        for logger in self.loggers:  # the first writes metrics.jsonl
            logger.log(values, step)
        batches = getattr(trainer, "last_batches", None)
        if self.config.logger.log_rollouts and batches and batches[0].step == step - 1:
            self.run_dir.write_rollouts(step, rollout_table(*batches[:2]))
        c = self.config.checkpointing
        if c.enabled and c.save_period and step and step % c.save_period == 0:
            self.save()

    def train(self, num_steps: int | None = None) -> dict[str, Any]:
        """Train; returns a summary (accuracy before/after, run directory, time)."""
        t = self.trainer
        g = self.config.grpo
        target = g.max_num_steps if num_steps is None else num_steps
        remaining = max(0, target - t.step_count) if num_steps is None else num_steps
        start = time.perf_counter()
        before = t.last_validation.get("validation/accuracy")
        last: dict[str, float] = {}
        for metrics in t.train(remaining, progress=self.progress):
            last = metrics
            if before is None and "validation/accuracy" in t.last_validation:
                before = self._initial_accuracy()
        c = self.config.checkpointing
        if c.enabled and t.step_count and (not c.save_period or t.step_count % c.save_period):
            self.save()  # always leave a checkpoint of the final step
        self._close_loggers()
        return {
            "steps": t.step_count,
            "seconds": time.perf_counter() - start,
            "accuracy_before": before,
            "accuracy_after": t.last_validation.get("validation/accuracy"),
            "final_reward": last.get("train/reward", math.nan),
            "run_dir": str(self.path),
            "warm_start": self.warm_start,
        }

    def close(self) -> None:
        """End the run: close the loggers (``train`` already does) and, under several processes,
        leave the process group together. Call it once every rank has finished training."""
        self._close_loggers()
        accelerator = self.dist.accelerator
        if accelerator is None or self._left_group:
            return
        import torch.distributed as dist

        # a rank that exits while gloo's threads still run aborts with 'terminate called
        # without an active exception': wait for everyone, then leave together
        accelerator.wait_for_everyone()
        accelerator.end_training()
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
        self._left_group = True

    def _close_loggers(self) -> None:
        if self._loggers_open:
            for logger in self.loggers:
                logger.close()
            self._loggers_open = False

    def _initial_accuracy(self):
        if self.run_dir is None:
            return None
        first = self.run_dir.read_metrics()
        return first[0].get("validation/accuracy") if first and first[0]["step"] == 0 else None


def rollout_table(rollout, advantages) -> dict[str, Any]:
    """Per-response token-level record of one step (lists of per-token values per row)."""

    def rows(x):
        return None if x is None else [r.tolist() for r in x]

    table = {
        "prompt": rollout.prompts,
        "response": rollout.responses,
        "reward": rollout.rewards.tolist(),
        "correct": rollout.correct.tolist(),
        "truncated": rollout.truncated.tolist(),
        "group": rollout.group.tolist(),
        "kept": advantages.kept.tolist(),
        "input_ids": rows(rollout.input_ids),
        "attention_mask": rows(rollout.attention_mask),
        "token_mask": rows(rollout.token_mask),
        "advantages": rows(advantages.advantages),
        "generation_logprobs": rows(rollout.generation_logprobs),
        "prev_logprobs": rows(rollout.prev_logprobs),
    }
    if rollout.reference_logprobs is not None:
        table["reference_logprobs"] = rows(rollout.reference_logprobs)
    return table


def _quiet(*args, **kwargs):
    pass
