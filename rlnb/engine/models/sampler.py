"""A lean sampling loop for any Hugging Face causal LM: prefill once, then one token per step on
the model's KV cache, with the sampled token's log-prob taken as it is drawn.

    for t in 0 .. R-1:
        z_t   = model(y_{t-1} | cache).logits[:, -1] / τ         [B, V]   (prefill at t = 0)
        z̃_t   = top-p(top-k(z_t))                                 [B, V]   (-inf outside them)
        y_t   ~ softmax(z̃_t);  logp_t = log softmax(z_t)[y_t]    [B], [B]

It draws the same tokens as ``model.generate(do_sample=True)`` with the same settings and seed:
the same warpers in the same order (temperature, top-k, top-p), one ``torch.multinomial`` per
step over all B rows, finished rows fed the pad token. ``tests/engine/test_sampler.py`` checks that.
What it leaves out is ``generate``'s per-step machinery this use does not need: the logits
processor and stopping-criteria lists, input re-preparation and cloning, and keeping every step's
``[B, V]`` logits (R·B·V floats: 1.2 GB at 128 x 16 tokens of a 152k vocabulary) only to compute
``logp`` afterwards. See docs/algorithms.md#sampling.

Implementation choices:
1) Positions are ``cumsum(mask) - 1`` over the left-padded prompt (0 on pads), then one more per
   step, and the 2-D attention mask grows by a column of ones per step, as ``generate`` does;
   the model builds its own 4-D mask, so any causal LM that ``generate`` can drive works.
2) Settings come only from the config: a checkpoint's own ``generation_config.json``
   (repetition penalty, default top-k, ...) is not merged in, so the sampled distribution is the
   one whose log-probs the trainer computes. ``generate`` would merge them; with the ``generate``
   sampler those defaults are overridden explicitly (``hf_generate_kwargs``).
3) A stop string ends a row at the first step whose decoded response contains it (the rule
   ``Generations`` uses to cut the response); ``generate``'s stop-string criterion also matches a
   string that starts in the prompt. Decoding happens only when stop strings are set.
4) ``interrupt`` (an event) ends every row after the current token: how the async collector
   stops mid-generation.
5) The KV cache goes in and comes out under the name the installed transformers uses:
   ``cache`` from 5.24 on (``past_key_values`` is deprecated there, to be removed in 5.40),
   ``past_key_values`` before, and ``cache_params`` for recurrent models such as xLSTM before
   5.24. The name is read off the model's ``forward`` signature, so no version sees a deprecated
   argument, and a recurrent model is never stepped without its state.
6) Each decode step is one call of ``decode_step``, or of its compiled form that ``compiled.py``
   registers for a policy's model under ``policy.compile`` (``COMPILED_DECODE``); sampling
   around it stays eager.
"""

from __future__ import annotations

import inspect
import threading
import weakref

import torch


