"""Held-out validation, every loop's: ``trainer.validate()`` samples the task's held-out rows and
reports the mean reward, the length, and (when the task defines ``correct``) accuracy and pass@k.

    trainer.validate()          # {"validation/accuracy": 0.42, "validation/reward": ..., ...}

``Trainer`` inherits ``Validation`` (a mixin, as ``SaveState``: it reads the trainer's task,
policy, loop section and step count). Nothing here runs during a training step.

Implementation choices:
1) Validation samples on its own random state (``isolated_rng``: seeded by the seed and the
   step), so it never draws from the training stream: a run validated at other steps, or
   resumed, trains exactly the same.
2) A task with no held-out rows is refused by name (``run_task.check_held_out_rows``; the
   trainer checks it when built if its loop validates).
"""

from __future__ import annotations

import contextlib

import torch

from rlnb.engine.environments.run_task import check_held_out_rows


@contextlib.contextmanager
def isolated_rng(seed: int, device: torch.device | None = None):
    """Run the block on its own seeded random state; the caller's state is untouched after."""
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


class Validation:
    """The validation half of ``Trainer`` (module docstring)."""

    @torch.no_grad()
    def validate(self, num_prompts: int | None = None) -> dict[str, float]:
        """Held-out results: ``validation/reward`` (mean reward), ``avg_length``, and when the
        task defines ``correct``, ``accuracy`` (share correct) and ``pass_k``."""
        loop = self.loop_config
        available = len(self.task.val_rows())
        if not available:  # (a task swapped in since the trainer was built: choice 2)
            check_held_out_rows(self.task, "trainer.validate()")
        wanted = num_prompts or loop.max_val_samples or available  # null: every held-out row
        rows = self.dist.shard(self.task.val_rows(min(wanted, available)))
        k = loop.val_num_generations_per_prompt
        # choice 1: its own random state, so validating never shifts the training stream
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
