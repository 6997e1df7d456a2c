"""reasoning-gym and verifiers on the tiny model: held-out gain per data set within a time budget,
and the same task through two doors (reasoning-gym's task, a verifiers environment wrapping it).

For each seed and door this builds the run of ``configs/reasoning_gym_tiny.yaml`` (spell_backward
with 3-5 letter words and basic_arithmetic adding two 1-2 digit terms, half and half; ``--only``
keeps one of them, ``--config`` takes another recipe, e.g.
``configs/reasoning_gym_arithmetic_tiny.yaml``: basic_arithmetic alone, two 2-digit terms),
warm-starts it on the data sets' own answers with a cold cache, then trains with GRPO until
``--budget`` seconds of GRPO have passed (the warm start is timed apart), validating every 50
steps and at the end. Held-out: 200 questions never trained on, one answer each at temperature
1, the accuracy of each data set apart.

- door ``rg``: ``data.name: reasoning_gym`` (rlnb's reasoning-gym task);
- door ``vf``: ``data.name: verifiers`` with ``examples/rlnb_rg_env`` (a verifiers taskset of
  4000 questions from the same data sets, scored by a ``@vf.reward`` calling the data set's own
  scorer), the same seed; its held-out rows are carved out of those 4000.

It prints per run: accuracy before GRPO and at the end per data set, the gain, the steps, the
warm start's and GRPO's seconds, the share of a step spent scoring (``reward_calculation`` over
``total_step_time``, the median over the run's steps), and the load.

    python benchmarks/bench_reasoning_gym.py [--seeds 0 1 2] [--doors rg vf] [--budget 600]
        [--only NAME] [--config PATH] [--set KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import yaml
from harness import ROOT, load_text, machine_line

CONFIG = ROOT / "configs" / "reasoning_gym_tiny.yaml"


def config_for(door: str, path=CONFIG, only: str | None = None) -> dict:
    raw = yaml.safe_load(open(path).read())
    if only is not None:  # one of the recipe's data sets, trained alone
        if only not in raw["data"]["datasets"]:
            raise SystemExit(f"--only {only}: the recipe's data sets are "
                             f"{sorted(raw['data']['datasets'])}")
        raw["data"]["datasets"] = {only: raw["data"]["datasets"][only]}
    if door == "vf":  # the same data sets, through a verifiers environment
        sys.path.insert(0, str(ROOT / "examples" / "rlnb_rg_env"))
        datasets = {name: spec["config"] for name, spec in raw["data"]["datasets"].items()}
        raw["data"] = {"name": "verifiers", "env_id": "rlnb-rg-env", "correct_reward": "correct",
                       "env_args": {"datasets": datasets, "size": 4000}}
    return raw


def per_dataset(metrics: dict) -> dict[str, float]:
    return {k.split("/")[2]: v for k, v in metrics.items() if k.startswith("validation/rg/")}


def held_out(trainer) -> dict[str, float]:
    """Held-out accuracy per data set (the vf door's rows carry their data set as a column)."""
    m = trainer.validate()
    found = per_dataset(m)
    if found:
        return {**found, "all": m["validation/accuracy"]}
    rows = trainer.task.val_rows(min(trainer.loop_config.max_val_samples,
                                     len(trainer.task.val_rows())))
    batch = trainer.generate_batch(rows, 1)
    out: dict[str, list[bool]] = {}
    for row, ok in zip(batch.rows, batch.correct.tolist()):
        out.setdefault(row["dataset"], []).append(ok)
    return {**{k: sum(v) / len(v) for k, v in out.items()}, "all": m["validation/accuracy"]}


def run(seed: int, door: str, budget: float, path=CONFIG, overrides=(), only=None) -> dict:
    from rlnb.run.training.session import TrainingRun

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["RLNB_CACHE_DIR"] = os.path.join(tmp, "cache")  # cold: no cached warm start
        start = time.perf_counter()
        run = TrainingRun(config_for(door, path, only), overrides=[*overrides, f"grpo.seed={seed}"],
                          run_dir=os.path.join(tmp, "run"), progress=False, log=lambda *a: None)
        trainer = run.trainer
        warm = time.perf_counter() - start
        before = held_out(trainer)
        curve, shares, steps = [(0, 0.0, before["all"])], [], 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < budget:
            m = trainer.step()
            steps += 1
            shares.append(m["timing/train/reward_calculation"] / m["timing/train/total_step_time"])
            if steps % 50 == 0:
                curve.append((steps, time.perf_counter() - t0,
                              trainer.validate()["validation/accuracy"]))
        grpo = time.perf_counter() - t0
        after = held_out(trainer)
        run.close()
    return {"seed": seed, "door": door, "before": before, "after": after, "steps": steps,
            "warm_s": warm, "grpo_s": grpo, "score_share": statistics.median(shares),
            "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--doors", nargs="+", default=["rg", "vf"], choices=["rg", "vf"])
    parser.add_argument("--budget", type=float, default=600, help="seconds of GRPO per run")
    parser.add_argument("--config", default=str(CONFIG), help="the recipe (default: %(default)s)")
    parser.add_argument("--only", metavar="NAME",
                        help="train one of the recipe's data sets alone")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides on the recipe, as rlnb train takes them")
    args = parser.parse_args()
    print(f"reasoning-gym on the tiny model, {args.budget:.0f} s of GRPO per run, cold warm "
          f"start ({machine_line()})", flush=True)
    results = []
    for seed in args.seeds:
        for door in args.doors:
            r = run(seed, door, args.budget, args.config, args.set, args.only)
            results.append(r)
            names = [k for k in r["before"] if k != "all"]
            gains = "  ".join(f"{n} {100 * r['before'][n]:.1f}% -> {100 * r['after'][n]:.1f}% "
                              f"({100 * (r['after'][n] - r['before'][n]):+.1f})" for n in names)
            print(f"door {door} seed {seed}: {gains}  all {100 * r['before']['all']:.1f}% -> "
                  f"{100 * r['after']['all']:.1f}%; {r['steps']} steps in {r['grpo_s']:.0f} s "
                  f"after a {r['warm_s']:.0f} s warm start; scoring {100 * r['score_share']:.1f}%"
                  f" of a step; load {load_text()}", flush=True)
            print("    curve (step, s, acc): " + ", ".join(
                f"({s}, {t:.0f}, {100 * a:.1f}%)" for s, t, a in r["curve"]), flush=True)
    for door in args.doors:
        mine = [r for r in results if r["door"] == door]
        names = [k for k in mine[0]["before"] if k != "all"]
        met = {n: all(r["after"][n] - r["before"][n] >= 0.15 for r in mine) for n in names}
        print(f"door {door}: +15 points within {args.budget:.0f} s on every seed: "
              + ", ".join(f"{n} {'met' if ok else 'NOT met'}" for n, ok in met.items()),
              flush=True)


if __name__ == "__main__":
    main()
