"""An OpenAI-compatible chat client served in-process by the policy: no server, no port.

    client = LocalOpenAI(trainer)                       # or AsyncLocalOpenAI(trainer)
    reply = client.chat.completions.create(messages=[{"role": "user", "content": "2*3?"}],
                                           tools=TOOLS, logprobs=True)
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
   ``tool_choice="none"`` reads none back (the text as written, as a vLLM server returns it;
   the tools stay in the prompt, as there).
2) Every parameter of openai's ``create`` is implemented, of no effect, or refused by name
   (``parameters.py``). ``temperature`` and ``top_p`` are accepted when they agree with the
   policy's sampling (``policy.generation``) or are left out: training log-probs are the
   policy's at its own temperature. ``n`` > 1 samples several completions of the prompt
   (outside a rollout; a rollout's group is ``num_generations_per_prompt`` episodes).
3) A call to a tool the request did not offer is counted (``train/agent/unknown_tool_calls``) and
   returned as written: what to answer is the agent's choice, as with any OpenAI server.
4) Requests go to a ``submit`` function: in a rollout, the batcher that joins every episode's
   pending requests into one generation call; on its own, the sampler directly.
5) Replies have the ``openai`` package's ``ChatCompletion`` shape (``replies.py``), with the
   log-probs only when ``logprobs=True``, as OpenAI returns them; the episode records the
   sampled tokens and log-probs either way.
"""

from __future__ import annotations

import asyncio
import time

from rlnb.engine.agents.episode import Episode
from rlnb.engine.agents.parameters import check_parameters
from rlnb.engine.agents.replies import (
    ChatCompletion,
    Choice,
    Function,
    Message,
    ToolCall,
    Usage,
    token_logprobs,
)
from rlnb.engine.agents.sampler import PolicySampler, Request, Sampled
from rlnb.engine.agents.templates import plain_messages, render, token_ids
from rlnb.engine.agents.tool_calls import convention_of, parse_tool_calls


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

    def request(self, kwargs: dict) -> tuple[list[dict], list | None, Request, dict]:
        """Check a ``create`` call's arguments (choice 2) and tokenise its prompt; the given
        keywords come back with the request."""
        kwargs = check_parameters(kwargs)
        if "messages" not in kwargs:
            raise TypeError("chat.completions.create: messages is required")
        for key, own in (("temperature", self.temperature), ("top_p", self.top_p)):
            asked = kwargs.get(key)
            if asked is not None and own is not None and abs(asked - own) > 1e-9:
                raise ValueError(f"chat.completions.create: {key}={asked}, but the policy samples "
                                 f"with {key}={own} (policy.generation.{key}): training needs "
                                 "the policy's own sampling")
        check_logprobs(kwargs)
        messages = plain_messages(kwargs["messages"])
        tools = check_tools(kwargs.get("tools"), kwargs.get("tool_choice", "auto"))
        if tools and self.convention is None:
            raise ValueError("chat.completions.create: tools given, but the chat template writes "
                             "tool calls in no convention rlnb reads (<tool_call> JSON blocks, "
                             "or Llama 3's JSON object)")
        n = kwargs.get("n", 1)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:  # (n=0 is not "left out")
            raise ValueError(f"chat.completions.create: n={n!r} must be an integer >= 1")
        if self.episode is not None and n != 1:
            raise ValueError(f"chat.completions.create: n={n} inside a rollout; each episode "
                             "samples one completion per call (the group is "
                             "grpo.num_generations_per_prompt episodes)")
        ids = (self.episode.prompt_ids(messages, tools) if self.episode is not None
               else token_ids(self.tokenizer, render(self.tokenizer, messages, tools)))
        for key in ("max_tokens", "max_completion_tokens"):
            value = kwargs.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"chat.completions.create: {key}={value!r} must be an integer "
                                 ">= 1")
        max_tokens = kwargs.get("max_completion_tokens") or kwargs.get("max_tokens")
        request = Request(ids, n, max_tokens)
        self.sampler.budget(request)  # a prompt past the context fails alone, not its batch
        return messages, tools, request, kwargs

    def reply(self, messages, tools, request: Request, sampled: list[Sampled],
              asked: dict | None = None) -> ChatCompletion:
        """The OpenAI-shaped reply (choices 1, 3, 5), recorded into the episode."""
        asked = asked or {}
        offered = {t.get("function", {}).get("name") for t in tools or []}
        read = tools and asked.get("tool_choice", "auto") != "none"  # choice 1
        choices = []
        for i, s in enumerate(sampled):
            parsed = parse_tool_calls(s.text, self.convention if read else None)
            calls = [ToolCall(c["id"], Function(**c["function"])) for c in parsed.calls]
            message = Message(parsed.content if calls else s.text, tool_calls=calls or None)
            if self.episode is not None:
                self.episode.record(messages, tools, request.prompt_ids, s, message.to_dict())
                self.episode.count("malformed_tool_calls", parsed.malformed)
                self.episode.count("unknown_tool_calls",
                                   sum(c.function.name not in offered for c in calls))
            reason = "tool_calls" if calls and s.finish_reason == "stop" else s.finish_reason
            logprobs = (token_logprobs(self.tokenizer, s.token_ids, s.logprobs)
                        if asked.get("logprobs") else None)
            choices.append(Choice(i, message, reason, logprobs, list(s.token_ids)))
        self.calls += 1
        completion = sum(len(s.token_ids) for s in sampled)
        return ChatCompletion(f"chatcmpl-{self.calls}", choices, int(time.time()), self.model,
                              Usage(len(request.prompt_ids), completion,
                                    len(request.prompt_ids) + completion),
                              list(request.prompt_ids))


