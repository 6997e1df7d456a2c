"""Chat templates for multi-turn training: render a conversation, and check that turn N+1's
tokens extend turn N's (the template is *prefix-preserving*).

    render(tokenizer, messages, tools)             # the template's text, assistant turn opened
    check_prefix(tokenizer, conversation, tools)   # PrefixReport: ok, or the turn that broke

A multi-turn sample is trained as one sequence: prompt | model turn 1 | environment | model
turn 2 | ... That is only the conversation the model saw when the template renders every earlier
turn the same way each time it is applied. Templates that rewrite history break this: Qwen3's
drops the ``<think>`` block of every assistant turn before the last user message, so once the
conversation moves on, turn 1's tokens are no longer in the prompt of turn 2.

Implementation choices:
1) The check is on token ids, not text: render ``messages[:k]`` with the assistant turn opened
   and ``messages[:k+1]``, tokenise both, and the first must be a prefix of the second at every
   assistant message ``k``. A failure names the turn, the token position and the tokens on
   each side, with the usual fixes.
2) A template that renders the same text with and without ``add_generation_prompt`` has no
   generation prompt: sampling from it would continue the user's turn. It is refused.
3) The embedded tiny model's template is ``models/tiny.py``'s ``TINY_CHAT_TEMPLATE``
   (``policy.tiny.chat_template``).
4) Messages reach the template as plain dicts whose content is text: a list of text parts is
   joined by newlines (as vLLM does for a template that reads text), and content of any other
   kind (an object, a dict, a number, an image part) is refused in one line naming the message,
   its role and the type, where it would otherwise be rendered as its ``repr``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rlnb.engine.environments.run_task import loop_section_of
from rlnb.engine.environments.tasks import check_rollout_turns

ADVICE = ("usual fixes: a template that keeps earlier turns as they were rendered (for Qwen3, one "
          "that keeps past <think> blocks); train each turn as its own sample; or keep reasoning "
          "out of earlier turns")


def plain_messages(messages: Iterable[Any]) -> list[dict]:
    """Messages as plain dicts: OpenAI message objects (``model_dump``/``to_dict``) and
    mappings alike, so a template and an equality test read them the same way (choice 4)."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Iterable):
        raise ValueError(f"messages: a list of messages, got {type(messages).__name__}")
    out = []
    for i, m in enumerate(messages):
        if hasattr(m, "to_dict"):
            m = m.to_dict()
        elif hasattr(m, "model_dump"):
            m = m.model_dump(exclude_none=True)
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}]: a message is a mapping with a 'role' (a string), "
                             f"got {m!r}")
        m = {k: v for k, v in dict(m).items() if v is not None}
        if isinstance(m.get("tool_calls"), list):  # a reply's call objects in a dict of one's own
            m["tool_calls"] = [c.model_dump(exclude_none=True) if hasattr(c, "model_dump") else c
                               for c in m["tool_calls"]]
        if "content" in m:
            m["content"] = content_text(m["content"], f"messages[{i}] ({m['role']})")
        out.append(m)
    return out


def content_text(content: Any, where: str) -> str:
    """A message's content as the template's text (choice 4): a string, or a list of text parts
    joined by newlines; anything else is refused, as OpenAI's client refuses it."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ValueError(f"{where}: content is a {type(content).__name__}, not a string or a list "
                         "of content parts; give the text (json.dumps a structured tool result)")
    texts = []
    for j, part in enumerate(content):
        if hasattr(part, "model_dump"):
            part = part.model_dump(exclude_none=True)
        kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
        if kind != "text" or not isinstance(part.get("text"), str):
            raise ValueError(f"{where}: content[{j}] is a {kind!r} part; the policy reads text "
                             "parts ({'type': 'text', 'text': ...}) only")
        texts.append(part["text"])
    return "\n".join(texts)


def render(tokenizer, messages: Sequence[Any], tools: list | None = None, *,
           add_generation_prompt: bool = True) -> str:
    """The chat template's text for ``messages`` (and the tool schemas ``tools``)."""
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"the tokenizer ({type(tokenizer).__name__}) has no chat template: "
                         "multi-turn agents need one (for the embedded tiny model: "
                         "policy.tiny.chat_template=true)")
    kwargs = {"tools": tools} if tools else {}
    return tokenizer.apply_chat_template(plain_messages(messages), tokenize=False,
                                         add_generation_prompt=add_generation_prompt, **kwargs)


def token_ids(tokenizer, text: str) -> list[int]:
    """``text``'s ids as the template wrote it: its special tokens are in the text already."""
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


