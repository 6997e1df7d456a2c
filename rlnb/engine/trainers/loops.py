"""The training loops by name: ``algorithm: grpo`` in a config picks ``GRPOTrainer``,
``algorithm: ppo`` picks ``PPOTrainer``, ``algorithm: dpo`` picks ``DPOTrainer``; GRPO with
``grpo.async_grpo.enabled`` is ``AsyncGRPOTrainer``.

    trainer = make_trainer(rlnb.load_config("configs/tiny.yaml"))
    register_loop("grpo_sign", SignGRPOTrainer)   # algorithm: grpo_sign, on the grpo section

``LOOPS`` is the registry: each loop's trainer (which declares its stages and dashboard panels,
``views.py``), the config sections it reads (the first is its loop section; another loop's
sections are refused when a config loads), for a loop whose section can switch generation to
run ahead of training its asynchronous trainer, and one line saying what it is (the config's
``algorithm`` field lists them).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlnb.algorithms.checks import choose
from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer
from rlnb.engine.trainers.base import Trainer
from rlnb.engine.trainers.dpo import DPOTrainer
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.engine.trainers.ppo import PPOTrainer
from rlnb.registry import claim, origin


@dataclass(frozen=True)
class LoopSpec:
    """One loop: its trainer class, the config sections it reads (the first one is its loop
    section: ``LoopConfig``'s keys, or a section with rules of its own), the trainer used when
    that section's ``asynchronous`` is true, and what it is, in a few words."""

    trainer: type
    sections: tuple[str, ...]
    async_trainer: type | None = None
    about: str = ""


def make_trainer(config, **kwargs):
    """The trainer of the loop ``config`` names (``config.algorithm``, default ``grpo``; GRPO
    with ``grpo.async_grpo.enabled`` is the async loop)."""
    return trainer_class(config)(config, **kwargs)


def trainer_class(config) -> type:
    """The trainer class ``make_trainer`` builds for ``config`` (its loop's, or the loop's
    asynchronous trainer when its section says so)."""
    spec = choose(LOOPS, getattr(config, "algorithm", "grpo"), "training loop (algorithm)")
    return spec.async_trainer if should_use_async_rollouts(config) else spec.trainer


def should_use_async_rollouts(config) -> bool:
    """Whether the run generates asynchronously to training (NeMo-RL's
    ``_should_use_async_rollouts``): a loop section with ``asynchronous`` set (GRPO with
    ``grpo.async_grpo.enabled``)."""
    spec = LOOPS.get(getattr(config, "algorithm", "grpo"))
    section = getattr(config, spec.sections[0], None) if spec else None
    return spec is not None and spec.async_trainer is not None and section is not None \
        and section.asynchronous


def loop_sections() -> dict[str, tuple[str, ...]]:
    """loop name -> the config sections it reads (a loop registered on another's section,
    ``register_loop``, shares them)."""
    return {name: spec.sections for name, spec in LOOPS.items()}


def main_section(name: str) -> str:
    """The loop section of loop ``name`` (the config section holding its sizes and seed)."""
    return choose(LOOPS, name, "training loop (algorithm)").sections[0]


def describe_loops() -> str:
    """The registered loops, each with what it is: ``'grpo' (GRPO: ...), 'ppo' (...)``."""
    return ", ".join(f"{name!r} ({spec.about or spec.trainer.__name__})"
                     for name, spec in LOOPS.items())


def register_loop(name: str, trainer: type, sections: tuple[str, ...] | None = None, *,
                  async_trainer: type | None = None, about: str = "",
                  replace: bool = False) -> None:
    """Make ``algorithm: <name>`` build ``trainer``: a ``Trainer`` subclass with its stage
    methods, ``step``, and what the UI shows of it (``stages``, ``panels``: ``views.py``).

    ``sections`` are the config sections it reads, the first its loop section (default: the
    trainer's ``loop_section``). A loop in the package adds a ``MasterConfig`` field for a
    section of its own; a plug-in reads an existing loop's, as a GRPO variant reads ``grpo``
    (``register_loop("grpo_sign", SignGRPOTrainer)``). ``about``: what it is, in a few words
    (default: the trainer's name)."""
    if not (isinstance(trainer, type) and issubclass(trainer, Trainer)):
        raise TypeError(f"loop {name!r}: a loop's trainer is a Trainer subclass, got {trainer!r}")
    if trainer.step is Trainer.step:
        raise TypeError(f"loop {name!r}: {trainer.__name__} does not define step()")
    sections = tuple(sections) if sections is not None else (trainer.loop_section,)
    if not sections or sections[0] != trainer.loop_section:
        raise TypeError(f"loop {name!r}: {trainer.__name__} reads its keys from the "
                        f"{trainer.loop_section!r} section (loop_section), so the loop's first "
                        f"section must be it, got {sections}")
    if async_trainer is not None and not (isinstance(async_trainer, type)
                                          and issubclass(async_trainer, trainer)):
        raise TypeError(f"loop {name!r}: the asynchronous trainer is a subclass of "
                        f"{trainer.__name__}, got {async_trainer!r}")
    claim(LOOPS, "loop", name, LoopSpec(trainer, sections, async_trainer, about),
          replace=replace, part=lambda spec: spec.trainer)


# the registry (name -> LoopSpec): the config's `algorithm` and its sections are checked here
LOOPS: dict[str, LoopSpec] = {
    "grpo": LoopSpec(GRPOTrainer, ("grpo",), async_trainer=AsyncGRPOTrainer,
                     about="GRPO: group-relative advantages, no critic; asynchronous with "
                     "grpo.async_grpo.enabled"),
    "ppo": LoopSpec(PPOTrainer, ("ppo", "value", "value_loss_fn"),
                    about="PPO: GAE advantages from a learned value model, the critic"),
    "dpo": LoopSpec(DPOTrainer, ("dpo",),
                    about="DPO: a preference loss on chosen/rejected pairs against a frozen "
                    "reference"),
}


def parts_in_use(config, trainer) -> dict[str, str]:
    """Which class ran under each registered name the run's config uses, as ``{"<key>=<name>":
    "module.Class"}`` (``rlnb.registry.origin``): the loop's trainer, the advantage estimator,
    the task and the generation backend. A run records it (``parts.json``), so a plug-in that
    replaced a part on purpose shows in the run, not only in the code that was imported."""
    from rlnb.algorithms.estimators import ADVANTAGE_ESTIMATORS
    from rlnb.engine.environments.tasks import TASKS
    from rlnb.engine.models.generation import GENERATION_BACKENDS

    parts = {f"algorithm={getattr(config, 'algorithm', 'grpo')}": origin(type(trainer))}
    estimator = getattr(trainer.loop_config, "adv_estimator", None)
    if estimator is not None:
        key = f"{trainer.loop_section}.adv_estimator.name={estimator.name}"
        parts[key] = origin(ADVANTAGE_ESTIMATORS[estimator.name])
    parts[f"data.name={config.data.name}"] = origin(TASKS[config.data.name])
    backend = config.policy.generation.backend
    parts[f"policy.generation.backend={backend}"] = origin(GENERATION_BACKENDS[backend])
    return parts

