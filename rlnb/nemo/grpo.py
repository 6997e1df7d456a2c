"""NeMo-RL's ``nemo_rl.algorithms.grpo`` names, each driving rlnb's GRPO trainer.

    from rlnb.nemo.grpo import MasterConfig, setup, grpo_train
    parts = setup(rlnb.load_config(None))      # NeMo-RL: policy, generation, ..., save state
    grpo_train(parts)                          # NeMo-RL: the synchronous GRPO loop

| NeMo-RL                      | here                                                           |
|------------------------------|----------------------------------------------------------------|
| ``MasterConfig``             | ``rlnb.run.master_config.MasterConfig`` (the run's config)      |
| ``GRPOSaveState``            | the TypedDict ``GRPOTrainer.state()`` returns                  |
| ``GRPOLoggerConfig``         | the ``logger`` section (``rlnb.run.loggers.LoggerConfig``)     |
| ``setup(master_config)``     | a ``TrainingRun``: trainer, policy, generation, task, loss ... |
| ``grpo_train(...)``          | ``TrainingRun.train``: ``trainer.step()`` = rollout ->         |
|                              | compute_advantages -> update, validation, logging, checkpoints |
| ``validate(...)``            | ``trainer.validate()``                                         |
| ``refit_policy_generation``  | ``generator.refit(policy.model)``                              |
| ``async_grpo_train(...)``    | the same with ``AsyncGRPOTrainer`` (``grpo.async_grpo``):      |
|                              | a collector thread generates ahead, a replay buffer, ages      |
| ``AsyncGRPOConfig``          | the ``grpo.async_grpo`` section                                 |
| ``_should_use_async_rollouts`` | whether the loop generates asynchronously to training        |

rlnb keeps NeMo-RL's meaning, not its signatures: NeMo-RL passes a dozen workers and loaders
around; here ``setup`` returns them bundled (``GRPOSetup``) and the other functions take it.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict

from rlnb.engine.trainers.collector import AsyncLoopConfig as AsyncGRPOConfig
from rlnb.engine.trainers.loops import should_use_async_rollouts
from rlnb.run.loggers import LoggerConfig as GRPOLoggerConfig
from rlnb.run.master_config import MasterConfig, load_config

__all__ = ["AsyncGRPOConfig", "GRPOLoggerConfig", "GRPOSaveState", "GRPOSetup", "MasterConfig",
           "_should_use_async_rollouts", "async_grpo_train", "grpo_train",
           "refit_policy_generation", "setup", "validate"]


class GRPOSaveState(TypedDict):
    """NeMo-RL's GRPO save state: what ``GRPOTrainer.state()`` returns (and a checkpoint's
    ``trainer_state.json`` holds), plus rlnb's ``data_position``."""

    consumed_samples: int
    current_step: int
    current_epoch: int
    total_steps: int
    total_valid_tokens: int
    val_reward: float | None
    data_position: dict[str, Any]


class GRPOSetup(NamedTuple):
    """What NeMo-RL's ``setup`` returns, as rlnb's parts."""

    policy: Any  # rlnb.engine.models.policy.Policy
    policy_generation: Any  # the generation backend
    task: Any  # the data and its environment (NeMo-RL: dataloaders and task_to_env)
    loss_fn: Any  # ClippedPGLossFn
    run: Any  # TrainingRun: the logger and the checkpointer
    trainer: Any  # GRPOTrainer: the stages
    grpo_save_state: GRPOSaveState
    master_config: MasterConfig


def setup(master_config: MasterConfig | dict | None = None, *, run_dir=None,
          resume: bool = False, accelerator=None) -> GRPOSetup:
    """NeMo-RL's ``setup``: build the parts the GRPO loop needs (warm start included) and
    return them."""
    from rlnb.run.session import TrainingRun

    config = load_config(master_config)
    run = TrainingRun(config, run_dir=run_dir, resume=resume, accelerator=accelerator)
    t = run.trainer
    return GRPOSetup(t.policy, t.generator, t.task, t.loss_fn, run, t, t.state(), config)


def grpo_train(parts: GRPOSetup, num_steps: int | None = None) -> dict[str, Any]:
    """NeMo-RL's ``grpo_train``: the synchronous loop (rollout -> advantages -> update per step,
    validation at ``grpo.val_period``, checkpoints at ``checkpointing.save_period``)."""
    return parts.run.train(num_steps)


def validate(parts: GRPOSetup, step: int | None = None) -> dict[str, float]:
    """NeMo-RL's ``validate``: held-out accuracy of the current policy (``validation/*``)."""
    return parts.trainer.validate()


def refit_policy_generation(policy, policy_generation) -> None:
    """NeMo-RL's ``refit_policy_generation``: push the policy's current weights into the
    generation backend (a no-op count for the HF backend, which samples with the policy's own
    module)."""
    policy_generation.refit(policy.model)


def async_grpo_train(parts: GRPOSetup, max_trajectory_age_steps: int | None = None,
                     num_steps: int | None = None) -> dict[str, Any]:
    """NeMo-RL's ``async_grpo_train``: the async loop (``setup`` built an ``AsyncGRPOTrainer``
    from a config with ``grpo.async_grpo.enabled``); ``max_trajectory_age_steps``, if given,
    must be the config's."""
    cfg = parts.master_config.grpo.async_grpo
    if not _should_use_async_rollouts(parts.master_config):
        raise ValueError("async_grpo_train needs a config with grpo.async_grpo.enabled=true "
                         "(grpo_train runs the synchronous loop)")
    if max_trajectory_age_steps is not None and \
            max_trajectory_age_steps != cfg.max_trajectory_age_steps:
        raise ValueError(
            f"max_trajectory_age_steps={max_trajectory_age_steps} differs from the config's "
            f"grpo.async_grpo.max_trajectory_age_steps={cfg.max_trajectory_age_steps}: set it "
            "in the config (the trainer was built from it)")
    return parts.run.train(num_steps)


def _should_use_async_rollouts(master_config) -> bool:
    """NeMo-RL's ``_should_use_async_rollouts``: whether generation runs asynchronously to
    training (GRPO with ``grpo.async_grpo.enabled``)."""
    return should_use_async_rollouts(master_config)
