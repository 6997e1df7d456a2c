"""Critic (value-model) loss for PPO: clipped squared error against the GAE returns.

    L_V = ½·scale·Σ_t max((V - R)², (clip(V, V_old - c, V_old + c) - R)²)·M / N_tok

Papers: PPO https://arxiv.org/abs/1707.06347 (value clipping as in the OpenAI baselines PPO2
implementation; analysed in "Implementation Matters in Deep RL", https://arxiv.org/abs/2005.12729).

See docs/algorithms.md#value-loss. Layout: ``values``, ``returns``, ``old_values``,
``token_mask`` are all ``[B, S]`` with index t = quantity for token t; the critic output was
already shifted right by one (V_t = value of the state before token t), so nothing here is
shifted or sliced.

Implementation choices:
1) The mask M = token_mask·sample_mask is **not** sliced ``[:, 1:]``, while the global count N_tok
   that callers pass counts ``token_mask[:, 1:]``. The two agree because index 0 is
   always a prompt token; a mask with index 0 set would be counted in the numerator only.
2) Clipping is on when ``cliprange`` is truthy and > 0 (None or 0 disables it); ``vf_clipfrac``
   counts tokens where the clipped branch is strictly larger (the branch ``max`` picks).
3) Metrics are Σ·M / N_tok like the loss, so micro-batch sums give the global value;
   ``values_min``/``values_max`` are over valid tokens and 0.0 when there is none (NeMo-RL's
   choice; note the 0.0 then takes part in the driver's min/max).
4) NeMo-RL quirk reproduced: ``num_valid_samples`` is the row count B, not Σ sample_mask.
5) A trailing singleton dim (``[B, S, 1]`` straight from a value head) is squeezed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field

from rlnb.algorithms.checks import check_mask, check_tensor
from rlnb.algorithms.masked import masked_mean
from rlnb.config import Config, parse_config


def _squeeze_last(name: str, x: torch.Tensor) -> torch.Tensor:
    check_tensor(name, x, ndim=(2, 3), floating=True)
    if x.ndim == 3:
        if x.shape[-1] != 1:
            raise ValueError(f"{name} must be [B, S] or [B, S, 1], got {tuple(x.shape)}")
        x = x.squeeze(-1)  # [B, S]
    return x


def clipped_value_loss(
    values: torch.Tensor,
    returns: torch.Tensor,
    old_values: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    global_valid_toks,
    scale: float = 1.0,
    cliprange: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped (or plain) ½·MSE of the critic, normalised by the global token count.

    Args:
        values: ``[B, S]`` (or ``[B, S, 1]``) current critic predictions, differentiable.
        returns: ``[B, S]`` regression targets (GAE returns).
        old_values: ``[B, S]`` critic predictions stored at rollout time (clipping centre).
        token_mask: ``[B, S]`` 0/1; sample_mask: ``[B]`` 0/1.
        global_valid_toks: N_tok of the whole global batch.
        scale: loss multiplier. cliprange: c, or None/0 for no clipping.
    Returns: ``(loss, metrics)``; metrics ``loss, vf_clipfrac, returns_mean, values_mean,
    returns_sq_mean, residual_sq_mean, values_min, values_max, num_valid_samples``.
    """
    values = _squeeze_last("values", values)
    B, S = values.shape
    returns = _squeeze_last("returns", returns)
    old_values = _squeeze_last("old_values", old_values)
    check_tensor("returns", returns, shape=(B, S))
    check_tensor("old_values", old_values, shape=(B, S))
    tm = check_mask("token_mask", token_mask, shape=(B, S))
    sm = check_mask("sample_mask", sample_mask, shape=(B,))
    mask = tm * sm.unsqueeze(-1)  # [B, S], not sliced (choice 1)

    def mean(x: torch.Tensor) -> torch.Tensor:
        return masked_mean(x, mask, global_normalization_factor=global_valid_toks)

    sq_err = (values - returns) ** 2  # [B, S]
    if cliprange and cliprange > 0:
        clipped = torch.clamp(values, old_values - cliprange, old_values + cliprange)
        sq_err_clipped = (clipped - returns) ** 2  # [B, S]
        per_token = torch.maximum(sq_err, sq_err_clipped)
        clipfrac = mean((sq_err_clipped > sq_err).float()).item()
    else:
        per_token = sq_err
        clipfrac = 0.0
    loss = 0.5 * scale * mean(per_token)

    with torch.no_grad():
        v, r = values.detach(), returns.detach()
        valid = v[mask > 0]
        return loss, {
            "loss": loss.item(),
            "vf_clipfrac": clipfrac,
            "returns_mean": mean(r).item(),
            "values_mean": mean(v).item(),
            "returns_sq_mean": mean(r**2).item(),
            "residual_sq_mean": mean((r - v) ** 2).item(),
            "values_min": valid.min().item() if valid.numel() else 0.0,
            "values_max": valid.max().item() if valid.numel() else 0.0,
            "num_valid_samples": float(B),  # choice 4
        }


