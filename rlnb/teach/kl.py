"""Exercise 4's checks: the KL estimators k1, k2, k3 per token, and the exact KL over a
vocabulary.

    ℓ = log π_ref(y) - log π(y):   k1 = -ℓ,   k2 = ℓ²/2,   k3 = e^ℓ - 1 - ℓ
    KL(π ‖ π_ref) = Σ_v π(v)·(log π(v) - log π_ref(v))

The estimators' reference is ``rlnb.calculate_kl`` with its clamps off (the raw estimators:
the clamps are a safety net of the loss, exercise text); the exact KL's is
``torch.distributions.kl_divergence`` between the two categoricals. Log-ratios of both signs
and of several sizes tell a flipped log-ratio, a missing ½ and a misplaced sign apart.
"""

from __future__ import annotations

import torch
from torch.distributions import Categorical, kl_divergence

from rlnb.algorithms.kl import calculate_kl
from rlnb.teach.check import Case, Exercise, Mistake, check


def _reference(kind: str):
    def kl(logprobs, reference_logprobs):
        return calculate_kl(logprobs, reference_logprobs, kind, input_clamp_value=None,
                            output_clamp_value=None)

    kl.__name__ = kind
    return kl


def reference_exact_kl(logits, reference_logits):
    """KL(π ‖ π_ref) over the last dim, ``[..., V] -> [...]``."""
    return kl_divergence(Categorical(logits=logits), Categorical(logits=reference_logits))


def _ell(lp, ref):
    return ref - lp


MISTAKES = {
    "k1": [
        Mistake("flipped_log_ratio", "k1 = log π_ref - log π: the log-ratio the wrong way round "
                "(k1 is log π(y) - log π_ref(y), positive where π likes the token more)",
                lambda lp, ref: _ell(lp, ref)),
        Mistake("absolute", "|log π - log π_ref|: k1 can be negative, and must be to stay "
                "unbiased", lambda lp, ref: _ell(lp, ref).abs()),
    ],
    "k2": [
        Mistake("no_half", "ℓ² without the ½ (k2 = ℓ²/2)", lambda lp, ref: _ell(lp, ref) ** 2),
        Mistake("ratio_minus_one", "(ρ - 1)²/2 with ρ = π_ref/π instead of ℓ²/2 with "
                "ℓ = log ρ", lambda lp, ref: (torch.exp(_ell(lp, ref)) - 1) ** 2 / 2),
    ],
    "k3": [
        Mistake("flipped_log_ratio", "k3 of the log-ratio the wrong way round (e^(-ℓ) - 1 + ℓ "
                "with ℓ = log π_ref - log π)",
                lambda lp, ref: torch.exp(-_ell(lp, ref)) - 1 + _ell(lp, ref)),
        Mistake("plus_ell", "e^ℓ - 1 + ℓ (a sign error on the last term: k3 = e^ℓ - 1 - ℓ)",
                lambda lp, ref: torch.exp(_ell(lp, ref)) - 1 + _ell(lp, ref)),
        Mistake("no_minus_one", "e^ℓ - ℓ (the -1 is missing: k3 must be 0 where π = π_ref)",
                lambda lp, ref: torch.exp(_ell(lp, ref)) - _ell(lp, ref)),
    ],
}

