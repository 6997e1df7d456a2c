"""Does PPO with a value model learn the embedded default too? PPO vs GRPO, same budget, per seed.

For each seed and loop: build the tiny character-level Llama from the loop's config
(configs/ppo_tiny.yaml for PPO, configs/tiny.yaml for GRPO: the same model, task and warm start),
warm-start it (the supervised run, cached after the first time and shared by both loops),
measure held-out accuracy (200 validation problems never trained on, one sampled answer each),
train for a fixed wall-time budget (validation time included) and measure again.
The aim it measures against: PPO gains >= +25 points in 5 minutes on 2 CPU cores for seeds 0, 1
and 2, with the critic's explained variance rising above 0.3 during training.

    python benchmarks/bench_ppo.py [--seeds 0 1 2 3] [--minutes 5] [--algos ppo grpo]

Explained variance columns: ``EV max`` is the maximum of NeMo-RL's ``critic/explained_var``
(measured in the last critic pass of a step, after ppo_epochs-1 passes on the same batch);
``EV0 max`` the maximum of ``critic/explained_var_before_update`` (the first pass: a batch the
critic has not trained on yet). The machine's load average is printed with the table: other
processes on the machine slow every step down.
"""

from __future__ import annotations

import argparse
import math
import time

from harness import load_text, machine_line

from rlnb.run.config.master_config import load_config
from rlnb.run.training.warm_trainer import trainer_with_warm_start

CONFIGS = {"ppo": "configs/ppo_tiny.yaml", "grpo": "configs/tiny.yaml"}


def run(algo: str, seed: int, minutes: float, val_every: int, extra=()) -> dict:
    cfg = load_config(CONFIGS[algo], [f"{algo}.seed={seed}", f"{algo}.val_period=0", *extra])
    trainer, _ = trainer_with_warm_start(cfg)  # as TrainingRun
    before = trainer.validate()["validation/accuracy"]
    start, curve, evs, ev0s = time.perf_counter(), [(0, 0.0, before, math.nan)], [], []
    train_s = 0.0
    while time.perf_counter() - start < 60 * minutes:
        t0 = time.perf_counter()
        m = trainer.step()
        train_s += time.perf_counter() - t0
        evs.append(m.get("critic/explained_var", math.nan))
        ev0s.append(m.get("critic/explained_var_before_update", math.nan))
        if trainer.step_count % val_every == 0:
            acc = trainer.validate()["validation/accuracy"]
            window = evs[-val_every:]  # the critic's mean EV since the last point
            curve.append((trainer.step_count, time.perf_counter() - start, acc,
                          sum(window) / len(window)))
    after = trainer.validate()["validation/accuracy"]
    return {"algo": algo, "seed": seed, "steps": trainer.step_count, "before": before,
            "after": after, "s_per_step": train_s / max(trainer.step_count, 1),
            "seconds": time.perf_counter() - start, "ev_max": max(evs, default=math.nan),
            "ev0_max": max(ev0s, default=math.nan), "curve": curve,
            "load": load_text()}  # the 5-minute load average: over (about) this run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--algos", nargs="+", default=["ppo", "grpo"], choices=list(CONFIGS))
    parser.add_argument("--val-every", type=int, default=100)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra overrides for the PPO runs, e.g. ppo.ppo_epochs=2")
    args = parser.parse_args()
    print(f"{machine_line()}; {args.minutes} min per run", flush=True)
    rows = []
    for seed in args.seeds:
        for algo in args.algos:
            r = run(algo, seed, args.minutes, args.val_every, args.set if algo == "ppo" else ())
            rows.append(r)
            print(f"{algo} seed {seed}: {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% "
                  f"in {r['steps']} steps; curve (step, s, acc, mean EV): "
                  + ", ".join(f"({s}, {t:.0f}, {100 * a:.0f}%, {ev:.2f})"
                              for s, t, a, ev in r["curve"]), flush=True)
    print(f"\nload average at the end {load_text()}\n")
    print("| loop | seed | steps | accuracy before | after | gain (pts) | s/step | EV max | "
          "EV0 max | load at its end (1, 5, 15 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ev = (f"{r['ev_max']:.2f} | {r['ev0_max']:.2f}" if not math.isnan(r["ev_max"])
              else "— | —")
        print(f"| {r['algo']} | {r['seed']} | {r['steps']} | {100 * r['before']:.1f}% | "
              f"{100 * r['after']:.1f}% | {100 * (r['after'] - r['before']):+.1f} | "
              f"{r['s_per_step']:.2f} | {ev} | {r['load']} |")
    ppo = [r for r in rows if r["algo"] == "ppo"]
    met = all(r["after"] - r["before"] >= 0.25 and r["ev_max"] > 0.3 for r in ppo)  # NaN: False
    print(f"\nPPO target (>= +25 pts and EV > 0.3 for every seed): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
