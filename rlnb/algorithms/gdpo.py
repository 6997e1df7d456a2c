"""GDPO: a GRPO advantage per reward component, weighted, summed and whitened over the rows.

    A = whiten_rows(Σ_k w_k · A_k^GRPO)       (one A_k per reward component)

Decoupled multi-reward normalisation: https://arxiv.org/abs/2601.05242;
docs/algorithms.md#grpo-family-advantage-estimators.

Implementation choices:
1) The weighted sum is whitened over the B rows with the unbiased std and no epsilon; if that std
   is not > 0 (B = 1 gives NaN) it is only centred.
2) Components come from ``repeated_batch``: keys ``reward/<name>`` (NeMo-RL's code), or
   ``reward1, reward2, ...`` (NeMo-RL's docs page); when both kinds are present the
   ``reward/<name>`` keys win. ``reward_weights`` follow the components' sorted order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import torch

from rlnb.algorithms.advantages import Estimator, broadcast_rows, grpo_advantages
from rlnb.algorithms.checks import check_finite, check_tensor

_NUMBERED = re.compile(r"reward(\d+)")


def _component_order(name: str) -> tuple:
    """Sort key of reward components: ``reward<N>`` by N (reward2 before reward10), else name."""
    numbered = _NUMBERED.fullmatch(name)
    return (0, int(numbered.group(1)), name) if numbered else (1, 0, name)


def gdpo_reward_components(repeated_batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The reward components of a batch: its ``reward/<name>`` keys (NeMo-RL's code) or, if it
    has none, its ``reward1, reward2, ...`` keys (NeMo-RL's docs page). When both kinds are
    present only the ``reward/<name>`` keys are used."""
    keys = [k for k in repeated_batch if isinstance(k, str) and k.startswith("reward/")]
    if not keys:
        keys = [k for k in repeated_batch if isinstance(k, str) and _NUMBERED.fullmatch(k)]
    return {k: repeated_batch[k] for k in sorted(keys, key=_component_order)}


def gdpo_advantages(
    prompt_ids: torch.Tensor,
    reward_components: Mapping[str, torch.Tensor],
    *,
    reward_weights: list[float] | None = None,
    leave_one_out: bool = True,
    normalize_rewards: bool = True,
) -> torch.Tensor:
    """GDPO: a GRPO advantage per reward component, weighted, summed and whitened over rows.

    Args:
        prompt_ids: ``[B, L]``.
        reward_components: name -> ``[B]`` rewards; at least two, taken in sorted name order
            (``reward<N>`` by N), which is the order ``reward_weights`` refers to.
        reward_weights: one weight per component (default all 1).
    Returns:
        ``[B]`` advantages.
    """
    names = sorted(reward_components, key=_component_order)
    if len(names) < 2:
        raise ValueError(
            "GDPO needs at least 2 reward components (batch keys 'reward/<name>' or "
            f"'reward1', 'reward2', ...), got {names}"
        )
    weights = [1.0] * len(names) if reward_weights is None else list(reward_weights)
    if len(weights) != len(names):
        raise ValueError(
            f"reward_weights has {len(weights)} entries but there are {len(names)} reward "
            f"components {names} (weights follow this sorted order)"
        )
    total = None
    for name, w in zip(names, weights):
        check_tensor(f"reward_components[{name!r}]", reward_components[name], ndim=1, floating=True)
        check_finite(f"reward_components[{name!r}]", reward_components[name])
        a_k = grpo_advantages(
            prompt_ids,
            reward_components[name],
            leave_one_out=leave_one_out,
            normalize_rewards=normalize_rewards,
        )
        total = w * a_k if total is None else total + w * a_k
    centred = total - total.mean()
    if total.numel() < 2:  # unbiased std of one row is NaN, and NaN > 0 is False: only centre
        return centred
    std = total.std()  # unbiased, over rows (not tokens), no epsilon
    return centred / std if bool(std > 0) else centred


class GDPOAdvantageEstimator(Estimator):
    """GDPO over the reward components of ``repeated_batch``; ``rewards`` is unused (None is
    accepted, as NeMo-RL never reads it)."""

    reads_rewards = False

    def advantages(self, prompt_ids, rewards, mask, *, repeated_batch, **_unused):
        if repeated_batch is None:
            raise ValueError("GDPO needs repeated_batch with 'reward/<name>' components")
        a = gdpo_advantages(
            prompt_ids,
            gdpo_reward_components(repeated_batch),
            reward_weights=self.config.reward_weights,
            leave_one_out=self.config.use_leave_one_out_baseline,
            normalize_rewards=self.config.normalize_rewards,
        )
        return broadcast_rows(a, mask)
