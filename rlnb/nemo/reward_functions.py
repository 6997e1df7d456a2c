"""NeMo-RL's ``nemo_rl.algorithms.reward_functions``: reward shaping on a batch, in place.

    batch = apply_reward_shaping(batch, RewardShapingConfig(enabled=True, ...))

``apply_reward_shaping`` reads the batch NeMo-RL's way (``total_reward``, ``truncated``, the
response lengths from ``response_token_lengths`` or else the first assistant message of each
``message_log``), calls rlnb's ``shape_rewards`` and writes ``total_reward`` back, keeping the
unshaped copy in ``unshaped_total_reward``. See docs/algorithms.md#reward-scaling-and-shaping.

``RewardShapingConfig(**cfg["grpo"]["reward_shaping"])`` takes NeMo-RL's shipped section:
parameters under ``enabled: false`` are kept and unused, and DAPO's parameters beside κ only
warn, as in NeMo-RL (rlnb's own ``grpo.reward_shaping``, ``rlnb.algorithms.rewards``, refuses
both: an rlnb option always acts). Deliberate differences (docs/nemo_rl_names.md): an unknown
key, or an enabled config without κ or all three DAPO parameters, fails when the config is
built (NeMo-RL: lets it through, or fails at the first call); bad values raise ``ValueError``
instead of ``AssertionError``.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any

import torch

from rlnb.algorithms import rewards
from rlnb.algorithms.rewards import shape_rewards
from rlnb.config import cross_field_rule

__all__ = ["RewardShapingConfig", "apply_reward_shaping"]

DAPO_KEYS = ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")


class RewardShapingConfig(rewards.RewardShapingConfig):
    """NeMo-RL's ``grpo.reward_shaping``: rlnb's fields and bounds with NeMo-RL's tolerance of
    parameters that do nothing (module docstring); usable wherever rlnb's config is."""

    @cross_field_rule
    def _dapo_parameters_complete(self) -> RewardShapingConfig:  # (replaces rlnb's rule)
        if not self.enabled:  # NeMo-RL's shipped configs carry DAPO's parameters here
            return self
        if self.stop_properly_penalty_coef is not None:
            beside = [k for k in DAPO_KEYS if getattr(self, k) is not None]
            if beside:  # NeMo-RL prints this at each call; apply_reward_shaping warns there too
                warnings.warn(f"reward_shaping: stop_properly_penalty_coef is set, so "
                              f"{', '.join(beside)} are ignored (set it to null for DAPO's "
                              "overlong penalty)", stacklevel=2)
            return self
        missing = [k for k in DAPO_KEYS if getattr(self, k) is None]
        if missing:
            raise ValueError("enabled reward shaping needs stop_properly_penalty_coef or all "
                             f"three DAPO parameters; missing: {', '.join(missing)}")
        return self


def config_value(cfg: Any, key: str, default: Any = None) -> Any:
    """``cfg.key`` or ``cfg[key]``: NeMo-RL passes configs as pydantic models or plain dicts."""
    if isinstance(cfg, Mapping):
        return cfg.get(key, default)
    return getattr(cfg, key, default)


def _response_lengths(batch: Mapping[str, Any]) -> torch.Tensor:
    """``[B]`` generated tokens per row: ``response_token_lengths``, else the token count of each
    row's first assistant message (NeMo-RL's fallback)."""
    given = batch.get("response_token_lengths")
    if given is not None:
        return torch.as_tensor(given)
    if "message_log" not in batch:
        raise ValueError("reward shaping needs batch['response_token_lengths'] or "
                         "batch['message_log'] to measure the responses")
    lengths = []
    for i, log in enumerate(batch["message_log"]):
        first = next((m for m in log if m.get("role") == "assistant"), None)
        if first is None:
            raise ValueError(f"reward shaping: batch['message_log'][{i}] has no assistant message")
        lengths.append(len(first["token_ids"]))
    return torch.tensor(lengths)


def apply_reward_shaping(batch: Any, cfg: Any) -> Any:
    """Shape ``batch["total_reward"]`` ``[B]`` in place (stop-properly κ, else DAPO's overlong
    penalty) and return the batch; ``cfg`` disabled: the batch untouched."""
    if not config_value(cfg, "enabled", False):
        return batch
    rewards = batch["total_reward"]
    batch["unshaped_total_reward"] = rewards.clone()
    coef = config_value(cfg, "stop_properly_penalty_coef")
    options = {k: config_value(cfg, k) for k in
               ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")}
    truncated = batch.get("truncated")
    if coef is not None:
        if truncated is None:
            raise ValueError("stop_properly_penalty_coef needs batch['truncated'] ([B] 0/1)")
        batch["total_reward"] = shape_rewards(
            rewards, truncated=torch.as_tensor(truncated, device=rewards.device),
            stop_properly_penalty_coef=coef, **options)
        return batch
    lengths = _response_lengths(batch)
    if lengths.shape[0] != rewards.shape[0]:
        raise ValueError(f"reward shaping: {lengths.shape[0]} response lengths for "
                         f"{rewards.shape[0]} rewards")
    batch["total_reward"] = shape_rewards(rewards, response_lengths=lengths.to(rewards.device),
                                          **options)
    return batch
