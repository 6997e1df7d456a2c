"""NeMo-RL's ``nemo_rl.algorithms.utils`` tensor helpers, with its argument names, over rlnb's.

Each takes NeMo-RL's argument names and calls rlnb's one implementation:

- ``calculate_kl(logprobs, logprobs_reference, ..., importance_sampling_weights)`` ->
  ``rlnb.algorithms.kl.calculate_kl`` (there: ``reference_logprobs``, ``importance_weights``);
- ``calculate_baseline_and_std_per_prompt(prompts, rewards, valid_mask, leave_one_out_baseline,
  std_rewards)`` -> ``rlnb.algorithms.baselines`` (``leave_one_out``, ``rewards_for_std``);
- ``masked_mean``, ``masked_var`` -> ``rlnb.algorithms.masked``;
- ``get_gdpo_reward_component_keys(batch)`` -> ``rlnb.algorithms.gdpo``;
- ``mask_out_neg_inf_logprobs`` and ``set_seed`` are small enough to live here.

Not here (NeMo-RL's infrastructure): ``get_tokenizer`` (rlnb loads the tokenizer with the model,
``policy.tokenizer_name``), ``maybe_pad_last_batch`` (data-parallel sharding), the performance and
efficiency printers, ``surpress_user_warnings``.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlnb.algorithms import baselines, gdpo, kl, masked

__all__ = ["calculate_baseline_and_std_per_prompt", "calculate_kl",
           "get_gdpo_reward_component_keys", "mask_out_neg_inf_logprobs", "masked_mean",
           "masked_var", "set_seed"]


def calculate_kl(
    logprobs: torch.Tensor,
    logprobs_reference: torch.Tensor,
    kl_type: str = "k3",
    input_clamp_value: float | None = 20.0,
    output_clamp_value: float | None = 10.0,
    importance_sampling_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(π‖π_ref) estimate ``[B, T]`` (k1/k2/k3, clamps as NeMo-RL)."""
    return kl.calculate_kl(
        logprobs, logprobs_reference, kl_type=kl_type, input_clamp_value=input_clamp_value,
        output_clamp_value=output_clamp_value, importance_weights=importance_sampling_weights,
    )


def calculate_baseline_and_std_per_prompt(
    prompts: torch.Tensor,
    rewards: torch.Tensor,
    valid_mask: torch.Tensor,
    leave_one_out_baseline: bool = True,
    std_rewards: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(baseline [B], std [B])`` of each row's prompt group (rows of ``prompts`` that are equal
    form a group)."""
    return baselines.calculate_baseline_and_std_per_prompt(
        prompts, rewards, valid_mask, leave_one_out=leave_one_out_baseline,
        rewards_for_std=std_rewards,
    )


def masked_mean(
    values: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    global_normalization_factor: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Σ(values·mask) / (Σ mask + 1e-8), or over ``global_normalization_factor``."""
    return masked.masked_mean(values, mask, dim, global_normalization_factor)


def masked_var(
    values: torch.Tensor,
    mask: torch.Tensor,
    mean: torch.Tensor | float | None = None,
    unbiased: bool = True,
) -> torch.Tensor:
    """Masked variance over every element, Bessel-corrected when ``unbiased``."""
    return masked.masked_var(values, mask, mean, unbiased)


def get_gdpo_reward_component_keys(batch: Mapping[str, Any]) -> list[str]:
    """The batch's ``reward/<name>`` keys in sorted order (GDPO's reward components)."""
    return [k for k in gdpo.gdpo_reward_components(batch) if k.startswith("reward/")]


def mask_out_neg_inf_logprobs(
    logprobs: torch.Tensor, mask: torch.Tensor, logprobs_name: str
) -> torch.Tensor:
    """``logprobs`` where ``mask`` is set and the value is finite, 0 elsewhere (a -inf is a token
    outside the training-time top-k/top-p set); warns with the count of such valid tokens."""
    inf = torch.isinf(logprobs)
    count = int((inf & mask.bool()).sum())
    if count:
        warnings.warn(f"{logprobs_name}: {count} valid token(s) have -inf log-probability under "
                      "the top-k/top-p filter; masked out", stacklevel=2)
    return torch.where(mask.bool() & ~inf, logprobs, torch.zeros_like(logprobs))


def set_seed(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global generators (every device)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


ABSENT = {
    "get_tokenizer": "rlnb loads the tokenizer with the model (policy.tokenizer_name)",
    "maybe_pad_last_batch": "data-parallel sharding: accelerate splits rlnb's batches",
    "print_performance_metrics": "NeMo-RL's console report; rlnb logs timing/* metrics",
    "log_generation_metrics": "NeMo-RL's vLLM engine metrics",
    "print_efficiency_summary": "NeMo-RL's console report; rlnb logs timing/* metrics",
    "surpress_user_warnings": "rlnb fixes warnings at their source",
}


def __getattr__(name: str):
    if name in ABSENT:
        raise ImportError(f"rlnb.nemo.utils has no {name}: {ABSENT[name]} "
                          "(docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
