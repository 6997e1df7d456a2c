"""The calculator tool task on the tiny model: held-out success before and after GRPO within a time
budget, and what the in-process OpenAI-compatible client adds to a multi-turn step.

For each seed this builds the run of ``configs/calculator_tiny.yaml`` (two-digit products asked
as chat messages, the ``calc`` tool offered; the warm start demonstrates a tool call on a share
of the rows), warm-starts it with a cold cache, then trains with GRPO until ``--budget`` seconds
of GRPO have passed (the warm start is timed apart), validating every 25 steps and at the end.
Held-out: 200 questions never trained on, one episode each at temperature 1.

The client's cost: every step's episodes run through the client (chat template, token-in
token-out stitching, tool-call parsing, the batcher) around the same ``generate_ids`` calls a
direct multi-turn rollout makes. ``timing/train/generation`` is the time inside those calls;
``timing/train/reward_calculation`` is everything else the episodes took (the client, the agent
code, the tool). The overhead is that second time over the step time without it: how much longer
the step is than one that called the generator directly (the median over the run's steps).

    python benchmarks/bench_agents.py [--seeds 0 1 2] [--budget 600]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from harness import ROOT, load_text, machine_line

CONFIG = ROOT / "configs" / "calculator_tiny.yaml"


def run(seed: int, budget: float) -> dict:
    from rlnb.run.training.session import TrainingRun

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RLNB_CACHE_DIR"] = os.path.join(tmp, "cache")  # cold: no cached warm start
        start = time.perf_counter()
        run = TrainingRun(str(CONFIG), overrides=[f"grpo.seed={seed}"],
                          run_dir=os.path.join(tmp, "run"), progress=False, log=lambda *a: None)
        trainer = run.trainer
        warm = time.perf_counter() - start
        before = trainer.validate()["validation/accuracy"]
        curve, overheads, calls, steps = [(0, 0.0, before)], [], [], 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < budget:
            m = trainer.step()
            steps += 1
            client = m["timing/train/reward_calculation"]
            overheads.append(client / (m["timing/train/total_step_time"] - client))
            calls.append(m["train/agent/generation_calls"])
            if steps % 25 == 0:
                curve.append((steps, time.perf_counter() - t0,
                              trainer.validate()["validation/accuracy"]))
        grpo = time.perf_counter() - t0
        after = trainer.validate()["validation/accuracy"]
        run.close()
    return {"seed": seed, "before": before, "after": after, "steps": steps, "warm_s": warm,
            "grpo_s": grpo, "overhead": statistics.median(overheads),
            "calls": statistics.mean(calls), "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--budget", type=float, default=600, help="seconds of GRPO per run")
    args = parser.parse_args()
    print(f"the calculator tool task on the tiny model, {args.budget:.0f} s of GRPO per run, "
          f"cold warm start ({machine_line()})", flush=True)
    results = []
    for seed in args.seeds:
        r = run(seed, args.budget)
        results.append(r)
        print(f"seed {seed}: held-out success {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% "
              f"({100 * (r['after'] - r['before']):+.1f}); {r['steps']} steps in "
              f"{r['grpo_s']:.0f} s after a {r['warm_s']:.0f} s warm start; the client adds "
              f"{100 * r['overhead']:.1f}% to a step ({r['calls']:.1f} generation calls a step); "
              f"load {load_text()}", flush=True)
        print("    curve (step, s, success): " + ", ".join(
            f"({s}, {t:.0f}, {100 * a:.1f}%)" for s, t, a in r["curve"]), flush=True)
    gains = [r["after"] - r["before"] for r in results]
    print(f"+20 points within {args.budget:.0f} s on every seed: "
          f"{'met' if all(g >= 0.20 for g in gains) else 'NOT met'}; the client's overhead "
          f"at most 15%: {'met' if all(r['overhead'] <= 0.15 for r in results) else 'NOT met'} "
          f"(largest {100 * max(r['overhead'] for r in results):.1f}%)", flush=True)


if __name__ == "__main__":
    main()
