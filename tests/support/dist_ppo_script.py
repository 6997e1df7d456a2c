"""A few PPO steps under ``accelerate``; launched by tests/engine/test_ppo.py (not collected).

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no tests/support/dist_ppo_script.py OUT [STEPS]

Every rank writes to OUT ``rank{r}.pt``: the policy's and the critic's parameters before the
first PPO step and after the last, and ``rank{r}.json``: rank, world size, the prompts it trained
on and its per-step metrics. Rewards come from the response length (``score_by_length``), so a
fresh tiny model has a learning signal without a warm start.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from accelerate import Accelerator
from dist_common import write_rank_and_leave

from rlnb.engine.trainers.ppo import PPOTrainer
from rlnb.run.config.master_config import load_config

OVERRIDES = [
    "ppo.val_period=0", "ppo.ppo_epochs=2", "sft.enabled=false", "ppo.policy_training_start_step=0",
    "policy.train_global_batch_size=16", "value.train_global_batch_size=16",
    "policy.train_micro_batch_size=4", "value.train_micro_batch_size=4",
]  # fmt: skip


def score_by_length(prompts, responses, rows):
    """Rewards that vary between rows and ranks (a fresh model answers nothing right), so both
    the critic's and the actor's gradients are non-zero and differ between the ranks' shards."""
    from rlnb.engine.environments.base import Rewards

    r = torch.tensor([float(len(text) % 2) for text in responses])
    return Rewards(total=r, components={}, correct=r > 0)


def weights(trainer) -> dict[str, torch.Tensor]:
    named = [("policy", trainer.policy.model), ("critic", trainer.critic.model)]
    return {f"{who}.{k}": v.detach().clone() for who, m in named for k, v in m.named_parameters()}


def main(out: Path, steps: int) -> None:
    accelerator = Accelerator(cpu=not torch.cuda.is_available())  # as `rlnb train`
    config = load_config("configs/ppo_tiny.yaml", OVERRIDES, preset="fast")
    trainer = PPOTrainer(config, accelerator=accelerator)
    trainer.task.score = score_by_length
    start = weights(trainer)  # builds the critic (from the policy) on every rank
    metrics, prompts = [], []
    for m in trainer.train(steps):
        metrics.append(dict(m))
        prompts.append(sorted({r["prompt"] for r in m.rollout.rows}))
    write_rank_and_leave(accelerator, trainer, out, start, weights(trainer), prompts, metrics)


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2)
