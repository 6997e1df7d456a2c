"""NeMo-RL's ``nemo_rl.algorithms.reward_functions``: reward shaping on a batch, in place.

    batch = apply_reward_shaping(batch, RewardShapingConfig(enabled=True, ...))

``apply_reward_shaping`` reads the batch NeMo-RL's way (``total_reward``, ``truncated``, the
response lengths from ``response_token_lengths`` or else the first assistant message of each
``message_log``), calls rlnb's ``shape_rewards`` and writes ``total_reward`` back, keeping the
unshaped copy in ``unshaped_total_reward``. See docs/algorithms.md#reward-scaling-and-shaping.

Deliberate differences (docs/nemo_rl_names.md): ``RewardShapingConfig`` is rlnb's strict config,
so an enabled config without κ or all three DAPO parameters, DAPO parameters next to κ, or
parameters under ``enabled: false`` fail when the config is built (NeMo-RL: at the first call,
or never); bad values raise ``ValueError`` instead of ``AssertionError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rlnb.algorithms.rewards import RewardShapingConfig, shape_rewards

__all__ = ["RewardShapingConfig", "apply_reward_shaping"]


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
