"""Every parameter of the ``openai`` package's ``chat.completions.create``, and what the in-process
client (``client.py``) does with it: implemented, of no effect on a completion, or refused.

    check_parameters({"messages": [...], "tools": [...], "logprobs": True})   # -> the kwargs
    check_parameters({"messages": [...], "seed": 3})   # ValueError: seed=3 ... (why)

Implementation choices:
1) ``PARAMETERS`` names each parameter of openai's ``Completions.create`` (openai 2.54) once; a
   test walks the installed package's signature, so a parameter a newer openai adds fails it
   until it is placed here. A name openai does not have is a ``TypeError``, as openai raises.
2) Refused, by name and why, is whatever would change what is sampled or returned and the
   client does not do: training needs the policy's own sampling (``policy.generation``), and its
   log-probs are of the tokens as sampled. A refused parameter set to the value that asks for
   nothing (``stream=False``, ``frequency_penalty=0``, ``parallel_tool_calls=True``,
   ``response_format={"type": "text"}``, ...) or to None is accepted: it changes nothing.
3) Of no effect, as on OpenAI's servers: end-user ids and prompt-cache hints, and the
   transport's ``extra_headers``, ``extra_query``, ``timeout`` (no transport here).
4) openai's "not given" sentinels (``NOT_GIVEN``, ``omit``) count as left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

SAMPLING = ("it changes the sampling distribution, and training needs the policy's own "
            "(policy.generation), whose log-probs the sample keeps")
CONSTRAINED = "it needs constrained decoding; the policy samples freely"


@dataclass(frozen=True)
class Parameter:
    """What the client does with one ``create`` parameter: ``kind`` is ``implemented``,
    ``no effect`` or ``refused``; ``accepted``: the values of a refused one that ask for
    nothing (choice 2)."""

    kind: str
    what: str
    accepted: tuple = ()


def implemented(what: str) -> Parameter:
    return Parameter("implemented", what)


def no_effect(what: str) -> Parameter:
    return Parameter("no effect", what)


def refused(why: str, *accepted: Any) -> Parameter:
    return Parameter("refused", why, accepted)


PARAMETERS: dict[str, Parameter] = {
    "messages": implemented("rendered by the tokenizer's chat template; each content a string "
                            "or a list of text parts (joined by newlines), else refused"),
    "model": implemented("any name: the one model is the policy (the reply's model names it)"),
    "n": implemented("n completions of the prompt (1 inside a rollout: the group is "
                     "grpo.num_generations_per_prompt episodes)"),
    "max_tokens": implemented("cuts the completion (finish_reason 'length'), within "
                              "policy.generation.max_new_tokens and the context"),
    "max_completion_tokens": implemented("as max_tokens"),
    "temperature": implemented("the policy's own (policy.generation.temperature) or left out; "
                               "another is refused"),
    "top_p": implemented("the policy's own (policy.generation.top_p) or left out; another is "
                         "refused"),
    "tools": implemented("function tools, given to the chat template; tool calls read back in "
                         "its convention (tool_calls.py); another type is refused"),
    "tool_choice": implemented("'auto' (the default) reads tool calls back; 'none' returns the "
                               "text as written, no tool calls; 'required' and a named function "
                               "are refused (" + CONSTRAINED + ")"),
    "logprobs": implemented("True: each token's log-prob, bytes and top_logprobs in "
                            "choice.logprobs; False or left out: choice.logprobs is None, as "
                            "OpenAI returns it"),
    "top_logprobs": implemented("0 or left out (each token's top_logprobs is empty), with "
                                "logprobs=True; more is refused: the sampler keeps the sampled "
                                "token's log-prob, not the distribution"),
    "stream": refused("streaming: the reply comes whole, in-process", False),
    "stream_options": refused("streaming options: the reply comes whole (stream is refused)"),
    "stop": refused("stop strings would cut the sampled tokens mid-token; the chat template's "
                    "end-of-turn token ends a reply", []),
    "seed": refused("the episodes' requests are sampled together, in one batch, from the run's "
                    "random stream (grpo.seed); one request cannot have a seed of its own"),
    "frequency_penalty": refused(SAMPLING, 0),
    "presence_penalty": refused(SAMPLING, 0),
    "logit_bias": refused(SAMPLING, {}),
    "extra_body": refused("provider-specific parameters (vLLM's top_k, min_p, ...): " + SAMPLING,
                          {}),
    "response_format": refused("structured output: " + CONSTRAINED, {"type": "text"}),
    "parallel_tool_calls": refused("False asks for at most one tool call per reply, which the "
                                   "sampler cannot enforce: the policy may write several",
                                   True),
    "reasoning_effort": refused("a reasoning model's effort setting: the policy has none (a "
                                "chat template's own switches are the tokenizer's)"),
    "verbosity": refused("a reasoning model's verbosity setting: the policy has none"),
    "modalities": refused("the policy writes text only", ["text"]),
    "audio": refused("audio output: the policy writes text only"),
    "prediction": refused("predicted outputs (a speculative-decoding hint): the sampler has no "
                          "draft to check"),
    "web_search_options": refused("web search: the model sees only the request's tools"),
    "moderation": refused("moderation of the input and output: the client runs no moderation "
                          "model"),
    "functions": refused("the deprecated function-calling API: give tools="),
    "function_call": refused("the deprecated function-calling API: give tool_choice="),
    "store": refused("stores the completion on OpenAI's servers; the client keeps nothing",
                     False),
    "metadata": refused("key-value pairs of a stored completion; the client stores nothing",
                        {}),
    "service_tier": refused("OpenAI's processing tiers: the policy serves every request alike",
                            "auto", "default"),
    "user": no_effect("an end-user id (OpenAI's abuse detection and caching)"),
    "safety_identifier": no_effect("an end-user id (OpenAI's abuse detection)"),
    "prompt_cache_key": no_effect("a prompt-cache hint"),
    "prompt_cache_retention": no_effect("a prompt-cache hint"),
    "prompt_cache_options": no_effect("a prompt-cache hint"),
    "extra_headers": no_effect("HTTP headers: there is no transport"),
    "extra_query": no_effect("HTTP query parameters: there is no transport"),
    "timeout": no_effect("an HTTP timeout: there is no transport"),
}


def given(value: Any) -> bool:
    """Whether a keyword was really given: None and openai's sentinels are not (choice 4)."""
    return value is not None and type(value).__name__ not in ("NotGiven", "Omit")


def same(value: Any, accepted: Any) -> bool:
    """``value == accepted``, but a bool only equals a bool (``True`` is not ``1``)."""
    if isinstance(value, bool) or isinstance(accepted, bool):
        return value is accepted
    return value == accepted


def check_parameters(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keywords that were given, each one ``PARAMETERS`` names; a refused one with a value
    that asks for something raises, naming it and why (choices 1-2)."""
    unknown = sorted(set(kwargs) - set(PARAMETERS))
    if unknown:
        raise TypeError(f"chat.completions.create: {', '.join(unknown)} is not a parameter of "
                        "openai's chat.completions.create (rlnb's in-process client takes "
                        "openai's; the guide's agents section lists what it does with each)")
    out = {k: v for k, v in kwargs.items() if given(v)}
    for name, value in out.items():
        p = PARAMETERS[name]
        if p.kind == "refused" and not any(same(value, a) for a in p.accepted):
            raise ValueError(f"chat.completions.create: {name}={value!r} is not supported by "
                             f"rlnb's in-process client: {p.what}")
    return out