@dataclass
class PrefixReport:
    """Whether a template is prefix-preserving on one conversation.

    Attributes:
        ok: every turn's tokens extend the previous turn's.
        turn: the assistant message (its index in the conversation) whose rendering broke, or
            None; position: the first token that differs; before / after: a few tokens from
            there as rendered before that turn and after it.
    """

    ok: bool
    turn: int | None = None
    position: int | None = None
    before: list[str] | None = None
    after: list[str] | None = None

    def message(self) -> str:
        if self.ok:
            return "the chat template is prefix-preserving on this conversation"
        return (f"the chat template is not prefix-preserving: after message {self.turn} "
                f"(assistant), token {self.position} changed from {self.before} to {self.after}, "
                f"so the earlier turn's tokens are not in the next turn's prompt; {ADVICE}")


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """The first index where ``b`` stops extending ``a`` (None when ``a`` is a prefix of ``b``)."""
    for i, x in enumerate(a):
        if i >= len(b) or b[i] != x:
            return i
    return None


def check_prefix(tokenizer, conversation: Sequence[Any], tools: list | None = None,
                 context: int = 6) -> PrefixReport:
    """Check at every assistant message ``k`` of ``conversation`` that the tokens the model saw
    when it wrote it (everything before, its turn opened) and the tokens of the turn it ended
    (everything up to it) are a prefix of the next turn's prompt (choice 1)."""
    messages = plain_messages(conversation)
    check_generation_prompt(tokenizer)
    assistant = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    for k, nxt in zip(assistant, assistant[1:] + [len(messages)]):
        if nxt == k + 1 and nxt == len(messages):
            break  # nothing follows the last turn
        steps = [render(tokenizer, messages[:k], tools),
                 render(tokenizer, messages[:k + 1], tools, add_generation_prompt=False),
                 render(tokenizer, messages[:nxt], tools)]
        ids = [token_ids(tokenizer, text) for text in steps]
        for seen, later in zip(ids, ids[1:]):
            at = first_difference(seen, later)
            if at is not None:
                tok = tokenizer.convert_ids_to_tokens
                return PrefixReport(False, k, at, tok(seen[at:at + context]),
                                    tok(later[at:at + context]))
    return PrefixReport(True)


def check_generation_prompt(tokenizer) -> None:
    """Refuse a template without a generation prompt (choice 2)."""
    probe = [{"role": "user", "content": "hi"}]
    if render(tokenizer, probe) == render(tokenizer, probe, add_generation_prompt=False):
        raise ValueError("the chat template adds no generation prompt (add_generation_prompt="
                         "True renders the same text as False): the model would go on writing "
                         "the user's turn; use a template that opens the assistant's turn")


# the shapes of conversation an agent's turns take, for the check before training: reasoning
# in an earlier turn (what Qwen3-style templates drop), and a tool call answered by a tool
PROBE_CONVERSATIONS: list[list[dict]] = [
    [{"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "<think>add</think>4"},
     {"role": "user", "content": "and 3+3?"},
     {"role": "assistant", "content": "<think>add</think>6"}],
    [{"role": "user", "content": "2*3?"},
     {"role": "assistant", "content": "<think>use the tool</think>",
      "tool_calls": [{"id": "call_0", "type": "function",
                      "function": {"name": "calc", "arguments": '{"x": "2*3"}'}}]},
     {"role": "tool", "tool_call_id": "call_0", "content": "6"},
     {"role": "assistant", "content": "6"}],
]


def check_before_training(tokenizer, conversations: Sequence[Sequence[Any]] | None = None,
                          tools: list | None = None) -> None:
    """Refuse a template that would make multi-turn samples wrong: no generation prompt, or not
    prefix-preserving on ``conversations`` (default: ``PROBE_CONVERSATIONS``)."""
    for conv in conversations or PROBE_CONVERSATIONS:
        report = check_prefix(tokenizer, conv, tools)
        if not report.ok:
            raise ValueError(report.message())


def check_agent_task(task, tokenizer, config) -> None:
    """What a run with an agent task (one whose ``agent`` drives the turns) needs, checked when
    the trainer is built: the environment is the task itself, and the template has a generation
    prompt and is prefix-preserving on the task's conversation shapes (``probe_conversations``,
    default ``PROBE_CONVERSATIONS``), unless ``task.prefix_check`` is False; and the loop's
    ``max_rollout_turns`` gives the task the turns it needs (``Task.turns_needed``)."""
    env = getattr(getattr(config, "env", None), "name", "task")
    if env != "task":
        raise ValueError(f"env.name={env!r}: task {task.name!r} runs its own agent episodes; use "
                         "env.name=task")
    loop = loop_section_of(config)
    if loop is not None:  # a task handed over in Python: the turns it needs (data's: at load)
        section = getattr(loop, "section", None) or getattr(config, "algorithm", "grpo")
        check_rollout_turns(type(task), task, getattr(loop, "max_rollout_turns", 1),
                            f"{section}.max_rollout_turns",
                            settable="max_rollout_turns" in getattr(type(loop), "model_fields", {}))
    if getattr(task, "prefix_check", True):
        check_before_training(tokenizer, getattr(task, "probe_conversations", None),
                              getattr(task, "tools", None))
