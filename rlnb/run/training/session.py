"""A training run on disk: a trainer, its run directory, loggers, checkpoints and resume.

    run = TrainingRun(config, run_dir="runs/x", accelerator=auto_accelerator())
    run.train()                                       # what `rlnb train` does
    for metrics in run.steps(10): ...                 # or step by step, logged as they come
    run.close()

Implementation choices:
1) The trainer knows nothing of the run: it yields ``StepMetrics`` and the run consumes them
   (``log``): metrics to every logger, the step's token-level rollouts to ``rollouts/`` (one
   Parquet file per 50 steps, ``store/rollout_store.py``; step 1 and every
   ``logger.rollouts_every``-th step), a checkpoint every ``checkpointing.save_period`` steps.
   A step taken stage by stage in a notebook is logged the same way (``run.log(metrics)``).
   When ``steps``/``train`` end (Ctrl-C and errors included) and in ``close``, the rollouts'
   chunk in progress is sealed into its Parquet file.
2) Only the main process writes (config, metrics.jsonl, rollouts, checkpoints, loggers). A
   checkpoint holds every rank's RNG states (gathered to rank 0), so ``save`` and ``log`` are
   called on every rank, and a run resumed on as many ranks repeats every rank's samples.
3) Construction warm-starts the policy (cached on disk, ``store/warm_start_cache.py``); its repr
   says what it did: run directory, warm start (loaded or run), what has been written.
4) Resume continues from the run directory's own ``config.yaml`` (overrides may change only
   what ``RESUMABLE_KEYS`` allows; one an older rlnb wrote is compared as this version reads it,
   ``saved_config_now``). The warm start is rebuilt first (from its cache; it is
   also the KL reference), then the latest checkpoint restores weights, optimizer, scheduler,
   RNG states and the data position, and metrics and rollouts past the checkpoint are dropped,
   so steps k+1.. repeat exactly and none is logged twice.
5) A run directory that fails to start (bad config, unreadable model, mismatched resume) is not
   left behind half-written (``RunDir`` creates it atomically).
6) Several processes: ``close()`` makes the ranks leave the process group together.
7) A failure after start-up leaves ``error.txt`` in the run directory (what failed, at which
   step) beside what was written before it; a save killed mid-write leaves hidden temporary
   folders, removed at the next start. A corrupt checkpoint is named on resume, with the latest
   intact one. A full disk is named as such (``store/space.py``: the folder, the space free and
   what the save needed), and the step in ``error.txt`` is the one whose save failed.
8) A run directory that holds no checkpoint and trained no step (a run stopped in its warm
   start or first step) starts again from step 0: resumed (with its own config.yaml), or reused
   under the same config; its step-0 record is replaced when step 0 is measured again, never
   dropped before. One that logged steps but saved no checkpoint cannot be resumed: refused
   before anything is read or written, naming the way out (its config.yaml, in a new run dir).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlnb.engine.data.batches import StepMetrics
from rlnb.run.config.master_config import MasterConfig, load_config
from rlnb.run.store.atomic import atomic_write_text
from rlnb.run.store.checkpoint import (
    capture_rng_state,
    checkpoint_problem,
    clean_partial_saves,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_checkpoint_files,
    save_checkpoint,
    saved_rng_ranks,
)
from rlnb.run.store.space import DiskFull, disk_full, out_of_space


class TrainingRun:
    """Owns a trainer (the loop the config names) and everything it writes (see the module
    docstring)."""

    def __init__(
        self,
        config: MasterConfig | str | dict | None = None,
        *,
        overrides=(),
        preset: str | None = None,
        run_dir: str | Path | None = None,
        resume: bool = False,
        accelerator=None,
        progress: bool = True,
        log=print,
        ignore_unsupported: bool = False,
        **user_data,
    ):
        """``user_data``: a user's ``reward_funcs``, ``reward_weights``, ``train_dataset`` and
        ``eval_dataset``, as the trainers take them (recorded in the run's config.yaml; a resume
        or a replay of the run is handed them again)."""
        import torch

        from rlnb.engine.environments.run_task import with_user_data
        from rlnb.engine.runtime.distributed import Distributed
        from rlnb.engine.trainers.loop_config import logprob_source
        from rlnb.engine.trainers.loops import parts_in_use
        from rlnb.run.store.loggers import make_loggers
        from rlnb.run.store.rundir import RunDir, first_missing
        from rlnb.run.training.probes import attach_probes
        from rlnb.run.training.warm_trainer import trainer_with_warm_start
        from rlnb.threads import busy_machine_note

        path = Path(run_dir) if run_dir is not None else RunDir.new_default_path()
        if resume and path.is_file():
            raise ValueError(f"cannot resume: {path} is a file, not a run directory")
        if resume and not (path / RunDir.CONFIG).is_file():
            raise ValueError(f"cannot resume: {path} is not a run directory (no config.yaml)")
        if resume and config is None and preset is None:
            config = path / RunDir.CONFIG  # the run's own record is its config (choice 4)
        self.config = with_user_data(load_config(config, overrides, preset=preset,
                                                 ignore_unsupported=ignore_unsupported),
                                     **user_data)
        self.progress, self.log_line = progress, log
        self.dist = Distributed(accelerator)
        expected = self.config.cluster.num_processes
        if expected is not None and expected != self.dist.world_size:
            raise ValueError(f"cluster.num_processes={expected}, but {self.dist.world_size} "
                             "process(es) were launched")
        # choice 8: a run that trained no step starts again from step 0 (resumed, or reused
        # with the same config), its earlier step-0 record replaced when step 0 is logged again
        self._restart = resume and nothing_to_resume(path, self.config)
        self._stale_step_0 = self._restart or (not resume and (path / RunDir.CONFIG).is_file())
        self.run_dir = None
        created = first_missing(path.absolute())
        if self.dist.is_main:
            self.run_dir = RunDir(path, config=self.config.model_dump(mode="json"), resume=resume,
                                  read_saved=saved_config_now)
        self.path = path
        try:
            self.loggers = make_loggers(self.config.logger, self.run_dir) if self.run_dir else []
            # the warm start is seeded by the loop's seed on its own random state: the same on
            # every rank; only the main rank writes the cache and speaks
            self.trainer, self.warm_start = trainer_with_warm_start(
                self.config, progress=progress and self.dist.is_main,
                log=log if self.dist.is_main else _quiet, write=self.dist.is_main,
                accelerator=accelerator, **user_data)
            attach_probes(self.trainer)  # the funnel, the memory check: outside the step
            if self.dist.is_main:  # the choice made when the config loaded, said once
                log(f"generation: policy.generation.backend={self.config.policy.generation.backend}"
                    f"; {logprob_source(self.trainer.loop_config)}")
                busy = busy_machine_note(torch.get_num_threads())  # rlnb/threads.py
                if busy:
                    log(busy)
                record_parts(self.run_dir.path, parts_in_use(self.config, self.trainer), log)
        except Exception:
            if self.run_dir is not None and created:  # leave nothing half-written behind
                shutil.rmtree(created, ignore_errors=True)
            raise
        self._loggers_open, self._left_group = True, False
        self.accuracy_before: float | None = None
        if resume:
            self._resume()

    def __repr__(self) -> str:
        t = self.trainer
        if self.warm_start is None:
            warm = "no warm start (sft.enabled=false)"
        elif self.warm_start["cached"]:
            warm = f"warm start loaded from cache ({self.warm_start['steps']} SFT steps)"
        else:
            warm = (f"warm start ran {self.warm_start['steps']} SFT steps "
                    f"({self.warm_start['seconds']:.0f} s)")
        written = "nothing (not the main process)"
        if self.run_dir is not None:
            steps = self.run_dir.rollout_steps()
            ckpts = [p.name for p in sorted(self.checkpoint_root.glob("step_*"))]
            written = (f"config.yaml, metrics.jsonl, rollouts of {len(steps)} steps, "
                       f"{len(ckpts)} checkpoints")
        return (f"TrainingRun({str(self.path)!r}: {type(t).__name__} at step {t.step_count}; "
                f"{warm}; wrote {written})")

    # ------------------------------------------------------------------ checkpoints
    @property
    def checkpoint_root(self) -> Path:
        return self.config.checkpointing.resolve_dir(self.path)

    def save(self) -> Path | None:
        """Checkpoint the current step; rank 0 writes it (a collective: call it on every rank).
        Returns the step directory (None on the other ranks)."""
        # each rank samples from its own RNG streams: all of them go into the checkpoint
        rng_states = self.dist.gather_object(capture_rng_state())
        if not self.dist.is_main:
            return None
        t, c = self.trainer, self.config.checkpointing
        try:
            return save_checkpoint(
                self.checkpoint_root, t.step_count, model=t.policy.model,
                optimizer=t.policy.optimizer, scheduler=t.policy.scheduler,
                tokenizer=t.policy.tokenizer, trainer_state=t.state(), keep_last=c.keep_top_k,
                extra=t.checkpoint_parts(), rng_states=rng_states, files=t.checkpoint_files(),
            )
        except (OSError, RuntimeError) as err:  # torch's zip writer hides ENOSPC (choice 7)
            needed = checkpoint_bytes(t)
            if out_of_space(err, self.checkpoint_root, needed):
                raise disk_full(f"checkpoint step_{t.step_count:06d}", self.checkpoint_root,
                                needed) from None
            raise

    def _resume(self) -> None:
        if self.dist.is_main:
            clean_partial_saves(self.checkpoint_root)  # a save killed mid-write left these
        if self._restart:  # choice 8
            if self.dist.is_main:
                self.log_line(f"resume: {self.path} holds no checkpoint and trained no step: "
                              "starting it again from step 0 with its config.yaml")
            return
        ckpt = latest_checkpoint(self.checkpoint_root)
        if ckpt is None:
            raise ValueError(f"cannot resume {self.path}: no checkpoint in {self.checkpoint_root}")
        problem = checkpoint_problem(ckpt)
        if problem is not None:
            intact = next((p for _, p in reversed(list_checkpoints(self.checkpoint_root))
                           if p != ckpt and checkpoint_problem(p) is None), None)
            hint = (f"the latest intact one is {intact.name}: move {ckpt.name} away to resume "
                    f"from it" if intact else "no earlier checkpoint is intact")
            raise ValueError(f"cannot resume {self.path}: checkpoint {ckpt.name} is corrupt "
                             f"({problem}); {hint}")
        t = self.trainer
        try:
            state = load_checkpoint(ckpt, model=t.policy.model, optimizer=t.policy.optimizer,
                                    scheduler=t.policy.scheduler, extra=t.checkpoint_parts(),
                                    rank=self.dist.rank)
        except (KeyError, RuntimeError) as err:
            raise ValueError(f"cannot resume {self.path}: checkpoint {ckpt.name} does not fit "
                             f"this run ({type(err).__name__}: {err})") from None
        t.load_state(state)
        names = list(t.checkpoint_files())  # the loop's other state (async: its buffer)
        if names:
            try:
                files = load_checkpoint_files(ckpt, names)
            except (RuntimeError, EOFError, OSError) as err:  # a truncated or garbage file
                raise ValueError(f"cannot resume {self.path}: checkpoint {ckpt.name} holds an "
                                 f"unreadable {'/'.join(names)} file ({err})") from None
            t.load_checkpoint_files(files)
        if self.run_dir is not None:
            # the rollouts first: a damaged chunk stops the resume before metrics.jsonl changes
            self.run_dir.truncate_rollouts(after_step=t.step_count)
            self.run_dir.truncate_metrics(after_step=t.step_count)
            first = self.run_dir.read_metrics()
            if first and first[0]["step"] == 0:
                self.accuracy_before = first[0].get("validation/accuracy")
        if self.dist.is_main:
            self.log_line(f"resumed from {ckpt} (step {t.step_count})")
            saved_ranks = saved_rng_ranks(ckpt)
            if saved_ranks != self.dist.world_size:
                warnings.warn(f"{ckpt.name} was saved by {saved_ranks} process(es) and resumes on "
                              f"{self.dist.world_size}: the steps after it will not repeat the "
                              "uninterrupted run's", stacklevel=2)

    # ------------------------------------------------------------------ logging
    def log(self, metrics: StepMetrics | dict[str, Any]) -> None:
        """Log one record: metrics to every logger, the step's rollouts, a checkpoint at
        ``save_period`` (written by the main process; call it on every rank, choice 2)."""
        step = int(metrics.get("step", self.trainer.step_count))
        if step == 0 and self.accuracy_before is None:
            self.accuracy_before = metrics.get("validation/accuracy")
        if self.run_dir is not None and step == 0 and self._stale_step_0:
            self.run_dir.truncate_metrics(after_step=-1)  # choice 8: measured again, replaced
            self._stale_step_0 = False
        if self.run_dir is not None:
            values = {k: v for k, v in metrics.items() if k != "step"}
            self._loggers_open = True  # a writer closed by an earlier train() reopens on write
            for logger in self.loggers:  # the first writes metrics.jsonl
                logger.log(values, step)
            rollout = getattr(metrics, "rollout", None)
            if rollout is not None and self.config.logger.keeps_rollouts(step):
                self.run_dir.write_rollouts(step, rollout_table(rollout, metrics.advantages))
        c = self.config.checkpointing
        if (getattr(metrics, "trained", False) and c.enabled and c.should_save(step)):
            self.save()

    def validate(self) -> dict[str, float]:
        """Held-out accuracy now, logged at the current step (step 0: the accuracy before)."""
        result = self.trainer.validate()
        self.log(StepMetrics({"step": self.trainer.step_count, **result}))
        return result

    def steps(self, num_steps: int | None = None) -> Iterator[StepMetrics]:
        """Train, yielding each step's metrics after it is logged (``None``: up to
        ``max_num_steps`` in total)."""
        t = self.trainer
        target = t.loop_config.max_num_steps
        n = max(0, target - t.step_count) if num_steps is None else num_steps
        if self.dist.is_main:
            clean_partial_saves(self.checkpoint_root)
        logging = False
        try:
            for metrics in t.train(n, progress=self.progress):
                logging = True
                self.log(metrics)
                logging = False
                yield metrics
        except Exception as err:  # choice 7: say what failed, next to what was written
            if isinstance(err, OSError) and not isinstance(err, DiskFull) and out_of_space(
                    err, self.path):  # the logs or rollouts of a step, on a full disk
                err = disk_full(f"the logs of step {t.step_count}", self.path)
            if self.run_dir is not None:
                # a step counts once it is trained: a failure while logging or saving it (its
                # metrics, rollouts, checkpoint) is that step's, one in training the next one's
                step = t.step_count if logging else t.step_count + 1
                with contextlib.suppress(OSError):  # (on a full disk this may fail too)
                    (self.path / "error.txt").write_text(
                        f"failed at step {step} ({type(err).__name__}): {err}\n")
            if isinstance(err, DiskFull):
                raise err from None
            raise
        finally:  # also on Ctrl-C, a Stop button (generator closed) or an error (choice 1)
            self._seal_rollouts()

    def train(self, num_steps: int | None = None) -> dict[str, Any]:
        """Train; returns a summary (accuracy before/after, run directory, time)."""
        t, start, last = self.trainer, time.perf_counter(), {}
        for metrics in self.steps(num_steps):
            last = metrics
        c = self.config.checkpointing
        if c.enabled and t.step_count and not c.should_save(t.step_count):
            self.save()  # always leave a checkpoint of the final step
        self._close_loggers()
        return {
            "steps": t.step_count,
            "seconds": time.perf_counter() - start,
            "accuracy_before": self.accuracy_before,
            "accuracy_after": t.last_validation.get("validation/accuracy"),
            "final_reward": last.get("train/reward", math.nan),
            "run_dir": str(self.path),
            "warm_start": self.warm_start,
        }

    def close(self) -> None:
        """End the run: close the loggers and seal the rollouts' chunk in progress (``train``
        already does both) and, under several processes, leave the process group together.
        Call it once every rank has finished training."""
        self._close_loggers()
        self._seal_rollouts()
        self.trainer.close()  # background work (the async loop's collector)
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

    def _seal_rollouts(self) -> None:
        if self.run_dir is not None:
            self.run_dir.seal_rollouts()

    def _close_loggers(self) -> None:
        if self._loggers_open:
            for logger in self.loggers:
                logger.close()
            self._loggers_open = False


def rollout_table(rollout, advantages) -> dict[str, Any]:
    """Per-response token-level record of one step (lists of per-token values per row); a
    batch that writes its own (DPO's pairs: ``PreferenceBatch.rollout_table``) is asked."""
    if hasattr(rollout, "rollout_table"):
        return rollout.rollout_table(advantages)

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


def saved_config_now(saved: dict) -> dict[str, Any]:
    """A run directory's saved config as this version reads it (``RunDir``'s ``read_saved``): an
    older rlnb wrote the same config in another form (its ``data`` held every task's keys). One
    that no longer loads is compared as written, so the keys that differ are named."""
    try:
        return load_config(saved).model_dump(mode="json")
    except ValueError:
        return saved


def _quiet(*args, **kwargs):
    pass


PARTS = "parts.json"  # which class ran under each registered name the config uses


def record_parts(run_dir: Path, parts: dict[str, str], log) -> None:
    """Write ``parts`` (``parts_in_use``) to ``run_dir/parts.json``; on a resume whose parts
    differ from the recorded ones (a plug-in replaced one since), say which, in one line."""
    path = run_dir / PARTS
    try:
        before = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        before = {}
    changed = [f"{k}: {before[k]} -> {v}" for k, v in parts.items()
               if k in before and before[k] != v]
    if changed:
        log(f"{PARTS}: the run now uses other classes under the same names: {'; '.join(changed)}")
    atomic_write_text(path, json.dumps(parts, indent=1) + "\n")


def nothing_to_resume(path: Path, config: MasterConfig) -> bool:
    """Whether a run to resume holds no checkpoint and trained no step, so it starts again from
    step 0 (choice 8). One that trained steps but saved no checkpoint cannot go on: a ValueError
    naming the way out (its config trains again in a new run directory)."""
    from rlnb.run.store.rundir import RunDir, read_metrics_file

    root = config.checkpointing.resolve_dir(path)
    if latest_checkpoint(root) is not None:
        return False
    steps = [r["step"] for r in read_metrics_file(path / RunDir.METRICS) if r["step"] > 0]
    if not steps:
        return True
    c = config.checkpointing
    why = ("checkpointing.enabled=false: it saves none" if not c.enabled else
           f"checkpointing.save_period={c.save_period}: it stopped before its first save")
    raise ValueError(f"cannot resume {path}: no checkpoint in {root}, though it logged steps up "
                     f"to {max(steps)} ({why}); {path} is left as it is: train its config again "
                     f"in a new run directory: rlnb train {path / RunDir.CONFIG} --run-dir "
                     "NEW_DIR")


def checkpoint_bytes(trainer) -> int:
    """About what a checkpoint of ``trainer`` writes: the policy's weights, its optimizer's
    tensors and the loop's other trained parts (a PPO critic and its optimizer)."""
    import torch

    def tensors(obj) -> int:
        if isinstance(obj, torch.Tensor):
            return obj.numel() * obj.element_size()
        if isinstance(obj, dict):
            return sum(tensors(v) for v in obj.values())
        if isinstance(obj, (list, tuple)):
            return sum(tensors(v) for v in obj)
        return 0

    parts = [(trainer.policy.model, trainer.policy.optimizer),
             *((m, o) for m, o, _ in trainer.checkpoint_parts().values())]
    return sum(tensors(m.state_dict()) + (tensors(o.state_dict()) if o is not None else 0)
               for m, o in parts)

