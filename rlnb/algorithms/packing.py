"""Sequence packing: run a batch as one padding-free row, then score each sequence separately.

    loss = Σ_i loss_fn(logits[cu_pad[i] : cu_pad[i] + n_i], data[i, :n_i]; N_seq, N_tok)
             = loss_fn(unpacked batch)           (every loss is a sum of per-row terms / global N)

No paper: this is the standard "packed sequences + cu_seqlens" layout of FlashAttention's varlen
kernels (https://arxiv.org/abs/2307.08691), as NeMo-RL's ``SequencePackingLossWrapper`` uses it.

Layout: packed logits ``[1, T_packed, V]`` hold sequence i at positions
``[cu_seqlens_padded[i], cu_seqlens_padded[i] + n_i)``, ``n_i = cu_seqlens[i+1] - cu_seqlens[i]``,
followed by padding up to ``cu_seqlens_padded[i+1]``. The data dict stays *unpacked*: ``[B, S]``
right-padded rows, ``[B]`` per-row entries. See docs/algorithms.md#sequence-packing.

Implementation choices:
1) Every call gets the same global N_seq / N_tok, so the packed loss equals the unpacked one up to
   summation order; only the metric reduction needs care: ``*_min`` keys take the min and
   ``*_max`` keys the max over calls, ignoring ±inf (the "no valid token" sentinels); a key
   whose values are all ±inf keeps the first one. Every other metric is summed.
2) Data entries with ndim > 1 and a second dim > 1 are cut to the first n_i positions; ``[B]``
   and ``[B, 1]`` entries are only row-sliced; non-tensor entries are passed through unchanged.
3) Each call sees exactly n_i logit positions (the padded tail of a slot is never read), so the
   loss's own ``next_token_logprobs`` lines up with ``input_ids[i, :n_i]``. (NeMo-RL slices
   the whole padded slot and relies on the loss to ignore the tail; the numbers are the same.)
4) Deliberate extension: a loss with a ``rows_per_call`` attribute (``DPOLossFn``: 2) receives
   that many consecutive rows per call, their logit slices right-padded with zeros to the
   longest one, so chosen/rejected pairs stay together. NeMo-RL always calls per sequence and
   therefore cannot pack DPO (https://github.com/NVIDIA-NeMo/RL/issues/719). The zero logits
   sit at positions the token mask already excludes in the unpacked batch.
5) Context parallelism (NeMo's ``÷ cp_size``) is out of scope.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rlnb.algorithms.checks import check_same_rows, check_tensor
from rlnb.algorithms.reduction import sum_partial_metrics


def _as_cu(name: str, cu: torch.Tensor | Sequence[int]) -> torch.Tensor:
    """Check a cumulative-length vector: 1-D integer, starts at 0, non-decreasing."""
    if not isinstance(cu, torch.Tensor):
        cu = torch.as_tensor(cu)
    check_tensor(name, cu, ndim=1)
    if cu.is_floating_point() or cu.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {cu.dtype}")
    if cu.numel() < 2:
        raise ValueError(
            f"{name} must have at least 2 entries (B+1 with B >= 1), got {cu.tolist()}"
        )
    if int(cu[0]) != 0:
        raise ValueError(f"{name} must start at 0, got {cu.tolist()}")
    if bool((cu[1:] < cu[:-1]).any()):
        raise ValueError(f"{name} must be non-decreasing, got {cu.tolist()}")
    return cu


def pack_sequences(
    input_ids: torch.Tensor,
    lengths: torch.Tensor | Sequence[int],
    pad_to_multiple_of: int = 1,
    *,
    pad_token_id: int = 0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Concatenate the first ``lengths[i]`` tokens of each row into one packed row.

    Args:
        input_ids: ``[B, S]`` right-padded token ids.
        lengths: ``[B]`` real length of each row (0 <= n_i <= S).
        pad_to_multiple_of: each sequence's slot is rounded up to a multiple of this (some
            kernels need it); the slot tail is filled with ``pad_token_id``.
    Returns:
        ``packed_ids [1, T]`` (T = cu_seqlens_padded[-1]), ``cu_seqlens [B+1]`` and
        ``cu_seqlens_padded [B+1]`` (int32, the dtype FlashAttention's varlen API takes).
    """
    check_tensor("input_ids", input_ids, ndim=2)
    B, S = input_ids.shape
    lengths = torch.as_tensor(lengths)
    check_tensor("lengths", lengths, shape=(B,))
    if lengths.is_floating_point() or lengths.dtype == torch.bool:
        raise ValueError(f"lengths must be integers, got dtype {lengths.dtype}")
    if bool(((lengths < 0) | (lengths > S)).any()):
        raise ValueError(
            f"lengths must lie in [0, {S}] (S = input_ids.shape[1]), got {lengths.tolist()}"
        )
    if not isinstance(pad_to_multiple_of, int) or pad_to_multiple_of < 1:
        raise ValueError(f"pad_to_multiple_of must be a positive int, got {pad_to_multiple_of!r}")

    m = pad_to_multiple_of
    lens = [int(n) for n in lengths]
    padded = [math.ceil(n / m) * m for n in lens]
    pieces = []
    for b, (n, n_pad) in enumerate(zip(lens, padded)):
        pieces.append(input_ids[b, :n])
        pieces.append(input_ids.new_full((n_pad - n,), pad_token_id))
    packed = torch.cat(pieces).unsqueeze(0)  # [1, T]
    zero = torch.zeros(1, dtype=torch.int32)
    cu = torch.cat([zero, torch.tensor(lens, dtype=torch.int32).cumsum(0, dtype=torch.int32)])
    cu_pad = torch.cat([zero, torch.tensor(padded, dtype=torch.int32).cumsum(0, dtype=torch.int32)])
    return packed, cu, cu_pad


