"""Time to accuracy of the embedded default: what `rlnb train` with no arguments does, per seed.

For each seed this does what `rlnb train` does (``TrainingRun(None).train()``: build the tiny
character-level Llama, warm-start it with the supervised run, validate, train with GRPO for
``grpo.max_num_steps`` steps validating every ``grpo.val_period``, validate at the end) with a
cold warm-start cache (a fresh ``RLNB_CACHE_DIR`` per run), so the clock includes the warm start.
Held-out accuracy: 200 validation problems never trained on, one answer each sampled at
temperature 1. It prints, per seed, the accuracy before GRPO and at the end, the gain, the seconds
(from the run's construction) at which the gain first reached +30 and +40 points, the steps and
the total seconds, for the current default and for the previous one (``PREVIOUS``: the default
before the current recipe, as overrides), side by side in one run, with the machine's load
average.

The aim it measures against: +40 points within 5 minutes for each of seeds 0, 1, 2 (check 3-5 as
well).

    python benchmarks/bench_embedded_default.py [--seeds 0 1 2] [--defaults current previous]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from harness import load_text, machine_line

# the embedded default before the current recipe (configs/tiny.yaml at a008d31, NeMo-RL's
# numerics: the leave-one-out baseline, rows in order, each step's own token count), as overrides
PREVIOUS = [
    "grpo.use_leave_one_out_baseline=true", "grpo.update_rows=in_order",
    "grpo.token_normalizer=global_batch",
]


def run_seed(seed: int, overrides: list[str]) -> dict:
    from rlnb.run.training.session import TrainingRun

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RLNB_CACHE_DIR"] = os.path.join(tmp, "cache")  # cold: no cached warm start
        start = time.perf_counter()
        # everything `rlnb train` writes is written (metrics, rollouts, checkpoints)
        run = TrainingRun(None, overrides=[f"grpo.seed={seed}", *overrides],
                          run_dir=os.path.join(tmp, "run"), progress=False, log=lambda *a: None)
        warm = time.perf_counter() - start
        curve = []  # (step, seconds since start, accuracy)
        if run.trainer.last_validation:
            curve.append((0, time.perf_counter() - start,
                          run.trainer.last_validation["validation/accuracy"]))
        for metrics in run.steps():
            if "validation/accuracy" in metrics:
                curve.append((metrics["step"], time.perf_counter() - start,
                              metrics["validation/accuracy"]))
        seconds = time.perf_counter() - start
        run.close()
    before = run.accuracy_before if run.accuracy_before is not None else curve[0][2]

    def first(points: float) -> float | None:
        return next((s for _, s, a in curve if a - before >= points / 100), None)

    return {"seed": seed, "before": before, "after": curve[-1][2], "steps": curve[-1][0],
            "seconds": seconds, "warm_start_s": warm, "to30": first(30), "to40": first(40),
            "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--defaults", nargs="+", default=["current", "previous"],
                        choices=["current", "previous"])
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra overrides on the current default (to try a recipe)")
    args = parser.parse_args()
    print(f"embedded default (`rlnb train`), cold warm-start cache ({machine_line()})",
          flush=True)
    print(f"previous default = current + {' '.join(PREVIOUS)}", flush=True)
    header = (f"{'default':>8} {'seed':>4} {'before':>7} {'after':>7} {'gain':>6} {'to +30':>7} "
              f"{'to +40':>7} {'steps':>6} {'warm':>5} {'total':>6} {'load':>14}")
    rows = []
    print(header, flush=True)
    for seed in args.seeds:
        for which in args.defaults:
            over = PREVIOUS if which == "previous" else args.set
            r = run_seed(seed, over)
            rows.append((which, r))

            def fmt(s):
                return "never" if s is None else f"{s:.0f}s"

            print(f"{which:>8} {seed:>4} {100 * r['before']:>6.1f}% {100 * r['after']:>6.1f}% "
                  f"{100 * (r['after'] - r['before']):>+6.1f} {fmt(r['to30']):>7} "
                  f"{fmt(r['to40']):>7} {r['steps']:>6} {r['warm_start_s']:>4.0f}s "
                  f"{r['seconds']:>5.0f}s {load_text():>14}", flush=True)
            print("         curve (step, s, acc): " + ", ".join(
                f"({s}, {t:.0f}, {100 * a:.0f}%)" for s, t, a in r["curve"]), flush=True)
    for which in args.defaults:
        got = [r for w, r in rows if w == which]
        met = all(r["to40"] is not None and r["to40"] <= 300 and r["seconds"] <= 300
                  for r in got)
        print(f"{which}: +40 points within 5 minutes for every seed: "
              f"{'met' if met else 'NOT met'}; gains "
              f"{[round(100 * (r['after'] - r['before']), 1) for r in got]}", flush=True)


if __name__ == "__main__":
    main()
