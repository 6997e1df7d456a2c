"""Does the embedded default visibly learn? Held-out accuracy before and after GRPO, per seed.

For each seed: build the tiny character-level Llama (configs/tiny.yaml), warm-start it with the
short supervised run (cached after the first time), measure held-out accuracy (200 validation
problems never seen in training, one sampled answer each at temperature 1), then train with
GRPO for a fixed wall-time budget (validation time included) and measure again.
Target (issue 3): +30 percentage points within 5 minutes on 2 CPU cores, for each of 3 seeds.

    python benchmarks/bench_embedded_default.py [--seeds 0 1 2] [--minutes 5]
"""

from __future__ import annotations

import argparse
import time

import torch

from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.engine.trainers.warm_start import warm_start
from rlnb.run.master_config import load_config


def run_seed(seed: int, minutes: float, config: str, val_every: int, extra=()) -> dict:
    cfg = load_config(config, [f"grpo.seed={seed}", "grpo.val_period=0", *extra])
    trainer = GRPOTrainer(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ws = warm_start(trainer, cfg.sft, log=lambda *a: None)
    before = trainer.validate()["validation/accuracy"]
    start, curve, reached = time.perf_counter(), [(0, 0.0, before)], None
    while time.perf_counter() - start < 60 * minutes:
        trainer.step()
        if trainer.step_count % val_every == 0:
            acc = trainer.validate()["validation/accuracy"]
            elapsed = time.perf_counter() - start
            curve.append((trainer.step_count, elapsed, acc))
            if reached is None and acc - before >= 0.30:
                reached = elapsed
    after = trainer.validate()["validation/accuracy"]
    return {
        "seed": seed,
        "warm_start_steps": ws["steps"],
        "warm_start_s": ws.get("seconds"),
        "cached": ws["cached"],
        "before": before,
        "after": after,
        "best": max(a for *_, a in curve + [(0, 0, after)]),
        "steps": trainer.step_count,
        "seconds": time.perf_counter() - start,
        "reached_30pp_s": reached,
        "curve": curve,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--val-every", type=int, default=100)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra config overrides, e.g. sft.max_steps=4000")
    args = parser.parse_args()
    print(
        f"embedded default, {torch.get_num_threads()} threads, {args.minutes} min of GRPO per seed"
    )
    results = []
    for seed in args.seeds:
        r = run_seed(seed, args.minutes, args.config, args.val_every, args.set)
        results.append(r)
        ws = "cached" if r["cached"] else f"{r['warm_start_s']:.0f}s"
        reached = "never" if r["reached_30pp_s"] is None else f"{r['reached_30pp_s']:.0f}s"
        print(
            f"seed {seed}: warm start {r['warm_start_steps']} SFT steps ({ws}); held-out "
            f"accuracy {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% "
            f"({100 * (r['after'] - r['before']):+.1f} pts) after {r['steps']} GRPO steps in "
            f"{r['seconds']:.0f}s; +30 pts first reached at {reached}",
            flush=True,
        )
        print(
            "  curve (step, s, acc): "
            + ", ".join(f"({s}, {t:.0f}, {100 * a:.0f}%)" for s, t, a in r["curve"]),
            flush=True,
        )
    gains = [r["after"] - r["before"] for r in results]
    print(
        f"gain per seed (pts): {[round(100 * g, 1) for g in gains]}; target >= +30 for each: "
        f"{'met' if all(g >= 0.30 for g in gains) else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