class SequencePackingLossWrapper:
    """Call a per-row loss on packed logits, one sequence (or ``rows_per_call`` rows) at a time.

    Args:
        loss_fn: NeMo-RL-style loss ``loss_fn(next_token_logits, data, global_valid_seqs,
            global_valid_toks) -> (loss, metrics)``.
        cu_seqlens_q: ``[B+1]`` cumulative real lengths.
        cu_seqlens_q_padded: ``[B+1]`` cumulative slot lengths (default: ``cu_seqlens_q``).
        rows_per_call: rows per loss call (default ``getattr(loss_fn, "rows_per_call", 1)``).
    """

    def __init__(
        self,
        loss_fn: Callable[..., tuple[torch.Tensor, dict[str, Any]]],
        cu_seqlens_q: torch.Tensor | Sequence[int],
        cu_seqlens_q_padded: torch.Tensor | Sequence[int] | None = None,
        *,
        rows_per_call: int | None = None,
    ):
        self.loss_fn = loss_fn
        self.cu_seqlens_q = _as_cu("cu_seqlens_q", cu_seqlens_q)
        if cu_seqlens_q_padded is None:
            self.cu_seqlens_q_padded = self.cu_seqlens_q
        else:
            self.cu_seqlens_q_padded = _as_cu("cu_seqlens_q_padded", cu_seqlens_q_padded)
        if self.cu_seqlens_q_padded.shape != self.cu_seqlens_q.shape:
            raise ValueError(
                f"cu_seqlens_q_padded must have the length of cu_seqlens_q "
                f"({self.cu_seqlens_q.numel()}), got {self.cu_seqlens_q_padded.numel()}"
            )
        lens = self.cu_seqlens_q.diff()
        slots = self.cu_seqlens_q_padded.diff()
        if bool((slots < lens).any()):
            raise ValueError(
                f"cu_seqlens_q_padded slots {slots.tolist()} must be at least the sequence "
                f"lengths {lens.tolist()} of cu_seqlens_q"
            )
        self.lengths = [int(n) for n in lens]  # CPU-side, read once (no per-call GPU sync)
        self.starts = [int(s) for s in self.cu_seqlens_q_padded[:-1]]
        if rows_per_call is None:
            rows_per_call = getattr(loss_fn, "rows_per_call", 1)
        self.rows_per_call = rows_per_call
        if (
            not isinstance(rows_per_call, int)
            or rows_per_call < 1
            or len(self.lengths) % rows_per_call
        ):
            raise ValueError(
                f"rows_per_call={self.rows_per_call} must be >= 1 and divide the number of "
                f"sequences ({len(self.lengths)})"
            )

    def __call__(
        self,
        next_token_logits: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs,
        global_valid_toks,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``next_token_logits``: ``[1, T_packed, V]``; ``data``: unpacked ``[B, S]``/``[B]``.

        Returns: ``(Σ_calls loss, reduced metrics)`` (choice 1).
        """
        check_tensor("next_token_logits", next_token_logits, ndim=3, floating=True)
        if next_token_logits.shape[0] != 1:
            raise ValueError(
                "next_token_logits must be packed as [1, T, V], got "
                f"{tuple(next_token_logits.shape)}"
            )
        T_packed = next_token_logits.shape[1]
        if int(self.cu_seqlens_q_padded[-1]) > T_packed:
            raise ValueError(
                f"cu_seqlens_q_padded ends at {int(self.cu_seqlens_q_padded[-1])}, past the "
                f"{T_packed} positions of next_token_logits"
            )
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a mapping of tensors, got {type(data).__name__}")
        tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor) and v.ndim > 0}
        B = check_same_rows(**tensors)
        if B != len(self.lengths):
            raise ValueError(
                f"cu_seqlens_q has {len(self.lengths) + 1} entries, so it describes "
                f"{len(self.lengths)} sequences, but data has {B} rows (need B+1 entries)"
            )
        for k, v in tensors.items():
            if v.ndim > 1 and v.shape[1] > 1 and v.shape[1] < max(self.lengths):
                raise ValueError(
                    f"data[{k!r}] has {v.shape[1]} positions, fewer than the longest packed "
                    f"sequence ({max(self.lengths)})"
                )

        g = self.rows_per_call
        total, per_call = None, []
        for first in range(0, B, g):
            rows = range(first, first + g)
            L = max(self.lengths[i] for i in rows)
            chunk = {}
            for k, v in data.items():
                if isinstance(v, torch.Tensor) and v.ndim > 0:
                    v = v[first : first + g]  # keep the row dim: [g, ...]
                    if v.ndim > 1 and v.shape[1] > 1:
                        v = v[:, :L]
                chunk[k] = v
            slices = []
            for i in rows:
                s = next_token_logits[0, self.starts[i] : self.starts[i] + self.lengths[i]]
                if self.lengths[i] < L:
                    s = F.pad(s, (0, 0, 0, L - self.lengths[i]))  # [L, V], zeros at the tail
                slices.append(s)
            # g = 1: a view of the packed logits, no copy.
            logits = slices[0].unsqueeze(0) if g == 1 else torch.stack(slices)  # [g, L, V]
            loss, metrics = self.loss_fn(logits, chunk, global_valid_seqs, global_valid_toks)
            total = loss if total is None else total + loss
            per_call.append(metrics)
        return total, sum_partial_metrics(per_call)
