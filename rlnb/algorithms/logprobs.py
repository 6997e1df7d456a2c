"""From logits to the per-token log-probabilities (and entropies) that every loss consumes.

    token_logprobs[b, t] = log softmax(logits[b, t] / τ)[targets[b, t]]             [B, T]
    token_entropy[b, t]  = -Σ_v p_v log p_v,   p = softmax(logits[b, t] / τ)        [B, T]

The one place in rlnb meant to turn logits into log-probs (the policy, the token statistics and
the model backends). See docs/algorithms.md#log-probabilities.

Implementation choices:
1) Logits are cast to float32 first: bf16 log-softmax loses about 2 decimal digits, which is
   larger than the policy change of one update step.
2) The temperature τ divides the logits before the softmax, so the log-probs are those of the
   distribution the sampler drew from (NeMo-RL does the same with the generation temperature).
3) Computed as ``logit[target] - logsumexp(logits)``: the same numbers as
   ``log_softmax(...).gather(...)`` without materialising a second ``[B, T, V]`` tensor.
4) ``next_token_logprobs`` is NeMo-RL's layout: logits ``[B, S, V]`` of a whole row, position
   t predicting token t+1, so the last position is dropped and the result is ``[B, S-1]``
   with index t = log-prob of token t+1. Losses then slice the stored ``[B, S]`` tensors with
   ``[:, 1:]`` to line up.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_tensor


def _scaled_logits(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    check_tensor("logits", logits, ndim=3, floating=True)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    logits = logits.float()  # a copy only when the logits are not float32 already
    return logits if temperature == 1.0 else logits / temperature


def token_logprobs(
    logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """log π(targets | logits / temperature) per position.

    Args:
        logits: ``[B, T, V]`` (any float dtype; computed in float32).
        targets: ``[B, T]`` integer token ids, the token whose log-prob each position gives.
        temperature: τ > 0 dividing the logits.
    Returns:
        ``[B, T]`` float32, differentiable with respect to ``logits``.
    """
    z = _scaled_logits(logits, temperature)
    B, T, _ = z.shape
    check_tensor("targets", targets, shape=(B, T))
    if targets.is_floating_point():
        raise ValueError(f"targets must be integer token ids, got dtype {targets.dtype}")
    picked = z.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)  # [B, T]
    return picked - torch.logsumexp(z, dim=-1)


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """Full-vocabulary entropy of each position: H = logsumexp(z) - Σ_v softmax(z)_v·z_v.

    z = logits / τ, so H is the entropy of the distribution the sampler drew from.

    Args:
        logits: ``[B, T, V]``; temperature: τ > 0.
    Returns:
        ``[B, T]`` float32 entropies in nats (0 for a one-hot distribution, log V for uniform).
    """
    z = _scaled_logits(logits, temperature)
    lse = torch.logsumexp(z, dim=-1)  # [B, T]
    probs = torch.exp(z - lse.unsqueeze(-1))  # [B, T, V]
    return lse - (probs * z).sum(dim=-1)


def next_token_logprobs(
    next_token_logits: torch.Tensor, input_ids: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Log-probability of each next token of a row under its logits (NeMo-RL's layout).

    Args:
        next_token_logits: ``[B, S, V]`` logits; position t predicts token t+1.
        input_ids: ``[B, S]`` token ids.
        temperature: τ > 0 dividing the logits.
    Returns:
        ``[B, S-1]`` float32; index t = log π(input_ids[t+1] | input_ids[≤t]).
    """
    check_tensor("next_token_logits", next_token_logits, ndim=3, floating=True)
    B, S, _ = next_token_logits.shape
    check_tensor("input_ids", input_ids, shape=(B, S))
    if input_ids.is_floating_point():
        raise ValueError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
    # Off-by-one: logits at t score token t+1, so drop the last position and the first token.
    return token_logprobs(next_token_logits[:, :-1], input_ids[:, 1:], temperature)
