"""NeMo-RL's loss classes (``nemo_rl.algorithms.loss.loss_functions``), each a subclass of rlnb's
loss of the same meaning, called the way NeMo-RL calls them.

    loss_fn = ClippedPGLossFn(ClippedPGLossConfig(ratio_clip_max=0.28))
    loss, metrics = loss_fn(next_token_logprobs, data, global_valid_seqs, global_valid_toks)
    loss, metrics = loss_fn(data=data, global_valid_seqs=n_seq, global_valid_toks=n_tok,
                            **prepare_loss_input(logits, data, loss_fn)[0])   # NeMo-RL's workers
    loss, metrics = loss_fn(next_token_logits, data, n_seq, n_tok)   # the older logits form

Implementation choices:
1) The log-prob losses (``ClippedPGLossFn``, ``NLLLossFn``, ``DPOLossFn``) take NeMo-RL's
   current first argument, ``next_token_logprobs`` ``[B, S-1]``, and also the older
   ``next_token_logits`` ``[B, S, V]`` (by keyword, or positionally: a 3-D first argument is
   logits). Either way the numbers come from rlnb's one implementation (``from_logprobs``).
2) ``loss_type`` and ``input_type`` are NeMo-RL's enums; ``metric_normalizations`` is built
   from the config as NeMo-RL builds it (rlnb's extra metric ``clip_fraction`` is per token).
3) The configs are rlnb's strict ones (``ClippedPGLossConfig``, ``DPOLossConfig``,
   ``MseValueLossConfig`` = ``ValueLossConfig``): an unknown key or a contradictory
   combination fails when the config is built (NeMo-RL: extra keys pass, some combinations
   fail at the first call). ``use_fused_linear_logprobs`` is stored for
   ``prepare_loss_input`` (the log-probs then come precomputed).
4) Not here: the distillation losses (``DistillationLossFn``, ``CrossTokenizerDistillationLossFn``)
   and the draft-model loss (``DraftCrossEntropyLossFn``): rlnb trains no teacher or draft
   model. Importing them raises ``ImportError`` saying so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import torch

from rlnb.algorithms import policy_loss, preference, value_loss
from rlnb.algorithms.policy_loss import ClippedPGLossConfig
from rlnb.algorithms.preference import DPOLossConfig
from rlnb.algorithms.value_loss import ValueLossConfig as MseValueLossConfig
from rlnb.nemo.loss.interfaces import LossInputType, LossType, MetricNormalizer

__all__ = ["ClippedPGLossConfig", "ClippedPGLossDataDict", "ClippedPGLossFn", "DPOLossConfig",
           "DPOLossDataDict", "DPOLossFn", "MseValueLossConfig", "MseValueLossFn", "NLLLossFn",
           "PreferenceLossDataDict", "PreferenceLossFn"]

ABSENT = {
    name: "rlnb trains no teacher or draft model, so it has no distillation or draft loss"
    for name in ("DistillationLossConfig", "DistillationLossDataDict", "DistillationLossFn",
                 "CrossTokenizerDistillationLossConfig",
                 "CrossTokenizerDistillationLossDataDict", "CrossTokenizerDistillationLossFn",
                 "DraftCrossEntropyLossConfig", "DraftCrossEntropyLossDataDict",
                 "DraftCrossEntropyLossFn")
}


def __getattr__(name: str):
    if name in ABSENT:
        raise ImportError(f"rlnb.nemo has no {name}: {ABSENT[name]} (docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ClippedPGLossDataDict(TypedDict, total=False):
    """``data`` of ``ClippedPGLossFn``: stored ``[B, S]`` tensors (index t = token t)."""

    input_ids: torch.Tensor  # needed only with logits
    advantages: torch.Tensor
    prev_logprobs: torch.Tensor
    generation_logprobs: torch.Tensor
    reference_policy_logprobs: torch.Tensor
    token_mask: torch.Tensor
    sample_mask: torch.Tensor  # [B]


class PreferenceLossDataDict(TypedDict, total=False):
    """``data`` of ``PreferenceLossFn`` (rows interleaved chosen, rejected)."""

    input_ids: torch.Tensor
    token_mask: torch.Tensor
    sample_mask: torch.Tensor


class DPOLossDataDict(PreferenceLossDataDict, total=False):
    """``data`` of ``DPOLossFn``: ``reference_policy_logprobs`` stored rolled left by one."""

    reference_policy_logprobs: torch.Tensor


def logprob_input(owner: str, logprobs: Any, logits: Any) -> tuple[str, torch.Tensor]:
    """``("logprobs", [B, S-1])`` or ``("logits", [B, S, V])`` from a loss call (choice 1)."""
    if logprobs is not None and logits is not None:
        raise TypeError(f"{owner}: give next_token_logprobs or next_token_logits, not both")
    if logits is not None:
        return "logits", logits
    if logprobs is None:
        raise TypeError(f"{owner}: missing next_token_logprobs ([B, S-1]; or next_token_logits "
                        "[B, S, V])")
    if isinstance(logprobs, torch.Tensor) and logprobs.ndim == 3:
        return "logits", logprobs  # the older positional form: logits first
    return "logprobs", logprobs


def clipped_pg_metric_normalizations(cfg: ClippedPGLossConfig) -> dict[str, MetricNormalizer]:
    """What each ``ClippedPGLossFn`` metric was divided by (NeMo-RL's table, choice 2)."""
    gradient = MetricNormalizer.TOKENS if cfg.token_level_loss else MetricNormalizer.SEQUENCES
    tokens, none = MetricNormalizer.TOKENS, MetricNormalizer.NONE
    norms = {"loss": gradient, "kl_penalty": gradient}
    for key in ("probs_ratio", "probs_ratio_clamped", "token_mult_prob_error", "gen_kl_error",
                "policy_kl_error", "js_divergence_error", "approx_entropy", "clip_fraction"):
        norms[key] = tokens
    norms["sampling_importance_ratio"] = (MetricNormalizer.SEQUENCES
                                         if cfg.sequence_level_importance_ratios else tokens)
    for key in ("num_valid_samples", "positive_nll_loss", "probs_ratio_min", "probs_ratio_max",
                "probs_ratio_clamped_min", "probs_ratio_clamped_max"):
        norms[key] = none
    if cfg.truncated_importance_sampling_type is not None:
        norms["is_oob_ratio"] = (MetricNormalizer.SEQUENCES
                                 if cfg.truncated_importance_sampling_type == "seq-mask-tis"
                                 else tokens)
    return norms


class ClippedPGLossFn(policy_loss.ClippedPGLossFn):
    """GRPO/PPO/DAPO/GSPO/CISPO/REINFORCE loss (``rlnb.algorithms.policy_loss``)."""

    input_type = LossInputType.LOGPROB

    def __init__(self, cfg: ClippedPGLossConfig | Mapping[str, Any] | None = None,
                 use_fused_linear_logprobs: bool = False):
        super().__init__(cfg)
        self.use_fused_linear_logprobs = use_fused_linear_logprobs
        self.metric_normalizations = clipped_pg_metric_normalizations(self.config)

    @property
    def loss_type(self) -> LossType:
        return LossType.TOKEN_LEVEL if self.config.token_level_loss else LossType.SEQUENCE_LEVEL

    @property
    def reference_policy_kl_penalty(self) -> float:
        """β as the loss uses it (0 under ``use_kl_in_reward``)."""
        return self.config.loss_kl_penalty

    def __call__(self, next_token_logprobs=None, data=None, global_valid_seqs=None,
                 global_valid_toks=None, *, next_token_logits=None):
        kind, x = logprob_input("ClippedPGLossFn", next_token_logprobs, next_token_logits)
        if kind == "logits":
            return super().__call__(x, data, global_valid_seqs, global_valid_toks)
        return self.from_logprobs(x, data, global_valid_seqs, global_valid_toks)


class NLLLossFn(preference.NLLLoss):
    """SFT negative log-likelihood (``rlnb.algorithms.preference.nll_loss``)."""

    loss_type = LossType.TOKEN_LEVEL
    input_type = LossInputType.LOGPROB

    def __init__(self, use_fused_linear_logprobs: bool = False):
        self.use_fused_linear_logprobs = use_fused_linear_logprobs
        self.metric_normalizations = {"loss": MetricNormalizer.TOKENS,
                                      "num_unmasked_tokens": MetricNormalizer.NONE,
                                      "num_valid_samples": MetricNormalizer.NONE}

    def __call__(self, next_token_logprobs=None, data=None, global_valid_seqs=None,
                 global_valid_toks=None, dpo_loss: bool = False,
                 dpo_average_log_probs: bool = False, *, next_token_logits=None):
        kind, x = logprob_input("NLLLossFn", next_token_logprobs, next_token_logits)
        call = super().__call__ if kind == "logits" else self.from_logprobs
        return call(x, data, global_valid_seqs, global_valid_toks, dpo_loss=dpo_loss,
                    dpo_average_log_probs=dpo_average_log_probs)


class PreferenceLossFn(preference.PreferenceLoss):
    """Bradley-Terry reward-model loss on ``logits`` ``[2P, 1]`` (one score per row)."""

    loss_type = LossType.SEQUENCE_LEVEL
    input_type = LossInputType.LOGIT

    def split_output_tensor(self, tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chosen rows, rejected rows)`` of an interleaved ``[2P, ...]`` tensor."""
        return tensor[::2], tensor[1::2]

    def __call__(self, logits=None, data=None, global_valid_seqs=None, global_valid_toks=None):
        if logits is None:
            raise TypeError("PreferenceLossFn: missing logits ([2P, 1] scores)")
        return super().__call__(logits, data, global_valid_seqs, global_valid_toks)


class DPOLossFn(preference.DPOLossFn):
    """DPO (+ optional SFT term) on interleaved chosen/rejected rows."""

    loss_type = LossType.SEQUENCE_LEVEL
    input_type = LossInputType.LOGPROB

    def __init__(self, cfg: DPOLossConfig | Mapping[str, Any] | None = None,
                 use_fused_linear_logprobs: bool = False):
        super().__init__(cfg)
        self.use_fused_linear_logprobs = use_fused_linear_logprobs

    def split_output_tensor(self, tensor: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(chosen rows, rejected rows)`` of an interleaved ``[2P, ...]`` tensor."""
        return tensor[::2], tensor[1::2]

    def __call__(self, next_token_logprobs=None, data=None, global_valid_seqs=None,
                 global_valid_toks=None, *, next_token_logits=None):
        kind, x = logprob_input("DPOLossFn", next_token_logprobs, next_token_logits)
        call = super().__call__ if kind == "logits" else self.from_logprobs
        return call(x, data, global_valid_seqs, global_valid_toks)


class MseValueLossFn(value_loss.MseValueLossFn):
    """PPO critic loss on the value head's output ``logits`` ``[B, S]`` or ``[B, S, 1]``."""

    loss_type = LossType.TOKEN_LEVEL
    input_type = LossInputType.LOGIT

    def __call__(self, logits=None, data=None, global_valid_seqs=None, global_valid_toks=None):
        if logits is None:
            raise TypeError("MseValueLossFn: missing logits (the value head's [B, S] output)")
        return super().__call__(logits, data, global_valid_seqs, global_valid_toks)
