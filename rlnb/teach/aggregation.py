"""Exercise 3's checks: token-level and sequence-level loss aggregation (Dr. GRPO's point).

    token level:     L = Σ_{b,t} ℓ·tm·sm / Σ_{b,t} tm·sm
    sequence level:  L = Σ_b sm_b · (Σ_t ℓ·tm / Σ_t tm) / Σ_b sm_b     (a row with no token adds 0)

The reference is ``rlnb.algorithms.reduction.reduce_loss`` with the batch's own counts
(``global_valid_counts``): one global batch, one process. Rows have different lengths, a
masked row (sample_mask 0) holds large values and padding holds values that are not 0, so
forgetting either mask, or dividing by the wrong count, changes the result.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.reduction import global_valid_counts, reduce_loss
from rlnb.teach.check import Case, Exercise, Mistake, check


def _reference(token_level: bool):
    def reduce(per_token, token_mask, sample_mask):
        n_seq, n_tok = global_valid_counts(token_mask, sample_mask)
        return reduce_loss(per_token, token_mask, sample_mask, token_level_loss=token_level,
                           global_valid_toks=n_tok, global_valid_seqs=n_seq)

    reduce.__name__ = "token_level_loss" if token_level else "sequence_level_loss"
    return reduce


# --------------------------------------------------------------------------- the mistakes


def _masked(per_token, token_mask, sample_mask):
    return per_token * token_mask * sample_mask[:, None], token_mask * sample_mask[:, None]


def _row_means(per_token, token_mask, *, divide_by_T=False, guard=True):
    sums = (per_token * token_mask).sum(-1)  # [B]
    counts = torch.full_like(sums, per_token.shape[-1]) if divide_by_T else token_mask.sum(-1)
    return sums / (counts.clamp(min=1) if guard else counts)


def _token(per_token, token_mask, sample_mask, *, sample=True, denominator="tokens"):
    sm = sample_mask if sample else torch.ones_like(sample_mask)
    num, mask = _masked(per_token, token_mask, sm)
    den = {"tokens": mask.sum(), "numel": torch.tensor(float(per_token.numel())),
           "rows": sm.sum()}[denominator]
    return num.sum() / den


def _sequence(per_token, token_mask, sample_mask, *, sample=True, all_rows=False, **kw):
    sm = sample_mask if sample else torch.ones_like(sample_mask)
    rows = _row_means(per_token, token_mask, **kw) * sm
    return rows.sum() / (torch.tensor(float(len(sm))) if all_rows else sm.sum())


def _per_position(per_token, token_mask, sample_mask):
    num, mask = _masked(per_token, token_mask, sample_mask)
    at_t = num.sum(0) / mask.sum(0).clamp(min=1)  # [T]: mean over the batch at position t
    return at_t[mask.sum(0) > 0].mean()


def _no_mask(per_token, token_mask, sample_mask):
    return per_token.mean()


TOKEN_MISTAKES = [
    Mistake("no_mask", "the mean over every position, padding and masked rows included (the "
            "masks were forgotten)", _no_mask),
    Mistake("ignore_sample_mask", "using token_mask alone: rows with sample_mask 0 still count",
            lambda x, tm, sm: _token(x, tm, sm, sample=False)),
    Mistake("divide_by_numel", "dividing the masked sum by B·T (every position) instead of the "
            "number of valid tokens", lambda x, tm, sm: _token(x, tm, sm, denominator="numel")),
    Mistake("divide_by_rows", "dividing the masked sum by the number of sequences instead of "
            "the number of valid tokens",
            lambda x, tm, sm: _token(x, tm, sm, denominator="rows")),
    Mistake("sequence_level", "averaging each sequence first, then over sequences: that is "
            "the sequence-level loss, not the token-level one", _sequence),
    Mistake("mean_over_batch_per_position", "averaging over the batch at each position first, "
            "then over positions, instead of over all valid tokens at once", _per_position),
]

SEQUENCE_MISTAKES = [
    Mistake("no_mask", "the mean over every position, padding and masked rows included (the "
            "masks were forgotten)", _no_mask),
    Mistake("token_level", "one mean over all valid tokens: that is the token-level loss, "
            "not the sequence-level one", _token),
    Mistake("divide_by_T", "dividing each row's sum by the padded length T instead of its "
            "own number of tokens (a constant normaliser, as Dr. GRPO does, is not this "
            "exercise's)", lambda x, tm, sm: _sequence(x, tm, sm, divide_by_T=True)),
    Mistake("ignore_sample_mask", "averaging over every row: rows with sample_mask 0 still "
            "count", lambda x, tm, sm: _sequence(x, tm, sm, sample=False)),
    Mistake("divide_by_all_rows", "dividing by B (every row) instead of the number of rows "
            "with sample_mask 1", lambda x, tm, sm: _sequence(x, tm, sm, all_rows=True)),
    Mistake("nan_empty_row", "NaN from a row with no valid token (0/0): such a row adds 0 "
            "to the sum and still counts as a sequence",
            lambda x, tm, sm: _sequence(x, tm, sm, guard=False)),
]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


CASES = [
    Case("equal lengths", {"per_token": _t([[1.0, 2.0, 3.0], [4.0, 6.0, 8.0]]),
                           "token_mask": _t([[1, 1, 1], [1, 1, 1]]),
                           "sample_mask": _t([1, 1])},
         "two full rows: both losses are the plain mean"),
    Case("lengths 2 and 4", {"per_token": _t([[1.0, 3.0, 9.0, 9.0, 9.0],
                                              [2.0, 2.0, 4.0, 4.0, 9.0],
                                              [0.5, 9.0, 9.0, 9.0, 9.0]]),
                             "token_mask": _t([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0],
                                               [1, 0, 0, 0, 0]]),
                             "sample_mask": _t([1, 1, 1])},
         "rows of 2, 4 and 1 valid tokens; padding holds 9s"),
    Case("a masked row", {"per_token": _t([[1.0, 2.0, 7.0, 7.0], [50.0, 50.0, 50.0, 50.0],
                                           [3.0, 3.0, 3.0, 1.0]]),
                          "token_mask": _t([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 1]]),
                          "sample_mask": _t([1, 0, 1])},
         "row 1 has sample_mask 0 and large values"),
    Case("a row with no token", {"per_token": _t([[2.0, 4.0, 5.0], [8.0, 8.0, 8.0]]),
                                 "token_mask": _t([[1, 1, 0], [0, 0, 0]]),
                                 "sample_mask": _t([1, 1])},
         "row 1 has sample_mask 1 but no valid token"),
]

TOKEN_LEVEL = Exercise(
    function="token_level_loss",
    reference_name="rlnb.algorithms.reduction.reduce_loss(token_level_loss=True)",
    reference=_reference(True),
    cases=CASES,
    mistakes=TOKEN_MISTAKES,
    outputs=("loss",),
    positional=3,
    grad_wrt="per_token",
)

SEQUENCE_LEVEL = Exercise(
    function="sequence_level_loss",
    reference_name="rlnb.algorithms.reduction.reduce_loss(token_level_loss=False)",
    reference=_reference(False),
    cases=CASES,
    mistakes=SEQUENCE_MISTAKES,
    outputs=("loss",),
    positional=3,
    grad_wrt="per_token",
)


def check_token_level_loss(fn) -> None:
    """Check ``fn(per_token [B, T], token_mask [B, T], sample_mask [B]) -> loss (0-d)``."""
    check(TOKEN_LEVEL, fn)


def check_sequence_level_loss(fn) -> None:
    """Check ``fn(per_token [B, T], token_mask [B, T], sample_mask [B]) -> loss (0-d)``."""
    check(SEQUENCE_LEVEL, fn)
