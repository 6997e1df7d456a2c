"""A run directory's diagnosis card (``rlnb.engine.inspection.diagnosis``): its config and first
steps read into findings with their fixes.

    print(diagnose_run("runs/2026-11-28_0130"))        # rlnb doctor runs/2026-11-28_0130
"""

from __future__ import annotations

from pathlib import Path

from rlnb.engine.inspection.diagnosis import Diagnosis, diagnose
from rlnb.run.experiments.run_diff import read_run


def diagnose_run(run_dir: str | Path, first: int = 20) -> Diagnosis:
    """The card of the run in ``run_dir``, from its ``config.yaml`` and the first ``first``
    steps of its ``metrics.jsonl``; a directory that is not a run raises one ValueError line."""
    if first < 1:
        raise ValueError(f"first={first}: read at least one step")
    config, records = read_run(run_dir)
    if not (Path(run_dir) / "metrics.jsonl").is_file():
        raise ValueError(f"{run_dir}: no metrics.jsonl (no step logged yet)")
    return diagnose(records, config=config, first=first)
