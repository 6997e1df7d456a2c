"""The training loops by name: ``algorithm: grpo`` in a config picks ``GRPOTrainer``,
``algorithm: ppo`` picks ``PPOTrainer``, ``algorithm: dpo`` picks ``DPOTrainer``; GRPO with
``grpo.async_grpo.enabled`` is ``AsyncGRPOTrainer``.

    trainer = make_trainer(rlnb.load_config("configs/tiny.yaml"))

``LOOPS`` is the registry: each loop's trainer, the config sections that belong to it alone
(another loop's sections are refused when a config loads) and, for a loop whose section can
switch generation to run ahead of training, its asynchronous trainer.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlnb.algorithms.checks import choose
from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer
from rlnb.engine.trainers.dpo import DPOTrainer
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.engine.trainers.ppo import PPOTrainer


@dataclass(frozen=True)
class LoopSpec:
    """One loop: its trainer class, its own config sections (the first one is the loop's
    ``LoopConfig``) and the trainer used when that section's ``asynchronous`` is true."""

    trainer: type
    sections: tuple[str, ...]
    async_trainer: type | None = None


def make_trainer(config, **kwargs):
    """The trainer of the loop ``config`` names (``config.algorithm``, default ``grpo``; GRPO
    with ``grpo.async_grpo.enabled`` is the async loop)."""
    name = getattr(config, "algorithm", "grpo")
    spec = choose(LOOPS, name, "training loop (algorithm)")
    if should_use_async_rollouts(config):
        return spec.async_trainer(config, **kwargs)
    return spec.trainer(config, **kwargs)


def should_use_async_rollouts(config) -> bool:
    """Whether the run generates asynchronously to training (NeMo-RL's
    ``_should_use_async_rollouts``): a loop section with ``asynchronous`` set (GRPO with
    ``grpo.async_grpo.enabled``)."""
    spec = LOOPS.get(getattr(config, "algorithm", "grpo"))
    section = getattr(config, spec.sections[0], None) if spec else None
    return spec is not None and spec.async_trainer is not None and section is not None \
        and section.asynchronous


def loop_sections() -> dict[str, tuple[str, ...]]:
    """loop name -> the config sections that belong to it alone."""
    return {name: spec.sections for name, spec in LOOPS.items()}


# the registry (name -> LoopSpec): the config's `algorithm` and its sections are checked here
LOOPS: dict[str, LoopSpec] = {
    "grpo": LoopSpec(GRPOTrainer, ("grpo",), async_trainer=AsyncGRPOTrainer),
    "ppo": LoopSpec(PPOTrainer, ("ppo", "value", "value_loss_fn")),
    "dpo": LoopSpec(DPOTrainer, ("dpo",)),
}
