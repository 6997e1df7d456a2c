"""The in-process client against the ``openai`` package itself: its replies validate as openai's
own ``ChatCompletion`` field by field (plain, n > 1, tool calls, log-probs), every parameter of
openai's ``chat.completions.create`` is implemented, of no effect or refused by name, and
message content that is not text is refused naming the message."""

import inspect
import json

import pytest

openai = pytest.importorskip("openai")

from openai.resources.chat.completions import Completions as OpenAICompletions  # noqa: E402
from openai.types.chat import ChatCompletion as OpenAIChatCompletion  # noqa: E402
from openai.types.chat import ChatCompletionMessage  # noqa: E402
from pydantic import BaseModel  # noqa: E402

from rlnb.engine.agents.client import LocalOpenAI  # noqa: E402
from rlnb.engine.agents.parameters import PARAMETERS  # noqa: E402
from rlnb.engine.agents.replies import Record  # noqa: E402
from rlnb.engine.agents.sampler import Sampled  # noqa: E402
from rlnb.engine.environments.calculator import TOOLS  # noqa: E402
from rlnb.engine.models.tiny import build_char_tokenizer  # noqa: E402

ASK = [{"role": "user", "content": "2*3"}]
CALL = '<tool_call>{"name":"calc","arguments":{"x":"2*3"}}</tool_call>'


def scripted(*texts):
    """The client on the tiny tokenizer, its completions ``texts`` (one per choice) with made-up
    log-probs; the template, tool-call parsing and reply building are the real ones."""
    tok = build_char_tokenizer(chat_template=True)
    client = LocalOpenAI(generator=object(), tokenizer=tok)

    def submit(request):
        out = []
        for k in range(request.n):
            text = texts[k % len(texts)]
            ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            out.append(Sampled(ids, [-0.5 - 0.01 * i for i in range(len(ids))], text, "stop"))
        return out

    client.sampling.submit = submit
    return client, tok


def same_fields(theirs: BaseModel, ours, where="reply"):
    """Every field of openai's validated object is an attribute of ours with the same value,
    recursively (a field openai added that rlnb's record lacks fails here)."""
    for name in type(theirs).model_fields:
        assert hasattr(ours, name), f"{where}.{name}: openai's field is missing from rlnb's reply"
        a, b = getattr(theirs, name), getattr(ours, name)
        if isinstance(a, BaseModel):
            same_fields(a, b, f"{where}.{name}")
        elif isinstance(a, list) and a and isinstance(a[0], BaseModel):
            assert len(a) == len(b), f"{where}.{name}"
            for i, (x, y) in enumerate(zip(a, b)):
                same_fields(x, y, f"{where}.{name}[{i}]")
        else:
            assert a == b, f"{where}.{name}: openai reads {a!r}, rlnb has {b!r}"


@pytest.mark.parametrize("kwargs, texts", [
    ({}, ["6"]),                                         # plain
    ({"n": 3}, ["6", "7", "8"]),                         # n > 1
    ({"tools": TOOLS}, [CALL]),                          # a tool call
    ({"tools": TOOLS, "logprobs": True, "top_logprobs": 0, "n": 2}, [CALL, "6"]),  # log-probs
])
def test_replies_validate_as_openais_chat_completion_field_by_field(kwargs, texts):
    client, tok = scripted(*texts)
    reply = client.chat.completions.create(messages=ASK, model="gpt-4o", **kwargs)
    for dump in (reply.model_dump(), reply.model_dump(exclude_none=True), reply.to_dict(),
                 json.loads(reply.model_dump_json())):
        theirs = OpenAIChatCompletion.model_validate(dump)
        same_fields(theirs, reply)
    assert len(reply.choices) == len(texts)
    for choice, text in zip(reply.choices, texts):
        if kwargs.get("tools") and text == CALL:
            assert choice.finish_reason == "tool_calls" and choice.message.content == ""
            call = choice.message.tool_calls[0]
            assert (call.type, call.function.name, json.loads(call.function.arguments)) == (
                "function", "calc", {"x": "2*3"})
        else:
            assert choice.message.content == text and choice.message.tool_calls is None
        assert choice.message.refusal is None and choice.message.role == "assistant"
        if not kwargs.get("logprobs"):
            assert choice.logprobs is None  # as OpenAI: only when asked
            continue
        content = choice.logprobs.content
        assert [t.logprob for t in content] == [-0.5 - 0.01 * i for i in range(len(content))]
        assert "".join(t.token for t in content) == text + "</s>"
        for t in content:  # each token's bytes and (empty) top log-probs, as openai has them
            assert t.bytes == list(t.token.encode("utf-8")) and t.top_logprobs == []
        assert choice.token_ids == tok(text + "</s>", add_special_tokens=False)["input_ids"]


def test_tool_choice_none_returns_no_tool_calls_and_forcing_one_is_refused():
    client, _ = scripted(CALL)
    auto = client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice="auto")
    assert auto.choices[0].message.tool_calls and auto.choices[0].finish_reason == "tool_calls"
    none = client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice="none")
    choice = none.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop"
    assert choice.message.content == CALL  # the text as written, as a vLLM server returns it
    forced = {"type": "function", "function": {"name": "calc"}}
    for choice in ("required", forced):
        with pytest.raises(ValueError, match=r"tool_choice=.* is not supported by rlnb's "
                                             r"in-process client: forcing a tool call needs "
                                             r"constrained decoding"):
            client.chat.completions.create(messages=ASK, tools=TOOLS, tool_choice=choice)
    custom = [{"type": "custom", "custom": {"name": "grammar"}}]
    with pytest.raises(ValueError, match=r"tools\[0\] is a 'custom' tool"):
        client.chat.completions.create(messages=ASK, tools=custom)


