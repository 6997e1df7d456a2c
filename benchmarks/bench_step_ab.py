"""A/B of whole GRPO steps: two or more arms of overrides on one config, stepped in turn in one
process, so the machine's drift (±15 % between identical runs on 2 cores) falls on every arm
alike. Each arm is a trainer from the same config and seed (its warm start from rlnb's cache,
or trained once), warmed up, then stepped one step at a time round-robin; the table gives the
median seconds of the step's stages from its own timing metrics and each arm's ratio to the
first.

    python benchmarks/bench_step_ab.py [--config configs/tiny.yaml] [--steps 60] \
        --arm base= --arm sdpa=policy.attn_implementation=null [--arm NAME=K=V,K=V ...]

An arm is ``NAME=`` followed by comma-separated dotted overrides (none: the config itself). The
arms' metrics part after their first step (different kernels round differently), so later steps
sample different responses: the step count evens that out. The load is printed before and after.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from harness import ROOT, load_text, machine_line

STAGES = {"generation": "timing/train/generation", "update": "timing/train/policy_training",
          "step": "timing/train/total_step_time"}


def parse_arm(text: str) -> tuple[str, list[str]]:
    name, sep, rest = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--arm {text!r}: expected NAME=K=V,K=V (or NAME=)")
    return name, [item for item in rest.split(",") if item]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "tiny.yaml"))
    parser.add_argument("--arm", type=parse_arm, action="append", required=True,
                        help="NAME=K=V,K=V (repeat; the first is the reference)")
    parser.add_argument("--steps", type=int, default=60, help="measured steps per arm")
    parser.add_argument("--warmup", type=int, default=10, help="steps per arm before measuring")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if len(args.arm) < 2 or args.steps < 1 or args.warmup < 0:
        parser.error("give at least two --arm, --steps >= 1 and --warmup >= 0")
    torch.set_num_threads(args.threads)
    import rlnb

    print(f"step A/B on {machine_line()}")
    base = [f"grpo.seed={args.seed}", "grpo.val_period=0", "grpo.val_at_start=false",
            "grpo.val_at_end=false", "checkpointing.enabled=false"]
    trainers = {}
    for name, overrides in args.arm:
        config = rlnb.load_config(args.config, [*base, *overrides])
        trainers[name], _ = rlnb.trainer_with_warm_start(config)
    for trainer in trainers.values():
        for _ in range(args.warmup):
            trainer.step()
    times: dict[str, dict[str, list[float]]] = {n: {s: [] for s in STAGES} for n in trainers}
    start = time.perf_counter()
    for _ in range(args.steps):
        for name, trainer in trainers.items():
            metrics = trainer.step()
            for stage, key in STAGES.items():
                times[name][stage].append(1000 * metrics[key])
    print(f"{args.steps} steps per arm after {args.warmup} warm-up, in turn "
          f"({time.perf_counter() - start:.0f} s); median ms (ratio to {args.arm[0][0]}); "
          f"load {load_text()}")
    ref = times[args.arm[0][0]]
    print(f"  {'arm':12s}" + "".join(f"{s:>22s}" for s in STAGES) + "   overrides")
    for name, overrides in args.arm:
        cells = []
        for stage in STAGES:
            med = statistics.median(times[name][stage])
            cells.append(f"{med:9.1f} ({med / statistics.median(ref[stage]):.2f}x)")
        print(f"  {name:12s}" + "".join(f"{c:>22s}" for c in cells) + "   "
              + (" ".join(overrides) or "(the config)"))


if __name__ == "__main__":
    main()
