"""The training loops by name: ``algorithm: grpo`` in a config picks ``GRPOTrainer``,
``algorithm: ppo`` picks ``PPOTrainer``; GRPO with ``grpo.async_grpo.enabled`` is
``AsyncGRPOTrainer``.

    trainer = make_trainer(rlnb.load_config("configs/tiny.yaml"))
"""

from __future__ import annotations

from rlnb.algorithms.checks import choose


def _grpo():
    from rlnb.engine.trainers.grpo import GRPOTrainer

    return GRPOTrainer


def _ppo():
    from rlnb.engine.trainers.ppo import PPOTrainer

    return PPOTrainer


def _async_grpo():
    from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer

    return AsyncGRPOTrainer


def make_trainer(config, **kwargs):
    """The trainer of the loop ``config`` names (``config.algorithm``, default ``grpo``; GRPO
    with ``grpo.async_grpo.enabled`` is the async loop)."""
    name = getattr(config, "algorithm", "grpo")
    if name == "grpo" and should_use_async_rollouts(config):
        return _async_grpo()(config, **kwargs)
    return choose(TRAINERS, name, "training loop (algorithm)")()(config, **kwargs)


def should_use_async_rollouts(config) -> bool:
    """Whether the run generates asynchronously to training (NeMo-RL's
    ``_should_use_async_rollouts``): GRPO with ``grpo.async_grpo.enabled``."""
    grpo = getattr(config, "grpo", None)
    return grpo is not None and grpo.async_grpo.enabled


# name -> a function returning the trainer class (imported on use: each loop loads its own parts)
TRAINERS = {"grpo": _grpo, "ppo": _ppo}
# name -> the config sections that belong to that loop alone (the others' must be absent)
LOOP_SECTIONS = {"grpo": ("grpo",), "ppo": ("ppo", "value", "value_loss_fn")}
