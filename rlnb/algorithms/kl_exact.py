"""The exact KL(π ‖ π_ref) at each position, and the mean and variance of each sampled-token
estimator (k1, k2, k3 of ``kl.py``) over the vocabulary, on the same positions.

    ℓ_v = log π_ref(v) - log π(v)
    KL_t = Σ_v π(v)·(-ℓ_v)
    E_{y~π}[k(ℓ_y)] = Σ_v π(v)·k(ℓ_v),     Var_{y~π}[k(ℓ_y)] = Σ_v π(v)·k(ℓ_v)² - E²

k1 = -ℓ and k3 = e^ℓ - 1 - ℓ average to KL exactly (Σ_v π·e^ℓ = Σ_v π_ref = 1); k2 = ℓ²/2 does
not. Schulman, "Approximating KL divergence" (http://joschu.net/blog/kl-approx.html). With the
full distributions of a small model these are sums, so an estimator's bias and variance are
numbers, not a Monte-Carlo guess. See docs/algorithms.md#kl-estimators.

Implementation choices:
1) The raw estimators, without the loss's clamps (``calculate_kl``'s ``input_clamp_value`` and
   ``output_clamp_value``): the moments are those of the estimator, not of the loss term.
2) float64 throughout: ``π·e^ℓ = π_ref`` for tokens π almost never samples, and the
   variance is a difference of two sums.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_same_shape, check_tensor
from rlnb.algorithms.kl import KL_ESTIMATORS


def kl_estimator_moments(logprobs: torch.Tensor, reference_logprobs: torch.Tensor
                         ) -> dict[str, torch.Tensor]:
    """Exact KL and each estimator's mean and variance under y ~ π, per position.

    Args:
        logprobs: ``[B, T, V]`` log π over the whole vocabulary (log-softmax of the logits, at
            the sampling temperature); reference_logprobs: ``[B, T, V]`` log π_ref.
    Returns:
        ``{"exact": KL [B, T], "k1_mean", "k1_var", "k2_mean", ...}``, float64 ``[B, T]``.
    """
    check_tensor("logprobs", logprobs, ndim=3, floating=True)
    check_tensor("reference_logprobs", reference_logprobs, ndim=3, floating=True)
    check_same_shape(logprobs=logprobs, reference_logprobs=reference_logprobs)
    logp, logq = logprobs.double(), reference_logprobs.double()
    p = logp.exp()
    ell = logq - logp  # [B, T, V]
    out = {"exact": (p * -ell).sum(-1)}
    for name, estimator in KL_ESTIMATORS.items():
        k = estimator(ell)  # [B, T, V]: the estimate were v the sampled token
        mean = (p * k).sum(-1)
        out[f"{name}_mean"] = mean
        out[f"{name}_var"] = ((p * k.square()).sum(-1) - mean.square()).clamp(min=0.0)
    return out
