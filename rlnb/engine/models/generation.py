"""Generation backends: sample responses and report their log-probs and truncation.

    responses, log π_gen(y_t | x, y_<t), truncated  ←  backend.generate(prompts)

The Hugging Face backend (default) samples on the policy's own model, with rlnb's lean loop
(``sampler.py``; ``policy.generation.sampler: loop``) or ``model.generate`` (``generate``): the
same tokens for a seed. A vLLM backend plugs in beside it through the same two methods:
``generate`` and ``refresh_weights`` (called by the trainer after every update, so a separate
inference engine can load the new weights; a no-op when the backend shares the policy's model).

Implementation choices:
1) Prompts are left-padded, responses right-padded, so generation appends on the right and a
   training row is ``prompt + response`` with pads on both ends (positions are recomputed from
   the attention mask, as generation does).
2) Generation log-probs are log-softmax(logits / temperature) at the sampled token: the
   log-prob under the distribution the token was drawn from (before top-k/top-p truncation;
   the trainer computes its log-probs the same way, so the two agree up to kernel noise).
3) A response ends at EOS (kept, so the model learns to stop) or right after a stop string;
   one that hits ``max_new_tokens`` without either is ``truncated`` (overlong filtering, DAPO
   shaping). Tokens after the end are padding and get mask 0.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from pydantic import Field, model_validator

from rlnb.algorithms.checks import choose
from rlnb.algorithms.logprobs import token_logprobs
from rlnb.config import Config
from rlnb.engine.models.sampler import sample_tokens
from rlnb.engine.models.vllm_backend import VLLMConfig, VLLMGenerationBackend  # imports no vllm

# generate() merges a checkpoint's generation_config.json into its arguments: these neutralise
# the sampling-relevant defaults it may hold, so only policy.generation shapes the distribution
PLAIN_SAMPLING = {"repetition_penalty": 1.0, "min_p": None, "typical_p": 1.0,
                  "epsilon_cutoff": 0.0, "eta_cutoff": 0.0, "no_repeat_ngram_size": 0,
                  "bad_words_ids": None,
                  "suppress_tokens": None, "begin_suppress_tokens": None,
                  "forced_bos_token_id": None, "forced_eos_token_id": None}


class GenerationConfig(Config):
    """``policy.generation``: how responses are sampled."""

    backend: str = Field("hf", description="hf (the policy's own model) | vllm (docs/vllm.md).")
    sampler: str = Field(
        "loop", description="backend=hf: loop (rlnb's lean KV-cache loop, sampler.py) | generate "
        "(transformers' model.generate); the same tokens for a seed, loop is faster.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature; 1.0 = on-policy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling; 1.0 disables.")
    top_k: int | None = Field(None, ge=1, description="Top-k sampling; None disables.")
    max_new_tokens: int = Field(8, ge=1, description="Response budget; longer = truncated.")
    stop_strings: list[str] | None = Field(None, description="Also end a response at these.")
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="backend=vllm's engine.")

    @model_validator(mode="after")
    def _known_backend(self) -> GenerationConfig:
        choose(GENERATION_BACKENDS, self.backend, "generation backend (policy.generation.backend)")
        choose(dict.fromkeys(("loop", "generate")), self.sampler,
               "sampler (policy.generation.sampler)")
        if self.backend != "hf" and self.sampler != "loop":
            raise ValueError(f"policy.generation.sampler={self.sampler!r} is for backend=hf, not "
                             f"{self.backend!r} (it would be ignored)")
        if self.backend != "vllm" and self.vllm != VLLMConfig():
            raise ValueError(f"vllm.* settings are for backend=vllm, not {self.backend!r} (they "
                             "would be ignored)")
        return self


@dataclass
class Generations:
    """A batch of sampled responses (B rows). Prompt tensors are left-padded ``[B, L]`` (L the
    longest prompt), response tensors right-padded ``[B, R]`` (R the longest response)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    generation_logprobs: torch.Tensor
    truncated: torch.Tensor  # [B] bool
    texts: list[str]
    weight_version: int = 0  # the backend's refits so far: which weights sampled these


class GenerationBackend(ABC):
    """What the trainer needs from an inference engine."""

    # whether ``refresh_weights`` loads new weights into weights of its own (the async loop
    # needs a generator that keeps sampling with old weights while the policy trains)
    can_refit = False

    @abstractmethod
    def generate(self, prompts: list[str]) -> Generations:
        """Sample one response per prompt (repeat prompts for a group)."""

    def generate_ids(  # noqa: B027 - optional: multi-turn rollouts need it
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
        max_new_tokens: int | None = None,
    ) -> Generations:
        """Sample from token ids (left-padded ``[B, L]``): multi-turn rollouts continue a
        conversation token for token, without a decode/re-encode round trip."""
        raise NotImplementedError(
            f"{type(self).__name__} cannot generate from token ids (multi-turn rollouts need it)"
        )

    def refresh_weights(self, model: torch.nn.Module) -> None:  # noqa: B027 - optional hook
        """Load the policy's new weights after an update (no-op if the model is shared)."""


