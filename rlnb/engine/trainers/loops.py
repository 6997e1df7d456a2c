"""The training loops by name: ``algorithm: grpo`` in a config picks ``GRPOTrainer``,
``algorithm: ppo`` picks ``PPOTrainer``.

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


def make_trainer(config, **kwargs):
    """The trainer of the loop ``config`` names (``config.algorithm``, default ``grpo``)."""
    name = getattr(config, "algorithm", "grpo")
    return choose(TRAINERS, name, "training loop (algorithm)")()(config, **kwargs)


# name -> a function returning the trainer class (imported on use: each loop loads its own parts)
TRAINERS = {"grpo": _grpo, "ppo": _ppo}
# name -> the config sections that belong to that loop alone (the others' must be absent)
LOOP_SECTIONS = {"grpo": ("grpo",), "ppo": ("ppo", "value", "value_loss_fn")}
