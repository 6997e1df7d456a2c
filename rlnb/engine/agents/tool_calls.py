"""Tool calls in a model's text, read into OpenAI's format.

    parse_tool_calls('<tool_call>{"name": "calc", "arguments": {"x": "2*3"}}</tool_call>',
                     "hermes")
    -> ToolCalls(content="", calls=[{"id": "call_0", "type": "function",
                 "function": {"name": "calc", "arguments": '{"x": "2*3"}'}}], malformed=0)

A model writes a tool call in the convention its chat template taught it. Two are read here:

- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``, one block per call,
  anywhere in the text; the convention of Hermes, Qwen2.5, Qwen3 and the embedded tiny model's
  template (``templates.TINY_CHAT_TEMPLATE``).
- ``json``: the whole reply is one JSON object ``{"name": ..., "parameters"|"arguments": {...}}``
  (Llama 3.1/3.2's JSON tool calling).

Implementation choices:
1) The convention is read off the template (``convention_of``): a template that writes
   ``<tool_call>`` is ``hermes``; one that names ``"parameters"`` is ``json``; any other, with
   tools given, is refused when the request is made (its tool calls could not be read back).
2) A block that is not valid JSON, or has no string ``name``, is *malformed*: it stays in the
   message's content, is not returned as a call, and is counted
   (``train/agent/malformed_tool_calls``), so the agent sees what the model wrote and the run
   sees how often it happens.
3) ``arguments`` are returned as a JSON string, as OpenAI returns them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

HERMES = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)


@dataclass
class ToolCalls:
    """What ``parse_tool_calls`` read: the text outside the calls, the calls (OpenAI dicts) and
    how many blocks were malformed."""

    content: str
    calls: list[dict] = field(default_factory=list)
    malformed: int = 0


def convention_of(tokenizer) -> str | None:
    """``"hermes"``, ``"json"`` or None (choice 1)."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if isinstance(template, dict):  # several named templates: the default one
        template = template.get("default", "") or ""
    if "<tool_call>" in template:
        return "hermes"
    if '"parameters"' in template or "'parameters'" in template:
        return "json"
    return None


def one_call(text: str, index: int) -> dict | None:
    """An OpenAI tool call from a JSON object's text, or None when it is malformed."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string already
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if not isinstance(args, dict):
        return None
    return {"id": f"call_{index}", "type": "function",
            "function": {"name": obj["name"], "arguments": json.dumps(args)}}


def parse_tool_calls(text: str, convention: str | None) -> ToolCalls:
    """Read the tool calls out of a reply's text (the module docstring)."""
    if convention == "hermes":
        calls, malformed, kept = [], 0, []
        last = 0
        for match in HERMES.finditer(text):
            call = one_call(match.group(1).strip(), len(calls))
            kept.append(text[last:match.start()])
            if call is None:
                malformed += 1
                kept.append(match.group(0))  # choice 2: the agent sees what was written
            else:
                calls.append(call)
            last = match.end()
        kept.append(text[last:])
        content = "".join(kept)
        if "<tool_call>" in content and "</tool_call>" not in content:
            malformed += 1  # an opened block never closed (cut off, or a typo)
        return ToolCalls(content.strip() if calls else content, calls, malformed)
    if convention == "json":
        stripped = text.strip()
        if stripped.startswith("{"):
            call = one_call(stripped, 0)
            if call is not None:
                return ToolCalls("", [call])
            return ToolCalls(text, [], 1)
    return ToolCalls(text)
