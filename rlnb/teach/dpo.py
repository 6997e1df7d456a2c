"""Exercise 6's check: the DPO loss on interleaved (chosen, rejected) rows.

    ρ_b = Σ_t (log π - log π_ref)·tm,     L = mean over pairs of -log σ(β·(ρ_chosen - ρ_rejected))

DPO: https://arxiv.org/abs/2305.18290. Rows 0, 2, 4, ... are the chosen answers and rows
1, 3, 5, ... the rejected ones. The reference is ``rlnb.dpo_loss`` with every sample_mask 1 and
the batch's own row count. Rows of different lengths with non-zero padding, and a β that is
not 1, tell the common mistakes apart.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlnb.algorithms.preference import dpo_loss
from rlnb.teach.check import Case, Exercise, Mistake, check


def reference_dpo(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    """rlnb's DPO loss (0-d) for interleaved rows, every row valid."""
    B = logprobs.shape[0]
    loss, _ = dpo_loss(logprobs, reference_logprobs, token_mask, torch.ones(B),
                       global_valid_seqs=B, reference_policy_kl_penalty=beta)
    return loss


def _variant(*, mask=True, reference=True, mean=False, beta_outside=False, swap=False,
             sign=1, per_row=False, reduce="mean", halves=False, log=True):
    def loss(logprobs, reference_logprobs, token_mask, *, beta=0.1):
        m = token_mask if mask else torch.ones_like(token_mask)
        diff = (logprobs + reference_logprobs if reference == "added" else
                logprobs - reference_logprobs if reference else logprobs)
        rho = (diff * m).sum(-1)  # [B]
        if mean:
            rho = rho / m.sum(-1).clamp(min=1)
        chosen, rejected = rho[0::2], rho[1::2]
        if halves:  # the first half of the rows chosen, the second half rejected
            chosen, rejected = rho[: len(rho) // 2], rho[len(rho) // 2:]
        if swap:
            chosen, rejected = rejected, chosen
        if beta_outside:
            per_pair = -beta * F.logsigmoid(chosen - rejected)
        elif not log:
            per_pair = -torch.sigmoid(beta * (chosen - rejected))
        else:
            per_pair = -F.logsigmoid(beta * (chosen - rejected))
        per_pair = sign * per_pair
        if reduce == "sum":
            return per_pair.sum()
        return per_pair.sum() / len(rho) if per_row else per_pair.mean()

    return loss


MISTAKES = [
    Mistake("no_mask", "summing log-ratios over every position, padding included (multiply "
            "by token_mask)", _variant(mask=False)),
    Mistake("no_reference", "the policy's log-probs alone: DPO's implicit reward is the "
            "log-ratio to the reference, log π - log π_ref", _variant(reference=False)),
    Mistake("mean_over_tokens", "the mean log-ratio over each row's tokens instead of the "
            "sum (length normalisation, as IPO/SimPO do: not DPO)", _variant(mean=True)),
    Mistake("beta_outside", "-β·log σ(ρ_c - ρ_r) instead of -log σ(β·(ρ_c - ρ_r)) (β goes "
            "inside the sigmoid)", _variant(beta_outside=True)),
    Mistake("swapped_pairs", "the chosen and rejected rows swapped: rows 0, 2, 4, ... are "
            "the chosen ones", _variant(swap=True)),
    Mistake("sign", "+log σ(...) instead of -log σ(...) (a sign error: minimising it would "
            "prefer the rejected answers)", _variant(sign=-1)),
    Mistake("divide_by_rows", "dividing by the number of rows instead of the number of pairs "
            "(half the rows)", _variant(per_row=True)),
    Mistake("reference_added", "log π + log π_ref instead of log π - log π_ref (the reference's "
            "log-probs added, not subtracted)", _variant(reference="added")),
    Mistake("summed_pairs", "summing the pairs' losses instead of averaging them (the loss, "
            "and so the step, then grows with the batch)", _variant(reduce="sum")),
    Mistake("halves", "pairing the first half of the rows with the second half: the rows are "
            "interleaved, chosen at 0, 2, 4, ... and rejected at 1, 3, 5, ... (rho[0::2] and "
            "rho[1::2])", _variant(halves=True)),
    Mistake("no_log", "-σ(β·(ρ_c - ρ_r)) without the log: DPO's loss is -log σ(...), the "
            "negative log-likelihood of the preference", _variant(log=False)),
]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


CASES = [
    Case("one pair", {"logprobs": _t([[-1.0, -0.5], [-2.0, -1.5]]),
                      "reference_logprobs": _t([[-1.5, -1.0], [-1.0, -1.0]]),
                      "token_mask": _t([[1, 1], [1, 1]]), "beta": 0.5},
         "rows of equal length, chosen row 0"),
    Case("two pairs, padding", {"logprobs": _t([[-0.5, -0.2, -3.0, -3.0],
                                                [-1.0, -2.0, -0.3, -3.0],
                                                [-0.7, -0.4, -0.1, -0.9],
                                                [-0.2, -3.0, -3.0, -3.0]]),
                                "reference_logprobs": _t([[-1.0, -0.4, -1.0, -1.0],
                                                          [-0.8, -1.0, -0.6, -1.0],
                                                          [-0.9, -0.6, -0.5, -0.4],
                                                          [-0.6, -1.0, -1.0, -1.0]]),
                                "token_mask": _t([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1],
                                                  [1, 0, 0, 0]]),
                                "beta": 0.1},
         "rows of 2, 3, 4 and 1 tokens; padding holds log-probs that are not 0"),
    Case("β = 2", {"logprobs": _t([[-0.1, -0.2, -0.3], [-0.3, -0.2, -0.9]]),
                   "reference_logprobs": _t([[-0.4, -0.4, -0.4], [-0.2, -0.2, -0.2]]),
                   "token_mask": _t([[1, 1, 1], [1, 1, 0]]), "beta": 2.0},
         "a large β"),
]

DPO = Exercise(
    function="dpo_loss",
    reference_name="rlnb.dpo_loss",
    reference=reference_dpo,
    cases=CASES,
    mistakes=MISTAKES,
    outputs=("loss",),
    positional=3,
    grad_wrt="logprobs",
)


def check_dpo_loss(fn) -> None:
    """Check ``fn(logprobs [B, T], reference_logprobs [B, T], token_mask [B, T], *, beta)``
    (rows interleaved chosen, rejected) returning the loss (0-d)."""
    check(DPO, fn)
