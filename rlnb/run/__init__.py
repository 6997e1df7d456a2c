"""Run plumbing: run directories, metric and rollout logs, checkpoints, loggers.

Modules: ``atomic`` (crash-safe writes), ``rundir`` (one folder per run), ``checkpoint`` (save,
prune, resume), ``loggers`` (TensorBoard, W&B, stdout next to ``metrics.jsonl``), ``session``
(``TrainingRun``, ``auto_accelerator``), ``notebooks`` (``rlnb run``: one notebook through
papermill, and the parameter parsing the next two share), ``sweep`` (``rlnb sweep``: a grid of runs
and its report), ``launch`` (``rlnb launch``: one notebook on N ranks).
"""

_LAZY = {"TrainingRun": "rlnb.run.session", "auto_accelerator": "rlnb.run.session"}
_MODULES = ("atomic", "checkpoint", "config", "launch", "loggers", "notebooks", "rundir", "session",
            "sweep")


def __getattr__(name: str):
    import importlib

    if name in _LAZY:  # imported on first use: the session loads transformers
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _MODULES:  # `rlnb.run.notebooks.sweep(...)` after a bare `import rlnb`
        return importlib.import_module(f"rlnb.run.{name}")
    raise AttributeError(f"module 'rlnb.run' has no attribute {name!r}")
