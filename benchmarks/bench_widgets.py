"""Dashboard cost: one step taken in at a history of 1,000 steps, and training overhead.

    python benchmarks/bench_widgets.py [--history 1000] [--steps 30] [--repeats 3]

Prints:
1) the time ``Dashboard.update(metrics)`` takes when the dashboard already holds ``--history``
   steps (median of 50 updates; target < 50 ms): appending to the columns and re-sending every
   trace of the FigureWidget, serialised as for a front end (outside a kernel the widgets'
   comm is a no-op sink, so the ZMQ transport itself is not counted);
2) the wall time of ``trainer.train(n)`` on the embedded tiny default (no warm start) with and
   without a dashboard taking in every step, alternated over ``--repeats`` rounds on fresh
   trainers with the same seed (target overhead < 5%).
"""

from __future__ import annotations

import argparse
import random
import statistics
import time


def bench_update(history: int, samples: int = 50) -> float:
    from rlnb.widgets import Dashboard

    dash = Dashboard()
    keys = dash.plotted_keys()
    rng = random.Random(0)
    for step in range(1, history + 1):
        dash.update({"step": step, **{k: rng.random() for k in keys}}, redraw=False)
    dash.redraw()
    times = []
    for step in range(history + 1, history + 1 + samples):
        metrics = {"step": step, **{k: rng.random() for k in keys}}
        start = time.perf_counter()
        dash.update(metrics)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def train_seconds(steps: int, with_dashboard: bool) -> float:
    import rlnb
    from rlnb.widgets import Dashboard

    trainer = rlnb.GRPOTrainer(
        rlnb.load_config(None, ["sft.enabled=false", "grpo.val_period=0"])
    )
    dash = Dashboard(trainer) if with_dashboard else None
    start = time.perf_counter()
    if dash is None:
        for _ in trainer.train(steps):
            pass
    else:
        dash.run(steps, background=False)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--history", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    t = bench_update(args.history)
    print(f"dashboard update at a history of {args.history} steps: {t * 1e3:.1f} ms "
          f"(median of 50; target < 50 ms)")

    bare, dashed = [], []
    for r in range(args.repeats):  # alternate, so drift in machine load hits both
        order = (False, True) if r % 2 == 0 else (True, False)
        for with_dash in order:
            (dashed if with_dash else bare).append(train_seconds(args.steps, with_dash))
    b, d = statistics.median(bare), statistics.median(dashed)
    print(f"train {args.steps} steps (tiny default, no warm start): without dashboard "
          f"{b:.2f} s, with dashboard {d:.2f} s (medians of {args.repeats})")
    print(f"dashboard overhead: {100 * (d / b - 1):+.1f}% (target < 5%)")


if __name__ == "__main__":
    main()
