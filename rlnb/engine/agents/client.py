"""An OpenAI-compatible chat client served in-process by the policy: no server, no port.

    client = LocalOpenAI(trainer)                       # or AsyncLocalOpenAI(trainer)
    reply = client.chat.completions.create(messages=[{"role": "user", "content": "2*3?"}],
                                           tools=TOOLS, n=1)
    reply.choices[0].message.tool_calls[0].function.name     # "calc"
    reply.choices[0].token_ids, reply.choices[0].logprobs.content[0].logprob

Agent code written against ``openai.OpenAI``/``openai.AsyncOpenAI`` (``client.chat.completions
.create(...)``) runs unchanged on the trainer's current policy. Each completion keeps its token
ids and generation log-probs; inside a rollout (``rollouts.py``) the client records them into
the episode, which becomes one trainable multi-turn sample (``episode.py``).

Implementation choices:
1) Messages go through the tokenizer's own chat template (``templates.py``), ``tools`` as the
   template's ``tools``; tool calls are read back in the template's convention
   (``tool_calls.py``) into OpenAI's ``tool_calls`` with ``finish_reason="tool_calls"``.
2) ``temperature``, ``top_p`` and ``model`` are accepted when they agree with the policy's sampling
   (``policy.generation``) or are left out: training log-probs are the policy's at its own
   temperature, so a request for another is refused, not silently ignored. ``n`` > 1 samples
   several completions of the prompt (outside a rollout; a rollout's group is
   ``num_generations_per_prompt`` episodes). Parameters the client does not implement
   (``stop``, ``logit_bias``, ...) are refused by name.
3) A call to a tool the request did not offer is counted (``train/agent/unknown_tool_calls``) and
   returned as written: what to answer is the agent's choice, as with any OpenAI server.
4) Requests go to a ``submit`` function: in a rollout, the batcher that joins every episode's
   pending requests into one generation call; on its own, the sampler directly.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rlnb.engine.agents.episode import Episode
from rlnb.engine.agents.sampler import PolicySampler, Request, Sampled
from rlnb.engine.agents.templates import plain_messages, render, token_ids
from rlnb.engine.agents.tool_calls import convention_of, parse_tool_calls

ACCEPTED = {"model", "temperature", "top_p", "n", "max_tokens", "max_completion_tokens", "tools",
            "tool_choice", "stream", "logprobs", "top_logprobs"}


class Record:
    """Attribute access over plain data, with ``to_dict``/``model_dump`` as pydantic objects of
    the ``openai`` package have, so agent code can append a reply's message to its list."""

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    def model_dump(self, **_: Any) -> dict:
        return self.to_dict()


@dataclass
class Function(Record):
    name: str
    arguments: str  # JSON text, as OpenAI returns it


@dataclass
class ToolCall(Record):
    id: str
    function: Function
    type: str = "function"


@dataclass
class Message(Record):
    content: str | None
    role: str = "assistant"
    tool_calls: list[ToolCall] | None = None


@dataclass
class TokenLogprob(Record):
    token: str
    logprob: float


@dataclass
class Logprobs(Record):
    content: list[TokenLogprob]


@dataclass
class Choice(Record):
    index: int
    message: Message
    finish_reason: str
    logprobs: Logprobs
    token_ids: list[int] = field(default_factory=list)  # what the policy sampled (choice 4)


@dataclass
class Usage(Record):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


@dataclass
class ChatCompletion(Record):
    id: str
    choices: list[Choice]
    created: int
    model: str
    usage: Usage
    prompt_token_ids: list[int] = field(default_factory=list)
    object: str = "chat.completion"