def warp_logits(z: torch.Tensor, top_k: int | None, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) truncation of already temperature-scaled logits.

    Args:
        z: ``[B, V]`` float32 logits divided by the temperature.
    Returns:
        ``[B, V]``: ``z`` with ``-inf`` outside the kept set. Top-k keeps tokens at least as
        likely as the k-th; top-p drops the least likely tokens whose cumulative probability
        (ascending) is at most ``1 - top_p``, always keeping the most likely one.
    """
    if top_k:
        kth = torch.topk(z, min(top_k, z.shape[-1])).values[..., -1:]  # [B, 1]
        z = z.masked_fill(z < kth, float("-inf"))
    if top_p < 1.0:
        ascending, order = torch.sort(z, descending=False)
        drop = ascending.softmax(dim=-1).cumsum(dim=-1) <= (1 - top_p)
        drop[..., -1:] = False
        z = z.masked_fill(drop.scatter(1, order, drop), float("-inf"))
    return z


def _repeat_groups(ids: torch.Tensor, mask: torch.Tensor) -> int:
    """k > 1 when the rows are runs of k identical prompts (a GRPO batch: each prompt G times in a
    row), so the prompts can be prefilled once and the cache repeated; 1 otherwise."""
    B = ids.shape[0]
    for k in range(B, 1, -1):
        if B % k == 0:
            rows = ids.view(B // k, k, -1)
            if torch.equal(rows, rows[:, :1].expand_as(rows)) and torch.equal(
                    mask.view(B // k, k, -1), mask.view(B // k, k, -1)[:, :1].expand_as(rows)):
                return k
    return 1


# the names a forward takes and returns its cache under, newest first (choice 5)
CACHE_NAMES = ("cache", "past_key_values", "cache_params")


def cache_keyword(model) -> str:
    """The keyword ``model.forward`` takes its KV cache under (choice 5)."""
    params = inspect.signature(model.forward).parameters
    return next((name for name in CACHE_NAMES if name in params), "past_key_values")


def output_cache(out):
    """The KV cache a forward returned, read without touching a deprecated attribute (choice 5):
    ``out.past_key_values`` on transformers >= 5.24 is a property that logs a deprecation."""
    return next((out[name] for name in CACHE_NAMES if out.get(name) is not None), None)


COMPILED_DECODE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> decode step


def decode_step(model, input_ids, attention_mask, cache_name: str, cache, extra: dict):
    """One decode step on the KV cache: ``(logits [B, V] of the new position, the cache)``.

    Args:
        input_ids: ``[B, 1]`` the tokens just drawn; attention_mask: ``[B, L + t]``.
        cache_name: the keyword the model takes its cache under (choice 5); extra: the
            ``position_ids [B, 1]`` when the model takes them.
    """
    out = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=True,
                **{cache_name: cache}, **extra)
    return out.logits[:, -1], output_cache(out)


@torch.no_grad()
def sample_tokens(
    model,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float = 1.0,
    eos_token_id: int | list[int] | None = None,
    pad_token_id: int = 0,
    stop_check=None,
    interrupt: threading.Event | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample up to ``max_new_tokens`` per row.

    Args:
        prompt_ids, prompt_mask: ``[B, L]`` left-padded prompts (on the model's device).
        stop_check: optional ``f(response_ids [B, t]) -> [B] bool``, rows a stop string ended.
        interrupt: optional event; once set, every row ends after the current step.
    Returns:
        ``(response_ids [B, R], logprobs [B, R] float32)``, R ≤ ``max_new_tokens`` (the loop
        ends when every row has ended): the tokens (pad after a row's end) and
        log softmax(z_t / τ)[y_t] under the untruncated distribution, 0 after a row's end.
    """
    B, L = prompt_ids.shape
    device = prompt_ids.device
    mask = torch.ones(B, L + max_new_tokens, dtype=prompt_mask.dtype, device=device)
    mask[:, :L] = prompt_mask
    positions = (prompt_mask.long().cumsum(-1) - 1).masked_fill(prompt_mask == 0, 0)  # [B, L]
    takes_positions = "position_ids" in inspect.signature(model.forward).parameters
    cache_name = cache_keyword(model)
    k = _repeat_groups(prompt_ids, prompt_mask)  # prefill each distinct prompt once
    extra = {"position_ids": positions[::k]} if takes_positions else {}
    out = model(input_ids=prompt_ids[::k], attention_mask=prompt_mask[::k], use_cache=True,
                **extra)
    cache, logits = output_cache(out), out.logits[:, -1]
    if k > 1 and not hasattr(cache, "batch_repeat_interleave"):  # a model's own cache type
        k, extra = 1, ({"position_ids": positions} if takes_positions else {})
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, use_cache=True, **extra)
        cache, logits = output_cache(out), out.logits[:, -1]
    if k > 1:
        cache.batch_repeat_interleave(k)
        logits = logits.repeat_interleave(k, dim=0)
    # the prompts' [P, L, V] logits: only the last position's are read; without this they stay
    # alive through the whole decode (the KV cache's size again for a large vocabulary)
    del out
    can_drop = hasattr(cache, "batch_select_indices")
    decode = COMPILED_DECODE.get(model, decode_step)  # choice 6
    running = torch.ones(B, dtype=torch.bool, device=device)
    active = torch.arange(B, device=device)  # rows the model still computes, ⊇ running rows
    tokens, logprobs = [], []
    for t in range(max_new_tokens):
        z = torch.zeros(B, logits.shape[-1], device=device)  # finished rows: any distribution
        z[active] = logits.float()
        if temperature != 1.0:
            z = z / temperature
        # one draw over all B rows, as generate makes: the random stream does not depend on
        # which rows are still computed
        probs = warp_logits(z, top_k, top_p).softmax(dim=-1)
        y = torch.multinomial(probs, num_samples=1).squeeze(1)  # [B]
        y = torch.where(running, y, pad_token_id)
        lp = z.gather(1, y[:, None]).squeeze(1) - torch.logsumexp(z, dim=-1)
        tokens.append(y)
        logprobs.append(torch.where(running, lp, 0.0))
        if eos_token_id is not None:  # one id, or EOS and the stop token ids
            running &= ~torch.isin(y, torch.tensor(eos_token_id, device=y.device))
        if stop_check is not None:
            running &= ~stop_check(torch.stack(tokens, dim=1))
        if interrupt is not None and interrupt.is_set():
            running[:] = False
        n_running = int(running.sum())
        if t + 1 == max_new_tokens or n_running == 0:
            break
        keep = running[active]
        if can_drop and len(active) - n_running >= max(1, len(active) // 4):
            cache.batch_select_indices(keep.nonzero().squeeze(1))  # stop computing ended rows
            active, positions = active[keep], positions[keep]
        if takes_positions:
            positions = positions[:, -1:] + 1
            extra["position_ids"] = positions
        logits, cache = decode(
            model, y[active, None], mask[active, : L + t + 1], cache_name, cache, extra)
    return torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1)
