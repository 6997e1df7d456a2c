"""Advantage estimators by name: the one registry every loop, panel and comparison reads.

    make_estimator({"name": "reinforce_plus_plus"}, loss_config, loop="grpo")
    estimator_names(loop="grpo", trainable=True)   # ['grpo', 'gdpo', 'reinforce_plus_plus']

An estimator is a class with NeMo-RL's interface (``cls(estimator_config, loss_config)`` then
``compute_advantage(...)``) that declares what it needs as class attributes:

- ``loop``: whose call contract it follows, ``"grpo"`` (returns ``[B, S]`` advantages;
  ``advantages.py``) or ``"ppo"`` (returns ``(advantages, returns)``; ``gae.py``);
- ``needs_groups`` (and ``uses_groups(config)``): its baseline is the other responses to the
  same prompt, so a group of one gives zeros;
- ``needs_critic``: its advantages come from a value model's predictions;
- ``kl_in_reward``: ``loss_fn.use_kl_in_reward`` puts β·KL into its advantages;
- ``trainable``: a trainer can feed it (OPD needs a teacher model rlnb does not have yet).

A new estimator is a class plus ``register_estimator(name, cls)`` (from a notebook cell too);
the config, the trainers, the config panel and the counterfactual comparison then list it.
"""

from __future__ import annotations

from typing import Any

from rlnb.algorithms.advantage_config import AdvEstimatorConfig
from rlnb.algorithms.advantages import GRPOAdvantageEstimator
from rlnb.algorithms.checks import choose
from rlnb.algorithms.gae import (
    GeneralizedAdvantageEstimator,
    PPOAdvEstimatorConfig,
    RawRewardAdvantageEstimator,
)
from rlnb.algorithms.gdpo import GDPOAdvantageEstimator
from rlnb.algorithms.opd import OnPolicyDistillationAdvantageEstimator
from rlnb.algorithms.reinforce_plus_plus import ReinforcePlusPlusAdvantageEstimator
from rlnb.config import parse_config
from rlnb.registry import claim

ESTIMATOR_LOOPS = {"grpo": ("GRPO's loop", AdvEstimatorConfig, "grpo.adv_estimator"),
                   "ppo": ("PPO's loop", PPOAdvEstimatorConfig, "ppo.adv_estimator")}
CAPABILITIES = ("needs_groups", "needs_critic", "kl_in_reward", "trainable")


def register_estimator(name: str, cls: type, *, replace: bool = False) -> None:
    """Make ``<loop>.adv_estimator.name: <name>`` build ``cls``: a class with
    ``compute_advantage`` and a ``loop`` attribute (``"grpo"`` or ``"ppo"``); subclass
    ``GRPOAdvantageEstimator`` (or ``GeneralizedAdvantageEstimator``) to inherit the call
    contract and the default capabilities."""
    if not callable(getattr(cls, "compute_advantage", None)):
        raise TypeError(f"estimator {name!r}: {cls!r} has no compute_advantage method")
    if getattr(cls, "loop", None) not in ESTIMATOR_LOOPS:
        raise TypeError(f"estimator {name!r}: {cls.__name__}.loop must be one of "
                        f"{list(ESTIMATOR_LOOPS)} "
                        f"(whose call contract compute_advantage follows), got "
                        f"{getattr(cls, 'loop', None)!r}")
    missing = [c for c in CAPABILITIES if not isinstance(getattr(cls, c, None), bool)]
    if missing:
        raise TypeError(f"estimator {name!r}: {cls.__name__} must declare {missing} as booleans")
    claim(ADVANTAGE_ESTIMATORS, "estimator", name, cls, replace=replace)


def estimator_names(loop: str | None = None, **capabilities: bool) -> list[str]:
    """Registered names, in registration order, of a loop's estimators with the given
    capabilities (``trainable=True``, ``needs_critic=False``, ...)."""
    return [name for name, cls in ADVANTAGE_ESTIMATORS.items()
            if (loop is None or cls.loop == loop)
            and all(getattr(cls, k) == v for k, v in capabilities.items())]


def estimator_class(name: str, loop: str | None = None) -> type:
    """The class registered as ``name`` (of ``loop``'s estimators, when given); an unknown name,
    or another loop's, is a ``ValueError`` listing the valid ones."""
    if loop is None:
        return choose(ADVANTAGE_ESTIMATORS, name, "advantage estimator")
    cls = ADVANTAGE_ESTIMATORS.get(name)
    if cls is not None and cls.loop != loop:
        raise ValueError(
            f"{name!r} is an estimator of {ESTIMATOR_LOOPS[cls.loop][0]}; "
            f"{ESTIMATOR_LOOPS[loop][0]} takes "
            f"{', '.join(map(repr, estimator_names(loop)))}")
    return choose({n: ADVANTAGE_ESTIMATORS[n] for n in estimator_names(loop)}, name,
                  "advantage estimator")


def make_estimator(estimator_config: Any, loss_config: Any = None, *, loop: str = "grpo"):
    """The estimator ``estimator_config`` names (a config of ``loop``'s kind, or its dict)."""
    _, config_class, key = ESTIMATOR_LOOPS[loop]
    cfg = parse_config(config_class, estimator_config, key)
    try:
        cls = estimator_class(cfg.name, loop)
    except ValueError as err:
        raise ValueError(f"{key}.name: {err}") from None
    return cls(cfg, loss_config)


def make_advantage_estimator(estimator_config: Any = None, loss_config: Any = None):
    """A GRPO-family estimator from a ``grpo.adv_estimator`` config (or dict)."""
    return make_estimator(estimator_config, loss_config, loop="grpo")


def make_ppo_advantage_estimator(estimator_config: Any = None, loss_config: Any = None):
    """A PPO estimator from a ``ppo.adv_estimator`` config (or dict)."""
    return make_estimator(estimator_config, loss_config, loop="ppo")


# the registry (name -> class): every other list of estimators is derived from it
ADVANTAGE_ESTIMATORS: dict[str, type] = {
    "grpo": GRPOAdvantageEstimator,
    "gdpo": GDPOAdvantageEstimator,
    "reinforce_plus_plus": ReinforcePlusPlusAdvantageEstimator,
    "opd": OnPolicyDistillationAdvantageEstimator,
    "gae": GeneralizedAdvantageEstimator,
    "raw_reward": RawRewardAdvantageEstimator,
}
