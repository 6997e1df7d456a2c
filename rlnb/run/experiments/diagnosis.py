"""A run directory's diagnosis card (``rlnb.engine.inspection.diagnosis``): its config and first
steps read into findings with their fixes.

    print(diagnose_run("runs/2026-11-28_0130"))        # rlnb doctor runs/2026-11-28_0130
    print(diagnose_run("logs/exp_001"))                # NeMo-RL's, verl's or TRL's files as well

A folder of another framework's rollout files (``rlnb.run.store.foreign_rollouts``) is read as
it is: each step's mean reward and sample funnel, the records ``import_rollouts`` would write.
The card says so in a note, and what the files lack (the config, KL, entropy, truncation).
"""

from __future__ import annotations

from pathlib import Path

from rlnb.engine.inspection.diagnosis import Diagnosis, diagnose
from rlnb.run.experiments.run_diff import read_run
from rlnb.run.store.foreign_rollouts import ForeignRollouts, foreign_format

FORMAT_NAMES = {"nemo-rl": "NeMo-RL", "verl": "verl", "trl": "TRL"}


def diagnose_run(run_dir: str | Path, first: int = 20) -> Diagnosis:
    """The card of the run in ``run_dir``, from its ``config.yaml`` and the first ``first``
    steps of its ``metrics.jsonl`` (or of another framework's rollout files); a directory that
    is neither raises one ValueError line."""
    if first < 1:
        raise ValueError(f"first={first}: read at least one step")
    path = Path(run_dir)
    if path.is_dir() and not (path / "config.yaml").exists() and foreign_format(path):
        return diagnose_foreign(ForeignRollouts(path), first)
    config, records = read_run(run_dir)
    if not (path / "metrics.jsonl").is_file():
        raise ValueError(f"{run_dir}: no metrics.jsonl (no step logged yet)")
    return diagnose(records, config=config, first=first)


def diagnose_foreign(source: ForeignRollouts, first: int = 20) -> Diagnosis:
    """The card of another framework's rollout files: the findings their rewards and funnel
    can show, with a note naming what was read and what the files do not hold."""
    card = diagnose(source.records(), first=first)
    card.notes.insert(0, f"read {FORMAT_NAMES[source.format]}'s rollout files in "
                         f"{source.folder} as they are: each step's mean reward and sample "
                         "funnel (the files hold no config, KL, entropy, truncation or "
                         "correctness, so the findings that read them cannot show); "
                         "rlnb.run.store.foreign_rollouts.import_rollouts(folder, run_dir) "
                         "writes them as an rlnb run directory for the other views")
    return card
