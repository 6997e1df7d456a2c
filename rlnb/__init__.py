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

The packages and modules:

- ``algorithms``: the algorithm layer: estimators, losses, KL, filters (pure tensor math);
- ``engine``: models, environments, the loops and the inspection room;
- ``run``: run plumbing: configs, run directories, training runs, notebooks, pools, experiments;
- ``nemo``: NeMo-RL's module layout and names over rlnb's implementation;
- ``teach``: the exercises' checks, live runs, builder and grader;
- ``cli``: the ``rlnb`` command line, one module per command;
- ``demo``: ``rlnb demo``, a terminal tour of the algorithm layer;
- ``config``: the typed config base class and its error messages;
- ``registry``: the one rule of every registry of named parts;
- ``threads``: how torch's threads wait, set before torch loads (a shared machine's share);
- ``user_files``: a user's files read strictly (what a path must be, YAML without repeated keys).
"""

__version__ = "0.1.0"

# before anything imports torch: how its OpenMP threads wait (rlnb/threads.py, choice 1)
from rlnb.threads import set_wait_policy as _set_wait_policy  # noqa: E402

_set_wait_policy()

# Everything is imported on first use: the algorithm layer (torch, about 2 s), the engine and run
# plumbing (transformers as well). So `import rlnb` costs nothing, and the processes that never
# touch a tensor (`rlnb run` / `rlnb sweep` of a notebook, a sweep point's papermill process, the
# `rlnb launch` launcher) start without torch; `rlnb.grpo_advantages` or
# `from rlnb import GRPOTrainer` load what they name.
_LAZY = {
    "GRPOTrainer": "rlnb.engine.trainers.grpo",
    "GRPOConfig": "rlnb.engine.trainers.grpo_config",
    "PPOTrainer": "rlnb.engine.trainers.ppo",
    "PPOConfig": "rlnb.engine.trainers.ppo",
    "AsyncGRPOTrainer": "rlnb.engine.trainers.async_grpo",
    "DPOTrainer": "rlnb.engine.trainers.dpo",
    "DPOConfig": "rlnb.engine.trainers.dpo",
    "PreferenceBatch": "rlnb.engine.data.preference_batch",
    "Policy": "rlnb.engine.models.policy",
    "RolloutBatch": "rlnb.engine.data.batches",
    "AdvantageBatch": "rlnb.engine.data.batches",
    "UpdateResult": "rlnb.engine.data.batches",
    "StepMetrics": "rlnb.engine.data.batches",
    "TrainingRun": "rlnb.run.training.session",
    "trainer_with_warm_start": "rlnb.run.training.warm_trainer",
    "auto_accelerator": "rlnb.run.training.accelerator",
    "MasterConfig": "rlnb.run.config.master_config",
    "load_config": "rlnb.run.config.master_config",
    "ablate": "rlnb.run.experiments.ablation",
    "signal_check": "rlnb.engine.inspection.signal_check",
    "group_reward": "rlnb.engine.environments.reward_funcs",
    "LocalOpenAI": "rlnb.engine.agents.client",
    "AsyncLocalOpenAI": "rlnb.engine.agents.client",
    "AgentTask": "rlnb.engine.agents.agent_task",
    "openenv_agent": "rlnb.engine.agents.agent_task",
    "check_prefix": "rlnb.engine.agents.templates",
}


def _algorithms():
    import importlib

    return importlib.import_module("rlnb.algorithms")


def __getattr__(name: str):
    import importlib

    if name == "__all__":  # `from rlnb import *`: every algorithm name, then the lazy ones
        return [*_algorithms().__all__, *_LAZY, "__version__"]
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    # `rlnb.run.experiments.sweep.sweep(...)` after `import rlnb`
    if name in ("algorithms", "engine", "run"):
        return importlib.import_module(f"rlnb.{name}")
    algorithms = _algorithms()
    if name in algorithms.__all__:
        return getattr(algorithms, name)
    raise AttributeError(f"module 'rlnb' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