EXACT_MISTAKES = [
    Mistake("reversed", "KL(π_ref ‖ π) instead of KL(π ‖ π_ref) (the expectation must be "
            "under π, the policy that samples)",
            lambda z, z_ref: reference_exact_kl(z_ref, z)),
    Mistake("raw_logits", "using the raw logits as log-probabilities: take log_softmax first",
            lambda z, z_ref: (torch.softmax(z, -1) * (z - z_ref)).sum(-1)),
    Mistake("mean_over_vocab", "the mean over the vocabulary instead of the sum",
            lambda z, z_ref: reference_exact_kl(z, z_ref) / z.shape[-1]),
    Mistake("unweighted", "Σ_v (log π(v) - log π_ref(v)) without the weight π(v)",
            lambda z, z_ref: (torch.log_softmax(z, -1) - torch.log_softmax(z_ref, -1)).sum(-1)),
    Mistake("batchmean", "one number for the batch, the sum over every position divided by "
            "the first dimension (F.kl_div's reduction='batchmean'): the KL is one number per "
            "position, a sum over the vocabulary only (dim=-1)",
            lambda z, z_ref: reference_exact_kl(z, z_ref).sum() / z.shape[0]),
    Mistake("summed_everywhere", "one number, summed over the positions as well as the "
            "vocabulary: the KL is one number per position, a sum over dim=-1 only",
            lambda z, z_ref: reference_exact_kl(z, z_ref).sum()),
]

ESTIMATOR_CASES = [
    Case("equal policies", {"logprobs": torch.tensor([[-1.0, -2.0, -0.5]]),
                            "reference_logprobs": torch.tensor([[-1.0, -2.0, -0.5]])},
         "π = π_ref on every token: each estimator is 0"),
    Case("reference prefers the token", {"logprobs": torch.tensor([[-2.0, -3.0, -1.5]]),
                                         "reference_logprobs": torch.tensor([[-1.0, -1.0, -1.2]])},
         "ℓ > 0"),
    Case("policy prefers the token", {"logprobs": torch.tensor([[-0.2, -0.7], [-0.1, -1.0]]),
                                      "reference_logprobs": torch.tensor([[-1.7, -2.0],
                                                                          [-0.4, -4.0]])},
         "ℓ < 0"),
]

EXACT_CASES = [
    Case("equal distributions", {"logits": torch.tensor([[0.5, -1.0, 2.0]]),
                                 "reference_logits": torch.tensor([[1.5, 0.0, 3.0]])},
         "the same softmax (the logits differ by a constant): KL is 0"),
    Case("two positions, V = 4", {"logits": torch.tensor([[2.0, 0.0, -1.0, 0.5],
                                                         [0.0, 0.0, 0.0, 3.0]]),
                                  "reference_logits": torch.tensor([[0.0, 1.0, 0.0, 0.0],
                                                                    [1.0, -2.0, 0.5, 0.0]])},
         "different distributions at each position"),
]


def _estimator(kind: str) -> Exercise:
    return Exercise(function=kind, reference_name=f"rlnb.calculate_kl(kl_type='{kind}')",
                    reference=_reference(kind), cases=ESTIMATOR_CASES, mistakes=MISTAKES[kind],
                    outputs=(f"{kind} estimates",), positional=2, grad_wrt="logprobs")


for _kind in ("k1", "k2", "k3"):  # a mean over the tokens: one number, not one per token
    MISTAKES[_kind].append(Mistake(
        "averaged", f"the mean of {_kind} over the tokens: the estimator is one number per "
        "token, [B, T] -> [B, T] (the loss averages it later)",
        lambda lp, ref, k=_kind: _reference(k)(lp, ref).mean()))

ESTIMATORS = {kind: _estimator(kind) for kind in ("k1", "k2", "k3")}

EXACT = Exercise(function="exact_kl", reference_name="torch.distributions.kl_divergence",
                 reference=reference_exact_kl, cases=EXACT_CASES, mistakes=EXACT_MISTAKES,
                 outputs=("KL",), positional=2)


def check_kl_estimator(kind: str, fn) -> None:
    """Check ``fn(logprobs [B, T], reference_logprobs [B, T]) -> [B, T]`` as estimator
    ``kind`` ('k1', 'k2' or 'k3')."""
    if kind not in ESTIMATORS:
        raise ValueError(f"check_kl_estimator: kind must be one of {list(ESTIMATORS)}, "
                         f"got {kind!r}")
    check(ESTIMATORS[kind], fn)


def check_exact_kl(fn) -> None:
    """Check ``fn(logits [..., V], reference_logits [..., V]) -> KL(π ‖ π_ref) [...]``."""
    check(EXACT, fn)
