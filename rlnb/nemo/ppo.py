"""NeMo-RL's ``nemo_rl.algorithms.ppo`` names, each driving rlnb's PPO trainer.

    from rlnb.nemo.ppo import setup, ppo_train
    parts = setup(rlnb.load_config("configs/ppo_tiny.yaml"))  # policy, value model, ...
    ppo_train(parts)                                          # NeMo-RL: the PPO loop

| NeMo-RL                          | here                                                       |
|----------------------------------|------------------------------------------------------------|
| ``MasterConfig``                 | ``rlnb.run.config.master_config.MasterConfig``,            |
|                                  | ``algorithm: ppo``                                         |
| ``PPOConfig``                    | the ``ppo`` section (``engine/trainers/ppo.py``)            |
| ``AdvEstimatorConfig`` (GAE)     | ``ppo.adv_estimator``: ``gae`` or ``raw_reward``           |
| ``PPOSaveState``                 | the TypedDict ``PPOTrainer.state()`` returns               |
| ``setup(master_config)``         | a ``TrainingRun``: trainer, policy, value model, task ...  |
| ``ppo_train(...)``               | ``TrainingRun.train``: ``trainer.step()`` = rollout ->     |
|                                  | compute_values -> compute_advantages -> update             |
|                                  | (``ppo_epochs`` x: critic pass, then policy pass)          |
| ``validate(...)``                | ``trainer.validate()``                                     |
| ``dynamic_sampling(...)``        | NeMo-RL's signature over ``rlnb.algorithms.dynamic_sampling``|
|                                  | (``rlnb.nemo.batch_stages``), reading the ``ppo`` section  |
| ``_apply_ppo_seq_logprob_error_masking`` | ``rlnb.algorithms.filtering.seq_logprob_error_mask`` |
| ``_create_advantage_estimator``  | GAE / raw reward of ``rlnb.nemo.advantage_estimator``      |
| ``_compute_critic_metrics``      | ``critic/*`` from the critic's micro-batch metrics, with   |
|                                  | ``rlnb.algorithms.value_loss.explained_variance``          |

rlnb keeps NeMo-RL's meaning, not its signatures, for the loop functions: ``setup`` returns the
parts bundled (``PPOSetup``) and the others take it. Not here: ``AsyncPPOConfig`` and
``async_ppo_train`` (rlnb has no asynchronous PPO loop; importing them raises ``ImportError``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from rlnb.algorithms.estimators import estimator_names
from rlnb.algorithms.reduction import combine_metrics
from rlnb.algorithms.value_loss import explained_variance
from rlnb.engine.trainers.ppo import PPOConfig
from rlnb.engine.trainers.ppo import PPOEstimatorConfig as AdvEstimatorConfig
from rlnb.nemo import advantage_estimator, batch_stages
from rlnb.nemo.grpo import GRPOSaveState
from rlnb.nemo.reward_functions import config_value
from rlnb.run.config.master_config import MasterConfig, load_config
from rlnb.run.store.loggers import LoggerConfig as PPOLoggerConfig

__all__ = ["AdvEstimatorConfig", "MasterConfig", "PPOConfig", "PPOLoggerConfig", "PPOSaveState",
           "PPOSetup", "_apply_ppo_seq_logprob_error_masking", "_compute_critic_metrics",
           "_create_advantage_estimator",
           "dynamic_sampling", "ppo_train", "setup", "validate"]

ABSENT = {name: "rlnb has no asynchronous PPO loop (PPO runs synchronously; async GRPO exists)"
          for name in ("AsyncPPOConfig", "async_ppo_train")}


def __getattr__(name: str):
    if name in ABSENT:
        raise ImportError(f"rlnb.nemo.ppo has no {name}: {ABSENT[name]} (docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    from rlnb.run.training.session import TrainingRun

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
    est = config_value(batch_stages.section(master_config, "ppo"), "adv_estimator") or {}
    name = config_value(est, "name", "gae")
    if name in estimator_names("grpo"):
        raise ValueError(f"Invalid adv_estimator name for PPO: {name!r} is a group "
                         "estimator (GRPO's loop); PPO supports "
                         f"{', '.join(map(repr, estimator_names('ppo')))}")
    cls = advantage_estimator.with_nemo_signature(name, "ppo")
    return cls(est, config_value(master_config, "loss_fn"))


# --------------------------------------------------------------------------- batch stages


def dynamic_sampling(repeated_batch, std, baseline, dynamic_sampling_num_gen_batches,
                     master_config, timer, batch_cache=None):
    """NeMo-RL's PPO ``dynamic_sampling``: as ``rlnb.nemo.grpo.dynamic_sampling``, reading the
    ``ppo`` section; returns ``(batch, is_batch_complete, batch_cache, metrics)``."""
    return batch_stages.dynamic_sampling("ppo", repeated_batch, std, baseline,
                                         dynamic_sampling_num_gen_batches, master_config, timer,
                                         batch_cache)


def _apply_ppo_seq_logprob_error_masking(train_data, rewards, seq_logprob_error_threshold):
    """NeMo-RL's ``_apply_ppo_seq_logprob_error_masking``: ``(advantage_mask [B, S], metrics)``
    after the optional sequence-level masking (``train_data["sample_mask"]`` replaced); a
    ``RuntimeError`` when no valid response token is left, as NeMo-RL."""
    metrics = batch_stages.seq_logprob_error_masking(train_data, rewards,
                                                     seq_logprob_error_threshold)
    metrics["num_masked_seqs_by_logprob_error"] = metrics.pop("num_masked_seqs")
    mask = train_data["token_mask"] * train_data["sample_mask"].unsqueeze(-1)
    if not bool(mask.bool().any()):
        raise RuntimeError("PPO has no valid response tokens after filtering: check overlong "
                           "filtering and ppo.seq_logprob_error_threshold")
    return mask, metrics


# NeMo-RL's per-key rule for the critic's micro-batch metrics: averaged, or min/max, else summed
_CRITIC_MEANS = ("lr", "wd", "global_valid_seqs", "global_valid_toks", "grad_norm")


def _compute_critic_metrics(value_results):
    """NeMo-RL's ``_compute_critic_metrics``: ``critic/<key>`` of each micro-batch metric list
    (learning rates and global counts averaged, ``values_min``/``values_max`` their min/max,
    the rest summed: partial sums over global counts), plus ``critic/grad_norm``,
    ``critic/loss`` and ``critic/explained_var``."""
    out = {"critic/grad_norm": float(value_results["grad_norm"]),
           "critic/loss": float(value_results["loss"])}
    for key, values in value_results.get("all_mb_metrics", {}).items():
        listed = values.tolist() if hasattr(values, "tolist") else values
        if not isinstance(listed, (list, tuple)):
            if key not in (*_CRITIC_MEANS, "values_min", "values_max"):
                raise ValueError(f"Unsupported value-model metric: {key} (a list of per-micro-"
                                 f"batch values, got {type(values).__name__})")
            listed = [listed]
        out[f"critic/{key}"] = combine_metrics([{key: v} for v in listed],
                                               mean_keys=_CRITIC_MEANS)[key]
    moments = {f"critic/{k}": out.get(f"critic/{k}", 0.0) for k in
               ("returns_mean", "values_mean", "returns_sq_mean", "residual_sq_mean")}
    out["critic/explained_var"] = explained_variance(moments, prefix="critic/")
    return out
