"""Exercise 2's check: PPO's clipped surrogate per token, with clip-higher and the dual clip.

    ρ = exp(log π - log π_old),   ℓ = max(-A·ρ, -A·clip(ρ, 1 - ε_lo, 1 + ε_hi)),
    dual clip:  ℓ ← min(ℓ, -A·C) where A < 0

The reference is ``rlnb.probability_ratio`` then ``rlnb.clipped_surrogate`` (the per-token
loss before masking and reduction). Ratios are built as exp of chosen log-ratios, placed on
both sides of each clip bound and with both signs of the advantage, so that clipping the wrong
side, swapping ε_lo and ε_hi or taking the optimistic bound each change some element.
"""

from __future__ import annotations

import math

import torch

from rlnb.algorithms.surrogate import clipped_surrogate, probability_ratio
from rlnb.teach.check import Case, Exercise, Mistake, check


def reference_loss(logprobs, prev_logprobs, advantages, *, eps_low=0.2, eps_high=0.28,
                   dual_clip_c=None):
    """rlnb's per-token clipped surrogate ``[B, T]`` (to minimise)."""
    ratio, clamped = probability_ratio(logprobs, prev_logprobs, torch.ones_like(logprobs),
                                       ratio_clip_min=eps_low, ratio_clip_max=eps_high)
    return clipped_surrogate(advantages, ratio, clamped, logprobs, ratio_clip_c=dual_clip_c)


def _variant(*, ratio="exp", bound="max", swap=False, clip_only=False, dual="A<0", sign=1,
             one_eps=False, clip_advantage=False):
    """A wrong surrogate: each keyword names what the mistake changes."""

    def loss(logprobs, prev_logprobs, advantages, *, eps_low=0.2, eps_high=0.28,
             dual_clip_c=None):
        A = advantages
        if ratio == "exp":
            rho = torch.exp(logprobs - prev_logprobs)
        elif ratio == "inverted":
            rho = torch.exp(prev_logprobs - logprobs)
        elif ratio == "log":  # the log-ratio, not exponentiated
            rho = logprobs - prev_logprobs
        else:  # "quotient" of log-probs
            rho = logprobs / prev_logprobs
        lo, hi = (eps_high, eps_low) if swap else (eps_low, eps_high)
        if one_eps:
            hi = lo
        clipped = rho.clamp(1 - lo, 1 + hi)
        if clip_advantage:
            per_token = torch.maximum(-A * rho, -A.clamp(1 - lo, 1 + hi) * rho)
        elif clip_only:
            per_token = -A * clipped
        elif bound == "max":
            per_token = torch.maximum(-A * rho, -A * clipped)
        else:
            per_token = torch.minimum(-A * rho, -A * clipped)
        if dual_clip_c is not None and dual != "off":
            cap = torch.maximum if dual == "max" else torch.minimum
            capped = cap(per_token, -A * dual_clip_c)
            per_token = capped if dual == "all" else torch.where(A < 0, capped, per_token)
        return sign * per_token

    return loss


