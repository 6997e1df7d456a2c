"""Shared prompt prefixes: a batch's rows that start with the same prompt run it through the model
once, and only their own continuations separately.

    logprobs[b, t] = log π_θ(x_t | x_<t)                                          [B, S]
        prefix  (t < c):  from model(prefix_p),              p = the distinct prefix of row b
        rest    (t ≥ c):  from model(x_b[c:] | KV cache of prefix_p)

Causal attention makes this exact: a position before column ``c`` sees only columns before ``c``,
so rows whose first ``c`` tokens (and attention mask) are equal have equal hidden states there,
and the rest of each row attends to the same keys and values it would in one pass. Gradients
flow through the cache back into the shared prefix, summed over the rows that read it, which is
what the full pass's backward sums too. The numbers equal the full pass's to float rounding
(summation order), not bit for bit.

A GRPO batch repeats every prompt G times, so with the update's default split (the first column
any row is scored on) a micro-batch of 128 rows over 16 prompts forwards 16 prompts and 128
responses instead of 128 prompt-plus-response rows: at the embedded recipe's shapes (prompts of
7 columns, responses of 5) about half the tokens. The sampler prefills each distinct prompt once
for the same reason (``sampler.py``). See docs/guide.md#shared-prompt-prefixes.

Implementation choices:
1) Any split ``c`` with ``1 ≤ c < S`` gives the same numbers; the caller picks the one that
   shares most (``first_scored_column``). Rows are grouped by equal ``input_ids[:, :c]`` and
   ``attention_mask[:, :c]`` with ``torch.unique``, so row order does not matter (the recipe
   shuffles rows across optimizer steps).
2) The cache is the model's own (returned by a forward with ``use_cache=True``), spread to the
   rows with its ``batch_select_indices`` (an index, so autograd carries the gradient back). A
   model whose cache lacks it, a split that saves under 10 % of the token positions, or a model
   with active dropout (one mask per shared prefix would differ from one per row) takes the
   plain full pass (``None`` here).
3) ``SharedPrefix.check`` compares both paths once per model on the first batch, without
   gradient, in eval mode; if they differ by more than float rounding (a model whose attention
   ignores the cache's padding, for instance) the policy keeps the plain pass for that model.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.logprobs import token_logprobs
from rlnb.engine.models.sampler import cache_keyword, output_cache

FUNCTIONAL_DROPOUT = ("attention_dropout", "attention_probs_dropout_prob")
MIN_SAVING = 0.1  # below this fraction of token positions saved, the plain pass is as fast


def first_scored_column(token_mask: torch.Tensor) -> int:
    """The first column any row of ``token_mask [B, S]`` scores (0 when none does)."""
    cols = token_mask.any(dim=0).nonzero()
    return int(cols[0]) if len(cols) else 0


def has_dropout(model: torch.nn.Module) -> bool:
    """Whether a training-mode forward of ``model`` drops anything: a dropout module with p > 0,
    or a rate attention applies as a function (Llama's and Qwen's ``attention_dropout``)."""
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0
           for m in model.modules()):
        return True
    config = getattr(model, "config", None)
    return any(float(getattr(config, k, 0) or 0) > 0 for k in FUNCTIONAL_DROPOUT)


def shared_prefix_logprobs(
    model, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
    split: int, temperature: float = 1.0,
) -> torch.Tensor | None:
    """Per-token log-probs ``[B, S]`` (index 0 = 0, float32) with each distinct prefix of ``split``
    columns run once, or ``None`` where the plain full pass should run instead (choice 2).

    Args:
        input_ids, attention_mask, position_ids: ``[B, S]`` rows as the full pass takes them.
        split: the prefix's width c, ``1 ≤ c < S`` (else ``None``).
        temperature: the sampling temperature the logits are divided by.
    """
    B, S = input_ids.shape
    if not 1 <= split < S:
        return None
    c = split
    key = torch.cat([input_ids[:, :c], attention_mask[:, :c].to(input_ids.dtype)], dim=1)
    distinct, inverse = torch.unique(key, dim=0, return_inverse=True)  # [P, 2c], [B]
    P = distinct.shape[0]
    if P * c + B * (S - c) > (1 - MIN_SAVING) * B * S:
        return None
    rows = torch.arange(B, device=input_ids.device)
    first = torch.full((P,), B, dtype=torch.long, device=input_ids.device).scatter_reduce(
        0, inverse, rows, "amin")  # [P]: a row holding each distinct prefix
    name = cache_keyword(model)
    head = model(input_ids=input_ids[first, :c], attention_mask=attention_mask[first, :c],
                 position_ids=position_ids[first, :c], use_cache=True)
    cache = output_cache(head)
    if cache is None or not hasattr(cache, "batch_select_indices"):
        return None
    spread(cache, inverse)  # [P, ...] -> [B, ...], differentiable
    tail = model(input_ids=input_ids[:, c:], attention_mask=attention_mask,
                 position_ids=position_ids[:, c:], use_cache=False, **{name: cache}).logits
    inside = token_logprobs(head.logits[:, :-1], input_ids[first, 1:c], temperature)  # [P, c-1]
    joined = torch.cat([head.logits[:, -1:].index_select(0, inverse), tail[:, :-1]],
                       dim=1)  # [B, S-c, V]
    rest = token_logprobs(joined, input_ids[:, c:], temperature)  # [B, S-c]: tokens c..S-1
    return torch.nn.functional.pad(torch.cat([inside.index_select(0, inverse), rest], dim=1),
                                   (1, 0))


def spread(cache, inverse: torch.Tensor) -> None:
    """Row ``b`` of the cache becomes the prefix's row ``inverse[b]``, ``[P, ...] -> [B, ...]``.
    The layers' key and value tensors are taken with ``index_select``, whose backward sums into
    the prefix rows with one ``index_add`` (a plain index's backward, an accumulating
    ``index_put``, takes three times as long on a CPU); a cache of another layout uses its own
    ``batch_select_indices``."""
    layers = getattr(cache, "layers", None)
    if not layers or not all(isinstance(getattr(layer, "keys", None), torch.Tensor) and
                             isinstance(getattr(layer, "values", None), torch.Tensor)
                             for layer in layers):
        cache.batch_select_indices(inverse)
        return
    for layer in layers:
        layer.keys = layer.keys.index_select(0, inverse)
        layer.values = layer.values.index_select(0, inverse)


class SharedPrefix:
    """Whether a model may take the shared-prefix pass: decided once per model by
    ``check`` (choice 3); ``reason`` says why not when it may not."""

    TOLERANCE = {torch.float32: 1e-3}  # other dtypes (bfloat16): 5e-2

    def __init__(self, enabled: bool, model):
        self.enabled = enabled and not has_dropout(model)
        self.reason = None if self.enabled or not enabled else "the model has active dropout"
        self.checked = False

    def turn_off(self, reason: str) -> None:
        """Keep the plain pass, saying why (if the option was on)."""
        if self.enabled:
            self.enabled, self.reason = False, reason

    @torch.no_grad()
    def check(self, model, plain, shared, attention_mask: torch.Tensor) -> bool:
        """Run ``plain()`` and ``shared()`` (both ``[B, S]`` log-probs) with the model in eval
        mode; keep the shared pass only if they agree to float rounding on the tokens of
        ``attention_mask [B, S]`` read at an attended position (a token and the one before it
        attended)."""
        was_training = model.training
        model.eval()
        try:
            a, b = plain(), shared()
        finally:
            model.train(was_training)
        if b is None:
            return True  # nothing to share on this batch: decide on a later one
        self.checked = True
        dtype = next(model.parameters()).dtype
        attended = attention_mask.bool().to(a.device)
        # a token's log-prob is read at the position before it: where that one is padding (a
        # left-padded row's first token) the query attends to nothing, and what the model
        # makes of it (SDPA and eager attention differ) is no log-prob anything uses
        attended[:, 1:] &= attended[:, :-1].clone()
        attended[:, 0] = False
        diff = float((a - b)[attended].abs().max()) if attended.any() else 0.0
        if not diff <= self.TOLERANCE.get(dtype, 5e-2):
            self.enabled = False
            self.reason = (f"its shared-prefix log-probs differ from the full pass's by "
                           f"{diff:.3g}")
        return self.enabled
