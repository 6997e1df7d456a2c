"""Sample completions of token-id prompts with the policy's generator, many requests in one
batch: the engine under the in-process OpenAI client (``client.py``).

    PolicySampler(generator, tokenizer, max_total_length, max_new_tokens)
        .sample([Request(prompt_ids, n, max_tokens), ...]) -> [[Sampled] * n, ...]

Implementation choices:
1) One ``generate_ids`` call for every request's ``n`` rows (left-padded), with the largest
   budget any row has; each row is then cut to its own budget (``max_tokens``, and what its
   prompt leaves of ``max_total_length``). Cutting a sample after ``k`` tokens gives the same
   distribution as stopping it there, so one call serves requests of different budgets.
2) A prompt that leaves no room for one token is refused before sampling, with
   ``ContextLengthExceeded`` (the error an OpenAI server answers with a 400), naming its length.
3) Tokens and their generation log-probs are kept exactly as sampled: the caller stitches them
   into the training sequence without decoding and re-encoding (token in, token out).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlnb.engine.models.backend import left_pad


class ContextLengthExceeded(ValueError):
    """A prompt leaves no room in ``policy.max_total_sequence_length`` for a completion."""


@dataclass
class Request:
    """``n`` completions of one prompt (token ids, the template's text already tokenised)."""

    prompt_ids: list[int]
    n: int = 1
    max_tokens: int | None = None


@dataclass
class Sampled:
    """One completion: its tokens and their generation log-probs (``[T]`` each), its text
    (special tokens dropped) and why it ended: ``"stop"`` (EOS or a stop string) or
    ``"length"`` (out of budget)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


class PolicySampler:
    """Sample with ``generator`` (a backend with ``generate_ids``) under the run's limits."""

    def __init__(self, generator, tokenizer, max_total_length: int, max_new_tokens: int):
        self.generator, self.tokenizer = generator, tokenizer
        self.max_total_length, self.max_new_tokens = max_total_length, max_new_tokens

    def budget(self, request: Request) -> int:
        """The most tokens a completion of ``request`` may have (choice 2: refused if none)."""
        room = self.max_total_length - len(request.prompt_ids)
        if room < 1:
            raise ContextLengthExceeded(
                f"the prompt has {len(request.prompt_ids)} tokens and "
                f"policy.max_total_sequence_length is {self.max_total_length}: no room for a "
                "completion")
        return min(request.max_tokens or self.max_new_tokens, self.max_new_tokens, room)

    def sample(self, requests: list[Request]) -> list[list[Sampled]]:
        """The completions of every request, in order (choice 1)."""
        budgets = [self.budget(r) for r in requests]
        rows = [(i, b) for i, (r, b) in enumerate(zip(requests, budgets)) for _ in range(r.n)]
        ids, mask = left_pad([requests[i].prompt_ids for i, _ in rows],
                             self.tokenizer.pad_token_id)
        gens = self.generator.generate_ids(ids, mask, max_new_tokens=max(budgets))
        out: list[list[Sampled]] = [[] for _ in requests]
        for k, (i, budget) in enumerate(rows):
            keep = gens.response_mask[k].bool()
            tokens = gens.response_ids[k][keep].tolist()
            logprobs = gens.generation_logprobs[k][keep].tolist()
            cut = len(tokens) > budget
            tokens, logprobs = tokens[:budget], logprobs[:budget]
            stopped = not bool(gens.truncated[k]) and not cut
            text = gens.texts[k] if not cut else self.tokenizer.decode(
                tokens, skip_special_tokens=True)
            out[i].append(Sampled(tokens, logprobs, text, "stop" if stopped else "length"))
        return out

    def sample_one(self, request: Request) -> list[Sampled]:
        """One request's completions, sampled now (the client used on its own)."""
        return self.sample([request])[0]
