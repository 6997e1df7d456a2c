"""One agent episode as the client recorded it, and the training sample it becomes.

    call 1: render(messages_1)                        -> prompt_1 | completion_1
    call 2: prompt_1 | completion_1 | bridge + new     -> prompt_2 | completion_2
    sample: prompt_1 | completion_1 | env | completion_2 | ...   token_mask 1 on completions

Implementation choices:
1) Token in, token out: a call whose messages extend the previous call's conversation (its
   messages, then the assistant's reply, then anything new) is prompted with the previous
   prompt's ids, the previous completion's ids as sampled, and only the new messages tokenised:
   the text the template appends after the assistant message. The model's tokens are never
   decoded and re-encoded, so the sample trains on exactly the tokens the sampler produced.
2) The *bridge* between a completion and the new messages is what the template writes after
   the assistant's text: the rendered assistant turn after the decoded completion (``"\\n"``
   after ``</s>``, ``"\\n"`` after ``<|im_end|>``), or, when the template re-renders the reply
   differently (tool calls written its own way), what follows the EOS token in it, with the
   EOS first when the completion was cut before it. The bridge is the environment's: mask 0.
3) A call that does not extend the previous one is prompted with the template's own rendering,
   and the episode is *broken*: it cannot be one sample, so it is kept out of the loss
   (``sample_mask`` 0: none of its tokens is trained) and counted
   (``train/agent/broken_episodes``), with its reason naming the call and the message. It does
   not extend it when an earlier message changed, when the message after them is not an
   assistant message, when that message is not the reply the client returned (an agent that
   rewrites or compacts its last reply: the model would be prompted with tokens it did not
   write), when other tools change what the template renders before it, or when the template
   rewrote an earlier turn (``templates.check_prefix``).
4) Messages are compared by what they say (``same_message``), not by their Python type: the
   reply object passed back, its ``model_dump()`` or ``to_dict()``, or a dict with the same
   role, content and tool calls are all the reply. Tool-call arguments compare as JSON values
   (``'{"x": 1}'`` is ``'{"x":1}'``); tool-call ids may differ (the model wrote none of them);
   content None is "" (a reply that only calls tools); a key the reply lacks (a ``name``, a
   ``reasoning_content``) with a value is a change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from rlnb.engine.agents.sampler import Sampled
from rlnb.engine.agents.templates import plain_messages, render, token_ids


@dataclass
class Call:
    """One recorded completion: the conversation it answered, the prompt's ids, the sample and
    the message the client returned for it."""

    messages: list[dict]
    tools: list | None
    prompt_ids: list[int]
    sampled: Sampled
    reply: dict | None = None


@dataclass
class Episode:
    """What the client records for one episode (``tokenizer``'s chat template renders it)."""

    tokenizer: object
    calls: list[Call] = field(default_factory=list)
    broken: str | None = None  # why the episode cannot be one sample (choice 3)
    # counters the client adds to (malformed / unknown tool calls)
    counts: dict[str, int] = field(default_factory=dict)

    def prompt_ids(self, messages: list, tools: list | None) -> list[int]:
        """The ids to prompt the model with for ``messages`` (choices 1-3)."""
        tok = self.tokenizer
        fresh = render(tok, messages, tools)
        if not self.calls:
            return token_ids(tok, fresh)
        prev = self.calls[-1]
        a = len(prev.messages)
        turn = len(self.calls) + 1
        why = continues(messages, prev)
        if why is None and not same_tools(tools, prev.tools) and render(
                tok, messages[:a], tools) != render(tok, prev.messages, prev.tools):
            why = ("its tools differ from the previous call's, and the chat template renders "
                   "them: the previous prompt is not its prefix")
        if why is not None:
            self.mark(f"call {turn}: {why}")
            return token_ids(tok, fresh)
        closed = render(tok, messages[: a + 1], tools, add_generation_prompt=False)
        if not fresh.startswith(closed):
            self.mark(f"call {turn}: the chat template rewrote the conversation up to message "
                      f"{a} (not prefix-preserving)")
            return token_ids(tok, fresh)
        bridge = self.bridge(render(tok, messages[:a], tools), closed, prev.sampled)
        return prev.prompt_ids + prev.sampled.token_ids + token_ids(
            tok, bridge + fresh[len(closed):])

    def bridge(self, opened: str, closed: str, sampled: Sampled) -> str:
        """What the template writes after the model's tokens (choice 2)."""
        tok = self.tokenizer
        turn = closed[len(opened):] if closed.startswith(opened) else closed
        written = tok.decode(sampled.token_ids, skip_special_tokens=False,
                             clean_up_tokenization_spaces=False)
        if turn.startswith(written):
            return turn[len(written):]
        eos = tok.eos_token or ""
        if eos and eos in turn:
            after = turn[turn.rindex(eos) + len(eos):]
            ended = bool(sampled.token_ids) and sampled.token_ids[-1] == tok.eos_token_id
            return after if ended else eos + after
        return ""

    def record(self, messages: list, tools: list | None, prompt_ids: list[int],
               sampled: Sampled, reply: dict | None = None) -> None:
        self.calls.append(Call(plain_messages(messages), tools, prompt_ids, sampled, reply))

    def mark(self, reason: str) -> None:
        if self.broken is None:
            self.broken = reason

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.counts[name] = self.counts.get(name, 0) + n

    def sample(self) -> tuple[list[int], list[int], list[float], list[float]]:
        """``(prompt ids, the rest's ids, its token mask, its generation log-probs)``: the
        first call's prompt, then every completion and what came between (choice 1); empty
        after the prompt when the episode made no call."""
        if not self.calls:
            return [], [], [], []
        first = self.calls[0].prompt_ids
        rest: list[int] = []
        mask: list[float] = []
        logprobs: list[float] = []
        for call in (self.calls if self.broken is None else self.calls[:1]):
            between = call.prompt_ids[len(first) + len(rest):]
            rest += between + call.sampled.token_ids
            mask += [0.0] * len(between) + [1.0] * len(call.sampled.token_ids)
            logprobs += [0.0] * len(between) + call.sampled.logprobs
        return first, rest, mask, logprobs


def continues(messages: list[dict], prev: Call) -> str | None:
    """None when ``messages`` are ``prev``'s messages, then its reply, then anything new;
    otherwise why not (choice 3), naming the message."""
    a = len(prev.messages)
    for i, (now, then) in enumerate(zip(messages, prev.messages)):
        diff = same_message(now, then)
        if diff is not None:
            return (f"messages[{i}] ({now.get('role')}) changed since the previous call ({diff}), "
                    "so the previous prompt is not its prefix")
    if len(messages) <= a:
        return (f"its {len(messages)} messages do not continue the previous call's {a} and its "
                "reply")
    role = messages[a].get("role")
    if role != "assistant":
        return (f"messages[{a}] is a {role!r} message where the previous call's reply (an "
                "assistant message) should be")
    diff = same_message(messages[a], prev.reply) if prev.reply is not None else None
    if diff is not None:
        return (f"messages[{a}] is not the reply the client returned ({diff}): the model would be "
                "prompted with tokens it did not write")
    return None


EMPTY = (None, "", [], {})


def same_tools(a: list | None, b: list | None) -> bool:
    return json.dumps(a or [], sort_keys=True, default=str) == json.dumps(b or [], sort_keys=True,
                                                                          default=str)


def same_message(given: dict, want: dict) -> str | None:
    """None when ``given`` says what ``want`` says (choice 4), else what differs."""
    for key in sorted(set(given) | set(want)):
        mine, theirs = given.get(key), want.get(key)
        if key == "content":
            mine, theirs = mine or "", theirs or ""
        elif key == "tool_calls":
            mine, theirs = _calls(mine, want.get("role")), _calls(theirs, want.get("role"))
        elif mine in EMPTY and theirs in EMPTY:
            continue
        if mine != theirs:
            return f"{key!r} differs" if key in given and key in want else (
                f"{key!r} {'added' if key in given else 'left out'}")
    return None


def _calls(calls, role) -> list:
    """Tool calls as ``(type, name, arguments as a JSON value[, id])``: an assistant's ids are
    the client's, not the model's, and may differ (choice 4)."""
    out = []
    for c in calls or []:
        fn = c.get("function") or {}
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        key = (c.get("type") or "function", fn.get("name"), json.dumps(args, sort_keys=True))
        out.append(key if role == "assistant" else (*key, c.get("id")))
    return out
