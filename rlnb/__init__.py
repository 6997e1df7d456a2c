"""rlnb: a Jupyter-first research kit for RL post-training of language models.

Shape legend (used in every docstring and ``# [..]`` comment of the package):

    P   prompts in a step
    G   generations per prompt (a "group")
    B   sequences in a batch, B = P*G
    T   tokens per sequence (padded)
    S   NeMo-RL's padded sequence length; stored per-token tensors are [B, S] with index t =
        quantity for token t, current-policy log-probs are [B, S-1] with index t = log-prob of
        token t+1 (see ``rlnb.algorithms.logprobs``)
    L   prompt tokens (left-padded), so S = L + R
    R   response tokens (right-padded)
    V   vocabulary size
    W   processes (ranks) under accelerate

Layers, each importing only the ones before it: ``rlnb.algorithms`` (pure tensor math) <-
``rlnb.engine`` (models, environments, trainers) <- ``rlnb.run`` (configs, run directories,
checkpoints, notebooks) <- ``rlnb.widgets``, ``rlnb.nemo`` and the CLI. Nothing in ``rlnb``
imports Jupyter packages; the UI layer is ``rlnb.widgets``.
"""

from rlnb.algorithms import *  # noqa: F401,F403
from rlnb.algorithms import __all__ as _algorithms_all

__version__ = "0.1.0"

# The engine and run plumbing load transformers; they are imported on first use, so that
# `import rlnb` stays light (the algorithm layer needs only torch).
_LAZY = {
    "GRPOTrainer": "rlnb.engine.trainers.grpo",
    "GRPOConfig": "rlnb.engine.trainers.grpo",
    "PPOTrainer": "rlnb.engine.trainers.ppo",
    "PPOConfig": "rlnb.engine.trainers.ppo",
    "AsyncGRPOTrainer": "rlnb.engine.trainers.async_grpo",
    "DPOTrainer": "rlnb.engine.trainers.dpo",
    "DPOConfig": "rlnb.engine.trainers.dpo",
    "PreferenceBatch": "rlnb.engine.preference_batch",
    "Policy": "rlnb.engine.models.policy",
    "RolloutBatch": "rlnb.engine.batches",
    "AdvantageBatch": "rlnb.engine.batches",
    "UpdateResult": "rlnb.engine.batches",
    "StepMetrics": "rlnb.engine.batches",
    "TrainingRun": "rlnb.run.session",
    "auto_accelerator": "rlnb.run.accelerator",
    "MasterConfig": "rlnb.run.master_config",
    "load_config": "rlnb.run.master_config",
    "ablate": "rlnb.run.ablation",
    "signal_check": "rlnb.engine.signal_check",
    "group_reward": "rlnb.engine.environments.reward_funcs",
}
__all__ = [*_algorithms_all, *_LAZY, "__version__"]


def __getattr__(name: str):
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in ("engine", "run"):  # `rlnb.run.notebooks.sweep(...)` after a bare `import rlnb`
        return importlib.import_module(f"rlnb.{name}")
    raise AttributeError(f"module 'rlnb' has no attribute {name!r}")
