"""``policy.generation.sampler: generate``: sampling through transformers' ``model.generate``.

    response_ids, logprobs = generate_tokens(model, tokenizer, config, prompt_ids, prompt_mask)

The same tokens for a seed as rlnb's own loop (``sampler.py``), which is faster; kept as the
reference path. ``model.generate`` merges a checkpoint's generation_config.json into its
arguments: ``PLAIN_SAMPLING`` neutralises the sampling-relevant defaults it may hold (top-k 50, a
repetition penalty, ...), so only ``policy.generation`` shapes the distribution whose log-probs
the trainer computes. transformers is imported only when this path samples.
"""

from __future__ import annotations

import threading

import torch

from rlnb.algorithms.logprobs import token_logprobs
from rlnb.engine.models.backend import end_ids

PLAIN_SAMPLING = {"repetition_penalty": 1.0, "min_p": None, "typical_p": 1.0,
                  "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "no_repeat_ngram_size": 0,
                  "bad_words_ids": None,
                  "suppress_tokens": None, "begin_suppress_tokens": None,
                  "forced_bos_token_id": None, "forced_eos_token_id": None}


def generate_tokens(model, tok, cfg, prompt_ids, prompt_mask, max_new_tokens=None, *,
                    interrupt: threading.Event | None = None):
    """``(response_ids [B, R], logprobs [B, R])`` sampled by ``model.generate`` from left-padded
    ``prompt_ids [B, L]`` with ``cfg`` (``policy.generation``); every step's logits are kept and
    the log-probs taken afterwards. ``interrupt`` ends every row once set."""
    stopping = None
    if interrupt is not None:
        from transformers import StoppingCriteriaList

        stopping = StoppingCriteriaList([interrupted_criterion(interrupt)])
    out = model.generate(
        input_ids=prompt_ids, attention_mask=prompt_mask,
        do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k or 0,
        max_new_tokens=max_new_tokens or cfg.max_new_tokens,
        pad_token_id=tok.pad_token_id, eos_token_id=end_ids(tok, cfg),
        stop_strings=cfg.stop_strings, tokenizer=tok if cfg.stop_strings else None,
        return_dict_in_generate=True, output_logits=True, stopping_criteria=stopping,
        **PLAIN_SAMPLING,
    )
    response_ids = out.sequences[:, prompt_ids.shape[1]:].cpu()  # [B, R]
    logits = torch.stack(out.logits, dim=1).cpu()  # [B, R, V]
    return response_ids, token_logprobs(logits, response_ids, cfg.temperature)


def interrupted_criterion(event: threading.Event):
    """``generate``'s form of the interrupt: a stopping criterion that ends every row once
    ``event`` is set. (Built here rather than as a module-level subclass: importing this module
    must not import transformers, so that loading a config stays fast.)"""
    from transformers import StoppingCriteria

    class Interrupted(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
            return torch.full((input_ids.shape[0],), event.is_set(), dtype=torch.bool,
                              device=input_ids.device)

    return Interrupted()
