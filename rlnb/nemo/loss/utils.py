"""NeMo-RL's ``nemo_rl.algorithms.loss.utils``: turn a model's logits into a loss's input.

    loss_input, data = prepare_loss_input(logits, data, loss_fn)
    loss, metrics = loss_fn(data=data, global_valid_seqs=n_seq, global_valid_toks=n_tok,
                            **loss_input)

A ``LOGPROB`` loss gets ``next_token_logprobs`` ``[B, S-1]`` (rlnb's ``next_token_logprobs``:
float32 log-softmax, position t scores token t+1), a ``LOGIT`` loss gets ``logits`` as they are.
Deliberate difference: rlnb runs in one process per data-parallel rank, so the vocab/context
parallel groups, the draft mapping ``d2t`` and top-k/top-p training-time filtering
(``sampling_params`` other than a temperature) are refused, naming the argument.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from rlnb.algorithms.logprobs import next_token_logprobs
from rlnb.nemo.loss.interfaces import LossInputType

__all__ = ["prepare_loss_input", "prepare_packed_loss_input"]


def check_single_process(**given: Any) -> None:
    """NeMo-RL's parallelism and draft-model arguments, refused unless None (naming them)."""
    named = [k for k, v in given.items() if v is not None]
    if named:
        raise ValueError(f"{', '.join(named)}: rlnb has no tensor, vocab or context parallelism "
                         "and no draft model; leave them None")


def _temperature(sampling_params: Any) -> float:
    """The temperature of NeMo-RL's ``TrainingSamplingParams`` (or a dict); top-k/top-p refused."""
    if sampling_params is None:
        return 1.0
    get = (sampling_params.get if isinstance(sampling_params, dict)
           else lambda k, d=None: getattr(sampling_params, k, d))
    top_k, top_p = get("top_k"), get("top_p", 1.0)
    if top_k not in (None, -1, 0) or top_p not in (None, 1.0):
        raise ValueError(f"sampling_params top_k={top_k}, top_p={top_p}: rlnb computes training "
                         "log-probs over the full vocabulary (no top-k/top-p filtering)")
    return float(get("temperature", 1.0) or 1.0)


def prepare_loss_input(
    logits: torch.Tensor,
    data: Any,
    loss_fn: Any,
    vocab_parallel_rank: int | None = None,
    vocab_parallel_group: Any = None,
    context_parallel_group: Any = None,
    sampling_params: Any = None,
    d2t: torch.Tensor | None = None,
    chunk_size: int | None = None,
) -> tuple[dict[str, Any], Any]:
    """``({"next_token_logprobs": [B, S-1]} or {"logits": logits}, data)`` for ``loss_fn``.

    ``logits``: ``[B, S', V]`` with S' ≥ S = ``data["input_ids"].shape[1]`` (extra positions
    are padding and dropped). ``chunk_size`` only saves memory in NeMo-RL and is ignored.
    """
    check_single_process(vocab_parallel_rank=vocab_parallel_rank,
                         vocab_parallel_group=vocab_parallel_group,
                         context_parallel_group=context_parallel_group, d2t=d2t)
    kind = getattr(loss_fn, "input_type", None)
    if kind == LossInputType.LOGIT:
        return {"logits": logits}, data
    if kind != LossInputType.LOGPROB:
        raise ValueError(f"prepare_loss_input: {type(loss_fn).__name__}.input_type={kind!r}; "
                         "rlnb's losses take logits or next-token log-probs")
    input_ids = data["input_ids"]
    S = input_ids.shape[1]
    if getattr(loss_fn, "use_fused_linear_logprobs", False):  # already log-probs [B, >=S-1]
        return {"next_token_logprobs": logits.float()[:, : S - 1]}, data
    lp = next_token_logprobs(logits[:, :S], input_ids, temperature=_temperature(sampling_params))
    return {"next_token_logprobs": lp}, data


def prepare_packed_loss_input(
    logits: torch.Tensor,
    data: Any,
    loss_fn: Any,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_q_padded: torch.Tensor,
    vocab_parallel_rank: int | None = None,
    vocab_parallel_group: Any = None,
    context_parallel_group: Any = None,
    sampling_params: Any = None,
    chunk_size: int | None = None,
) -> tuple[dict[str, Any], Any]:
    """``prepare_loss_input`` for packed logits ``[1, T_packed, V]``: sequence i's logits start
    at ``cu_seqlens_q_padded[i]`` and run for its length ``cu_seqlens_q[i+1] - cu_seqlens_q[i]``;
    the result is the unpacked ``next_token_logprobs`` ``[B, S-1]`` (positions past a row's
    length score padding; its token_mask is 0 there)."""
    if getattr(loss_fn, "input_type", None) != LossInputType.LOGPROB:
        raise ValueError("prepare_packed_loss_input takes LOGPROB losses only (NeMo-RL too)")
    cu = [int(x) for x in torch.as_tensor(cu_seqlens_q).tolist()]
    starts = [int(x) for x in torch.as_tensor(cu_seqlens_q_padded).tolist()]
    B, S = data["input_ids"].shape
    if len(cu) != B + 1 or len(starts) != B + 1:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_q_padded need B+1 = {B + 1} entries, got "
                         f"{len(cu)} and {len(starts)}")
    rows = []
    for i in range(B):
        n = min(cu[i + 1] - cu[i], S)
        piece = logits[0, starts[i]: starts[i] + n]  # [n, V]
        rows.append(F.pad(piece, (0, 0, 0, S - n)))
    return prepare_loss_input(torch.stack(rows), data, loss_fn,
                              vocab_parallel_rank=vocab_parallel_rank,
                              vocab_parallel_group=vocab_parallel_group,
                              context_parallel_group=context_parallel_group,
                              sampling_params=sampling_params, chunk_size=chunk_size)
