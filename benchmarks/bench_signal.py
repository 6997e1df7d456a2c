"""Does the signal check predict how many groups carry no signal? Prediction against measurement.

For G in {2, 4, 8, 16} (``--group-sizes``) and each seed, on the default task (the embedded tiny
model, warm-started as ``rlnb train`` does it, the warm start cached and shared by every G): the
signal check probes the rows of the next ``--steps`` steps (``--samples`` samples per prompt)
and predicts the share of groups with no signal. Measured: the starting policy's own groups of
G for those rows, sampled in training-sized batches with no update in between (what the
prediction is of), then the run trains those steps and the share is ``1 −
train/groups_with_signal``, over the first 10 steps and over all of them (the policy learns
meanwhile, so training drifts from a prediction made at step 0).

    python benchmarks/bench_signal.py                     # seeds 0 1, 50 steps
    python benchmarks/bench_signal.py --quick             # smoke test: small model, 3 steps

Prints one row per (seed, G), the command, the wall time and the load average (other processes
on the machine slow every run down, but do not change the numbers: they depend on the seed).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

from harness import load_text, machine_line

import rlnb
from rlnb.engine.inspection.signal_check import signal_check
from rlnb.engine.trainers.base import isolated_rng
from rlnb.engine.trainers.rollout import groups_with_signal, sample_and_score
from rlnb.run.training.warm_trainer import trainer_with_warm_start


def measure(seed: int, G: int, steps: int, samples: int, quick: bool) -> dict:
    overrides = [f"grpo.seed={seed}", f"grpo.num_generations_per_prompt={G}", "grpo.val_period=0"]
    if quick:
        overrides += ["sft.max_steps=20", "sft.stop_at_accuracy=null"]
    config = rlnb.load_config(None, overrides, preset="fast" if quick else None)
    trainer, _ = trainer_with_warm_start(config)
    loop = config.grpo
    P = loop.num_prompts_per_step
    report = signal_check(trainer, num_prompts=steps * P, samples=samples)
    # the starting policy's own groups of G for the same prompts, in training-sized batches and
    # with no update in between: what the prediction is of (training then moves the policy)
    frozen = []
    with isolated_rng(10_007 * seed + G, trainer.policy.device):
        for k in range(steps):
            batch = sample_and_score(trainer.rollout_inputs(), trainer.generator,
                                     trainer.prompt_rows_at(k * P, P), G, 0)
            with_signal, groups = groups_with_signal(batch.group, batch.rewards)
            frozen.append(1 - with_signal / groups)
    lost = [1 - m["train/groups_with_signal"] for m in trainer.train(steps)]
    first = lost[: min(10, len(lost))]
    return {"seed": seed, "G": G, "predicted": report.expected[G],
            "starting policy": sum(frozen) / len(frozen),
            "measured (first 10)": sum(first) / len(first),
            "measured (all)": sum(lost) / len(lost),
            "mean p": sum(r["p"] for r in report.prompts) / len(report.prompts)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--group-sizes", type=int, nargs="+", default=[2, 4, 8, 16])
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--samples", type=int, default=16, help="probe samples per prompt")
    ap.add_argument("--quick", action="store_true", help="small model, 3 steps (smoke test)")
    args = ap.parse_args()
    if args.quick:
        args.steps = 3
    start, rows = time.perf_counter(), []
    print(machine_line(), flush=True)
    for seed in args.seeds:
        for G in args.group_sizes:
            row = measure(seed, G, args.steps, args.samples, args.quick)
            rows.append(row)
            print("  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in row.items()), flush=True)
    print(f"\n| seed | G | predicted (step 0) | starting policy, no updates | training, steps "
          f"1-10 | training, steps 1-{args.steps} | mean p (probe) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['G']} | {r['predicted']:.3f} | {r['starting policy']:.3f} | "
              f"{r['measured (first 10)']:.3f} | {r['measured (all)']:.3f} | {r['mean p']:.3f} |")
    print(f"\ncommand: python {' '.join(shlex.quote(a) for a in sys.argv)}")
    print(f"wall time: {time.perf_counter() - start:.0f} s; load average after: {load_text()}")


if __name__ == "__main__":
    main()
