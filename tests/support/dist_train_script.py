"""A few GRPO steps under ``accelerate``; launched by tests/run/test_distributed.py (not collected).

    accelerate launch --multi_gpu --num_processes 2 --num_machines 1 --mixed_precision no \
        --dynamo_backend no tests/support/dist_train_script.py OUT [STEPS]

Every rank writes to OUT:
- ``rank{r}.pt``: ``{name: parameter}`` after training; ``start_rank{r}.pt``: the same before the
  first GRPO step (after the warm start, so a difference means GRPO itself moved the weights);
- ``rank{r}.json``: rank, world size, the prompts it trained on, per-step metrics, and a
  gradient check: the gradient of one more update under DDP (this rank's shard, counts summed
  over ranks, loss x world size) against one process computing it on every rank's rows.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as torch_dist
from accelerate import Accelerator
from tiny_config import TINY

from rlnb.engine.models.policy import Policy
from rlnb.engine.runtime.distributed import Distributed
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config
from rlnb.run.store.warm_start_cache import cached_warm_start

SMALL = [
    *TINY, "grpo.val_period=0", "data.max_operand=9",
    # a short warm start so some groups have mixed rewards (non-zero advantages), plus a KL
    # term, so the GRPO steps have gradients that differ between ranks
    "sft.enabled=true", "sft.max_steps=60", "sft.stop_at_accuracy=null", "sft.cache=false",
    "sft.lr=3e-3",  # 60 steps at tiny.yaml's 1e-3 leave every reward 0 here
    "loss_fn.reference_policy_kl_penalty=0.05",
]  # fmt: skip


def pad_right(data: dict[str, torch.Tensor], width: int) -> dict[str, torch.Tensor]:
    """Right-pad the ``[B, S]`` tensors with zeros (masked out: attention 0, token_mask 0)."""
    return {
        k: torch.nn.functional.pad(v, (0, width - v.shape[1])) if v.dim() == 2 else v
        for k, v in data.items()
    }


def gradient_check(trainer: GRPOTrainer, advantages) -> dict[str, float]:
    """DDP gradient of this rank's shard vs. the one-process gradient of all ranks' rows."""
    policy = trainer.policy
    noclip = policy.config.model_copy(update={"max_grad_norm": None})
    reference = Policy(
        noclip,
        model=copy.deepcopy(policy.model),
        tokenizer=policy.tokenizer,
        dist=Distributed(),
    )
    mine = advantages.train_data()
    shards: list = [None] * trainer.dist.world_size
    torch_dist.all_gather_object(shards, mine)
    width = max(s["input_ids"].shape[1] for s in shards)
    shards = [pad_right(s, width) for s in shards]
    full = {k: torch.cat([s[k] for s in shards]) for k in mine}
    reference.optimizer_step(full, trainer.loss_fn)  # one process, every row
    saved = policy.config
    policy.config = noclip
    try:
        policy.optimizer_step(mine, trainer.loss_fn)  # this rank's rows through DDP
    finally:
        policy.config = saved
    want = torch.cat([p.grad.flatten() for p in reference.model.parameters()])
    got = torch.cat([p.grad.flatten() for p in policy.model.parameters()])
    return {
        "rows_per_rank": int(mine["input_ids"].shape[0]),
        "rows_total": int(full["input_ids"].shape[0]),
        "grad_norm": float(want.norm()),
        "max_abs_diff": float((got - want).abs().max()),
        "rel_diff": float((got - want).norm() / want.norm().clamp(min=1e-30)),
    }


def main(out: Path, steps: int) -> None:
    # as `rlnb train`: without cpu=True on a machine with no GPU, each process is rank 0 of 1
    accelerator = Accelerator(cpu=not torch.cuda.is_available())
    config = load_config(None, SMALL)
    trainer = GRPOTrainer(config, accelerator=accelerator)
    rank, world = trainer.dist.rank, trainer.dist.world_size
    with torch.random.fork_rng(devices=[]):  # as TrainingRun: the same warm start on every rank
        torch.manual_seed(config.grpo.seed)
        cached_warm_start(trainer, config.sft, log=lambda *a: None, write=rank == 0)
    named = trainer.policy.model.named_parameters
    start = {k: v.detach().clone() for k, v in named()}
    metrics, prompts, nonzero_adv = [], [], []
    for m in trainer.train(steps):
        rollout, advantages = m.rollout, m.advantages
        metrics.append(m)
        prompts.append(sorted({r["prompt"] for r in rollout.rows}))
        nonzero_adv.append(int((advantages.advantages != 0).any(dim=1).sum()))
    final = {k: v.detach().clone() for k, v in named()}
    check = gradient_check(trainer, advantages)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(start, out / f"start_rank{rank}.pt")
    torch.save(final, out / f"rank{rank}.pt")
    info = {
        "rank": rank,
        "world_size": world,
        "overrides": SMALL,
        "torch_world_size": torch_dist.get_world_size() if torch_dist.is_initialized() else 1,
        "backend": torch_dist.get_backend() if torch_dist.is_initialized() else None,
        "prompts": prompts,
        "rows_with_nonzero_advantage": nonzero_adv,
        "metrics": metrics,
        "gradient_check": check,
    }
    (out / f"rank{rank}.json").write_text(json.dumps(info, indent=1))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if torch.distributed.is_initialized():  # leave together (see rlnb TrainingRun.close)
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3)
