"""Training for a wall-time budget, held-out accuracy measured along the way off the clock.

    curve = train_for(run, seconds=300, every=60)   # [(training seconds, step, accuracy), ...]

Loops compare fairly on time, not steps, when their steps cost different amounts (a DPO step
samples G answers per prompt and trains on 2 rows per pair; GRPO trains on all P·G); notebook 09
and ``benchmarks/bench_dpo.py`` both draw their curves with this.

Implementation choices:
1) The clock counts training only: each accuracy checkpoint (``trainer.validate()``, on its own
   random state, so it never shifts what training draws) is taken with the clock stopped.
2) The budget is checked after each step: a run overshoots it by at most one step, and the last
   point is taken where it stopped. The first point is the accuracy before training.
3) A ``TrainingRun`` is trained through ``run.steps`` (its steps are logged and checkpointed as
   usual); a bare trainer through ``trainer.train``. The step generator is closed at the end,
   so a loop with background work (the async collector) stops.
"""

from __future__ import annotations

import time


def train_for(source, seconds: float, every: float | None = None, *,
              max_steps: int = 10**9) -> list[tuple[float, int, float]]:
    """Train ``source`` (a ``TrainingRun`` or a trainer) for ``seconds`` of training time (or
    ``max_steps`` steps), measuring held-out accuracy before, every ``every`` seconds and at the
    end. Returns ``[(training seconds, step, validation/accuracy)]``."""
    trainer = getattr(source, "trainer", source)
    steps = source.steps(max_steps) if hasattr(source, "steps") else trainer.train(max_steps)
    curve = [(0.0, trainer.step_count, trainer.validate()["validation/accuracy"])]
    trained, next_check = 0.0, every if every else float("inf")
    start = time.perf_counter()
    try:
        for metrics in steps:
            if not getattr(metrics, "trained", True):
                continue  # a validation-only record (val_at_start)
            trained = time.perf_counter() - start
            done = trained >= seconds
            if trained >= next_check or done:
                stopped = time.perf_counter()
                curve.append((trained, trainer.step_count,
                              trainer.validate()["validation/accuracy"]))
                next_check += every if every else 0.0
                start += time.perf_counter() - stopped  # choice 1: off the clock
            if done:
                break
    finally:
        steps.close()
    if curve[-1][1] != trainer.step_count:  # max_steps ended it before the budget did
        curve.append((trained, trainer.step_count, trainer.validate()["validation/accuracy"]))
    return curve
