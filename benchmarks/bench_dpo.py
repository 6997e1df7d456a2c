"""Offline DPO, on-policy DPO and GRPO on the embedded default: held-out accuracy in a wall-time
budget, from the same warm start.

For each seed: warm-start the tiny model once (the supervised run of configs/tiny.yaml, cached on
disk and shared by the three arms: configs/dpo_tiny.yaml has the same policy, task and SFT
settings), then for each arm build its trainer from the warm start, measure held-out accuracy
(200 problems never trained on, one sampled answer each), train for ``--minutes`` of wall time and
measure again, with accuracy checkpoints every ``--every`` minutes of training (validation time is
not counted in the budget). The arms:

- ``offline_dpo``: configs/dpo_tiny.yaml with ``dpo.pairs.source=warm_start``: pairs sampled once
  from the warm-started policy (``pool_prompts`` prompts x G answers, a right answer preferred to
  a wrong one), then cycled through; the pool's sampling counts in the budget;
- ``online_dpo``: configs/dpo_tiny.yaml as shipped: fresh pairs from the current policy every step;
- ``grpo``: configs/tiny.yaml (the embedded default).

The aim it measures against: on-policy DPO gains at least +20 held-out points in 5 minutes on
each of seeds 0, 1, 2; offline DPO is reported as measured. The machine's load average is printed
with every row: other processes slow every step down, and a budget in seconds then buys fewer
steps.

    python benchmarks/bench_dpo.py [--seeds 0 1 2] [--minutes 5] [--arms online_dpo grpo]
    python benchmarks/bench_dpo.py --minutes 0.2 --seeds 0          # a smoke run
    python benchmarks/bench_dpo.py --seeds 3 4 5 --set dpo.reference_policy_kl_penalty=0.2
"""

from __future__ import annotations

import argparse
import os

from harness import load_text, machine_line

from rlnb.run.config.master_config import load_config
from rlnb.run.training.timed import train_for
from rlnb.run.training.warm_trainer import trainer_with_warm_start

ARMS = {
    "offline_dpo": ("configs/dpo_tiny.yaml", ["dpo.pairs.source=warm_start"]),
    "online_dpo": ("configs/dpo_tiny.yaml", []),
    "grpo": ("configs/tiny.yaml", []),
}


def run_arm(arm: str, seed: int, minutes: float, every: float, extra: list[str]) -> dict:
    path, over = ARMS[arm]
    section = "grpo" if arm == "grpo" else "dpo"
    mine = [x for x in extra if x.startswith((f"{section}.", "policy."))]
    cfg = load_config(path, [f"{section}.seed={seed}", f"{section}.val_period=0", *over, *mine])
    trainer, warm = trainer_with_warm_start(cfg)  # as TrainingRun
    curve = train_for(trainer, 60 * minutes, 60 * every)  # validation is off the clock
    return {"arm": arm, "seed": seed, "before": curve[0][2], "after": curve[-1][2],
            "steps": trainer.step_count, "seconds": curve[-1][0], "curve": curve,
            "warm_cached": warm.get("cached")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--every", type=float, default=1.0,
                        help="minutes of training between accuracy checkpoints")
    parser.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra overrides (dpo.* go to the DPO arms, grpo.* to GRPO, "
                        "policy.* to all)")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"DPO (offline, on-policy) vs GRPO, {args.minutes:g} min each ({machine_line()}); "
          f"extra: {' '.join(args.set) or 'none'}", flush=True)
    print(f"{'arm':>12} {'seed':>4} {'before':>7} {'after':>7} {'gain':>6} {'steps':>6} "
          f"{'train s':>7} {'load':>14}", flush=True)
    rows = []
    for seed in args.seeds:
        for arm in args.arms:
            r = run_arm(arm, seed, args.minutes, args.every, args.set)
            rows.append(r)
            print(f"{arm:>12} {seed:>4} {100 * r['before']:>6.1f}% {100 * r['after']:>6.1f}% "
                  f"{100 * (r['after'] - r['before']):>+6.1f} {r['steps']:>6} "
                  f"{r['seconds']:>6.0f}s {load_text():>14}", flush=True)
            print("             curve (s, step, acc): " + ", ".join(
                f"({s:.0f}, {n}, {100 * a:.0f}%)" for s, n, a in r["curve"]), flush=True)
    for arm in args.arms:
        gains = [round(100 * (r["after"] - r["before"]), 1) for r in rows if r["arm"] == arm]
        print(f"{arm}: gains {gains}", flush=True)
    if "online_dpo" in args.arms:
        gains = [r["after"] - r["before"] for r in rows if r["arm"] == "online_dpo"]
        met = all(g >= 0.20 for g in gains)
        print(f"on-policy DPO: +20 held-out points in {args.minutes:g} minutes on every seed: "
              f"{'met' if met else 'NOT met'}", flush=True)


if __name__ == "__main__":
    main()
