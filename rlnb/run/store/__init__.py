"""What a run leaves on disk, and how it is written (the bottom of the run layer).

- ``atomic``: crash-safe writes: a file or a folder is the old one or the complete new one;
- ``rundir``: one folder per run: its config, metrics, rollouts and checkpoints;
- ``rollout_store``: a run's rollouts as one chunked dataset (a Parquet file per 50 steps);
- ``rollout_files``: the rollout store's files (a step's Arrow batch, the chunk in progress);
- ``checkpoint``: save, prune, find the latest, resume exactly;
- ``loggers``: ``metrics.jsonl`` always, TensorBoard / W&B / stdout on request;
- ``warm_start_cache``: the warm start's weights on disk, keyed by its settings and code.
- ``foreign_rollouts``: NeMo-RL's, verl's and TRL's rollout files read as rlnb's steps;
- ``space``: a full disk, named as such.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
