"""The per-batch stages of NeMo-RL's GRPO and PPO loops, on NeMo-RL's batches and configs:
reward scaling, dynamic sampling, sequence-level log-prob-error masking, advantage clipping and
the ``mask_sample`` filter. ``rlnb.nemo.grpo`` and ``rlnb.nemo.ppo`` expose them under NeMo-RL's
names and signatures.

Each converts NeMo-RL's arguments (a ``BatchedDataDict`` edited in place, a ``MasterConfig`` as
a pydantic model or a dict, a ``Timer``), calls rlnb's one implementation
(``rlnb.algorithms.rewards``, ``dynamic_sampling``, ``filtering``) and converts the result back
into NeMo-RL's return shapes. See docs/algorithms.md for the math, docs/nemo_rl_names.md for the
deliberate differences.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from rlnb.algorithms.dynamic_sampling import DynamicSamplingState
from rlnb.algorithms.dynamic_sampling import dynamic_sampling as keep_rows_with_signal
from rlnb.algorithms.filtering import clip_advantages, seq_logprob_error_mask
from rlnb.algorithms.rewards import scale_batch_rewards
from rlnb.nemo.batched_data_dict import BatchedDataDict
from rlnb.nemo.reward_functions import config_value

# keys the dynamic-sampling stage writes or overwrites (NeMo-RL's, and rlnb's ADDED_KEYS)
_SAMPLING_KEYS = ("std", "baseline", "filtered_reward", "total_reward")
_ROW = "__row__"  # carries each row's index through rlnb's dynamic sampling


def section(master_config: Any, name: str) -> Any:
    """``master_config.<name>`` of a pydantic ``MasterConfig`` or a plain dict."""
    value = config_value(master_config, name)
    if value is None:
        raise ValueError(f"master_config has no {name!r} section")
    return value


def scale_rewards(repeated_batch: Any, reward_scaling_cfg: Any) -> Any:
    """Map ``total_reward`` and every ``reward/*`` component from the source range onto the
    target range, in place (nothing when ``enabled`` is false); returns the batch."""
    if not config_value(reward_scaling_cfg, "enabled", False):
        return repeated_batch
    bounds = {k: float(config_value(reward_scaling_cfg, k, d)) for k, d in
              (("source_min", 0.0), ("source_max", 1.0), ("target_min", 0.0),
               ("target_max", 1.0))}
    rewards = {k: v for k, v in repeated_batch.items()
               if k == "total_reward" or (isinstance(k, str) and k.startswith("reward/"))}
    repeated_batch.update(scale_batch_rewards(rewards, **bounds))
    return repeated_batch


def _without(batch: Any, keys: tuple[str, ...]) -> BatchedDataDict:
    return BatchedDataDict({k: v for k, v in batch.items() if k not in keys})


def dynamic_sampling(loop: str, repeated_batch: Any, std: torch.Tensor, baseline: torch.Tensor,
                     dynamic_sampling_num_gen_batches: int, master_config: Any, timer: Any,
                     batch_cache: Any = None) -> tuple[Any, bool, Any, dict[str, Any]]:
    """NeMo-RL's ``dynamic_sampling`` for the ``loop`` section (``grpo`` or ``ppo``); returns
    ``(batch, is_batch_complete, batch_cache, metrics)``.

    ``baseline`` and ``std`` are written into ``repeated_batch`` in place. Which rows are kept,
    cached, sliced and what ``total_reward`` holds is decided by
    ``rlnb.algorithms.dynamic_sampling``; this function only carries the other keys (tensors and
    lists) along by row index.
    """
    cfg = section(master_config, loop)
    repeated_batch["baseline"] = baseline
    repeated_batch["std"] = std
    if not config_value(cfg, "use_dynamic_sampling", False):
        return repeated_batch, True, batch_cache, {}
    train_size = (int(config_value(cfg, "num_prompts_per_step"))
                  * int(config_value(cfg, "num_generations_per_prompt")))
    n_cached = 0 if batch_cache is None else batch_cache["filtered_reward"].shape[0]
    state = DynamicSamplingState(num_gen_batches=dynamic_sampling_num_gen_batches - 1)
    if batch_cache is not None:
        cached = {k: batch_cache[k] for k in ("std", "baseline", "filtered_reward",
                                               "total_reward")}
        cached[_ROW] = torch.arange(n_cached)
        state = DynamicSamplingState(cache=cached,
                                        num_gen_batches=dynamic_sampling_num_gen_batches - 1)
    rows = torch.arange(n_cached, n_cached + len(std))
    if timer is not None and not hasattr(timer, "time"):
        raise TypeError(f"timer must be NeMo-RL's Timer (with .time(name)) or None, got "
                        f"{type(timer).__name__}; batch_cache comes after it")
    timing = contextlib.nullcontext() if timer is None else timer.time("dynamic_sampling")
    with timing:
        result = keep_rows_with_signal(
            {"total_reward": repeated_batch["total_reward"], _ROW: rows}, std=std,
            baseline=baseline, state=state, train_size=train_size,
            max_gen_batches=int(config_value(cfg, "dynamic_sampling_max_gen_batches", 10)))

    kept = result.cache if result.is_complete else result.state.cache
    others = [_without(b, _SAMPLING_KEYS) for b in (batch_cache, repeated_batch) if b is not None]
    if kept is None:  # nothing kept so far: an empty batch that still reports every reward
        empty = others[-1].select_indices([])
        empty.update({k: v[:0] for k, v in (("std", std), ("baseline", baseline))})
        empty["filtered_reward"] = repeated_batch["total_reward"][:0]
        empty["total_reward"] = repeated_batch["total_reward"]
        return empty, False, None, {}
    cache = BatchedDataDict.from_batches(others).select_indices(kept[_ROW])
    cache.update({k: kept[k] for k in _SAMPLING_KEYS})
    if not result.is_complete:
        return cache, False, cache, {}
    batch = cache.slice(0, train_size)
    batch.update({k: result.batch[k] for k in _SAMPLING_KEYS})
    discarded = result.metrics["dynamic_sampling_num_discarded_valid_samples"]
    return batch, True, cache, {"dynamic_sampling_num_discarded_valid_samples": discarded}


def seq_logprob_error_masking(train_data: Any, rewards: torch.Tensor,
                              seq_logprob_error_threshold: float | None) -> dict[str, Any]:
    """NeMo-RL's ``compute_and_apply_seq_logprob_error_masking``: the per-sequence
    multiplicative log-prob error statistics; with a threshold, ``train_data["sample_mask"]``
    is replaced (not edited) by the masked one. Metric ``num_masked_seqs`` as NeMo-RL names it
    here (its loops log it as ``num_masked_seqs_by_logprob_error``)."""
    new_mask, metrics = seq_logprob_error_mask(
        train_data["prev_logprobs"], train_data["generation_logprobs"],
        train_data["token_mask"], train_data["sample_mask"], rewards.reshape(-1),
        seq_logprob_error_threshold=seq_logprob_error_threshold)
    if seq_logprob_error_threshold is not None:
        train_data["sample_mask"] = new_mask
    metrics["num_masked_seqs"] = metrics.pop("num_masked_seqs_by_logprob_error")
    return metrics


def clip_loop_advantages(advantages: torch.Tensor, loop_config: Any) -> torch.Tensor:
    """Clamp to ``[advantage_clip_low, advantage_clip_high]`` (``None``: no bound)."""
    return clip_advantages(advantages, config_value(loop_config, "advantage_clip_low"),
                           config_value(loop_config, "advantage_clip_high"))


def apply_mask_sample_filter(repeated_batch: Any) -> int:
    """Zero ``loss_multiplier`` where the environment set ``mask_sample``; returns how many
    rows were flagged (0 when the batch has no ``mask_sample``). Other multipliers, fractional
    ones included, are kept."""
    if "mask_sample" not in repeated_batch:
        return 0
    multiplier = repeated_batch["loss_multiplier"]
    flagged = torch.as_tensor(repeated_batch["mask_sample"], dtype=torch.bool,
                              device=multiplier.device)
    repeated_batch["loss_multiplier"] = torch.where(flagged, torch.zeros_like(multiplier),
                                                    multiplier)
    return int(flagged.sum())
