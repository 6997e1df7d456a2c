"""A run directory's sample funnel for one step: where the rows went
(``rlnb.engine.trainers.funnel``).

    print(step_funnel("runs/2026-11-28_0130"))            # the last step
    print(step_funnel("runs/2026-11-28_0130", step=12))
"""

from __future__ import annotations

from pathlib import Path

from rlnb.engine.trainers.funnel import funnel_lines
from rlnb.run.store.rundir import read_metrics_file


def step_funnel(run_dir: str | Path, step: int | None = None) -> str:
    """The funnel of step ``step`` (default: the last logged) of the run in ``run_dir``."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"{run_dir}: no metrics.jsonl (not an rlnb run directory, or no step "
                         "logged yet)")
    records = [r for r in read_metrics_file(path) if "step" in r]
    if not records:
        raise ValueError(f"{path}: no step logged yet")
    if step is None:
        record = records[-1]
    else:
        found = [r for r in records if r["step"] == step]
        if not found:
            raise ValueError(f"{path}: no step {step} (logged: {records[0]['step']} to "
                             f"{records[-1]['step']})")
        record = found[-1]
    return "\n".join([f"step {record['step']}:", *funnel_lines(record)])
