"""The Hugging Face backend: sampling on the policy's own model (or a private copy of it).

    sampler: loop       rlnb's lean KV-cache loop (sampler.py), the default
    sampler: generate   transformers' model.generate; the same tokens for a seed

Implementation choices:
1) The policy's own module samples (``shares_policy_weights``), so a refit has nothing to load;
   the async loop's collector uses ``HFCopyGenerationBackend``, a private copy refit by copying.
2) ``sampler: generate`` goes through ``hf_generate.py`` (``model.generate`` with the
   checkpoint's own sampling defaults neutralised); the async loop's private copy is
   ``copy_backend.py``.
3) Importing this module does not import transformers (loading a config stays fast).
"""

from __future__ import annotations

import torch

from rlnb.engine.models.backend import (
    GenerationBackend,
    Generations,
    end_ids,
    response_mask_and_truncation,
    tokenize_prompts,
)
from rlnb.engine.models.hf_generate import generate_tokens
from rlnb.engine.models.sampler import sample_tokens


class HFGenerationBackend(GenerationBackend):
    """Sampling with ``transformers``' ``generate`` on the policy's own model (shared weights)."""

    shares_policy_weights = True  # samples with the training module itself

    def __init__(self, model, tokenizer, config, max_prompt_length=None):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.max_prompt_length = max_prompt_length
        self.weight_version = 0
        self.interrupt = None  # an Event that ends a generation early (the async collector's)

    @torch.no_grad()
    def generate(self, prompts: list[str]) -> Generations:
        prompt_ids, prompt_mask = tokenize_prompts(
            self.tokenizer, prompts, self.max_prompt_length
        )
        return self.generate_ids(prompt_ids, prompt_mask)

    @torch.no_grad()
    def generate_ids(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
        max_new_tokens: int | None = None,
    ) -> Generations:
        cfg, tok = self.config, self.tokenizer
        device = next(self.model.parameters()).device
        was_training = self.model.training
        self.model.eval()
        try:
            if cfg.sampler == "loop":
                response_ids, logprobs = sample_tokens(
                    self.model, prompt_ids.to(device), prompt_mask.to(device),
                    max_new_tokens=max_new_tokens or cfg.max_new_tokens,
                    temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                    eos_token_id=end_ids(tok, cfg), pad_token_id=tok.pad_token_id,
                    stop_check=self._stopped_rows if cfg.stop_strings else None,
                    interrupt=self.interrupt)
                response_ids, logprobs = response_ids.cpu(), logprobs.cpu()
            else:
                response_ids, logprobs = generate_tokens(
                    self.model, tok, cfg, prompt_ids.to(device), prompt_mask.to(device),
                    max_new_tokens, interrupt=self.interrupt)
        finally:
            self.model.train(was_training)
        stop_lengths = self._stop_lengths(response_ids) if cfg.stop_strings else None
        mask, truncated = response_mask_and_truncation(
            response_ids, end_ids(tok, cfg), tok.pad_token_id, stop_lengths
        )
        response_ids = torch.where(mask.bool(), response_ids, tok.pad_token_id)
        texts = [
            tok.decode([t for t, keep in zip(row, m) if keep], skip_special_tokens=True)
            for row, m in zip(response_ids.tolist(), mask.tolist())  # lists: no per-row tensors
        ]
        return Generations(
            prompt_ids,
            prompt_mask,
            response_ids,
            mask,
            logprobs * mask,
            truncated,
            texts,
            self.weight_version,
        )

    def _stopped_rows(self, response_ids: torch.Tensor) -> torch.Tensor:
        """[B] bool: rows whose decoded response so far contains a stop string."""
        return torch.tensor([
            any(s in self.tokenizer.decode(row, skip_special_tokens=True)
                for s in self.config.stop_strings)
            for row in response_ids.tolist()], device=response_ids.device)

    def _stop_lengths(self, response_ids: torch.Tensor) -> torch.Tensor:
        """Per row, the token count through the first stop string (0 if none)."""
        out = torch.zeros(response_ids.shape[0], dtype=torch.long)
        for b, row in enumerate(response_ids.tolist()):
            for n in range(1, len(row) + 1):
                text = self.tokenizer.decode(row[:n], skip_special_tokens=True)
                if any(s in text for s in self.config.stop_strings):
                    out[b] = n
                    break
        return out
