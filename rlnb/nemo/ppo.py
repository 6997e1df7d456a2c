"""NeMo-RL's ``nemo_rl.algorithms.ppo`` names, each driving rlnb's PPO trainer.

    from rlnb.nemo.ppo import setup, ppo_train
    parts = setup(rlnb.load_config("configs/ppo_tiny.yaml"))  # policy, value model, ...
    ppo_train(parts)                                          # NeMo-RL: the PPO loop

| NeMo-RL                          | here                                                       |
|----------------------------------|------------------------------------------------------------|
| ``MasterConfig``                 | ``rlnb.run.master_config.MasterConfig``, ``algorithm: ppo`` |
| ``PPOConfig``                    | the ``ppo`` section (``engine/trainers/ppo.py``)            |
| ``AdvEstimatorConfig`` (GAE)     | ``ppo.adv_estimator``: ``gae`` or ``raw_reward``           |
| ``PPOSaveState``                 | the TypedDict ``PPOTrainer.state()`` returns               |
| ``setup(master_config)``         | a ``TrainingRun``: trainer, policy, value model, task ...  |
| ``ppo_train(...)``               | ``TrainingRun.train``: ``trainer.step()`` = rollout ->     |
|                                  | compute_values -> compute_advantages -> update             |
|                                  | (``ppo_epochs`` x: critic pass, then policy pass)          |
| ``validate(...)``                | ``trainer.validate()``                                     |
| ``dynamic_sampling(...)``        | ``rlnb.algorithms.dynamic_sampling.dynamic_sampling`` (the |
|                                  | rollout stage runs it when ``ppo.use_dynamic_sampling``)   |
| ``_create_advantage_estimator``  | ``rlnb.algorithms.estimators.make_ppo_advantage_estimator``|

rlnb keeps NeMo-RL's meaning, not its signatures: ``setup`` returns the parts bundled
(``PPOSetup``) and the other functions take it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rlnb.algorithms.dynamic_sampling import dynamic_sampling
from rlnb.algorithms.estimators import estimator_names, make_ppo_advantage_estimator
from rlnb.engine.trainers.ppo import PPOConfig
from rlnb.engine.trainers.ppo import PPOEstimatorConfig as AdvEstimatorConfig
from rlnb.nemo.grpo import GRPOSaveState
from rlnb.run.master_config import MasterConfig, load_config

__all__ = ["AdvEstimatorConfig", "MasterConfig", "PPOConfig", "PPOSaveState", "PPOSetup",
           "_create_advantage_estimator", "dynamic_sampling", "ppo_train", "setup", "validate"]


class PPOSaveState(GRPOSaveState):
    """NeMo-RL's PPO save state: what ``PPOTrainer.state()`` returns (and a checkpoint's
    ``trainer_state.json`` holds), plus rlnb's ``data_position``: GRPO's fields, no more."""


class PPOSetup(NamedTuple):
    """What NeMo-RL's PPO ``setup`` returns, as rlnb's parts."""

    policy: Any  # rlnb.engine.models.policy.Policy
    policy_generation: Any  # the generation backend
    value_model: Any  # rlnb.engine.models.value.ValueModel
    task: Any  # the data and its environment
    loss_fn: Any  # ClippedPGLossFn
    value_loss_fn: Any  # MseValueLossFn
    run: Any  # TrainingRun: the logger and the checkpointer
    trainer: Any  # PPOTrainer: the stages
    ppo_save_state: PPOSaveState
    master_config: MasterConfig


def setup(master_config: MasterConfig | dict | str | None = None, *, run_dir=None,
          resume: bool = False, accelerator=None) -> PPOSetup:
    """NeMo-RL's PPO ``setup``: build the parts the loop needs (warm start included, then the
    value model from the warm-started policy) and return them."""
    from rlnb.run.session import TrainingRun

    if isinstance(master_config, Mapping) and "algorithm" not in master_config:
        master_config = {"algorithm": "ppo", **master_config}
    config = load_config(master_config)
    if config.algorithm != "ppo":
        raise ValueError(f"rlnb.nemo.ppo.setup: the config's algorithm is "
                         f"{config.algorithm!r}; set algorithm: ppo")
    run = TrainingRun(config, run_dir=run_dir, resume=resume, accelerator=accelerator)
    t = run.trainer
    return PPOSetup(t.policy, t.generator, t.critic, t.task, t.loss_fn, t.value_loss_fn, run, t,
                    t.state(), config)


def ppo_train(parts: PPOSetup, num_steps: int | None = None) -> dict[str, Any]:
    """NeMo-RL's ``ppo_train``: the loop (per step rollout -> values -> advantages ->
    ``ppo_epochs`` x (critic, policy), validation at ``ppo.val_period``, checkpoints at
    ``checkpointing.save_period``)."""
    return parts.run.train(num_steps)


def validate(parts: PPOSetup, step: int | None = None) -> dict[str, float]:
    """NeMo-RL's ``validate``: held-out accuracy of the current policy (``validation/*``)."""
    return parts.trainer.validate()


def _create_advantage_estimator(master_config: MasterConfig | Mapping):
    """NeMo-RL's ``_create_advantage_estimator``: the ``ppo.adv_estimator`` estimator (GAE or
    the raw reward); a group estimator (GRPO's loop) is a ``ValueError``."""
    if isinstance(master_config, Mapping):
        est = dict(master_config["ppo"].get("adv_estimator") or {})
        loss = master_config.get("loss_fn")
    else:
        est, loss = master_config.ppo.adv_estimator.model_dump(), master_config.loss_fn
    if est.get("name") in estimator_names("grpo"):
        raise ValueError(f"Invalid adv_estimator name for PPO: {est['name']!r} is a group "
                         "estimator (GRPO's loop); PPO supports "
                         f"{', '.join(map(repr, estimator_names('ppo')))}")
    return make_ppo_advantage_estimator(est, loss)
