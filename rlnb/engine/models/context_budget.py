"""NeMo-RL's response budget (``policy.generation.fill_context``): a response may fill what its
own prompt leaves of ``policy.max_total_sequence_length``.

    room_i = max_total_sequence_length - len(prompt_i)      each row's own budget
    response_i = sample(prompt_i)[: min(room_i, max_new_tokens)]

NeMo-RL's configs set ``max_new_tokens: ${policy.max_total_sequence_length}`` and let vLLM's
``max_model_len`` stop each sequence at the context's end; rlnb's default gives every response
the same ``max_new_tokens`` and prompts the rest. Here the batch samples up to the longest room
and each row is cut to its own afterwards: sampling is row by row, so a row's tokens are those a
per-row limit would have given, and a cut row counts as truncated (it did not stop).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from rlnb.engine.models.backend import Generations, tokenize_prompts


def generate_to_context(generator, prompts: list[str], tokenizer, max_prompt_length: int,
                        max_total_length: int, max_new_tokens: int) -> Generations:
    """NeMo-RL's budget (``fill_context``): a response may fill what its own prompt leaves of
    ``max_total_length``, as vLLM's ``max_model_len`` caps each sequence in NeMo-RL. The batch
    samples up to the longest room (at most ``max_new_tokens``); each row is then cut to its
    own (``capped_to_context``)."""
    ids, mask = tokenize_prompts(tokenizer, prompts, max_prompt_length)
    room = max_total_length - mask.sum(dim=1)  # [B]: >= 1 (prompts are checked)
    budget = min(max_new_tokens, int(room.max()))
    try:
        gens = generator.generate_ids(ids, mask, max_new_tokens=budget)
    except NotImplementedError as err:
        raise ValueError(f"policy.generation.fill_context=true samples from token ids: {err}"
                         ) from None
    return capped_to_context(gens, room.clamp(max=max_new_tokens), tokenizer)


def capped_to_context(gens: Generations, room: torch.Tensor, tokenizer) -> Generations:
    """``gens`` with row i's response cut to ``room[i]`` tokens (``[B]``); a cut row counts as
    truncated (it did not stop) and its text is decoded again."""
    length = gens.response_mask.sum(dim=1)  # [B]
    cut = length > room
    if not bool(cut.any()):
        return gens
    positions = torch.arange(gens.response_mask.shape[1])[None, :]  # [1, R]
    mask = gens.response_mask * (positions < room[:, None])
    ids = torch.where(mask.bool(), gens.response_ids, tokenizer.pad_token_id)
    texts = [tokenizer.decode(row[m.bool()].tolist(), skip_special_tokens=True) if c else t
             for row, m, c, t in zip(ids, mask, cut.tolist(), gens.texts)]
    return replace(gens, response_ids=ids, response_mask=mask,
                   generation_logprobs=gens.generation_logprobs * mask,
                   truncated=gens.truncated | cut, texts=texts)
