"""NeMo-RL's ``nemo_rl.algorithms.grpo`` names, each driving rlnb's GRPO trainer.

    from rlnb.nemo.grpo import MasterConfig, setup, grpo_train
    parts = setup(rlnb.load_config(None))      # NeMo-RL: policy, generation, ..., save state
    grpo_train(parts)                          # NeMo-RL: the synchronous GRPO loop

| NeMo-RL                      | here                                                           |
|------------------------------|----------------------------------------------------------------|
| ``MasterConfig``             | ``rlnb.run.config.master_config.MasterConfig`` (the config)    |
| ``GRPOSaveState``            | the TypedDict ``GRPOTrainer.state()`` returns                  |
| ``GRPOLoggerConfig``         | the ``logger`` section (``LoggerConfig``,                      |
|                              | ``rlnb.run.store.loggers``)                                    |
| ``setup(master_config)``     | a ``TrainingRun``: trainer, policy, generation, task, loss ... |
| ``grpo_train(...)``          | ``TrainingRun.train``: ``trainer.step()`` = rollout ->         |
|                              | compute_advantages -> update, validation, logging, checkpoints |
| ``validate(...)``            | ``trainer.validate()``                                         |
| ``refit_policy_generation``  | ``generator.refit(policy.model)``                              |
| ``async_grpo_train(...)``    | the same with ``AsyncGRPOTrainer`` (``grpo.async_grpo``):      |
|                              | a collector thread generates ahead, a replay buffer, ages      |
| ``AsyncGRPOConfig``          | the ``grpo.async_grpo`` section                                 |
| ``_should_use_async_rollouts`` | whether the loop generates asynchronously to training        |

rlnb keeps NeMo-RL's meaning, not its signatures, for these loop functions: NeMo-RL passes a dozen
workers and loaders around; here ``setup`` returns them bundled (``GRPOSetup``) and the others
take it. The batch-level functions keep NeMo-RL's signatures and return shapes exactly (thin
adapters in ``rlnb.nemo.batch_stages``):

| NeMo-RL                                             | rlnb's implementation                  |
|-----------------------------------------------------|----------------------------------------|
| ``scale_rewards(repeated_batch, reward_scaling_cfg)`` | ``rlnb.algorithms.rewards``            |
| ``dynamic_sampling(repeated_batch, std, baseline,``   | ``rlnb.algorithms.dynamic_sampling``   |
| ``  k, master_config, timer, batch_cache)``           |                                        |
| ``compute_and_apply_seq_logprob_error_masking(...)``  | ``rlnb.algorithms.filtering``          |
| ``_clip_grpo_advantages(advantages, grpo_config)``    | ``filtering.clip_advantages``          |
| ``_create_advantage_estimator(master_config)``        | ``rlnb.nemo.advantage_estimator``      |
| ``_apply_mask_sample_filter(repeated_batch)``         | here (``batch_stages``)                |

Not here (NeMo-Gym and message-log plumbing; docs/nemo_rl_names.md): the reward penalties
(``RewardPenaltyConfig``), ``shutdown_environments``, ``extract_initial_prompt_messages``,
``add_grpo_token_loss_masks_and_generation_logprobs``, ``aggregate_rollout_metrics``.
"""

from __future__ import annotations

from typing import Any, NamedTuple, TypedDict

from rlnb.algorithms.rewards import RewardScalingConfig
from rlnb.engine.trainers.collector import AsyncLoopConfig as AsyncGRPOConfig
from rlnb.engine.trainers.grpo_config import GRPOConfig
from rlnb.engine.trainers.grpo_config import (
    GRPOEstimatorConfig as AdvEstimatorConfig,  # what the field takes
)
from rlnb.engine.trainers.loops import should_use_async_rollouts
from rlnb.nemo import advantage_estimator, batch_stages
from rlnb.nemo.reward_functions import config_value
from rlnb.run.config.master_config import MasterConfig, load_config
from rlnb.run.store.loggers import LoggerConfig as GRPOLoggerConfig

__all__ = ["AdvEstimatorConfig", "AsyncGRPOConfig", "GRPOConfig", "GRPOLoggerConfig",
           "GRPOSaveState", "GRPOSetup", "MasterConfig", "RewardScalingConfig",
           "_apply_mask_sample_filter", "_clip_grpo_advantages", "_create_advantage_estimator",
           "_should_use_async_rollouts", "async_grpo_train",
           "compute_and_apply_seq_logprob_error_masking", "dynamic_sampling", "grpo_train",
           "refit_policy_generation", "scale_rewards", "setup", "validate"]

