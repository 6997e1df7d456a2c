"""Async vs synchronous GRPO on the embedded default: steps per minute and accuracy, same budget.

For each seed: build the tiny model from configs/tiny.yaml (synchronous GRPO, the default) and
from configs/async_tiny.yaml (the same model, task and warm start; a collector thread generating
up to one step ahead, prev_logprobs recomputed, importance weights truncated at 2), warm-start it
(cached, shared by both), measure held-out accuracy (200 problems, one sampled answer each),
train for a fixed wall time and measure again. Training steps per minute count training time
only (validation excluded). Thread counts: the synchronous trainer uses every core; the async
loop gives each side half (grpo.async_grpo.*_threads), so the two do not fight over the cores.
The aim it measures against: async >= 1.3x the synchronous steps per minute with
max_trajectory_age_steps=1, and held-out accuracy at least as good within noise (3 seeds).

    python benchmarks/bench_async.py [--seeds 0 1 2] [--minutes 3] [--age 1]

The machine's load average is printed with the table: other processes slow every step down.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import statistics
import time

import torch
from harness import load_text, machine_line

from rlnb.run.config.master_config import load_config
from rlnb.run.training.warm_trainer import trainer_with_warm_start

CONFIGS = {"sync": "configs/tiny.yaml", "async": "configs/async_tiny.yaml",
           "async_recompute": "configs/async_tiny.yaml",
           "async_2_trainer_threads": "configs/async_tiny.yaml"}
EXTRA = {"async_recompute": ["loss_fn.force_on_policy_ratio=false"],  # a second forward pass
         # the trainer keeps both cores (the collector's thread mostly waits for weights)
         "async_2_trainer_threads": ["grpo.async_grpo.trainer_threads=2"]}


def run(loop: str, seed: int, minutes: float, age: int) -> dict:
    extra = [f"grpo.async_grpo.max_trajectory_age_steps={age}"] if loop != "sync" else []
    cfg = load_config(CONFIGS[loop], [f"grpo.seed={seed}", "grpo.val_period=0", *extra,
                                      *EXTRA.get(loop, [])])
    torch.set_num_threads(os.cpu_count() or 1)  # the async trainer sets its own while it runs
    trainer, _ = trainer_with_warm_start(cfg)  # as TrainingRun
    before = trainer.validate()["validation/accuracy"]
    ages, waits, weights_std = collections.Counter(), [], []
    start = time.perf_counter()
    steps = trainer.train(10**9)
    first_step_s = None
    try:
        for metrics in steps:
            if first_step_s is None:
                first_step_s = time.perf_counter() - start
            if loop != "sync":
                versions = metrics.rollout.weight_versions
                ages.update((metrics["step"] - 1 - versions).tolist())
                waits.append(metrics["timing/train/wait_for_trajectories"])
                weights_std.append(metrics["train/sampling_importance_ratio"])
            if time.perf_counter() - start >= 60 * minutes:
                break
    finally:
        steps.close()  # stops the collector
    train_s = time.perf_counter() - start
    after = trainer.validate()["validation/accuracy"]
    groups = sum(ages.values()) or 1
    return {"loop": loop, "seed": seed, "steps": trainer.step_count, "before": before,
            "after": after, "steps_per_min": 60 * trainer.step_count / train_s,
            "first_step_s": first_step_s or math.nan, "load": load_text(),
            "ages": {a: n / groups for a, n in sorted(ages.items())},
            "wait": statistics.mean(waits) if waits else math.nan,
            "w_mean": statistics.mean(weights_std) if weights_std else math.nan}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--age", type=int, default=1, help="max_trajectory_age_steps")
    ap.add_argument("--loops", nargs="+", default=["sync", "async"], choices=list(CONFIGS),
                    help="async_recompute: async with a separate prev_logprobs forward")
    args = ap.parse_args()
    print(f"{machine_line()}; {args.minutes} min per run, "
          f"max_trajectory_age_steps={args.age}")
    rows = []
    for seed in args.seeds:
        for loop in args.loops:
            r = run(loop, seed, args.minutes, args.age)
            rows.append(r)
            print(f"{loop} seed {seed}: {r['steps']} steps, {r['steps_per_min']:.0f}/min, "
                  f"{100 * r['before']:.1f}% -> {100 * r['after']:.1f}%", flush=True)
    print(f"\nload average at the end {load_text()}\n")
    print("| loop | seed | steps | steps/min | accuracy before | after | gain (pts) | "
          "load at its end (1, 5, 15 min) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['loop']} | {r['seed']} | {r['steps']} | {r['steps_per_min']:.0f} | "
              f"{100 * r['before']:.1f}% | {100 * r['after']:.1f}% | "
              f"{100 * (r['after'] - r['before']):+.1f} | {r['load']} |")
    for loop in [k for k in args.loops if k != "sync"]:
        ratios, gains = [], {"sync": [], loop: []}
        for seed in args.seeds:
            s, a = (next(r for r in rows if r["seed"] == seed and r["loop"] == k)
                    for k in ("sync", loop))
            ratios.append(a["steps_per_min"] / s["steps_per_min"])
            gains["sync"].append(s["after"] - s["before"])
            gains[loop].append(a["after"] - a["before"])
            print(f"\nseed {seed}: {loop}/sync steps per minute {ratios[-1]:.2f}x; accuracy "
                  f"gain {loop} {100 * gains[loop][-1]:+.1f} vs sync "
                  f"{100 * gains['sync'][-1]:+.1f} pts; trajectory ages "
                  + ", ".join(f"{age}: {100 * f:.0f}%" for age, f in a["ages"].items())
                  + f"; mean wait for data {1000 * a['wait']:.0f} ms; mean importance weight "
                  f"(after truncation) {a['w_mean']:.4f}")
        mean_ratio = statistics.mean(ratios)
        print(f"\n{loop}: speed-up {mean_ratio:.2f}x (target >= 1.3x: "
              f"{'met' if mean_ratio >= 1.3 else 'NOT met'}); mean gain sync "
              f"{100 * statistics.mean(gains['sync']):+.1f} pts, {loop} "
              f"{100 * statistics.mean(gains[loop]):+.1f} pts")

if __name__ == "__main__":
    main()
