"""Per-token quantities of a frozen batch, for token views and heatmaps.

    stats = token_stats(trainer.policy, batch, advantages, kl_type="k3")
    stats["ratio"]          # [B, S] exp(log π_θ - log π_old), 0 off the response

Every tensor is ``[B, S]`` in the stored layout (index t = token t; see ``rlnb/__init__.py``) and
is 0 where ``token_mask`` is 0, so a view can colour prompt tokens neutrally.

Implementation choices:
1) One no-grad forward of the current policy gives both the log-probs (for the ratio and KL)
   and the full-vocabulary entropy H = -Σ_v p_v log p_v (at the policy's sampling
   temperature, like the log-probs the loss sees).
2) ``kl`` is the chosen estimator of KL(π_θ || π_ref) per token against the reference policy
   when the batch has reference log-probs, else against the policy that generated the batch
   (``kl_against`` says which), so the view works with the KL penalty off.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.kl import calculate_kl
from rlnb.algorithms.logprobs import token_entropy, token_logprobs
from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch
from rlnb.engine.models.policy import position_ids_from_mask

QUANTITIES = ("advantage", "ratio", "kl", "entropy", "logprob_gap", "importance_weight")


@torch.no_grad()
def current_logprobs_and_entropy(policy, batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs [B, S], entropy [B, S])`` of the current policy on ``batch``'s tokens."""
    model = policy.model
    was_training = model.training
    model.eval()
    lps, ents = [], []
    n = policy.config.logprob_batch_size
    temperature = policy.config.generation.temperature
    for i in range(0, batch.input_ids.shape[0], n):
        ids = batch.input_ids[i : i + n].to(policy.device)
        mask = batch.attention_mask[i : i + n].to(policy.device)
        logits = model(
            input_ids=ids, attention_mask=mask, position_ids=position_ids_from_mask(mask)
        ).logits[:, :-1]  # [b, S-1, V]
        picked = token_logprobs(logits, ids[:, 1:], temperature)  # [b, S-1]
        entropy = token_entropy(logits, temperature)  # [b, S-1]
        lps.append(torch.nn.functional.pad(picked, (1, 0)).cpu())
        ents.append(torch.nn.functional.pad(entropy, (1, 0)).cpu())
    model.train(was_training)
    return torch.cat(lps), torch.cat(ents)


def token_stats(
    policy,
    batch: RolloutBatch,
    advantages: AdvantageBatch | None = None,
    *,
    kl_type: str = "k3",
) -> dict[str, torch.Tensor | str]:
    """Per-token ``advantage``, ``ratio``, ``kl``, ``entropy``, ``logprob_gap`` and
    ``importance_weight`` (all ``[B, S]``).

    ``logprob_gap`` = log π_prev - log π_gen: the training-vs-generation mismatch (numerics of
    two code paths for the same weights; in the async loop also the weights' age);
    ``importance_weight`` = exp(logprob_gap), the loss's weight before truncation;
    ``ratio`` = exp(log π_θ - log π_prev).
    """
    mask = batch.token_mask
    current, entropy = current_logprobs_and_entropy(policy, batch)
    against = batch.reference_logprobs
    kl_against = "reference"
    if against is None:
        against, kl_against = batch.prev_logprobs, "generating policy"
    stats: dict[str, torch.Tensor | str] = {
        "advantage": (advantages.advantages if advantages is not None
                      else torch.zeros_like(mask)) * mask,
        "ratio": torch.exp(current - batch.prev_logprobs) * mask,
        "kl": calculate_kl(current, against, kl_type) * mask,
        "entropy": entropy * mask,
        "logprob_gap": (batch.prev_logprobs - batch.generation_logprobs) * mask,
        "importance_weight": torch.exp(batch.prev_logprobs - batch.generation_logprobs) * mask,
        "current_logprobs": current * mask,
        "kl_against": kl_against,
    }
    return stats