ABSENT = {
    "RewardPenaltyConfig": "NeMo-Gym's reward penalties: rlnb has no NeMo-Gym environments",
    "RewardPenaltyTokenIdsConfig": "NeMo-Gym's reward penalties: rlnb has no NeMo-Gym "
                                   "environments",
    "shutdown_environments": "NeMo-RL's environments are Ray actors; rlnb's are objects",
    "extract_initial_prompt_messages": "message-log plumbing: rlnb's rollouts carry prompt "
                                       "tokens (RolloutBatch.prompt_ids)",
    "add_grpo_token_loss_masks_and_generation_logprobs": "message-log plumbing: rlnb's "
                                                          "rollouts carry token_mask",
    "aggregate_rollout_metrics": "NeMo-RL's async collector metrics; rlnb's collector reports "
                                 "its own",
}


def __getattr__(name: str):
    if name in ABSENT:
        raise ImportError(f"rlnb.nemo.grpo has no {name}: {ABSENT[name]} "
                          "(docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from rlnb.run.training.session import TrainingRun

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


def refit_policy_generation(policy, policy_generation, colocated_inference: bool = True,
                            _refit_buffer_size_gb: float | None = None, timer=None,
                            kv_scales: dict[str, float] | None = None) -> None:
    """NeMo-RL's ``refit_policy_generation``: push the policy's current weights into the
    generation backend (a no-op count for the HF backend, which samples with the policy's own
    module). ``colocated_inference``, ``_refit_buffer_size_gb`` and ``timer`` choose NeMo-RL's
    transport and are not needed here; FP8 ``kv_scales`` are refused (rlnb has no FP8 KV cache)."""
    if kv_scales is not None:
        raise ValueError("kv_scales: rlnb's generation backends have no FP8 KV cache to scale")
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


# --------------------------------------------------------------------------- batch stages


def scale_rewards(repeated_batch, reward_scaling_cfg):
    """NeMo-RL's ``scale_rewards``: ``total_reward`` and every ``reward/*`` clamped into
    [source_min, source_max] and mapped onto [target_min, target_max], in place; returns the
    batch (untouched when ``reward_scaling_cfg.enabled`` is false)."""
    return batch_stages.scale_rewards(repeated_batch, reward_scaling_cfg)


def dynamic_sampling(repeated_batch, std, baseline, dynamic_sampling_num_gen_batches,
                     master_config, timer, batch_cache=None):
    """NeMo-RL's ``dynamic_sampling`` (DAPO): ``(batch, is_batch_complete, batch_cache,
    metrics)``. Keeps rows with ``std != 0``, caches them across generation batches and cuts
    ``num_prompts_per_step × num_generations_per_prompt`` rows once there are enough; with
    ``grpo.use_dynamic_sampling`` false it only writes ``baseline``/``std`` into the batch."""
    return batch_stages.dynamic_sampling("grpo", repeated_batch, std, baseline,
                                         dynamic_sampling_num_gen_batches, master_config, timer,
                                         batch_cache)


def compute_and_apply_seq_logprob_error_masking(train_data, rewards,
                                                seq_logprob_error_threshold):
    """NeMo-RL's ``compute_and_apply_seq_logprob_error_masking``: metrics of the per-sequence
    train/inference log-prob error; with a threshold ``train_data["sample_mask"]`` masks the
    sequences above it."""
    return batch_stages.seq_logprob_error_masking(train_data, rewards,
                                                  seq_logprob_error_threshold)


def _clip_grpo_advantages(advantages, grpo_config):
    """NeMo-RL's ``_clip_grpo_advantages``: clamp to ``grpo.advantage_clip_low/high``."""
    return batch_stages.clip_loop_advantages(advantages, grpo_config)


def _apply_mask_sample_filter(repeated_batch) -> int:
    """NeMo-RL's ``_apply_mask_sample_filter``: zero ``loss_multiplier`` of the rows the
    environment flagged in ``mask_sample``; returns their count."""
    return batch_stages.apply_mask_sample_filter(repeated_batch)


def _create_advantage_estimator(master_config):
    """NeMo-RL's ``_create_advantage_estimator``: the ``grpo.adv_estimator`` estimator (with
    NeMo-RL's call signatures), built with the ``loss_fn`` section."""
    est = config_value(batch_stages.section(master_config, "grpo"), "adv_estimator") or {}
    name = config_value(est, "name", "grpo")
    cls = advantage_estimator.with_nemo_signature(name, "grpo")
    return cls(est, batch_stages.section(master_config, "loss_fn"))