def test_logprobs_and_top_logprobs_are_implemented_or_refused_as_openai_takes_them():
    client, _ = scripted("6")
    with pytest.raises(ValueError, match=r"top_logprobs=2 is not supported by rlnb's in-process "
                                         r"client: the sampler keeps the sampled token's log-prob"):
        client.chat.completions.create(messages=ASK, logprobs=True, top_logprobs=2)
    with pytest.raises(ValueError, match=r"top_logprobs=0 needs logprobs=True"):
        client.chat.completions.create(messages=ASK, top_logprobs=0)
    off = client.chat.completions.create(messages=ASK, logprobs=False)
    assert off.choices[0].logprobs is None and off.choices[0].token_ids
    # counts of 0 are refused, not read as "left out" (as OpenAI refuses them)
    with pytest.raises(ValueError, match=r"n=0 must be an integer >= 1"):
        client.chat.completions.create(messages=ASK, n=0)
    with pytest.raises(ValueError, match=r"max_tokens=0 must be an integer >= 1"):
        client.chat.completions.create(messages=ASK, max_tokens=0)


# a value that asks for something, for each refused parameter (the test below needs one for every
# refused name, so a newly refused parameter needs an example here too)
ASKS_FOR = {
    "stream": True, "stream_options": {"include_usage": True}, "stop": ["\n"], "seed": 3,
    "frequency_penalty": 0.5, "presence_penalty": -0.5, "logit_bias": {"5": 100},
    "extra_body": {"top_k": 5}, "response_format": {"type": "json_object"},
    "parallel_tool_calls": False, "reasoning_effort": "low", "verbosity": "low",
    "modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "6"}, "web_search_options": {},
    "moderation": {"model": "omni-moderation-latest"},
    "functions": [{"name": "calc", "parameters": {}}], "function_call": "auto",
    "store": True, "metadata": {"run": "1"}, "service_tier": "flex",
}


def test_every_parameter_of_openais_create_is_implemented_of_no_effect_or_refused_by_name():
    theirs = [n for n in inspect.signature(OpenAICompletions.create).parameters if n != "self"]
    unplaced = [n for n in theirs if n not in PARAMETERS]
    assert not unplaced, f"openai's create() takes {unplaced}: place each in PARAMETERS"
    assert sorted(set(PARAMETERS) - set(theirs)) == [], "a parameter openai no longer has"
    client, _ = scripted("6")
    for name, p in PARAMETERS.items():
        assert p.kind in ("implemented", "no effect", "refused") and p.what, name
        if p.kind == "refused":
            value = ASKS_FOR[name]
            with pytest.raises(ValueError, match=rf"^chat.completions.create: {name}=.* is not "
                                                 r"supported by rlnb's in-process client: \w"):
                client.chat.completions.create(messages=ASK, **{name: value})
            for value in (None, *p.accepted):  # asks for nothing: accepted
                client.chat.completions.create(messages=ASK, **{name: value})
        elif p.kind == "no effect":
            plain = client.chat.completions.create(messages=ASK)
            given = client.chat.completions.create(messages=ASK, **{name: "x"})
            assert given.choices[0].message == plain.choices[0].message
    # openai's "not given" sentinels are left out; a name openai does not have is a TypeError
    client.chat.completions.create(messages=ASK, seed=openai.NOT_GIVEN, stop=openai.omit)
    with pytest.raises(TypeError, match="temprature is not a parameter of openai's"):
        client.chat.completions.create(messages=ASK, temprature=1.0)


def test_content_that_is_not_text_is_refused_naming_the_message_its_role_and_type():
    client, tok = scripted("6")

    class Result:  # a tool's result object handed over as is
        value = 6

    for content, what in [(Result(), "Result"), ({"value": 6}, "dict"), (6, "int")]:
        messages = [*ASK, {"role": "assistant", "content": CALL},
                    {"role": "tool", "tool_call_id": "call_0", "content": content}]
        with pytest.raises(ValueError, match=rf"^messages\[2\] \(tool\): content is a {what}, not "
                                             r"a string or a list of content parts"):
            client.chat.completions.create(messages=messages)
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    with pytest.raises(ValueError, match=r"messages\[0\] \(user\): content\[0\] is a 'image_url' "
                                         r"part; the policy reads text parts"):
        client.chat.completions.create(messages=[{"role": "user", "content": image}])
    # text parts are the text, joined by newlines
    parts = [{"type": "text", "text": "2*3"}, {"type": "text", "text": "now"}]
    reply = client.chat.completions.create(messages=[{"role": "user", "content": parts}])
    assert reply.prompt_token_ids == tok("<s>U:2*3\nnow\nA:", add_special_tokens=False)[
        "input_ids"]


def test_a_reply_passed_back_as_openais_own_message_reads_as_the_reply():
    client, _ = scripted(CALL)
    reply = client.chat.completions.create(messages=ASK, tools=TOOLS)
    theirs = ChatCompletionMessage.model_validate(reply.choices[0].message.model_dump())
    assert isinstance(reply.choices[0].message, Record)
    from rlnb.engine.agents.templates import plain_messages

    assert plain_messages([theirs]) == plain_messages([reply.choices[0].message])