class Sampling:
    """What requests are checked against and how they are served (shared by both clients)."""

    def __init__(self, source=None, *, generator=None, tokenizer=None,
                 max_total_length: int | None = None, max_new_tokens: int | None = None,
                 submit=None, episode: Episode | None = None, model: str = "rlnb-policy",
                 sampler: PolicySampler | None = None):
        if source is not None:  # a trainer: its generator, tokenizer and limits
            generator = generator or source.generator
            tokenizer = tokenizer or source.policy.tokenizer
            cfg = source.config.policy
            max_total_length = max_total_length or cfg.max_total_sequence_length
            max_new_tokens = max_new_tokens or cfg.generation.max_new_tokens
            self.temperature = cfg.generation.temperature
            self.top_p = cfg.generation.top_p
            model = cfg.model_name
        else:
            if generator is None or tokenizer is None:
                raise ValueError("LocalOpenAI(trainer), or LocalOpenAI(generator=..., "
                                 "tokenizer=...)")
            gen_cfg = getattr(generator, "config", None)
            self.temperature = getattr(gen_cfg, "temperature", None)
            self.top_p = getattr(gen_cfg, "top_p", None)
        self.tokenizer, self.model, self.episode = tokenizer, model, episode
        self.sampler = sampler or PolicySampler(generator, tokenizer, max_total_length or 10**9,
                                                max_new_tokens or 10**9)
        self.submit = submit or self.sampler.sample_one
        self.convention = convention_of(tokenizer)
        self.calls = 0

    def request(self, kwargs: dict) -> tuple[list[dict], list | None, Request]:
        """Check a ``create`` call's arguments (choice 2) and tokenise its prompt."""
        unknown = sorted(set(kwargs) - ACCEPTED - {"messages"})
        if unknown:
            raise TypeError(f"chat.completions.create: {', '.join(unknown)} not supported by "
                            f"rlnb's in-process client (it takes {', '.join(sorted(ACCEPTED))})")
        if "messages" not in kwargs:
            raise TypeError("chat.completions.create: messages is required")
        if kwargs.get("stream"):
            raise ValueError("chat.completions.create: stream=True is not supported in-process")
        for key, own in (("temperature", self.temperature), ("top_p", self.top_p)):
            asked = kwargs.get(key)
            if asked is not None and own is not None and abs(asked - own) > 1e-9:
                raise ValueError(f"chat.completions.create: {key}={asked}, but the policy samples "
                                 f"with {key}={own} (policy.generation.{key}): training needs "
                                 "the policy's own sampling")
        messages = plain_messages(kwargs["messages"])
        tools = kwargs.get("tools") or None
        if tools and self.convention is None:
            raise ValueError("chat.completions.create: tools given, but the chat template writes "
                             "tool calls in no convention rlnb reads (<tool_call> JSON blocks, "
                             "or Llama 3's JSON object)")
        n = int(kwargs.get("n") or 1)
        if n < 1:
            raise ValueError(f"chat.completions.create: n={n} must be >= 1")
        if self.episode is not None and n != 1:
            raise ValueError(f"chat.completions.create: n={n} inside a rollout; each episode "
                             "samples one completion per call (the group is "
                             "grpo.num_generations_per_prompt episodes)")
        ids = (self.episode.prompt_ids(messages, tools) if self.episode is not None
               else token_ids(self.tokenizer, render(self.tokenizer, messages, tools)))
        max_tokens = kwargs.get("max_completion_tokens") or kwargs.get("max_tokens")
        request = Request(ids, n, max_tokens)
        self.sampler.budget(request)  # a prompt past the context fails alone, not its batch
        return messages, tools, request

    def reply(self, messages, tools, request: Request, sampled: list[Sampled]) -> ChatCompletion:
        """The OpenAI-shaped reply (choices 1, 3), recorded into the episode."""
        offered = {t.get("function", {}).get("name") for t in tools or []}
        choices = []
        for i, s in enumerate(sampled):
            parsed = parse_tool_calls(s.text, self.convention if tools else None)
            calls = [ToolCall(c["id"], Function(**c["function"])) for c in parsed.calls]
            if self.episode is not None:
                self.episode.record(messages, tools, request.prompt_ids, s)
                self.episode.count("malformed_tool_calls", parsed.malformed)
                self.episode.count("unknown_tool_calls",
                                   sum(c.function.name not in offered for c in calls))
            reason = "tool_calls" if calls and s.finish_reason == "stop" else s.finish_reason
            tokens = self.tokenizer.convert_ids_to_tokens(s.token_ids)
            choices.append(Choice(
                i, Message(parsed.content if calls else s.text, tool_calls=calls or None),
                reason, Logprobs([TokenLogprob(t, lp) for t, lp in zip(tokens, s.logprobs)]),
                list(s.token_ids)))
        self.calls += 1
        completion = sum(len(s.token_ids) for s in sampled)
        return ChatCompletion(f"chatcmpl-{self.calls}", choices, int(time.time()), self.model,
                              Usage(len(request.prompt_ids), completion,
                                    len(request.prompt_ids) + completion),
                              list(request.prompt_ids))


class Completions:
    def __init__(self, sampling: Sampling):
        self.sampling = sampling

    def create(self, **kwargs) -> ChatCompletion:
        messages, tools, request = self.sampling.request(kwargs)
        return self.sampling.reply(messages, tools, request, self.sampling.submit(request))


class AsyncCompletions(Completions):
    async def create(self, **kwargs) -> ChatCompletion:  # type: ignore[override]
        messages, tools, request = self.sampling.request(kwargs)
        result = self.sampling.submit(request)
        if asyncio.isfuture(result) or asyncio.iscoroutine(result):
            result = await result
        return self.sampling.reply(messages, tools, request, result)


class Chat:
    def __init__(self, completions):
        self.completions = completions


class LocalOpenAI:
    """``openai.OpenAI``'s ``chat.completions.create`` on the policy (module docstring)."""

    completions_class = Completions

    def __init__(self, trainer=None, **kwargs):
        self.sampling = Sampling(trainer, **kwargs)
        self.chat = Chat(self.completions_class(self.sampling))

    @property
    def episode(self) -> Episode | None:
        return self.sampling.episode


class AsyncLocalOpenAI(LocalOpenAI):
    """``openai.AsyncOpenAI``'s shape: ``await client.chat.completions.create(...)``."""

    completions_class = AsyncCompletions