def tokenize_prompts(tokenizer, prompts: list[str], max_length: int | None = None):
    """Left-padded ``(ids [B, L], mask [B, L])``; a BOS token is prepended when the tokenizer
    has one and does not add it itself. A prompt longer than ``max_length`` is an error."""
    # one tokenizer call per distinct prompt (a GRPO batch repeats each prompt G times)
    distinct = list(dict.fromkeys(prompts))
    ids_of = dict(zip(distinct, tokenizer(distinct, add_special_tokens=False)["input_ids"]))
    encoded = [list(ids_of[p]) for p in prompts]
    bos = tokenizer.bos_token_id
    if bos is not None:
        encoded = [[bos, *ids] for ids in encoded]
    if max_length is not None:
        for i, ids in enumerate(encoded):
            if len(ids) > max_length:
                raise ValueError(
                    f"prompt {i} is {len(ids)} tokens, longer than the maximum {max_length} "
                    f"(policy.max_total_sequence_length - policy.generation.max_new_tokens): "
                    f"{prompts[i][:80]!r}"
                )
    return left_pad(encoded, tokenizer.pad_token_id)


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> left-padded ``(ids [B, L], mask [B, L])``, L the longest row."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row) :] = 1
    return ids, mask


def response_mask_and_truncation(
    response_ids: torch.Tensor,
    eos_token_id: int | None,
    pad_token_id: int,
    stop_lengths: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Which response tokens were generated (through EOS) and which rows never stopped.

    Args:
        response_ids: ``[B, R]`` right-padded.
        stop_lengths: optional ``[B]`` length at which a stop string ended the row (0: none).
    Returns: ``(mask [B, R] long, truncated [B] bool)``.
    """
    B, R = response_ids.shape
    positions = torch.arange(R).expand(B, R)
    is_eos = (
        response_ids == eos_token_id
        if eos_token_id is not None
        else torch.zeros_like(response_ids, dtype=torch.bool)
    )
    first_eos = torch.where(is_eos, positions, R).amin(dim=1)  # [B], R if none
    length = torch.where(first_eos < R, first_eos + 1, R)
    if stop_lengths is not None:
        length = torch.where(stop_lengths > 0, torch.minimum(length, stop_lengths), length)
    stopped = (first_eos < R) | (stop_lengths > 0 if stop_lengths is not None else False)
    return (positions < length[:, None]).long(), ~stopped


class HFGenerationBackend(GenerationBackend):
    """Sampling with ``transformers``' ``generate`` on the policy's own model (shared weights)."""

    shares_policy_weights = True  # samples with the training module itself

    def __init__(self, model, tokenizer, config: GenerationConfig, max_prompt_length=None):
        self.model, self.tokenizer, self.config = model, tokenizer, config
        self.max_prompt_length = max_prompt_length
        self.weight_version = 0
        self.interrupt = None  # an Event that ends a generation early (the async collector's)

    def refresh_weights(self, model: torch.nn.Module) -> None:
        """Nothing to load (the policy's own module samples); counts the version."""
        self.weight_version += 1

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
                    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                    stop_check=self._stopped_rows if cfg.stop_strings else None,
                    interrupt=self.interrupt)
                response_ids, logprobs = response_ids.cpu(), logprobs.cpu()
            else:
                response_ids, logprobs = self._generate(prompt_ids.to(device),
                                                        prompt_mask.to(device), max_new_tokens)
        finally:
            self.model.train(was_training)
        stop_lengths = self._stop_lengths(response_ids) if cfg.stop_strings else None
        mask, truncated = response_mask_and_truncation(
            response_ids, tok.eos_token_id, tok.pad_token_id, stop_lengths
        )
        response_ids = torch.where(mask.bool(), response_ids, tok.pad_token_id)
        texts = [
            tok.decode(row[m.bool()].tolist(), skip_special_tokens=True)
            for row, m in zip(response_ids, mask)
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

    def _generate(self, prompt_ids, prompt_mask, max_new_tokens):
        """The plain path: ``model.generate``, every step's logits kept, log-probs afterwards.
        The checkpoint's own generation defaults (top-k 50, repetition penalty, ...) are
        overridden so the sampled distribution is the configured one (as the loop samples)."""
        cfg, tok = self.config, self.tokenizer
        stopping = None
        if self.interrupt is not None:
            from transformers import StoppingCriteriaList

            stopping = StoppingCriteriaList([interrupted_criterion(self.interrupt)])
        out = self.model.generate(
            input_ids=prompt_ids, attention_mask=prompt_mask,
            do_sample=True, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k or 0,
            max_new_tokens=max_new_tokens or cfg.max_new_tokens,
            pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
            stop_strings=cfg.stop_strings, tokenizer=tok if cfg.stop_strings else None,
            return_dict_in_generate=True, output_logits=True, stopping_criteria=stopping,
            **PLAIN_SAMPLING,
        )
        response_ids = out.sequences[:, prompt_ids.shape[1]:].cpu()  # [B, R]
        logits = torch.stack(out.logits, dim=1).cpu()  # [B, R, V]
        return response_ids, token_logprobs(logits, response_ids, cfg.temperature)

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


GENERATION_BACKENDS = {"hf": HFGenerationBackend, "vllm": VLLMGenerationBackend}


def make_generation_backend(model, tokenizer, config: GenerationConfig, max_prompt_length=None):
    """Build the backend named by ``config.backend`` (see ``GENERATION_BACKENDS``)."""
    cls = choose(
        GENERATION_BACKENDS, config.backend, "generation backend (policy.generation.backend)"
    )
    return cls(model, tokenizer, config, max_prompt_length)
