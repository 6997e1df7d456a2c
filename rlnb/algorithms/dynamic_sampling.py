"""DAPO dynamic sampling: keep only samples whose group has a learning signal, refill to size.

    keep_b = [std_b ≠ 0];   cache ← [cache; batch[keep]];   train batch = cache[0 : P·G]

Papers: DAPO, dynamic sampling https://arxiv.org/abs/2503.14476 (Section 3.2: over-sample and
filter out prompts whose accuracy is 0 or 1, so every group carries a gradient).

See docs/algorithms.md#dynamic-sampling.

Implementation choices:
1) One pure function per generation batch, ``dynamic_sampling(batch, std=..., baseline=...,
   state=...)``; what carries over between generation batches of one training step (the cache of
   kept rows and the generation-batch counter k) lives in a small frozen ``DynamicSamplingState``
   that the caller holds and passes back. No hidden globals; nothing is edited in place.
2) The filter is ``std != 0`` with *exact* float inequality on the per-sample std of the
   baseline helper (``baselines.py``, the same std the advantages use). Without leave-one-out
   this keeps whole groups; **with leave-one-out the std is per sample, so partial groups are
   kept** (group [1, 0, 0]: the 1 is dropped, since its two others are equal). As in NeMo-RL,
   not as in the DAPO paper.
3) The kept rows of every key are cached; ``std``, ``baseline`` and ``filtered_reward`` (= the
   kept ``total_reward``) are added. ``total_reward`` is **overwritten with the full, unfiltered
   reward vector** of the generation batch and cached the same way, so it accumulates every
   generated reward and has more rows than the other keys (NeMo-RL quirk, kept: it only feeds
   the ``reward`` metric). A generation batch in which no row survives adds nothing to the
   cache, not even its rewards to ``total_reward`` (NeMo-RL, kept).
4) k counts calls (one per generation batch). While the cache holds fewer than ``train_size``
   rows and ``k ≤ max_gen_batches`` the result says "generate more"; past that it raises
   ``ValueError``. Once there are enough, every key (``total_reward`` included) is sliced to
   rows ``[0, train_size)``, which may split a group at the boundary.
5) The cached row count is the number of kept rows (NeMo-RL reads the first key of the batch,
   which is ``message_log`` there; a first key of ``total_reward`` would miscount).
6) A complete result hands back a fresh ``DynamicSamplingState()``: NeMo-RL resets the cache and
   k after the training step, and no caller should carry a finished step's cache into the next.
7) Advantages must be computed on the returned batch *afresh*: its groups are partial or merged,
   so the baselines of the generation batches no longer apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from rlnb.algorithms.checks import check_same_rows, check_tensor

Batch = dict[str, torch.Tensor]

# Keys this module writes into the cached batch, on top of the caller's keys.
ADDED_KEYS = ("std", "baseline", "filtered_reward")


@dataclass(frozen=True)
class DynamicSamplingState:
    """What survives between the generation batches of one training step.

    Attributes:
        cache: kept rows so far (every key ``[N, ...]``, ``total_reward`` longer), or ``None``.
        num_gen_batches: k, the generation batches consumed this step.
    """

    cache: Batch | None = None
    num_gen_batches: int = 0

    @property
    def num_cached(self) -> int:
        """Kept rows in the cache."""
        return 0 if self.cache is None else int(self.cache["filtered_reward"].shape[0])


@dataclass(frozen=True)
class DynamicSamplingResult:
    """The outcome of one call.

    Attributes:
        batch: exactly ``train_size`` rows to train on, or ``None``: generate another batch.
        state: pass it to the next call (a fresh state once ``batch`` is ready).
        metrics: ``dynamic_sampling_num_gen_batches`` always; when complete also
            ``dynamic_sampling_num_discarded_valid_samples``, ``filtered_reward`` (mean of the
            kept rewards) and ``reward`` (mean of ``total_reward[0:train_size]``).
        cache: when complete, the whole cache ``batch`` was cut from (its rows past
            ``train_size`` are the discarded valid samples); NeMo-RL's function returns it.
    """

    batch: Batch | None
    state: DynamicSamplingState
    metrics: dict[str, float] = field(default_factory=dict)
    cache: Batch | None = None

    @property
    def is_complete(self) -> bool:
        """True when ``batch`` is ready for training."""
        return self.batch is not None


def select_nonzero_std(
    batch: Mapping[str, torch.Tensor], *, std: torch.Tensor, baseline: torch.Tensor
) -> Batch:
    """The rows of one generation batch with ``std ≠ 0``, plus std/baseline/filtered_reward.

    Args:
        batch: every value ``[B, ...]``; must hold ``total_reward`` ``[B]``.
        std: ``[B]`` per-sample reward std (``calculate_baseline_and_std_per_prompt`` on this
            generation batch).
        baseline: ``[B]`` per-sample baseline from the same call.
    Returns:
        A new dict: every key's kept rows ``[N, ...]``, ``std``/``baseline``/``filtered_reward``
        ``[N]``, and ``total_reward`` ``[B]`` = the full unfiltered rewards (see choice 3).
    """
    if "total_reward" not in batch:
        raise ValueError(f"batch must contain 'total_reward' [B]; got keys {sorted(batch)}")
    rewards = check_tensor("batch['total_reward']", batch["total_reward"], ndim=1)
    check_tensor("std", std, ndim=1, floating=True)
    check_tensor("baseline", baseline, ndim=1, floating=True)
    for k, v in batch.items():
        check_tensor(f"batch[{k!r}]", v, ndim=range(1, 8))
    check_same_rows(std=std, baseline=baseline, **{f"batch[{k!r}]": v for k, v in batch.items()})

    keep = (std != 0).nonzero().squeeze(-1)  # [N] row indices, in order
    kept = {k: v.index_select(0, keep) for k, v in batch.items() if k not in ADDED_KEYS}
    kept["std"] = std.index_select(0, keep)
    kept["baseline"] = baseline.index_select(0, keep)
    kept["filtered_reward"] = rewards.index_select(0, keep)
    kept["total_reward"] = rewards.clone()  # overwritten: all rewards, for the `reward` metric
    return kept


def _concatenate(cache: Batch, new: Batch) -> Batch:
    """Concatenate two cached batches key by key (each key independently, choice 3)."""
    if set(cache) != set(new):
        raise ValueError(
            "every generation batch must carry the same keys; cached "
            f"{sorted(cache)}, new {sorted(new)}"
        )
    for k in cache:
        if cache[k].shape[1:] != new[k].shape[1:]:
            raise ValueError(
                f"batch[{k!r}] has shape {tuple(new[k].shape)} but the cache holds "
                f"{tuple(cache[k].shape)}: pad every generation batch to the same trailing shape"
            )
    return {k: torch.cat([cache[k], new[k]]) for k in cache}


def dynamic_sampling(
    batch: Mapping[str, torch.Tensor],
    *,
    std: torch.Tensor,
    baseline: torch.Tensor,
    state: DynamicSamplingState,
    train_size: int,
    max_gen_batches: int = 10,
) -> DynamicSamplingResult:
    """Filter one generation batch, add it to the cache, and say whether a train batch is ready.

    Args:
        batch: one generation batch, every value ``[B, ...]``, with ``total_reward`` ``[B]``
            (after scaling/shaping).
        std: ``[B]`` per-sample std from the baseline helper on this batch (top-level
            leave-one-out flag; on the unshaped rewards when shaping is on).
        baseline: ``[B]`` per-sample baseline from the same call.
        state: the previous call's ``result.state`` this step, or ``DynamicSamplingState()``.
        train_size: rows to train on, ``num_prompts_per_step × num_generations_per_prompt``
            (the configured value, not multiplied by ``batch_multiplier``).
        max_gen_batches: ``dynamic_sampling_max_gen_batches``.
    Returns:
        ``DynamicSamplingResult``; ``batch`` holds exactly ``train_size`` rows when complete.
    """
    if train_size < 1:
        raise ValueError(f"train_size must be >= 1, got {train_size}")
    if max_gen_batches < 1:
        raise ValueError(f"max_gen_batches must be >= 1, got {max_gen_batches}")
    k = state.num_gen_batches + 1
    kept = select_nonzero_std(batch, std=std, baseline=baseline)

    cache = state.cache
    if kept["filtered_reward"].shape[0] > 0:
        cache = kept if cache is None else _concatenate(cache, kept)
    new_state = DynamicSamplingState(cache=cache, num_gen_batches=k)
    size = new_state.num_cached
    metrics: dict[str, float] = {"dynamic_sampling_num_gen_batches": k}

    if size < train_size:
        if k <= max_gen_batches:
            return DynamicSamplingResult(batch=None, state=new_state, metrics=metrics)
        raise ValueError(
            f"dynamic sampling kept {size} of the {train_size} samples it needs after {k} "
            f"generation batches (max_gen_batches={max_gen_batches}); most groups have equal "
            "rewards: use easier/harder prompts, more generations per prompt, a larger "
            "batch_multiplier or a larger dynamic_sampling_max_gen_batches"
        )

    train = {key: v[:train_size] for key, v in cache.items()}
    metrics["dynamic_sampling_num_discarded_valid_samples"] = size - train_size
    metrics["filtered_reward"] = train["filtered_reward"].float().mean().item()
    metrics["reward"] = train["total_reward"].float().mean().item()
    return DynamicSamplingResult(batch=train, state=DynamicSamplingState(), metrics=metrics,
                                 cache=cache)
