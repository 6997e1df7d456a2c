"""From logits to the per-token log-probabilities that every loss consumes.

    logprobs[b, t] = log softmax(logits[b, t])[input_ids[b, t+1]]        [B, S-1]

Implementation choices (spec §0):
1) Logits are cast to float32 first: bf16 log-softmax loses about 2 decimal digits, which is
   larger than the policy change of one update step.
2) The last position is dropped (it predicts a token past the row), so the result is one
   shorter than ``input_ids``: index t is the log-prob of token t+1. Losses then slice the
   stored ``[B, S]`` tensors with ``[:, 1:]`` to line up.
3) Computed as ``logit[next] - logsumexp(logits)``, which gives the same numbers as
   ``log_softmax(...).gather(...)`` without materialising a second ``[B, S, V]`` tensor.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_tensor


def next_token_logprobs(next_token_logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each next token under the logits.

    Args:
        next_token_logits: ``[B, S, V]`` logits; position t predicts token t+1.
        input_ids: ``[B, S]`` token ids.
    Returns:
        ``[B, S-1]`` float32; index t = log π(input_ids[t+1] | input_ids[≤t]).
    """
    check_tensor("next_token_logits", next_token_logits, ndim=3, floating=True)
    B, S, _ = next_token_logits.shape
    check_tensor("input_ids", input_ids, shape=(B, S))
    if input_ids.is_floating_point():
        raise ValueError(f"input_ids must be integer token ids, got dtype {input_ids.dtype}")
    logits = next_token_logits[:, :-1].float()  # [B, S-1, V]
    targets = input_ids[:, 1:].long().unsqueeze(-1)  # [B, S-1, 1]
    picked = logits.gather(-1, targets).squeeze(-1)  # [B, S-1]
    return picked - torch.logsumexp(logits, dim=-1)