def explained_variance(metrics: Mapping[str, Any], *, prefix: str = "") -> float:
    """Fraction of the return variance the critic explains, from aggregated value-loss metrics.

        EV = 1 - (E[(R-V)²] - (E[R] - E[V])²) / max(E[R²] - E[R]², 1e-8)

    i.e. 1 - Var(R - V) / Var(R) over valid tokens. Args: ``metrics`` holding ``returns_mean``,
    ``values_mean``, ``returns_sq_mean``, ``residual_sq_mean`` (each already summed over
    micro-batches), optionally under ``prefix`` (e.g. ``"critic/"``). Returns: a float (1 is
    perfect, 0 is no better than predicting the mean return, negative is worse).
    """
    got = {}
    for key in ("returns_mean", "values_mean", "returns_sq_mean", "residual_sq_mean"):
        if prefix + key not in metrics:
            raise ValueError(f"metrics is missing key {prefix + key!r} (has {sorted(metrics)})")
        got[key] = float(metrics[prefix + key])
    mean_r, mean_v = got["returns_mean"], got["values_mean"]
    var_residual = got["residual_sq_mean"] - (mean_r - mean_v) ** 2
    var_returns = max(got["returns_sq_mean"] - mean_r**2, 1e-8)
    return 1.0 - var_residual / var_returns


def returns_vary(metrics: Mapping[str, Any], *, prefix: str = "", rtol: float = 1e-5) -> bool:
    """Whether the returns of a batch vary, so that its explained variance means something.

    False when Var(R) = E[R²] - E[R]² is zero up to float32 rounding (``<= rtol·E[R²]``, with
    the same aggregated metrics as ``explained_variance``): EV's denominator is then its 1e-8
    floor, and EV reads exactly 1 when the values do not vary either (1 - 0/1e-8, e.g. a batch
    of all-wrong answers and a critic still at 0) and far below 0 when they do. Neither says
    anything about the critic; the dashboard leaves such a step out of the EV panel.
    """
    mean_r, mean_sq = float(metrics[prefix + "returns_mean"]), float(
        metrics[prefix + "returns_sq_mean"])
    return mean_sq - mean_r**2 > rtol * mean_sq


class ValueLossConfig(Config):
    """NeMo-RL's ``value_loss_fn`` section."""

    scale: float = Field(1.0, description="Multiplier of the value loss (PPO paper's c1 ≈ 0.5-1).")
    cliprange: float | None = Field(
        None,
        ge=0,
        description="Clip V to V_old ± cliprange before the squared error (None/0: no clipping; "
        "PPO2 used 0.2).",
    )


class MseValueLossFn:
    """Value loss with NeMo-RL's call shape.

    ``data``: returns ``[B, S]``, values ``[B, S]`` (old, from rollout), token_mask ``[B, S]``,
    sample_mask ``[B]``.
    """

    loss_type = "token_level"  # divides by N_tok

    def __init__(self, cfg: ValueLossConfig | Mapping[str, Any] | None = None):
        self.cfg = parse_config(ValueLossConfig, cfg, "value_loss_fn")

    def __call__(
        self,
        values: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs=None,
        global_valid_toks=None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``values``: ``[B, S]`` or ``[B, S, 1]`` current critic output (already right-shifted)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"data must be a mapping of tensors, got {type(data).__name__}")
        for key in ("returns", "values", "token_mask", "sample_mask"):
            if key not in data:
                raise ValueError(
                    f"MseValueLossFn: data is missing key {key!r} (has {sorted(data)})"
                )
        if global_valid_toks is None:
            raise ValueError("global_valid_toks is required by MseValueLossFn (÷ N_tok)")
        return clipped_value_loss(
            values,
            data["returns"],
            data["values"],
            data["token_mask"],
            data["sample_mask"],
            global_valid_toks=global_valid_toks,
            scale=self.cfg.scale,
            cliprange=self.cfg.cliprange,
        )
