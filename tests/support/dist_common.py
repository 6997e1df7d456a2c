"""What the two-rank loop scripts (dist_dpo_script.py, dist_ppo_script.py) do after training:
write each rank's weights and records for the test to compare, then leave the process group
together. Imported as a sibling module: `accelerate launch tests/support/<script>.py` puts tests/support/ on
sys.path."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as torch_dist


def write_rank_and_leave(accelerator, trainer, out: Path, start: dict, final: dict,
                         prompts: list, metrics: list) -> None:
    """``out/rank{r}.pt`` (start and final weights) and ``out/rank{r}.json`` (world sizes, each
    step's prompts and metrics), then end training on every rank at once."""
    rank = trainer.dist.rank
    out.mkdir(parents=True, exist_ok=True)
    torch.save({"start": start, "final": final}, out / f"rank{rank}.pt")
    info = {"rank": rank, "world_size": trainer.dist.world_size,
            "torch_world_size": torch_dist.get_world_size() if torch_dist.is_initialized() else 1,
            "prompts": prompts, "metrics": metrics}
    (out / f"rank{rank}.json").write_text(json.dumps(info, indent=1))
    accelerator.wait_for_everyone()
    accelerator.end_training()
    if torch_dist.is_initialized():  # leave together (see rlnb TrainingRun.close)
        torch_dist.destroy_process_group()
