"""Importance weights between the trainer and the inference engine, and their truncation.

    w_t = π_prev(y_t) / π_gen(y_t) = exp(p_t - q_t)          (GSPO: w_b = exp(Σ_t (p - q)·M))

Generation engines (vLLM) and trainers compute slightly different probabilities for the same
tokens; weighting the loss by w corrects the off-policy gap, and truncating w bounds its
variance. TIS: https://fengyao.notion.site/off-policy-rl; IcePop (mask rather than clamp):
https://ringtech.notion.site/icepop; sequence-level masking by the geometric mean follows
the same idea per sequence.

See docs/algorithms.md#importance-sampling-correction.

Implementation choices:
1) Weights are detached and NaN/±inf become 0.
2) tis clamps w to [lo, hi] (lo defaults to 0); icepop zeroes w outside [lo, hi] (inclusive);
   seq-mask-tis drops whole rows whose geometric-mean weight exp(mean_t (p - q)) is outside
   [lo, hi], leaving the kept rows' token weights untruncated.
3) ``is_oob_ratio`` is the fraction of valid tokens (of valid rows for seq-mask-tis) outside
   the bounds, over the global counts.
4) ``train_inference_diagnostics`` measures the same mismatch four ways (no gradient) with a
   single exponential per token, which it hands on as the raw weights exp(p - q).
"""

from __future__ import annotations

import math

import torch

from rlnb.algorithms.kl import KL_ESTIMATORS
from rlnb.algorithms.masked import masked_mean

TRUNCATED_IS_TYPES = ("tis", "icepop", "seq-mask-tis")


@torch.no_grad()
def train_inference_diagnostics(
    prev_logprobs: torch.Tensor,
    generation_logprobs: torch.Tensor,
    mask: torch.Tensor,
    *,
    kl_type: str = "k3",
    global_valid_toks,
) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """How far apart the trainer (p) and the generation engine (q) are, over valid tokens.

        token_mult_prob_error = Σ e^|q-p|·M / N_tok      gen_kl_error    = Σ k(p - q)·M / N_tok
        js_divergence_error   = Σ JS(p, q)·M / N_tok      policy_kl_error = Σ k(q - p)·M / N_tok

    Args:
        prev_logprobs, generation_logprobs, mask: ``[B, T]`` (mask = token_mask·sample_mask).
        kl_type: the estimator k (the loss's ``reference_policy_kl_type``), no clamps.
    Returns:
        ``(metrics, weights)``: four 0-d tensors, and ``[B, T]`` e^(p-q), the raw token
        importance weights (computed here anyway, so the loss reuses them).
    """
    # One exponential serves everything (the loss is bound by transcendental math on long
    # batches): r = π_gen/π_prev = e^(q-p), so e^(p-q) = 1/r, e^|q-p| = max(r, 1/r), and against
    # the mixture m = ½π_prev + ½π_gen: π_prev/m = 2/(1+r), π_gen/m = 2/(1+1/r),
    # log(π_prev/m) = log 2 - softplus(q-p), log(π_gen/m) = log(π_prev/m) + (q-p).
    gap = generation_logprobs - prev_logprobs
    r = torch.exp(gap)
    inv_r = 1 / r  # = e^(p-q): the raw token importance weight π_prev/π_gen
    if kl_type == "k3":  # k3(ℓ) = e^ℓ - 1 - ℓ, with e^ℓ already known
        gen_kl, policy_kl = inv_r - 1 + gap, r - 1 - gap  # ℓ = p - q and ℓ = q - p
    else:
        kl_fn = KL_ESTIMATORS[kl_type]
        gen_kl, policy_kl = kl_fn(-gap), kl_fn(gap)
    softplus = torch.where(gap > 20, gap, torch.log1p(r))  # log(1 + e^gap), overflow-safe
    a = math.log(2) - softplus  # log(π_prev / m)
    b = a + gap  # log(π_gen / m)
    js = 0.5 * ((2 / (1 + r) - a - 1) + (2 / (1 + inv_r) - b - 1))
    metrics = {
        name: masked_mean(x, mask, None, global_valid_toks)
        for name, x in (
            ("token_mult_prob_error", torch.maximum(r, inv_r)),
            ("gen_kl_error", gen_kl),
            ("policy_kl_error", policy_kl),
            ("js_divergence_error", js),
        )
    }
    return metrics, inv_r


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
