"""The PPO surrogate, piece by piece: probability ratio, clipping, dual clip, CISPO.

    ρ_t = π(y_t) / π_old(y_t),      ℓ_t = max(-A_t·ρ_t, -A_t·clip(ρ_t, 1 - ε_lo, 1 + ε_hi))

PPO https://arxiv.org/abs/1707.06347, DAPO's asymmetric clip ("clip-higher")
https://arxiv.org/abs/2503.14476, dual clip https://arxiv.org/abs/1912.09729, GSPO's sequence
ratio https://arxiv.org/abs/2507.18071, CISPO https://arxiv.org/abs/2506.13585.
See docs/algorithms.md#clipped-policy-gradient-loss.

Each function is one step of ``clipped_pg_loss`` and can be called on its own on hand-made
``[B, T]`` tensors. Implementation choices:
1) ``force_on_policy``: ρ = exp(log π - sg(log π)), value exactly 1 with the gradient of log π,
   and it is *not* clipped (so the surrogate is -A·ρ).
2) ``disable_ppo_ratio`` (REINFORCE/RLOO): ρ and its "clipped" value are log π itself.
3) GSPO: one ratio per row, exp of the token mean of log π - log π_old over ``token_mask``
   (sample_mask plays no part), broadcast over the row's tokens, then clipped like a token ratio.
4) CISPO: -A·sg(clip(ρ))·log π, a REINFORCE term weighted by the detached clipped ratio.
5) Dual clip caps ℓ at -A·C only where A < 0 (also when the ratio is disabled).
"""

from __future__ import annotations

import torch

from rlnb.algorithms.masked import masked_mean


def probability_ratio(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor,
    token_mask: torch.Tensor,
    *,
    ratio_clip_min: float = 0.2,
    ratio_clip_max: float = 0.2,
    disable_ppo_ratio: bool = False,
    sequence_level: bool = False,
    force_on_policy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ratio ρ and its clipped value ``clip(ρ, 1 - ratio_clip_min, 1 + ratio_clip_max)``.

    Args:
        logprobs: ``[B, T]`` log π (carries the gradient).
        prev_logprobs: ``[B, T]`` log π_old (ignored with ``force_on_policy``).
        token_mask: ``[B, T]`` 0/1, only read for the GSPO sequence ratio.
        disable_ppo_ratio, sequence_level, force_on_policy: the variants of choices 1-3.
    Returns:
        ``(ratio [B, T], ratio_clamped [B, T])``.
    """
    if force_on_policy:
        ratio = torch.exp(logprobs - logprobs.detach())
        return ratio, ratio
    if disable_ppo_ratio:
        return logprobs, logprobs
    log_ratio = logprobs - prev_logprobs
    if sequence_level:
        seq_log_ratio = masked_mean(log_ratio, token_mask, dim=-1)  # [B]
        ratio = torch.exp(seq_log_ratio).unsqueeze(-1).expand_as(logprobs)  # [B, T]
    else:
        ratio = torch.exp(log_ratio)
    return ratio, ratio.clamp(1 - ratio_clip_min, 1 + ratio_clip_max)


def clipped_surrogate(
    advantages: torch.Tensor,
    ratio: torch.Tensor,
    ratio_clamped: torch.Tensor,
    logprobs: torch.Tensor,
    *,
    use_cispo: bool = False,
    ratio_clip_c: float | None = None,
) -> torch.Tensor:
    """Per-token loss ℓ (to minimise): PPO's pessimistic max, or CISPO, then the dual clip.

    Args:
        advantages, ratio, ratio_clamped, logprobs: ``[B, T]`` (logprobs is read by CISPO only).
        ratio_clip_c: dual-clip constant C > 1, or None.
    Returns:
        ``[B, T]`` per-token loss, not masked or reduced (see ``reduction.reduce_loss``).
    """
    if use_cispo:
        per_token = -advantages * ratio_clamped.detach() * logprobs
    else:
        per_token = torch.maximum(-advantages * ratio, -advantages * ratio_clamped)
    if ratio_clip_c is not None:
        capped = torch.minimum(per_token, -advantages * ratio_clip_c)
        per_token = torch.where(advantages < 0, capped, per_token)
    return per_token


def positive_example_nll(
    logprobs: torch.Tensor, mask: torch.Tensor, rewards: torch.Tensor
) -> torch.Tensor:
    """VAPO's NLL on the tokens of positive-reward rows, averaged over *this* call's tokens.

        nll = Σ -log π · M·[r > 0] / (Σ M·[r > 0] + 1e-8)           (0 with no positive token)

    VAPO https://arxiv.org/abs/2504.05118. The normalisation is local to the (micro-)batch, not
    over the global counts, as in NeMo-RL. Args: logprobs, mask ``[B, T]``; rewards ``[B]``.
    """
    positive = mask * (rewards > 0).to(mask.dtype).unsqueeze(-1)  # [B, T]
    return masked_mean(-logprobs, positive)
