"""What a generation backend is: sample responses, report their log-probs and truncation.

    responses, log π_gen(y_t | x, y_<t), truncated  ←  backend.generate(prompts)
    backend.refit(model)                                after every update (NeMo-RL's refit)

A backend is a class with this interface registered by name in ``generation.GENERATION_BACKENDS``
(``hf_backend.py``, ``vllm_backend.py``, or one of a user's). Layout: prompts are left-padded,
responses right-padded, so a training row is ``prompt + response`` with pads on both ends; a
response ends at EOS (kept, so the model learns to stop) or right after a stop string, and one
that hits ``max_new_tokens`` without either is ``truncated``. Generation log-probs are
log-softmax(logits / temperature) at the sampled token, before top-k/top-p truncation, as the
trainer computes them (docs/algorithms.md#sampling).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch


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
    """What the trainer needs from an inference engine.

    Args (every backend's constructor): the policy's ``model`` and ``tokenizer``, the
    ``policy.generation`` config and the longest prompt in tokens.
    """

    # whether the backend samples with the policy's own module (then its log-probs are the
    # policy's, and ``reuse_generation_logprobs`` may take them: trainers/loop_config.py)
    shares_policy_weights = False
    # whether ``refit`` loads new weights into weights of its own (the async loop needs a
    # generator that keeps sampling with old weights while the policy trains)
    can_refit = False
    weight_version = 0  # refits so far (0: the weights the backend was built with)

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

    def refit(self, model: torch.nn.Module) -> None:
        """Load the policy's new weights after an update (NeMo-RL's refit); a backend that
        samples with the policy's own module has nothing to load and only counts."""
        self.weight_version += 1


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


def end_ids(tokenizer, config) -> int | list[int] | None:
    """The ids that end a response: EOS, and ``policy.generation.stop_token_ids``."""
    extra = list(config.stop_token_ids or ())
    if not extra:
        return tokenizer.eos_token_id
    return [i for i in (tokenizer.eos_token_id,) if i is not None] + extra


def left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists -> left-padded ``(ids [B, L], mask [B, L])``, L the longest row."""
    width = max(len(r) for r in rows)
    # padded as lists, one tensor each: per-row tensors cost more than the rows at GRPO's sizes
    ids = torch.tensor([[pad] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids.reshape(len(rows), width), mask.reshape(len(rows), width)


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
    is_eos = (  # eos_token_id: one id, or EOS and the stop token ids (``end_ids``)
        torch.isin(response_ids, torch.tensor(eos_token_id))
        if eos_token_id is not None
        else torch.zeros_like(response_ids, dtype=torch.bool)
    )
    first_eos = torch.where(is_eos, positions, R).amin(dim=1)  # [B], R if none
    length = torch.where(first_eos < R, first_eos + 1, R)
    if stop_lengths is not None:
        length = torch.where(stop_lengths > 0, torch.minimum(length, stop_lengths), length)
    stopped = (first_eos < R) | (stop_lengths > 0 if stop_lengths is not None else False)
    return (positions < length[:, None]).long(), ~stopped
