"""KL estimators k1, k2, k3 between the policy and a reference, per token.

    ℓ = log π_ref(y) - log π(y);   k1 = -ℓ,   k2 = ℓ²/2,   k3 = e^ℓ - 1 - ℓ

Schulman's "Approximating KL divergence" (http://joschu.net/blog/kl-approx.html): for samples
y ~ π, k1 is unbiased but high-variance and can be negative, k3 is unbiased and always ≥ 0,
k2 is biased with low variance. GRPO (https://arxiv.org/abs/2402.03300) uses k3.

See docs/algorithms.md#kl-estimators.

Implementation choices:
1) The log-ratio is clamped to ±input_clamp_value (default 20) *before* the estimator, so one
   token with a wildly off reference cannot produce e^ℓ = inf. Where the clamp bites, the
   log-ratio gets no gradient (clamp's own behaviour) and the importance weight is detached.
2) An optional importance weight multiplies the estimate (``w·k``), and the product is clamped
   to ±output_clamp_value (default 10): after the weight and before any outer coefficient β.
   k1 can be negative and is clamped too: logprobs - reference = -30 gives ℓ = 30 → 20 after
   the input clamp, k1 = -20, and -10 after the output clamp.
3) ``None`` for either clamp disables it; the diagnostic metrics of the loss use no clamps.
4) The loss's KL term (``kl_penalty_term``) weights k by exp(log π - sg(log π)) (value 1,
   gradient ∇log π) unless the on-policy approximation exp(log π - log π_gen) is on, so its
   gradient always carries the score-function term k·∇log π besides ∂k/∂log π. A NaN/±inf
   weight becomes 0.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_same_shape, check_tensor, choose


def k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """-ℓ: the plain log-ratio estimator (unbiased, can be negative). Shape preserved."""
    return -log_ratio


def k2(log_ratio: torch.Tensor) -> torch.Tensor:
    """ℓ²/2: low variance, biased. Shape preserved."""
    return log_ratio.square() / 2


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """e^ℓ - 1 - ℓ: unbiased and non-negative (the GRPO choice). Shape preserved."""
    return torch.exp(log_ratio) - 1 - log_ratio


def calculate_kl(
    logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor,
    kl_type: str = "k3",
    input_clamp_value: float | None = 20.0,
    output_clamp_value: float | None = 10.0,
    importance_weights: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL(π || π_ref) estimate.

    Args:
        logprobs: ``[B, T]`` log π of the sampled tokens (may carry gradient).
        reference_logprobs: ``[B, T]`` log π_ref of the same tokens.
        kl_type: ``"k1"``, ``"k2"`` or ``"k3"`` (see ``KL_ESTIMATORS``).
        input_clamp_value: clamp of ℓ = ref - logprobs, ``None`` to disable.
        output_clamp_value: clamp of ``w·k``, ``None`` to disable.
        importance_weights: optional ``[B, T]`` (or broadcastable) weight w.
    Returns:
        ``[B, T]`` per-token estimate (unmasked, no β).
    """
    estimator = choose(KL_ESTIMATORS, kl_type, "KL estimator (reference_policy_kl_type)")
    check_tensor("logprobs", logprobs, floating=True)
    check_tensor("reference_logprobs", reference_logprobs, floating=True)
    check_same_shape(logprobs=logprobs, reference_logprobs=reference_logprobs)
    log_ratio = reference_logprobs - logprobs
    if input_clamp_value is not None:
        clamped = log_ratio.clamp(-input_clamp_value, input_clamp_value)
        if importance_weights is not None:
            # A clamped token's estimate no longer depends on π, so its weight must not either.
            importance_weights = torch.where(
                clamped != log_ratio, importance_weights.detach(), importance_weights
            )
        log_ratio = clamped
    kl = estimator(log_ratio)
    if importance_weights is not None:
        kl = importance_weights * kl
    if output_clamp_value is not None:
        kl = kl.clamp(-output_clamp_value, output_clamp_value)
    return kl


def kl_penalty_term(
    logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor,
    generation_logprobs: torch.Tensor | None = None,
    *,
    beta: float,
    kl_type: str = "k3",
    input_clamp_value: float | None = 20.0,
    output_clamp_value: float | None = 10.0,
    on_policy_kl_approximation: bool = False,
) -> torch.Tensor:
    """The clipped PG loss's per-token KL penalty β·clamp(w·k(clamp(ref - log π))).

    Args:
        logprobs: ``[B, T]`` log π (unfiltered by top-k/top-p if that applies), with gradient.
        reference_logprobs: ``[B, T]`` log π_ref.
        generation_logprobs: ``[B, T]`` log π_gen, read only by the on-policy approximation.
        beta: β (``reference_policy_kl_penalty``); the other keywords as ``calculate_kl``.
    Returns:
        ``[B, T]`` per-token term, not masked or reduced (see ``reduction.reduce_loss``).
    """
    if on_policy_kl_approximation:
        weights = torch.exp(logprobs - generation_logprobs)
    else:
        # Value 1 and gradient ∇log π (the score-function term): the same value and the same
        # gradient as exp(log π - sg(log π)), without an exp per token.
        weights = 1 + (logprobs - logprobs.detach())
    weights = torch.nan_to_num(weights, nan=0.0, posinf=0.0, neginf=0.0)
    kl = calculate_kl(
        logprobs, reference_logprobs, kl_type, input_clamp_value, output_clamp_value, weights
    )
    return beta * kl


def kl_in_reward(
    prev_logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor,
    *,
    reference_policy_kl_penalty: float,
    reference_policy_kl_type: str = "k3",
) -> torch.Tensor:
    """β·KL(π_old ‖ π_ref) per token with the default clamps (20 / 10), for KL-in-reward.

    Args: ``[B, T]`` log-probs of the sampled tokens. Returns ``[B, T]``.
    """
    kl = calculate_kl(prev_logprobs, reference_logprobs, reference_policy_kl_type)
    return reference_policy_kl_penalty * kl


KL_ESTIMATORS = {"k1": k1, "k2": k2, "k3": k3}
