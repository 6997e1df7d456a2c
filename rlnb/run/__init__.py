"""Run plumbing: configs, run directories, metric and rollout logs, checkpoints, notebooks.

Modules: ``master_config`` (the whole run's config, ``load_config``), ``atomic`` (crash-safe
writes), ``rundir`` (one folder per run), ``rollout_store`` (its rollouts, in chunks of steps),
``checkpoint`` (save, prune, resume), ``loggers`` (TensorBoard, W&B, stdout next to
``metrics.jsonl``), ``accelerator`` (``auto_accelerator``), ``warm_start_cache``, ``session``
(``TrainingRun``), ``notebooks`` (``rlnb run``: one notebook through papermill, and the parameter
parsing the next two share), ``sweep`` (``rlnb sweep``: a grid of runs, resumable), ``executors``
(where a sweep's points run: local processes or Ray tasks), ``sweep_summary`` (a sweep's table,
per-setting summary and report), ``stats`` (mean ± sd and intervals for differences over seeds,
the power of a paired design), ``launch`` (``rlnb launch``: one notebook on N ranks, on one
machine or several), ``ablation`` (``rlnb.ablate``: arms over paired seeds through the
executors), ``effects`` (its table: reductions, paired intervals, detectable effects),
``findings`` (published claims as ablations), ``mechanisms`` (what their knobs do to one
frozen batch), ``timed`` (``train_for``: a wall-time budget, accuracy checkpoints off the clock).
"""

_MODULES = ("ablation", "accelerator", "atomic", "checkpoint", "effects", "executors",
            "findings", "launch", "loggers", "master_config", "mechanisms", "notebooks",
            "rollout_store", "rundir", "session", "stats", "sweep", "sweep_summary", "timed",
            "warm_start_cache")


def __getattr__(name: str):
    import importlib

    if name in _MODULES:  # `rlnb.run.sweep.sweep(...)` after a bare `import rlnb`
        return importlib.import_module(f"rlnb.run.{name}")
    raise AttributeError(f"module 'rlnb.run' has no attribute {name!r}")
