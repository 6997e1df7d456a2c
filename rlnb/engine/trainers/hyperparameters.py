"""Changing hyperparameters between steps: ``trainer.reconfigure({"loss_fn.ratio_clip_max": .3})``.

    new config = validate(old config + overrides);  then loss, optimizer lr and sampler follow it

Implementation choices:
1) The change goes through the same path as a config file (dotted overrides, then validation of
   the whole config), so unknown keys fail with the closest name, bad values with the key, and
   NeMo-RL's top-level aliases (``grpo.normalize_rewards``) land where the config folds them.
2) Only keys that can change mid-run are accepted (``RECONFIGURABLE``): anything that changes
   shapes, the model or the data would silently break the run.
3) A learning-rate change reaches both the optimizer's param groups and the warm-up scheduler's
   base rates (the scheduler multiplies those), so it sticks past the next scheduler step.
4) Turning the KL penalty on needs a reference model; a trainer built without one refuses.
"""

from __future__ import annotations

from typing import Any

from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.config import apply_overrides, flatten, parse_config
from rlnb.engine.trainers.loop_config import OVERRIDE_ALIASES, needs_reference

RECONFIGURABLE = (
    "loss_fn.", "grpo.adv_estimator.", "grpo.normalize_rewards",
    "grpo.use_leave_one_out_baseline", "grpo.advantage_clip_low", "grpo.advantage_clip_high",
    "grpo.overlong_filtering", "grpo.val_period", "grpo.max_val_samples",
    "ppo.adv_estimator.", "ppo.val_period", "ppo.max_val_samples", "ppo.ppo_epochs",
    "dpo.reference_policy_kl_penalty", "dpo.preference_loss_weight", "dpo.sft_loss_weight",
    "dpo.preference_average_log_probs", "dpo.sft_average_log_probs", "dpo.val_period",
    "dpo.max_val_samples",
    "policy.optimizer.lr", "policy.max_grad_norm", "policy.generation.temperature",
    "policy.generation.top_p", "policy.generation.top_k", "value.optimizer.lr",
)


def _reconfigurable(key: str) -> bool:
    return any(key == p or (p.endswith(".") and key.startswith(p)) for p in RECONFIGURABLE)


def reconfigure(trainer, overrides: dict[str, Any] | list[str], *, dry_run: bool = False
                ) -> dict[str, tuple[Any, Any]]:
    """Validate ``overrides`` against ``trainer.config`` and apply them; returns
    ``{dotted key: (old, new)}``. ``dry_run=True`` only validates and returns the changes."""
    items = ([f"{k}={v}" for k, v in overrides.items()] if isinstance(overrides, dict)
             else list(overrides))
    for item in items:
        key = item.split("=", 1)[0]
        if not _reconfigurable(key):
            raise ValueError(
                f"reconfigure: '{key}' cannot change between steps (it changes shapes, the model "
                f"or the data); these can: {', '.join(RECONFIGURABLE)}")
    data = apply_overrides(trainer.config.model_dump(mode="json"), items, OVERRIDE_ALIASES)
    new = parse_config(type(trainer.config), data)
    policy = trainer.policy  # (with LoRA adapters the reference is the base: always there)
    if needs_reference(new) and policy.reference_model is None and not policy.lora:
        raise ValueError(
            "reconfigure: loss_fn.reference_policy_kl_penalty > 0 needs a reference model, and "
            "this trainer was built without one; rebuild it with a KL penalty > 0")
    old_flat, new_flat = flatten(trainer.config.model_dump()), flatten(new.model_dump())
    changed = {k: (old_flat.get(k), v) for k, v in new_flat.items() if old_flat.get(k) != v}
    if dry_run:
        return changed
    trainer.config = new
    trainer.need_reference = needs_reference(new)
    trainer.loss_fn = ClippedPGLossFn(new.loss_fn)
    trainer.policy.config = new.policy
    trainer.generator.config = new.policy.generation
    set_learning_rate(trainer.policy.optimizer, trainer.policy.scheduler,
                      new.policy.optimizer.lr)
    critic = getattr(trainer, "critic", None)
    if critic is not None:  # PPO's value model has its own optimizer
        critic.config = new.value
        set_learning_rate(critic.optimizer, critic.scheduler, new.value.optimizer.lr)
    return changed


def set_learning_rate(optimizer, scheduler, lr: float) -> None:
    """Set the base learning rate of ``optimizer`` under a multiplicative ``scheduler``
    (choice 3)."""
    for group in optimizer.param_groups:
        group["initial_lr"] = lr
    if hasattr(scheduler, "base_lrs"):  # the warm-up multiplies these
        scale = [lr / b if b else 1.0 for b in scheduler.base_lrs]
        scheduler.base_lrs = [lr] * len(scheduler.base_lrs)
        for group, s in zip(optimizer.param_groups, scale):
            group["lr"] *= s
