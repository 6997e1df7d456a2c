"""Reducing a per-token loss to a scalar: token-level or sequence-level, over global counts.

    token-level:     L = Σ_{b,t} ℓ·tm·sm / N_tok
    sequence-level:  L = Σ_b sm_b · (Σ_t ℓ·tm / (Σ_t tm + 1e-8)) / N_seq

See docs/algorithms.md#masked-helpers-and-reductions.

Implementation choices:
1) The per-token loss and its reduction are separate steps, so "token-level vs sequence-level"
   is a choice of reduction and not a branch inside each loss (as verl's ``agg_loss``).
2) N_tok / N_seq are the *global* valid counts of the whole global batch (all micro-batches,
   all data-parallel ranks), so Σ_micro-batches L equals the full-batch L exactly; every
   division carries +1e-8.
3) Token-level loss normalisation follows DAPO (https://arxiv.org/abs/2503.14476): long and
   short responses weigh per token. Sequence-level is GRPO's original per-sample mean
   (https://arxiv.org/abs/2402.03300).
4) In the sequence-level inner mean only ``token_mask`` counts; a row with sample_mask 1 but
   no valid token adds 0 to the numerator and still counts in N_seq.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

import torch

from rlnb.algorithms.masked import masked_mean


def global_valid_counts(
    token_mask: torch.Tensor, sample_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """N_seq = Σ sm and N_tok = Σ tm·sm for *aligned* masks (already sliced).

    Both go over the whole global batch (docs/algorithms.md#masked-helpers-and-reductions).

    Args:
        token_mask: ``[B, T]`` 0/1.
        sample_mask: ``[B]`` 0/1.
    Returns: ``(global_valid_seqs, global_valid_toks)`` as 0-d float32 tensors. Under several
    ranks, all-reduce (sum) both before calling a loss.
    """
    sm = sample_mask.float()
    return sm.sum(), (token_mask.float() * sm.unsqueeze(-1)).sum()


def token_level(per_token: torch.Tensor, mask: torch.Tensor, global_valid_toks) -> torch.Tensor:
    """Σ ℓ·M / (N_tok + 1e-8). ``per_token``, ``mask``: ``[B, T]`` (M = token_mask·sample_mask)."""
    return masked_mean(per_token, mask, global_normalization_factor=global_valid_toks)


def sequence_level(
    per_token: torch.Tensor, token_mask: torch.Tensor, sample_mask: torch.Tensor, global_valid_seqs
) -> torch.Tensor:
    """Σ_b sm_b · mean_t(ℓ over token_mask) / (N_seq + 1e-8).

    Args:
        per_token: ``[B, T]``; token_mask: ``[B, T]``; sample_mask: ``[B]``.
    """
    per_row = masked_mean(per_token, token_mask, dim=-1)  # [B]
    return masked_mean(per_row, sample_mask, global_normalization_factor=global_valid_seqs)


def reduce_loss(
    per_token: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    token_level_loss: bool,
    global_valid_toks,
    global_valid_seqs,
) -> torch.Tensor:
    """Token-level or sequence-level reduction of a ``[B, T]`` per-token loss to a 0-d tensor."""
    if token_level_loss:
        return token_level(per_token, token_mask * sample_mask.unsqueeze(-1), global_valid_toks)
    return sequence_level(per_token, token_mask, sample_mask, global_valid_seqs)


def combine_metrics(parts: list[dict[str, Any]], *, default: str = "sum",
                    mean_keys: Collection[str] = (), empty: Any = None) -> dict[str, Any]:
    """Combine metric dicts key by key, NeMo-RL's rule: a key whose name contains ``_min`` /
    ``_max`` takes the min / max ignoring ±inf (``empty``, or the first value, when none is
    finite); every other key is summed (``default="sum"``) or averaged (``"mean"``, and for
    ``mean_keys``). The one place micro-batches, global batches and ranks are combined.
    """
    out: dict[str, Any] = {}
    for key in dict.fromkeys(k for m in parts for k in m):  # union of keys, first-seen order
        vals = [m[key] for m in parts if key in m]
        if "_min" in key or "_max" in key:
            finite = [v for v in vals if not math.isinf(float(v))]
            pick = min if "_min" in key else max
            out[key] = pick(finite) if finite else (vals[0] if empty is None else empty)
        elif default == "mean" or key in mean_keys:
            out[key] = sum(vals) / len(vals)
        else:
            out[key] = sum(vals)
    return out


def sum_partial_metrics(per_call: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine the metrics of the calls that make up one global batch (micro-batches, packed
    sequences): each is a partial sum over global counts, so they add up; ``*_min`` / ``*_max``
    keys take the min / max ignoring ±inf."""
    return combine_metrics(per_call)
