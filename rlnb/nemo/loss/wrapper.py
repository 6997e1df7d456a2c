"""NeMo-RL's ``nemo_rl.algorithms.loss.wrapper``: a loss over packed sequences, and the call that
prepares a loss's input first.

    wrapped = SequencePackingLossWrapper(loss_fn, prepare_loss_input, cu_seqlens_q, cu_padded)
    loss, metrics = wrapped(packed_logits [1, T, V], data [B, S], n_seq, n_tok)

``SequencePackingLossWrapper`` is rlnb's ``rlnb.algorithms.packing.SequencePackingLossWrapper``
(one sequence per loss call, or one chosen/rejected pair for DPO, the same global counts for every
call, metrics summed with min/max kept) around ``prepare_fn`` + ``loss_fn``.
``SequencePackingFusionLossWrapper`` prepares the whole packed batch at once and calls the loss
once: the same numbers up to summation order. Not here: ``DraftLossWrapper`` (rlnb has no draft
model).
"""

from __future__ import annotations

from typing import Any

import torch

from rlnb.algorithms import packing
from rlnb.nemo.batched_data_dict import BatchedDataDict
from rlnb.nemo.loss.utils import check_single_process

__all__ = ["SequencePackingFusionLossWrapper", "SequencePackingLossWrapper",
           "wrap_loss_fn_with_input_preparation"]


def __getattr__(name: str):
    if name == "DraftLossWrapper":
        raise ImportError("rlnb.nemo has no DraftLossWrapper: rlnb trains no draft model "
                          "(docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def wrap_loss_fn_with_input_preparation(
    next_token_logits: torch.Tensor,
    data: Any,
    global_valid_seqs: Any,
    global_valid_toks: Any,
    loss_fn: Any,
    prepare_fn: Any,
    vocab_parallel_rank: int | None = None,
    vocab_parallel_group: Any = None,
    context_parallel_group: Any = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """``prepare_fn`` (``prepare_loss_input``) on the logits, then ``loss_fn`` on its result."""
    loss_input, data = prepare_fn(logits=next_token_logits, data=data, loss_fn=loss_fn,
                                  vocab_parallel_rank=vocab_parallel_rank,
                                  vocab_parallel_group=vocab_parallel_group,
                                  context_parallel_group=context_parallel_group)
    return loss_fn(data=data, global_valid_seqs=global_valid_seqs,
                   global_valid_toks=global_valid_toks, **loss_input)


class SequencePackingLossWrapper:
    """``loss_fn`` over packed logits ``[1, T, V]``, one sequence (DPO: one pair) per call."""

    def __init__(
        self,
        loss_fn: Any,
        prepare_fn: Any,
        cu_seqlens_q: torch.Tensor,
        cu_seqlens_q_padded: torch.Tensor | None = None,
        vocab_parallel_rank: int | None = None,
        vocab_parallel_group: Any = None,
        context_parallel_group: Any = None,
    ):
        check_single_process(vocab_parallel_rank=vocab_parallel_rank,
                             vocab_parallel_group=vocab_parallel_group,
                             context_parallel_group=context_parallel_group)
        self.loss_fn, self.prepare_fn = loss_fn, prepare_fn
        self.cu_seqlens_q, self.cu_seqlens_q_padded = cu_seqlens_q, cu_seqlens_q_padded

        def prepared(logits, chunk, global_valid_seqs, global_valid_toks):
            return wrap_loss_fn_with_input_preparation(
                logits, BatchedDataDict(chunk), global_valid_seqs, global_valid_toks,
                loss_fn, prepare_fn)

        self._packed = packing.SequencePackingLossWrapper(
            prepared, cu_seqlens_q, cu_seqlens_q_padded,
            rows_per_call=getattr(loss_fn, "rows_per_call", 1))

    def __call__(self, next_token_logits: torch.Tensor, data: Any, global_valid_seqs: Any,
                 global_valid_toks: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        return self._packed(next_token_logits, data, global_valid_seqs, global_valid_toks)


class SequencePackingFusionLossWrapper(SequencePackingLossWrapper):
    """The same loss with the whole packed batch prepared at once (``prepare_fn`` =
    ``prepare_packed_loss_input``) and one loss call."""

    def __call__(self, next_token_logits: torch.Tensor, data: Any, global_valid_seqs: Any,
                 global_valid_toks: Any) -> tuple[torch.Tensor, dict[str, Any]]:
        cu_padded = (self.cu_seqlens_q if self.cu_seqlens_q_padded is None
                     else self.cu_seqlens_q_padded)
        loss_input, data = self.prepare_fn(logits=next_token_logits, data=data,
                                           loss_fn=self.loss_fn, cu_seqlens_q=self.cu_seqlens_q,
                                           cu_seqlens_q_padded=cu_padded)
        return self.loss_fn(data=data, global_valid_seqs=global_valid_seqs,
                            global_valid_toks=global_valid_toks, **loss_input)
