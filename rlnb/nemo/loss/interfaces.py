"""NeMo-RL's ``nemo_rl.algorithms.loss.interfaces``: the loss protocol and its three enums.

``LossType`` says which global count the gradient is divided by (tokens or sequences),
``MetricNormalizer`` which count each returned metric was divided by (a loss advertises it in
``metric_normalizations``), ``LossInputType`` what the loss is called with. The enums are also
``str`` so that ``LossType.TOKEN_LEVEL == "token_level"``, rlnb's own spelling.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

import torch

__all__ = ["LossFunction", "LossInputType", "LossType", "MetricNormalizer"]


class LossType(str, enum.Enum):
    TOKEN_LEVEL = "token_level"  # ÷ global valid tokens
    SEQUENCE_LEVEL = "sequence_level"  # per-row token mean, ÷ global valid sequences


class MetricNormalizer(str, enum.Enum):
    TOKENS = "tokens"  # divided by global_valid_toks
    SEQUENCES = "sequences"  # divided by global_valid_seqs
    NONE = "none"  # a count, a local mean, a min or max


class LossInputType(str, enum.Enum):
    LOGIT = "logit"  # called with logits= (value and reward heads)
    LOGPROB = "logprob"  # called with next_token_logprobs= [B, S-1]
    DISTILLATION = "distillation"
    DISTILLATION_CROSS_TOKENIZER = "distillation_cross_tokenizer"
    DRAFT = "draft"


class LossFunction(Protocol):
    """``loss_fn(data=..., global_valid_seqs=..., global_valid_toks=..., **loss_input)`` ->
    ``(loss, metrics)``; ``loss_input`` is what ``prepare_loss_input`` makes for the loss's
    ``input_type`` (``next_token_logprobs`` or ``logits``)."""

    loss_type: LossType
    input_type: LossInputType

    def __call__(self, data: Any, global_valid_seqs: torch.Tensor,
                 global_valid_toks: torch.Tensor, **kwargs: Any
                 ) -> tuple[torch.Tensor, dict[str, Any]]: ...
