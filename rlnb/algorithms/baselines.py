"""Per-prompt baseline and standard deviation of rewards, with or without leave-one-out.

    no-loo:  b_i = mean_{j∈g(i)} r_j                σ_i = Bessel std of the group
    loo:     b_i = mean_{j∈g(i), j≠i} r_j           σ_i = Bessel std of the *other* rewards

GRPO (https://arxiv.org/abs/2402.03300) normalises by the group std; RLOO
(https://arxiv.org/abs/2402.14740) uses the leave-one-out mean.

Implementation choices (spec §1.4):
1) Groups are the distinct rows of ``prompt_ids`` (the whole padded row compared exactly), so
   two data-set items with identical prompt tokens form one group, as in NeMo-RL.
2) Vectorised with ``index_add`` group sums (O(B), no Python loop over groups, no B×B matrix);
   leave-one-out sums are the group sum minus one's own term. Rows are grouped by an exact
   hash-and-verify (``group_ids``), not ``torch.unique(dim=0)``, which is slow on CPU.
3) The std uses the one-pass formula sqrt((E[r²] - E[r]²)·n/(n-1)) in float32, like NeMo-RL:
   a group of equal non-dyadic rewards (3 × 1/3) can give a tiny non-zero std (~1e-4), and
   dynamic sampling's exact ``std != 0`` test depends on that. ``torch.std`` would give 0.
   The last bit of such a residue depends on summation order (NeMo-RL sums with a BLAS
   mat-vec); which members of a loo group get it can differ from NeMo-RL's, its size cannot.
4) A group with at most one valid member gets baseline = its own reward and std 0 (so its
   GRPO advantage is exactly 0). NaN std (n = 1 after leave-one-out) becomes 0 and +inf becomes
   float32 max (``nan_to_num``), reproducing NeMo-RL's 3.4e38 for a loo group with partial
   validity; the GRPO loop never meets it (validity is all ones there).
5) Invalid members still *receive* a baseline and std; they are only left out of the sums.
"""

from __future__ import annotations

import functools

import torch

from rlnb.algorithms.checks import check_mask, check_same_rows, check_tensor


def group_ids(prompt_ids: torch.Tensor) -> torch.Tensor:
    """Dense group index per row: rows with identical ``prompt_ids`` share an index.

    Args:
        prompt_ids: ``[B, P]`` padded prompt tokens (or ``[B]`` ids).
    Returns:
        ``[B]`` int64 in ``[0, num_groups)`` (numbering is arbitrary; only equality matters).

    ``torch.unique(dim=0)`` is exact but loops over rows inside ATen (about 5 ms at B = 4096 on
    CPU). Instead each row is hashed to one int64 (an exact linear form: ids < 2^20 and weights
    < 2^20 keep every sum below 2^53), rows are sorted by hash, and each run of equal hashes is
    one group. The grouping is still exact: if two *different* rows ever share a hash, some
    adjacent pair in the sorted order has equal hashes but different rows, which is checked,
    and then the slow exact ``torch.unique`` is used.
    """
    check_tensor("prompt_ids", prompt_ids, ndim=(1, 2))
    if prompt_ids.shape[0] == 0:
        return torch.zeros(0, dtype=torch.long, device=prompt_ids.device)
    ids = prompt_ids.long()
    if ids.ndim == 1 or ids.shape[1] == 1:
        return torch.unique(ids.reshape(-1), return_inverse=True)[1]
    if ids.shape[1] > 8192 or int(ids.min()) < 0 or int(ids.max()) >= 2**20:
        return torch.unique(ids, dim=0, return_inverse=True)[1]
    hashes = (ids * _hash_weights(ids.shape[1], ids.device)).sum(dim=1)  # [B], exact int64
    order = torch.argsort(hashes, stable=True)
    sorted_hashes, sorted_rows = hashes[order], ids[order]
    same_hash = sorted_hashes[1:] == sorted_hashes[:-1]  # [B-1]
    if bool((same_hash & (sorted_rows[1:] != sorted_rows[:-1]).any(dim=1)).any()):
        return torch.unique(ids, dim=0, return_inverse=True)[1]  # a collision: exact fallback
    starts = torch.cat([same_hash.new_ones(1), ~same_hash])
    groups = torch.empty_like(hashes)
    groups[order] = torch.cumsum(starts.long(), dim=0) - 1
    return groups


@functools.cache
def _hash_weights(width: int, device: torch.device) -> torch.Tensor:
    """Fixed pseudo-random weights in [1, 2^20) for the row hash (the same on every call)."""
    g = torch.Generator().manual_seed(20_250_220 + width)
    return torch.randint(1, 2**20, (width,), generator=g, dtype=torch.long).to(device)


def calculate_baseline_and_std_per_prompt(
    prompt_ids: torch.Tensor,
    rewards: torch.Tensor,
    valid_mask: torch.Tensor | None = None,
    leave_one_out: bool = True,
    rewards_for_std: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Baseline and std of the rewards of each row's prompt group.

    Args:
        prompt_ids: ``[B, P]`` prompt tokens; equal rows form a group.
        rewards: ``[B]`` rewards r.
        valid_mask: ``[B]`` 0/1; invalid rows are left out of every sum (default all ones).
        leave_one_out: RLOO baseline (mean of the *other* valid rewards).
        rewards_for_std: ``[B]`` optional separate reward used only for the std (for example
            the unshaped reward under dynamic sampling); defaults to ``rewards``.
    Returns:
        ``(baseline [B], std [B])`` float32.
    """
    check_tensor("rewards", rewards, ndim=1, floating=True)
    if valid_mask is None:
        valid_mask = torch.ones_like(rewards)
    valid = check_mask("valid_mask", valid_mask, shape=(rewards.shape[0],))
    if rewards_for_std is not None:
        check_tensor("rewards_for_std", rewards_for_std, ndim=1, floating=True)
    check_same_rows(prompt_ids=prompt_ids, rewards=rewards, rewards_for_std=rewards_for_std)
    group = group_ids(prompt_ids)
    r = rewards.float()
    r_std = r if rewards_for_std is None else rewards_for_std.float()
    num_groups = int(group.max()) + 1 if group.numel() else 0

    def per_row_sum(x: torch.Tensor) -> torch.Tensor:  # [B] -> [B]: Σ over the row's group
        totals = torch.zeros(num_groups, dtype=x.dtype, device=x.device).index_add_(0, group, x)
        return totals[group] - x if leave_one_out else totals[group]

    v = r * valid
    n = per_row_sum(valid) + (valid if leave_one_out else 0)  # Σ valid of the whole group
    n = n - (1 if leave_one_out else 0)  # the divisor: valid members minus the left-out one
    baseline = per_row_sum(v) / n
    if rewards_for_std is None:
        mean_for_std = baseline
    else:
        mean_for_std = per_row_sum(r_std * valid) / n
    mean_sq = per_row_sum(r_std.square() * valid) / n
    std = ((mean_sq - mean_for_std.square()) * (n / (n - 1))).sqrt().nan_to_num(nan=0.0)

    group_valid = n + (1 if leave_one_out else 0)
    small = group_valid <= 1  # at most one valid member: no comparison possible
    baseline = torch.where(small, r, baseline)
    std = torch.where(small, torch.zeros_like(std), std)
    return baseline, std
