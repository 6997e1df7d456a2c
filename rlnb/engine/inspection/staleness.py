"""Off-policy staleness on one frozen batch: how far the trained policy has moved from the
weights that generated the batch, token by token, and what the importance-sampling correction
does to each token's push (notebook 07, the staleness finding).

    stale = staleness(advantages, logprobs, truncation=2.0)   # logprobs: log π_θ now, [B, S]
    stale.summary     # per advantage sign: tokens, mean w, w > 1, truncated, push kept
    stale.tokens      # one row per token: A, π_v, π_θ, w, the push with and without
    stale.responses   # one row per response: correct, A, the geometric mean of its w

A batch sampled by weights π_v (``generation_logprobs``) and trained on k steps later by π_θ
gets, per token, the importance weight ``w = π_θ(y)/π_v(y)``; NeMo-RL's correction
(``loss_fn.use_importance_sampling_correction``, https://arxiv.org/abs/2410.18252 for the
async loop, AReaL https://arxiv.org/abs/2505.24298 §4 for the decoupled objective) multiplies
each token's loss by it, truncated at ``hi`` (TIS, https://fengyao.notion.site/off-policy-rl).
With the ratio at 1 (``force_on_policy_ratio``, one optimizer step per rollout) each token's
push ``-∂L/∂log π`` is ``A·c`` without the correction and ``A·c·min(w, hi)`` with it.

Implementation choices:
1) ``w`` is computed as the loss computes it (``truncated_importance_weights``: detached,
   NaN/±inf → 0, ``tis`` clamps to [0, hi]), so the corrected push is the library's own
   gradient (notebook 07 checks it by autograd of ``clipped_pg_loss``).
2) The summary splits tokens by the sign of their advantage: the claim is that a stale batch's
   wrong answers (A < 0) are ones the policy has since left (w < 1, so the correction stops
   pushing them down) and its right answers ones it has moved toward (w > 1).
3) The reduction coefficient ``c`` is the loss's (``token_level_loss``: token mean, else
   sequence mean) over this batch's counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlnb.algorithms.importance_sampling import truncated_importance_weights
from rlnb.algorithms.token_weights import policy_gradient_weights
from rlnb.engine.data.batches import AdvantageBatch
from rlnb.engine.inspection.mechanisms import token_table


@dataclass
class Staleness:
    """``weights``: ``[B, S]`` raw w, 0 off the mask; ``truncated``: ``[B, S]`` min(w, hi);
    ``push``: ``"uncorrected"`` / ``"corrected"`` -> ``[B, S]`` each token's push;
    ``summary``, ``tokens``, ``responses``: pandas frames (see ``staleness``)."""

    weights: torch.Tensor
    truncated: torch.Tensor
    push: dict[str, torch.Tensor]
    summary: object
    tokens: object
    responses: object


@torch.no_grad()
def staleness(advantages: AdvantageBatch, logprobs: torch.Tensor, *,
              truncation: float | None = 2.0, token_level_loss: bool = True) -> Staleness:
    """The importance weights ``w = exp(logprobs − generation_logprobs)`` of a stale batch
    (``logprobs`` ``[B, S]``: the current policy's on the batch's tokens), truncated at
    ``truncation`` (TIS; None: not truncated), and each token's push with and without the
    correction at ρ = 1."""
    r = advantages.rollout
    tm, sm = r.token_mask.float(), advantages.sample_mask.float()
    mask = tm * sm[:, None]  # [B, S]
    n_seq, n_tok = sm.sum(), mask.sum()
    raw, _ = truncated_importance_weights(
        logprobs.float(), r.generation_logprobs.float(), tm, mask, sm, sequence_level=False,
        kind=None, hi=None, lo=None, global_valid_toks=n_tok, global_valid_seqs=n_seq)
    weights = raw * mask
    kept = weights if truncation is None else weights.clamp(0.0, truncation)  # choice 1
    reduction = "token_mean" if token_level_loss else "sequence_mean"
    uncorrected = policy_gradient_weights(advantages.advantages, tm, sm, reduction=reduction)
    push = {"uncorrected": uncorrected, "corrected": uncorrected * kept}
    A = advantages.advantages.float()
    import pandas as pd

    valid = mask > 0
    summary = []
    for label, sel in (("A > 0", valid & (A > 0)), ("A < 0", valid & (A < 0)),
                       ("A = 0", valid & (A == 0))):
        n = int(sel.sum())
        w = weights[sel]
        without = float(push["uncorrected"][sel].abs().sum())
        summary.append({
            "tokens": label, "count": n,
            "mean w": float(w.mean()) if n else float("nan"),
            "mean |log w|": float(w.clamp(min=1e-30).log().abs().mean()) if n else float("nan"),
            "share w > 1": float((w > 1).float().mean()) if n else float("nan"),
            "share truncated": float((w > truncation).float().mean())
            if n and truncation is not None else 0.0,
            "push without correction (Σ|A·c|)": without,
            "push with correction (Σ|A·c·w|)": float(push["corrected"][sel].abs().sum()),
            "push kept": float(push["corrected"][sel].abs().sum()) / without
            if without else float("nan")})
    tokens = token_table(r, valid, {"A": A, "π_v": r.generation_logprobs.exp(),
                                    "π_θ": logprobs.exp(), "w": weights,
                                    "push without": push["uncorrected"],
                                    "push with": push["corrected"]})
    log_w = (weights.clamp(min=1e-30).log() * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    responses = pd.DataFrame({
        "group": r.group.tolist(), "response": r.responses,
        "correct": r.correct.bool().tolist(), "A": (A * mask).sum(-1).div(
            mask.sum(-1).clamp(min=1)).tolist(),
        "tokens": mask.sum(-1).long().tolist(), "geometric-mean w": log_w.exp().tolist()})
    return Staleness(weights, kept, push, pd.DataFrame(summary).set_index("tokens"), tokens,
                     responses)