def check_logprobs(kwargs: dict) -> None:
    """``logprobs`` and ``top_logprobs`` as OpenAI takes them (``parameters.py``)."""
    logprobs, top = kwargs.get("logprobs"), kwargs.get("top_logprobs")
    if logprobs is not None and not isinstance(logprobs, bool):
        raise ValueError(f"chat.completions.create: logprobs={logprobs!r} must be True or False")
    if top is None:
        return
    if not logprobs:
        raise ValueError(f"chat.completions.create: top_logprobs={top!r} needs logprobs=True "
                         "(as OpenAI requires)")
    if top != 0:
        raise ValueError(f"chat.completions.create: top_logprobs={top!r} is not supported by "
                         "rlnb's in-process client: the sampler keeps the sampled token's "
                         "log-prob, not the distribution (use top_logprobs=0 or leave it out)")


def check_tools(tools, tool_choice) -> list | None:
    """The request's tools (function tools only) and its ``tool_choice`` (choice 1)."""
    for i, tool in enumerate(tools or []):
        kind = tool.get("type", "function") if isinstance(tool, dict) else type(tool).__name__
        if not isinstance(tool, dict) or kind != "function" or not isinstance(
                tool.get("function"), dict):
            raise ValueError(f"chat.completions.create: tools[{i}] is a {kind!r} tool; rlnb's "
                             "in-process client reads function tools ({'type': 'function', "
                             "'function': {...}}) only")
    if tool_choice not in ("auto", "none"):
        raise ValueError(f"chat.completions.create: tool_choice={tool_choice!r} is not supported "
                         "by rlnb's in-process client: forcing a tool call needs constrained "
                         "decoding, and the policy samples freely (use 'auto', the default, or "
                         "'none')")
    return list(tools) if tools else None


class Completions:
    def __init__(self, sampling: Sampling):
        self.sampling = sampling

    def create(self, **kwargs) -> ChatCompletion:
        messages, tools, request, asked = self.sampling.request(kwargs)
        return self.sampling.reply(messages, tools, request, self.sampling.submit(request),
                                   asked)


class AsyncCompletions(Completions):
    async def create(self, **kwargs) -> ChatCompletion:  # type: ignore[override]
        messages, tools, request, asked = self.sampling.request(kwargs)
        result = self.sampling.submit(request)
        if asyncio.isfuture(result) or asyncio.iscoroutine(result):
            result = await result
        return self.sampling.reply(messages, tools, request, result, asked)


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

