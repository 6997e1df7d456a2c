"""Per-prompt baseline and standard deviation of rewards, with or without leave-one-out.

    no-loo:  b_i = mean_{j∈g(i)} r_j                σ_i = Bessel std of the group
    loo:     b_i = mean_{j∈g(i), j≠i} r_j           σ_i = Bessel std of the *other* rewards

GRPO (https://arxiv.org/abs/2402.03300) normalises by the group std; RLOO
(https://arxiv.org/abs/2402.14740) uses the leave-one-out mean. See docs/algorithms.md#baselines.

Implementation choices (the reasons and the cases behind them: docs/algorithms.md#baselines):
1) Groups are the distinct rows of ``prompt_ids`` (whole padded rows, compared exactly, as
   NeMo-RL does), found by hash-and-verify (``group_ids``), not the slow ``torch.unique(dim=0)``.
2) Sums over a member's comparison set are NeMo-RL's product with a 0/1 matrix (1 - I with
   leave-one-out), added term by term in member order (``comparison_sums``), never "group
   total minus own reward": the same bits on any device, exact for 0/1 rewards.
3) The std is NeMo-RL's one-pass sqrt((E[r²] - E[r]²)·n/(n-1)) in float32, residue included
   (dynamic sampling's exact ``std != 0`` filter depends on it).
4) A group with at most one valid member, or a divisor n - 1 <= 0, gets std 0; NaN or ±inf
   rewards raise ``ValueError``.
"""

from __future__ import annotations

import functools

import torch

from rlnb.algorithms.checks import check_finite, check_mask, check_same_rows, check_tensor


def group_ids(prompt_ids: torch.Tensor) -> torch.Tensor:
    """Dense group index per row: rows with identical ``prompt_ids`` share an index.

    Args:
        prompt_ids: ``[B, L]`` padded prompt tokens (or ``[B]`` ids).
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


def comparison_sums(
    group: torch.Tensor, values: torch.Tensor, *, leave_one_out: bool
) -> torch.Tensor:
    """Σ_j M[i, j]·values[j] over each row's group, M = 1 - I (leave-one-out) or all ones.

    The terms are added in member order (ascending row index), like a matrix-vector product that
    accumulates column by column; see the module docstring, choice 2.

    Args:
        group: ``[B]`` dense group index per row (``group_ids``).
        values: ``[B, C]`` float32, C quantities summed independently (r, r², ...).
    Returns:
        ``[B, C]`` float32 sums.
    """
    out = torch.empty_like(values)
    if group.numel() == 0:
        return out
    sizes = torch.bincount(group)  # [num_groups]
    starts = torch.cumsum(sizes, 0) - sizes  # first position of each group in `order`
    order = torch.argsort(group, stable=True)  # rows grouped, ascending row index inside
    for k in torch.unique(sizes).tolist():  # one host sync; distinct sizes, not groups
        if k == 0:
            continue
        groups_k = (sizes == k).nonzero().squeeze(-1)  # [n_k]
        rows = order[starts[groups_k, None] + torch.arange(k, device=group.device)]  # [n_k, k]
        v = values[rows]  # [n_k, k, C]
        mask = torch.ones(k, k, dtype=values.dtype, device=values.device)
        if leave_one_out:
            mask.fill_diagonal_(0)
        acc = torch.zeros_like(v)  # [n_k, k, C]: member i's running sum
        for j in range(k):  # add column j of M @ v: M[i, j]·v_j for every member i
            acc = acc + mask[:, j, None] * v[:, j, None, :]
        out[rows.reshape(-1)] = acc.reshape(-1, values.shape[-1])
    return out


def calculate_baseline_and_std_per_prompt(
    prompt_ids: torch.Tensor,
    rewards: torch.Tensor,
    valid_mask: torch.Tensor | None = None,
    leave_one_out: bool = True,
    rewards_for_std: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Baseline and std of the rewards of each row's prompt group.

    Args:
        prompt_ids: ``[B, L]`` prompt tokens (or ``[B]`` ids); equal rows form a group.
        rewards: ``[B]`` rewards r, finite.
        valid_mask: ``[B]`` 0/1; invalid rows are left out of every sum (default all ones).
        leave_one_out: RLOO baseline (mean of the *other* valid rewards).
        rewards_for_std: ``[B]`` optional separate reward used only for the std (for example
            the unshaped reward under dynamic sampling); defaults to ``rewards``.
    Returns:
        ``(baseline [B], std [B])`` float32.
    """
    check_tensor("rewards", rewards, ndim=1, floating=True)
    check_finite("rewards", rewards)
    if valid_mask is None:
        valid_mask = torch.ones_like(rewards)
    valid = check_mask("valid_mask", valid_mask, shape=(rewards.shape[0],))
    if rewards_for_std is not None:
        check_tensor("rewards_for_std", rewards_for_std, ndim=1, floating=True)
        check_finite("rewards_for_std", rewards_for_std)
    check_same_rows(prompt_ids=prompt_ids, rewards=rewards, rewards_for_std=rewards_for_std)
    group = group_ids(prompt_ids)
    r = rewards.float()
    r_std = r if rewards_for_std is None else rewards_for_std.float()

    # NeMo-RL's vectors: v = r·valid, v2 = r_std²·valid (and r_std·valid when it differs).
    columns = [r * valid, r_std.square() * valid]
    if rewards_for_std is not None:
        columns.append(r_std * valid)
    sums = comparison_sums(group, torch.stack(columns, dim=-1), leave_one_out=leave_one_out)
    group_valid = torch.bincount(group, weights=valid).to(valid.dtype)[group]  # [B], exact counts
    n = group_valid - (1 if leave_one_out else 0)  # NeMo-RL's num_valid, shared by the group
    baseline = sums[:, 0] / n
    mean_for_std = baseline if rewards_for_std is None else sums[:, 2] / n
    mean_sq = sums[:, 1] / n
    std = ((mean_sq - mean_for_std.square()) * (n / (n - 1))).sqrt().nan_to_num(nan=0.0)
    zero = torch.zeros_like(std)
    std = torch.where(n > 1, std, zero)  # n/(n-1) is NaN or inf there (choice 4)

    small = group_valid <= 1  # at most one valid member: no comparison possible
    baseline = torch.where(small, r, baseline)
    std = torch.where(small, zero, std)
    return baseline, std
