"""How hard one policy-gradient step pushes each token: the loss reduction's coefficient per
token, times the advantage.

    L = Σ_{b,t} c_{bt}·ℓ_{bt},   ℓ = -A·ρ,   so at ρ = 1:   w_{bt} = -∂L/∂log π_{bt} = A_{bt}·c_{bt}

    sequence_mean:  c_{bt} = M_{bt} / (N_seq·|o_b|)    GRPO's 1/|o_i| inside the sum
    token_mean:     c_{bt} = M_{bt} / N_tok            DAPO's token-level loss
    token_sum:      c_{bt} = M_{bt} / C                Dr. GRPO: a constant C for every batch

``w > 0`` raises the token's log-probability, ``w < 0`` lowers it. Under ``sequence_mean`` a
response's tokens share a fixed budget ``A_b / N_seq``, so a long response with a negative
advantage is pushed down less per token than a short one: the length bias of Dr. GRPO
(Liu et al., https://arxiv.org/abs/2503.20783, §3.1). DAPO's token-level loss
(https://arxiv.org/abs/2503.14476) and Dr. GRPO's token sum weigh every token alike.
See docs/algorithms.md#masked-helpers-and-reductions.

Implementation choices:
1) The coefficients are exactly those of ``reduction.reduce_loss`` (the same masks, global
   counts and +1e-8), so autograd of ``clipped_pg_loss`` at ρ = 1 gives ``A·c``
   (tests/engine/test_mechanisms.py checks it).
2) ``token_sum`` is ``token_mean`` with the count replaced by the constant ``C``: Dr. GRPO
   divides the token sum by the generation budget, e.g. ``C = N_seq·max_new_tokens``, the same
   number whatever the batch's lengths. Within one batch it orders tokens as ``token_mean``.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_mask, check_tensor, choose


def _masks(token_mask: torch.Tensor, sample_mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
    check_tensor("token_mask", token_mask, ndim=2)
    tm = check_mask("token_mask", token_mask)
    return tm, check_mask("sample_mask", sample_mask, shape=(tm.shape[0],))


def sequence_mean(token_mask, sample_mask, *, global_valid_seqs=None, **_) -> torch.Tensor:
    """``[B, T]`` c = sm·tm / ((Σ_t tm + 1e-8)(N_seq + 1e-8)), N_seq = Σ sm unless given."""
    tm, sm = _masks(token_mask, sample_mask)
    n_seq = sm.sum() if global_valid_seqs is None else torch.as_tensor(global_valid_seqs)
    lengths = tm.sum(-1, keepdim=True)  # [B, 1]
    return sm[:, None] * tm / ((lengths + 1e-8) * (n_seq + 1e-8))


def token_mean(token_mask, sample_mask, *, global_valid_toks=None, **_) -> torch.Tensor:
    """``[B, T]`` c = sm·tm / (N_tok + 1e-8), N_tok = Σ sm·tm unless given."""
    tm, sm = _masks(token_mask, sample_mask)
    mask = tm * sm[:, None]
    n_tok = mask.sum() if global_valid_toks is None else torch.as_tensor(global_valid_toks)
    return mask / (n_tok + 1e-8)


def token_sum(token_mask, sample_mask, *, constant=None, **_) -> torch.Tensor:
    """``[B, T]`` c = sm·tm / (C + 1e-8) with the constant ``C`` (> 0) the caller gives."""
    if constant is None or not float(constant) > 0:
        raise ValueError(f"token_sum needs constant > 0 (Dr. GRPO's budget, e.g. "
                         f"N_seq·max_new_tokens), got {constant}")
    return token_mean(token_mask, sample_mask, global_valid_toks=float(constant))


def reduction_coefficients(token_mask: torch.Tensor, sample_mask: torch.Tensor, *,
                           reduction: str, global_valid_seqs=None, global_valid_toks=None,
                           constant: float | None = None) -> torch.Tensor:
    """The coefficient ``c`` of each token in the reduced loss ``L = Σ c·ℓ``.

    Args:
        token_mask: ``[B, T]`` 0/1; sample_mask: ``[B]`` 0/1.
        reduction: ``"sequence_mean"``, ``"token_mean"`` or ``"token_sum"`` (``REDUCTIONS``).
        global_valid_seqs / global_valid_toks: counts of the whole global batch (default: this
            batch's); constant: ``C`` of ``token_sum``.
    Returns:
        ``[B, T]`` float32, 0 off the mask.
    """
    fn = choose(REDUCTIONS, reduction, "reduction")
    return fn(token_mask, sample_mask, global_valid_seqs=global_valid_seqs,
              global_valid_toks=global_valid_toks, constant=constant)


def policy_gradient_weights(advantages: torch.Tensor, token_mask: torch.Tensor,
                            sample_mask: torch.Tensor, *, reduction: str, ratio=None,
                            **counts) -> torch.Tensor:
    """``w = A·ρ·c``: minus the loss's gradient with respect to each token's log π where the
    clip does not bind (``ratio`` ρ ``[B, T]``, default 1: the first step on a batch).

    Args:
        advantages: ``[B, T]`` (or ``[B]``, one per response); the masks and ``reduction`` (and
            its counts or ``constant``) as ``reduction_coefficients``.
    Returns:
        ``[B, T]``: > 0 pushes the token up, < 0 down; 0 off the mask.
    """
    c = reduction_coefficients(token_mask, sample_mask, reduction=reduction, **counts)
    a = check_tensor("advantages", advantages, ndim=(1, 2), floating=True).float()
    a = a[:, None] if a.ndim == 1 else a
    w = a * c
    return w if ratio is None else w * check_tensor("ratio", ratio, shape=tuple(c.shape))


REDUCTIONS = {"sequence_mean": sequence_mean, "token_mean": token_mean, "token_sum": token_sum}
