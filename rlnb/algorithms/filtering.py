"""Row and value filters of the GRPO loop: overlong filtering, seq-logprob-error masking, clipping.

    overlong:    sample_mask'_b = sample_mask_b · (1 − truncated_b)
    seq error:   e_b = Σ_t exp(|q − p|·M)·M / max(Σ_t M, 1)
                 sample_mask'_b = [e_b ≤ τ] · sample_mask_b
    clip:        A' = clamp(A, low, high)

Papers: overlong filtering, DAPO https://arxiv.org/abs/2503.14476 (Section 3.4: truncated samples
are masked out of the loss).

See docs/algorithms.md#filters.

Implementation choices:
1) Every function returns a new tensor (the sample mask as float32 0/1) and never edits its input;
   NeMo-RL writes ``train_data["sample_mask"]`` in place.
2) Overlong filtering runs *after* the baselines: a truncated row still counts in its group's
   baseline but adds nothing to the loss or to N_tok / N_seq.
3) The sequence error takes the *stored* ``[B, S]`` tensors and slices ``[:, 1:]`` (index t =
   token t; index 0 is a prompt position), with M = token_mask[:, 1:] · sample_mask. q =
   ``generation_logprobs`` (inference engine), p = ``prev_logprobs`` (trainer). e_b is the
   per-row mean of the token-level multiplicative probability error, so e_b ≥ 1 for a row with
   valid tokens and 0 for a row without.
4) Rows without valid tokens are always kept by the threshold (NeMo-RL keeps them because
   0 ≤ τ; rlnb keeps them for any τ) and are left out of the max/mean/min statistics, which
   are 0 when no row qualifies.
5) All metric keys are always returned; with no threshold nothing is masked, so the
   ``*_after_mask`` statistics equal the unmasked ones and the masked count is 0.
6) ``masked_correct_pct`` is a fraction in [0, 1] (the name says pct; NeMo-RL logs the
   fraction), over the rows this call masked, counting reward == 1 exactly.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_mask, check_same_rows, check_tensor


def overlong_filter(sample_mask: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
    """Zero the sample mask of truncated rows (DAPO overlong filtering).

    Args:
        sample_mask: ``[B]`` 0/1 (bool, int or float).
        truncated: ``[B]`` 0/1, 1 where the response hit the token limit without a stop token
            or an env observation was cut to fit the sequence length.
    Returns:
        ``[B]`` float32 new sample mask.
    """
    sm = check_mask("sample_mask", sample_mask, shape=(None,))
    tr = check_mask("truncated", truncated, shape=(None,))
    check_same_rows(sample_mask=sample_mask, truncated=truncated)
    return sm * (1.0 - tr)


def seq_mult_prob_error(
    prev_logprobs: torch.Tensor,
    generation_logprobs: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
) -> torch.Tensor:
    """Per-row mean of exp|log q − log p| over the row's valid response tokens.

    Args:
        prev_logprobs: ``[B, S]`` trainer log-probs, stored layout (index t = token t).
        generation_logprobs: ``[B, S]`` inference-engine log-probs, stored layout.
        token_mask: ``[B, S]`` 0/1, stored layout.
        sample_mask: ``[B]`` 0/1.
    Returns:
        ``[B]`` float32 error e_b (0 for rows without valid tokens).
    """
    check_tensor("prev_logprobs", prev_logprobs, ndim=2, floating=True)
    B, S = prev_logprobs.shape
    check_tensor("generation_logprobs", generation_logprobs, shape=(B, S), floating=True)
    tm = check_mask("token_mask", token_mask, shape=(B, S))
    sm = check_mask("sample_mask", sample_mask, shape=(B,))
    # Off-by-one trap: stored tensors carry a prompt position at index 0; drop it like the loss.
    mask = tm[:, 1:] * sm.unsqueeze(-1)  # [B, S-1]
    lp_error = (generation_logprobs[:, 1:].float() - prev_logprobs[:, 1:].float()).abs()
    # exp(err·M)·M, not exp(err)·M: kept from NeMo-RL (masked positions give exp(0)·0 = 0).
    per_token = torch.exp(lp_error * mask) * mask  # [B, S-1]
    return per_token.sum(dim=-1) / mask.sum(dim=-1).clamp(min=1)


def _row_stats(values: torch.Tensor, rows: torch.Tensor, suffix: str) -> dict[str, float]:
    """max/mean/min of ``values[rows]`` (0 when no row is selected)."""
    picked = values[rows]
    if picked.numel() == 0:
        return {f"{k}_seq_mult_prob_error{suffix}": 0.0 for k in ("max", "mean", "min")}
    return {
        f"max_seq_mult_prob_error{suffix}": picked.max().item(),
        f"mean_seq_mult_prob_error{suffix}": picked.mean().item(),
        f"min_seq_mult_prob_error{suffix}": picked.min().item(),
    }


def seq_logprob_error_mask(
    prev_logprobs: torch.Tensor,
    generation_logprobs: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    rewards: torch.Tensor,
    *,
    seq_logprob_error_threshold: float | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Mask rows whose train-vs-inference sequence error exceeds the threshold, with metrics.

    Args:
        prev_logprobs, generation_logprobs, token_mask: ``[B, S]`` stored layout.
        sample_mask: ``[B]`` 0/1.
        rewards: ``[B]`` rewards, only read for ``masked_correct_pct``.
        seq_logprob_error_threshold: τ; ``None`` computes the metrics and masks nothing.
    Returns:
        ``(sample_mask [B] float32, metrics)`` with keys ``max|mean|min_seq_mult_prob_error``,
        ``num_masked_seqs_by_logprob_error``, ``masked_correct_pct`` and
        ``max|mean|min_seq_mult_prob_error_after_mask``.
    """
    error = seq_mult_prob_error(prev_logprobs, generation_logprobs, token_mask, sample_mask)
    check_tensor("rewards", rewards, ndim=1)
    check_same_rows(prev_logprobs=prev_logprobs, rewards=rewards)
    sm = check_mask("sample_mask", sample_mask)
    tm = check_mask("token_mask", token_mask)
    has_tokens = (tm[:, 1:] * sm.unsqueeze(-1)).sum(dim=-1) > 0  # [B]

    if seq_logprob_error_threshold is None:
        new_sm = sm.clone()
    else:
        keep = (error <= seq_logprob_error_threshold) | ~has_tokens
        new_sm = sm * keep.float()
    masked = (sm - new_sm) > 0  # [B] rows this call masked
    num_masked = int(masked.sum())
    correct = int((rewards[masked] == 1).sum()) if num_masked else 0

    metrics = _row_stats(error, has_tokens, "")
    metrics["num_masked_seqs_by_logprob_error"] = num_masked
    metrics["masked_correct_pct"] = correct / num_masked if num_masked else 0.0
    metrics.update(_row_stats(error, has_tokens & (new_sm > 0), "_after_mask"))
    return new_sm, metrics


def clip_advantages(
    advantages: torch.Tensor, low: float | None = None, high: float | None = None
) -> torch.Tensor:
    """Clamp advantages to [low, high] (``grpo.advantage_clip_low/high``); ``None`` = no bound.

    Args:
        advantages: any shape, usually ``[B, S]``.
    Returns:
        A new tensor of the same shape; ``advantages`` itself (not a copy) when both bounds are
        ``None``.
    """
    check_tensor("advantages", advantages, floating=True)
    if low is not None and high is not None and low > high:
        raise ValueError(
            f"advantage clip low ({low}) must be <= high ({high}) (advantage_clip_low/high)"
        )
    if low is None and high is None:
        return advantages
    return advantages.clamp(min=low, max=high)
