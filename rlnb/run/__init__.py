"""Run plumbing: run directories, metric and rollout logs, checkpoints, loggers.

Modules: ``atomic`` (crash-safe writes), ``rundir`` (one folder per run), ``checkpoint`` (save,
prune, resume), ``loggers`` (TensorBoard, W&B, stdout next to ``metrics.jsonl``).
"""
