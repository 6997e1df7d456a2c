"""Which way a policy-gradient push on one token moves the entropy of its position.

    π = softmax(z/τ),   H = -Σ_v π_v log π_v
    ∇_z H = -π ⊙ (log π + H) / τ,   ∇_z log π_y = (e_y - π) / τ

    a step z ← z + η·w·∇_z log π_y  (w: the token's gradient weight, w > 0 pushes y up) gives

    ΔH ≈ η·w·h_y,     h_y = ⟨∇_z H, ∇_z log π_y⟩ = [Σ_v π_v² (log π_v + H) - π_y (log π_y + H)] / τ²

Pushing up a rare token (log π_y well below -H) gives h_y > 0: entropy rises; pushing up a
likely one gives h_y < 0. This is the covariance view of entropy dynamics of Cui et al.,
*The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models*
(https://arxiv.org/abs/2505.22617, §3): a step on high-probability tokens with positive
advantage collapses entropy, one on low-probability tokens keeps it up. It is why DAPO's
clip-higher (https://arxiv.org/abs/2503.14476, §3.1), which lets more rare good tokens keep
their gradient, keeps entropy higher.

Implementation choices:
1) The model is the softmax policy with one free logit vector per position (the setting of the
   paper's derivation): each push moves only its own position's logits, by plain gradient
   ascent. A network shares parameters between positions and Adam rescales the step, so
   ``h`` gives the direction and relative size of each token's effect, not the size of a real
   update's entropy change.
2) Computed in float64 from log-softmax (no ``log 0``), at the temperature τ the sampler used.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_tensor


def entropy_change_per_push(logits: torch.Tensor, targets: torch.Tensor,
                            temperature: float = 1.0) -> torch.Tensor:
    """``h_y`` per position: the first-order entropy change per unit of ``η·w`` when the
    position's logits take a gradient step that raises ``log π(targets)``.

    Args:
        logits: ``[B, T, V]`` raw logits (position t gives the distribution of token t).
        targets: ``[B, T]`` integer token ids (the pushed token y of each position).
        temperature: τ > 0 dividing the logits, as the sampler did.
    Returns:
        ``[B, T]`` float32: > 0 where pushing the token up raises the position's entropy.
    """
    check_tensor("logits", logits, ndim=3, floating=True)
    B, T, _ = logits.shape
    check_tensor("targets", targets, shape=(B, T))
    if targets.is_floating_point():
        raise ValueError(f"targets must be integer token ids, got dtype {targets.dtype}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logp = torch.log_softmax(logits.double() / temperature, dim=-1)  # [B, T, V]
    p = logp.exp()
    H = -(p * logp).sum(-1, keepdim=True)  # [B, T, 1]
    spread = (p.square() * (logp + H)).sum(-1)  # [B, T]: Σ_v π_v² (log π_v + H)
    logp_y = logp.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
    own = logp_y.exp() * (logp_y + H.squeeze(-1))  # π_y (log π_y + H)
    return ((spread - own) / temperature**2).float()