MISTAKES = [
    Mistake("objective_sign", "the objective min(ρA, clip(ρ)·A) to maximise instead of the loss "
            "to minimise (its negative: a sign error)", _variant(sign=-1)),
    Mistake("optimistic_bound", "taking the min of the two losses instead of the max (the "
            "optimistic bound: the clip then never holds the update back)",
            _variant(bound="min")),
    Mistake("swapped_eps", "clipping to [1 - ε_hi, 1 + ε_lo] (ε_low and ε_high swapped: "
            "clip-higher raises the upper bound, 1 + ε_high)", _variant(swap=True)),
    Mistake("inverted_ratio", "the ratio π_old/π instead of π/π_old (exp(prev_logprobs - "
            "logprobs))", _variant(ratio="inverted")),
    Mistake("logprob_quotient", "the ratio as logprobs / prev_logprobs (a quotient of "
            "log-probs) instead of exp(logprobs - prev_logprobs)", _variant(ratio="quotient")),
    Mistake("clip_only", "-A·clip(ρ) alone, without the max with the unclipped -A·ρ (the "
            "pessimistic bound)", _variant(clip_only=True)),
    Mistake("dual_clip_all_signs", "applying the dual clip's cap -A·C to every token instead "
            "of only where A < 0", _variant(dual="all")),
    Mistake("dual_clip_missing", "ignoring dual_clip_c (no cap at -A·C where A < 0)",
            _variant(dual="off")),
    Mistake("one_eps", "one ε for both sides, [1 - ε_low, 1 + ε_low] (clip-higher's upper "
            "bound is 1 + ε_high)", _variant(one_eps=True)),
    Mistake("clipped_advantage", "clipping the advantage instead of the ratio (the clip "
            "bounds ρ = π/π_old, and A multiplies the clipped ratio)",
            _variant(clip_advantage=True)),
    Mistake("log_ratio_as_ratio", "the log-ratio log π - log π_old used as the ratio (ρ is "
            "its exponential, exp(logprobs - prev_logprobs))", _variant(ratio="log")),
    Mistake("dual_clip_max", "the dual clip as a floor, max(ℓ, -A·C), instead of a cap: where "
            "A < 0 the loss is min(ℓ, -A·C), so a bad token with a huge ratio adds at most "
            "-A·C", _variant(dual="max")),
]


def _case(ratios, advantages, **hyper):
    """Log-probs with the given ratios to a previous policy of probability 0.1 per token."""
    rho = torch.tensor(ratios, dtype=torch.float32)
    prev = torch.full_like(rho, math.log(0.1))
    return {"logprobs": prev + torch.log(rho), "prev_logprobs": prev,
            "advantages": torch.tensor(advantages, dtype=torch.float32), **hyper}


CASES = [
    Case("inside the clip", _case([[1.05, 0.95, 1.0]], [[1.0, 1.0, -0.5]]),
         "every ratio within [0.8, 1.28]: the surrogate is -A·ρ"),
    Case("between 1 + ε_lo and 1 + ε_hi", _case([[1.25, 1.25, 0.78, 0.78]],
                                                 [[2.0, -2.0, 2.0, -2.0]]),
         "ρ = 1.25 is clipped by a symmetric 0.2 but not by ε_high = 0.28; ρ = 0.78 by both"),
    Case("far outside", _case([[2.0, 2.0, 0.5, 0.5], [1.5, 0.6, 1.0, 1.3]],
                              [[1.0, -1.0, 1.0, -1.0], [0.5, -0.5, 0.0, 1.5]]),
         "ratios 2 and 0.5 with both signs of A: the max picks the clipped side on one and the "
         "unclipped side on the other"),
    Case("dual clip C = 3", _case([[5.0, 5.0, 2.0, 0.5]], [[-1.0, 1.0, -1.0, -1.0]],
                                  dual_clip_c=3.0),
         "ρ = 5 with A < 0 is capped at -A·C = 3; with A > 0 the cap must not act"),
    Case("symmetric ε", _case([[1.3, 0.7, 1.1]], [[1.0, -1.0, 1.0]], eps_low=0.2,
                              eps_high=0.2), "PPO's symmetric clip"),
]

SURROGATE = Exercise(
    function="ppo_clip_loss",
    reference_name="rlnb.clipped_surrogate",
    reference=reference_loss,
    cases=CASES,
    mistakes=MISTAKES,
    outputs=("per-token loss",),
    positional=3,
    grad_wrt="logprobs",
)


def check_ppo_clip_loss(fn) -> None:
    """Check ``fn(logprobs, prev_logprobs, advantages, *, eps_low, eps_high, dual_clip_c)``,
    each tensor ``[B, T]``, returning the per-token loss ``[B, T]``."""
    check(SURROGATE, fn)
