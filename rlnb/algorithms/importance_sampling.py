"""Importance weights between the trainer and the inference engine, and their truncation.

    w_t = π_prev(y_t) / π_gen(y_t) = exp(p_t - q_t)          (GSPO: w_b = exp(Σ_t (p - q)·M))

Generation engines (vLLM) and trainers compute slightly different probabilities for the same
tokens; weighting the loss by w corrects the off-policy gap, and truncating w bounds its
variance. TIS: https://fengyao.notion.site/off-policy-rl; IcePop (mask rather than clamp):
https://ringtech.notion.site/icepop; sequence-level masking by the geometric mean follows
the same idea per sequence.

Implementation choices (spec §5.6):
1) Weights are detached and NaN/±inf become 0.
2) tis clamps w to [lo, hi] (lo defaults to 0); icepop zeroes w outside [lo, hi] (inclusive);
   seq-mask-tis drops whole rows whose geometric-mean weight exp(mean_t (p - q)) is outside
   [lo, hi], leaving the kept rows' token weights untruncated.
3) ``is_oob_ratio`` is the fraction of valid tokens (of valid rows for seq-mask-tis) outside
   the bounds, over the global counts.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.masked import masked_mean

TRUNCATED_IS_TYPES = ("tis", "icepop", "seq-mask-tis")


def truncated_importance_weights(
    p: torch.Tensor,
    q: torch.Tensor,
    token_mask: torch.Tensor,
    mask: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    sequence_level: bool,
    kind: str | None,
    hi: float | None,
    lo: float | None,
    global_valid_toks,
    global_valid_seqs,
    token_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """π_prev/π_gen weights after truncation, and the out-of-bounds fraction (or None).

    Args:
        p, q: ``[B, T]`` prev (trainer) and generation (inference engine) log-probs.
        token_mask: ``[B, T]``; mask: ``[B, T]`` token_mask·sample_mask; sample_mask: ``[B]``.
        sequence_level: GSPO weights exp(Σ_t (p - q)·M), one per row.
        kind: None (no truncation), "tis", "icepop" or "seq-mask-tis"; hi / lo: the bounds.
        global_valid_toks / global_valid_seqs: N_tok / N_seq for ``is_oob_ratio``.
        token_weights: exp(p - q) if the caller already has it (saves an exp per token).
    Returns:
        ``(w, is_oob_ratio)``: ``w`` is ``[B, T]`` (``[B, 1]`` for GSPO) with no gradient;
        ``is_oob_ratio`` is a 0-d tensor, or None when ``hi`` is None (no truncation).
    """
    if sequence_level:
        w = torch.exp(((p - q) * mask).sum(dim=-1, keepdim=True))  # [B, 1]
    else:
        w = torch.exp(p - q) if token_weights is None else token_weights  # [B, T]
    w = torch.nan_to_num(w, nan=0.0, posinf=0.0, neginf=0.0)
    if hi is None:
        return w, None
    if kind == "tis":
        lo = 0.0 if lo is None else lo
        out = ((w > hi) | (w < lo)).float()
        oob = masked_mean(out, mask, global_normalization_factor=global_valid_toks)
        return w.clamp(lo, hi), oob
    if kind == "icepop":
        keep = ((w >= lo) & (w <= hi)).float()
        oob = masked_mean(1 - keep, mask, global_normalization_factor=global_valid_toks)
        return w * keep, oob
    if kind == "seq-mask-tis":
        log_gmean = masked_mean(torch.nan_to_num(p - q), token_mask, dim=-1)  # [B]
        g = torch.exp(log_gmean)
        keep = ((g >= lo) & (g <= hi)).float()  # [B]
        oob = masked_mean(1 - keep, sample_mask, global_normalization_factor=global_valid_seqs)
        return w * keep.unsqueeze(-1), oob
    raise ValueError(f"Invalid truncated importance sampling type: {kind}")
