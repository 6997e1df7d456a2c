"""A few DPO steps under ``accelerate``; launched by tests/engine/test_dpo.py (not collected).

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no tests/support/dist_dpo_script.py OUT [STEPS]

Every rank writes to OUT ``rank{r}.pt``: the policy's parameters before the first DPO step and
after the last, and ``rank{r}.json``: rank, world size, the prompts it paired and its per-step
metrics. Rewards come from the response length (``score_by_length``), so a fresh tiny model has
pairs without a warm start, and the ranks' pairs (and gradients) differ.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from dist_common import write_rank_and_leave

from rlnb.engine.trainers.dpo import DPOTrainer
from rlnb.run.config.master_config import load_config

OVERRIDES = ["dpo.val_period=0", "sft.enabled=false", "policy.train_global_batch_size=16",
             "policy.train_micro_batch_size=4"]


def score_by_length(prompts, responses, rows):
    """0/1 by the parity of the response's length: most groups hold both."""
    from rlnb.engine.environments.base import Rewards

    r = torch.tensor([float(len(text) % 2) for text in responses])
    return Rewards(total=r, components={}, correct=r > 0)


def weights(trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters()}


def main(out: Path, steps: int) -> None:
    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # as `rlnb train`
    config = load_config("configs/dpo_tiny.yaml", OVERRIDES, preset="fast")
    trainer = DPOTrainer(config, accelerator=accelerator)
    trainer.task.score = score_by_length
    start = weights(trainer)
    metrics, prompts = [], []
    for m in trainer.train(steps):
        metrics.append(dict(m))
        prompts.append(sorted(set(m.rollout.prompts)))
    write_rank_and_leave(accelerator, trainer, out, start, weights(trainer), prompts, metrics)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
