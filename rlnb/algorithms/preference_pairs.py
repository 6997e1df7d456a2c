"""Preference pairs from rewards: which of a prompt's G sampled responses to prefer over which.

    candidates(p) = {(i, j) : r[p, i] > r[p, j]}      pairs_p = the k candidates of largest gap

Online and iterative DPO build pairs this way from a reward: sample G responses per prompt, score
them, and pair a higher-reward response (chosen) with a lower-reward one (rejected); with k = 1
this is best against worst (Xiong et al., iterative DPO, https://arxiv.org/abs/2312.11456; the
online-vs-offline comparison of Tajwar et al., https://arxiv.org/abs/2404.14367).
See docs/algorithms.md#the-dpo-loop.

Implementation choices:
1) A pair needs a strict reward difference: a prompt whose G rewards are all equal gives no pair
   (GRPO gives the same group a zero advantage; neither learns from it).
2) Candidates are taken by largest reward gap first; ties (every pair of a 0/1 reward has gap 1)
   are broken uniformly at random by ``generator``, without replacement, so k pairs of one
   prompt are k distinct (i, j).
3) The shape is fixed, ``[P, k]``, whatever the rewards: slots with no candidate left are
   ``valid = False`` (the trainer masks them), so every step and every rank trains on as many
   rows.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.checks import check_tensor


def preference_pairs(rewards: torch.Tensor, pairs_per_prompt: int = 1, *,
                     generator: torch.Generator | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pair each prompt's responses by reward.

    Args:
        rewards: ``[P, G]`` reward of response g of prompt p.
        pairs_per_prompt: k, the pairs made per prompt.
        generator: the random state that breaks ties (torch's global one if None).
    Returns:
        ``(chosen [P, k], rejected [P, k], valid [P, k])``: indices into the G responses of the
        prompt (long) and whether the slot holds a pair (bool; an invalid slot's indices are 0).
    """
    check_tensor("rewards", rewards, ndim=2, floating=True)
    if pairs_per_prompt < 1:
        raise ValueError(f"pairs_per_prompt must be >= 1, got {pairs_per_prompt}")
    P, G = rewards.shape
    r = rewards.double()
    gap = (r[:, :, None] - r[:, None, :]).reshape(P, G * G)  # [P, G*G]: index i*G + j
    noise = torch.rand(P, G * G, generator=generator, dtype=torch.float64)
    order = noise.argsort(dim=1)  # a random order, then stably by gap (choice 2)
    by_gap = gap.gather(1, order).argsort(dim=1, descending=True, stable=True)
    ranked = order.gather(1, by_gap)  # [P, G*G]: candidate ids, largest gap first
    k = min(pairs_per_prompt, G * G)
    top = ranked[:, :k]  # [P, k]
    valid = gap.gather(1, top) > 0  # choice 1: a strict difference
    chosen, rejected = top // G, top % G
    if k < pairs_per_prompt:  # more slots than ordered pairs exist: pad with invalid ones
        pad = torch.zeros(P, pairs_per_prompt - k, dtype=torch.long)
        chosen, rejected = torch.cat([chosen, pad], 1), torch.cat([rejected, pad], 1)
        valid = torch.cat([valid, pad.bool()], 1)
    return chosen * valid, rejected * valid, valid
