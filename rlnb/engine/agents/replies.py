"""The in-process client's replies, in the shape of the ``openai`` package's ``ChatCompletion``.

    reply.choices[0].message.content / .tool_calls[0].function.arguments / .refusal
    reply.choices[0].logprobs.content[0].token / .logprob / .bytes / .top_logprobs  (logprobs=True)
    reply.choices[0].token_ids, reply.prompt_token_ids        (rlnb's, as vLLM's return_token_ids)
    reply.model_dump()  -> validates as openai.types.chat.ChatCompletion

Implementation choices:
1) Plain dataclasses, not the ``openai`` package's pydantic models: ``openai`` is an optional
   dependency (the ``envs`` extra), and agent code reads a reply the same way either way. Every
   field of openai's ``ChatCompletion`` and its parts is an attribute here (absent ones None, as
   openai leaves them), and ``model_dump()`` validates as openai's own type: the tests hold both
   to it, field by field, for plain replies, ``n`` > 1, tool calls and log-probs.
2) ``model_dump`` includes None fields, as pydantic's does (``exclude_none=True`` drops them);
   ``to_dict`` drops them, as openai's ``to_dict`` leaves unset fields out. Either, or the object
   itself, passed back as the next call's assistant message is the same message
   (``episode.py``).
3) Two fields beyond OpenAI's, as vLLM adds them (``return_token_ids``): each choice's
   ``token_ids`` (what the policy sampled) and the reply's ``prompt_token_ids``.
4) A token's ``token`` is its text decoded alone and ``bytes`` that text's UTF-8; a token that is
   part of a multi-byte character decodes to U+FFFD, as vLLM reports it. ``top_logprobs`` is
   empty: the sampler keeps the sampled token's log-prob only (``parameters.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any


def _dump(value: Any, exclude_none: bool) -> Any:
    if isinstance(value, Record):
        return value.model_dump(exclude_none=exclude_none)
    if isinstance(value, list):
        return [_dump(v, exclude_none) for v in value]
    return value


class Record:
    """Attribute access over plain data, with ``model_dump``/``to_dict``/``model_dump_json`` as
    the ``openai`` package's objects have them (choice 2)."""

    def model_dump(self, *, exclude_none: bool = False, exclude_unset: bool = False,
                   **_: Any) -> dict:
        drop = exclude_none or exclude_unset  # a field rlnb leaves None is one never set
        out = {}
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and drop:
                continue
            out[f.name] = _dump(value, drop)
        return out

    def to_dict(self) -> dict:
        return self.model_dump(exclude_none=True)

    def model_dump_json(self, *, indent: int | None = None, **kwargs: Any) -> str:
        return json.dumps(self.model_dump(**kwargs), indent=indent)

    def to_json(self, *, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)


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
    refusal: str | None = None
    annotations: list | None = None
    audio: Any = None
    function_call: Any = None  # the deprecated API's (refused: ``parameters.py``)


@dataclass
class TopLogprob(Record):
    token: str
    logprob: float
    bytes: list[int] | None = None


@dataclass
class TokenLogprob(Record):
    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = field(default_factory=list)  # choice 4


@dataclass
class Logprobs(Record):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


@dataclass
class Choice(Record):
    index: int
    message: Message
    finish_reason: str
    logprobs: Logprobs | None = None  # only when the request asked (logprobs=True)
    token_ids: list[int] = field(default_factory=list)  # what the policy sampled (choice 3)


@dataclass
class Usage(Record):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    completion_tokens_details: Any = None
    prompt_tokens_details: Any = None


@dataclass
class ChatCompletion(Record):
    id: str
    choices: list[Choice]
    created: int
    model: str
    usage: Usage
    prompt_token_ids: list[int] = field(default_factory=list)  # choice 3
    object: str = "chat.completion"
    service_tier: str | None = None
    system_fingerprint: str | None = None
    moderation: Any = None


def token_logprobs(tokenizer, token_ids: list[int], logprobs: list[float]) -> Logprobs:
    """The ``logprobs`` of one choice (choice 4)."""
    texts = [tokenizer.decode([t], skip_special_tokens=False, clean_up_tokenization_spaces=False)
             for t in token_ids]
    return Logprobs([TokenLogprob(text, lp, list(text.encode("utf-8")))
                     for text, lp in zip(texts, logprobs)])
