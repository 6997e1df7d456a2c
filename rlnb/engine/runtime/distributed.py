"""The few collective operations the trainer needs, with or without ``accelerate``.

Implementation choices:
1) A single process is the default: every collective is the identity, so notebooks and tests
   need no process group. With an ``accelerate.Accelerator`` the same calls reduce across ranks.
2) FSDP is refused where accelerate does not apply it (CPU processes): the launcher's
   ``ACCELERATE_USE_FSDP`` would otherwise be ignored and the run silently be plain DDP.
3) Prompts are sharded by rank (whole GRPO groups stay on one rank, so per-group baselines need
   no communication); valid-token/sequence counts are summed over ranks *before* the loss, and
   each rank's loss is multiplied by the world size to undo DDP's gradient averaging
   (docs/algorithms.md#masked-helpers-and-reductions).
"""

from __future__ import annotations

import os

import torch

from rlnb.algorithms.reduction import combine_metrics


class Distributed:
    """Rank, world size and sum/min/max reductions (identity when single-process)."""

    def __init__(self, accelerator=None):
        self.accelerator = accelerator
        self.rank = accelerator.process_index if accelerator else 0
        self.world_size = accelerator.num_processes if accelerator else 1
        launched = int(os.environ.get("WORLD_SIZE", "1"))
        if accelerator is not None and launched > 1 and self.world_size == 1:
            raise ValueError(
                f"the launcher started {launched} processes but the Accelerator sees one: on a "
                "machine without GPUs create it with Accelerator(cpu=True) (or set "
                "ACCELERATE_USE_CPU=1), otherwise every process trains alone as rank 0"
            )
        kind = str(getattr(accelerator, "distributed_type", "")).rsplit(".", 1)[-1]
        if accelerator is not None and kind != "FSDP" and \
                os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true":
            # accelerate (1.x) turns FSDP on for GPU-type processes only; with cpu=True it
            # keeps MULTI_CPU and wraps the model in plain DDP, whatever the launcher asked
            raise ValueError(
                f"FSDP (ACCELERATE_USE_FSDP=true, as configs/accelerate/fsdp.yaml sets) works on "
                f"GPUs only: accelerate runs these processes as {kind} and would train plain "
                "DDP; on CPU launch with configs/accelerate/cpu_2proc.yaml")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def _reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        if self.world_size == 1:
            return x
        # NCCL reduces device tensors only; counts are computed on the CPU
        out = self.accelerator.reduce(x.to(self.accelerator.device).clone(), reduction=op)
        return out.to(x.device)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Sum over ranks (float tensor, any shape)."""
        return self._reduce(x.float(), "sum")

    def mean_dict(self, metrics: dict[str, float]) -> dict[str, float]:
        """Average a metrics dict over ranks (min/max keys by min/max)."""
        return self._reduce_dict(metrics, default="mean")

    def sum_loss_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Loss metrics are per-rank partial sums over global counts: sum them over
        ranks; min/max by min/max; ``lr``, ``grad_norm`` and the global counts are already
        the same on every rank, so they are averaged."""
        same = {"lr", "grad_norm", "global_valid_seqs", "global_valid_toks"}
        return self._reduce_dict(metrics, default="sum", mean_keys=same)

    def _reduce_dict(self, metrics, *, default: str, mean_keys=frozenset()) -> dict[str, float]:
        """One gather of all values ``[W, K]``, then min / max / mean / sum per key."""
        if self.world_size == 1 or not metrics:
            return metrics
        keys = sorted(metrics)
        values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
        gathered = self.accelerator.gather(values.to(self.accelerator.device)[None]).cpu()
        per_rank = [dict(zip(keys, row.tolist())) for row in gathered]  # W dicts
        return combine_metrics(per_rank, default=default, mean_keys=mean_keys)

    def gather_object(self, obj) -> list:
        """Every rank's ``obj`` (any picklable value), in rank order, on every rank."""
        if self.world_size == 1:
            return [obj]
        import torch.distributed as torch_dist

        out: list = [None] * self.world_size
        torch_dist.all_gather_object(out, obj)
        return out

    def shard(self, items: list) -> list:
        """This rank's contiguous share of ``items`` (length must divide evenly)."""
        if self.world_size == 1:
            return items
        if len(items) % self.world_size:
            raise ValueError(
                f"grpo.num_prompts_per_step ({len(items)}) must be divisible by the number of "
                f"processes ({self.world_size})"
            )
        n = len(items) // self.world_size
        return items[self.rank * n : (self.rank + 1) * n]
