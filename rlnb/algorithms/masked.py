"""Masked reductions: the mean and variance every estimator and loss is built on.

    masked_mean(x, m) = Σ x·m / (Σ m + 1e-8)        (or / (G + 1e-8) with a global count G)

See docs/algorithms.md#masked-helpers-and-reductions.

Implementation choices:
1) The denominator always carries +1e-8, so an all-zero mask gives exactly 0, never NaN.
2) Passing ``global_normalization_factor`` replaces Σ m by a count taken over the *whole*
   global batch (all micro-batches, all ranks): summing the micro-batch results then gives
   exactly the full-batch value.
3) ``masked_var`` applies Bessel's n/(n-1) without an epsilon: one valid element gives NaN
   (0·∞), no valid element gives 0. Callers that whiten decide how to guard it.
"""

from __future__ import annotations

import torch


def masked_mean(
    x: torch.Tensor,
    mask: torch.Tensor,
    dim: int | None = None,
    global_normalization_factor: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Σ(x·mask) / (D + 1e-8), D = Σ mask over ``dim`` or the given global count.

    Args:
        x: any shape, broadcastable with ``mask``.
        mask: 0/1, same shape as ``x`` (or broadcastable).
        dim: reduce over this dim (``None``: everything, returns a 0-d tensor).
        global_normalization_factor: scalar count replacing Σ mask.
    """
    num = (x * mask).sum() if dim is None else (x * mask).sum(dim=dim)
    if global_normalization_factor is None:
        den = mask.sum() if dim is None else mask.sum(dim=dim)
    else:
        den = global_normalization_factor
    return num / (den + 1e-8)


def masked_var(
    x: torch.Tensor,
    mask: torch.Tensor,
    mean: torch.Tensor | None = None,
    unbiased: bool = True,
) -> torch.Tensor:
    """Masked variance over all elements; Bessel-corrected (no epsilon) when ``unbiased``.

    Args:
        x, mask: same shape.
        mean: the masked mean to centre on (default ``masked_mean(x, mask)``).
    Returns: 0-d tensor.
    """
    if mean is None:
        mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    if unbiased:
        n = mask.sum()
        # n = 1 -> 0 * inf = NaN, n = 0 -> 0 * (0 / -1) = 0: both as in NeMo-RL.
        var = var * (n / (n - 1))
    return var


def masked_stats(prefix: str, x: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """``{prefix}/mean``, ``/max``, ``/min`` of ``x [B, S]`` over ``mask > 0`` (0 if empty), as
    python numbers for a metrics dict."""
    valid = x[mask > 0]
    if not valid.numel():
        return {f"{prefix}/mean": 0.0, f"{prefix}/max": 0.0, f"{prefix}/min": 0.0}
    return {f"{prefix}/mean": float(valid.mean()), f"{prefix}/max": float(valid.max()),
            f"{prefix}/min": float(valid.min())}
