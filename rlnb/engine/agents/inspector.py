"""The chat-template inspector: turn N against turn N+1, token by token, and a trajectory's
tokens by who wrote them.

    view = compare_turns(tokenizer, conversation, turn=1)
    view.verdict          # "turn 2's prompt extends turn 1 (...)" or the first diverging token
    view.rows             # [TokenRow(index, turn_n, turn_next, role, same), ...]
    trajectory_tokens(batch, i, tokenizer)    # [(token, trained, generation log-prob), ...]
    to_html(view) / trajectory_html(...)      # what the widget shows (widgets/template_inspector)

Implementation choices:
1) "Turn N" is the sequence as it stood when assistant turn N ended (everything up to and
   including that reply, rendered with the template); "turn N+1" is the next assistant turn's
   prompt. They are aligned position by position: a prefix-preserving template leaves every
   token of turn N in place, and turn N+1 only adds; the first position that differs is where
   the template rewrote history.
2) Each token of turn N+1 is labelled by who wrote it: ``model`` (the span of an assistant
   message's content as the template renders it: what the loss would train), ``prompt``
   (everything else: system, user, tool messages, the template's markup). Colours: model
   tokens green, the others grey, a diverging position red.
3) A trajectory from a run is read from its ``RolloutBatch`` row: the token mask says which
   tokens trained (the model's) and which were the environment's.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field

from rlnb.engine.agents.templates import (
    ADVICE,
    first_difference,
    plain_messages,
    render,
    token_ids,
)


@dataclass
class TokenRow:
    index: int
    turn_n: str | None  # the token of turn N at this position (None past its end)
    turn_next: str | None  # the token of turn N+1
    role: str  # "model" | "prompt" (turn N+1's token: choice 2)
    same: bool


@dataclass
class TurnView:
    """Turn N against turn N+1 (choice 1)."""

    turn: int
    rows: list[TokenRow] = field(default_factory=list)
    diverges_at: int | None = None
    verdict: str = ""

    @property
    def ok(self) -> bool:
        return self.diverges_at is None


def assistant_spans(tokenizer, messages: list[dict], upto: int, tools) -> list[tuple[int, int]]:
    """Token ranges of the assistant messages' rendered text within ``messages[:upto]``'s
    rendering, found by rendering with and without each message (choice 2)."""
    spans = []
    for k in range(min(upto, len(messages))):
        if messages[k]["role"] != "assistant":
            continue
        before = len(token_ids(tokenizer, render(tokenizer, messages[:k], tools)))
        after = len(token_ids(tokenizer, render(tokenizer, messages[:k + 1], tools,
                                                add_generation_prompt=False)))
        spans.append((before, after))
    return spans


def compare_turns(tokenizer, conversation, turn: int = 1, tools: list | None = None
                  ) -> TurnView:
    """Turn ``turn`` (1-based among the assistant messages) against the next turn's prompt."""
    messages = plain_messages(conversation)
    assistant = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
    if not 1 <= turn <= len(assistant):
        raise ValueError(f"turn {turn}: the conversation has {len(assistant)} assistant turns")
    k = assistant[turn - 1]
    nxt = assistant[turn] if turn < len(assistant) else len(messages)
    if nxt == k + 1 and nxt == len(messages):
        raise ValueError(f"turn {turn} is the last message: there is no next turn to compare")
    ended = token_ids(tokenizer, render(tokenizer, messages[:k + 1], tools,
                                        add_generation_prompt=False))
    later = token_ids(tokenizer, render(tokenizer, messages[:nxt], tools))
    spans = assistant_spans(tokenizer, messages, nxt, tools)
    tok = tokenizer.convert_ids_to_tokens
    a, b = tok(ended), tok(later)
    at = first_difference(ended, later)
    view = TurnView(turn, diverges_at=at)
    for i in range(max(len(a), len(b))):
        role = "model" if any(s <= i < e for s, e in spans) else "prompt"
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        view.rows.append(TokenRow(i, x, y, role, x is None or x == y))
    if at is None:
        view.verdict = (f"turn {turn + 1}'s prompt extends turn {turn} token for token "
                        f"({len(ended)} tokens kept, {len(later) - len(ended)} added)")
    else:
        view.verdict = (f"turn {turn + 1}'s prompt rewrites turn {turn} at token {at}: "
                        f"{a[at:at + 6]} became {b[at:at + 6]}; {ADVICE}")
    return view


def trajectory_tokens(batch, i: int, tokenizer) -> list[tuple[str, bool, float]]:
    """``(token, trained, generation log-prob)`` of row ``i`` of a ``RolloutBatch``, padding
    left out (choice 3)."""
    keep = batch.attention_mask[i].bool()
    ids = batch.input_ids[i][keep].tolist()
    trained = batch.token_mask[i][keep].bool().tolist()
    lps = batch.generation_logprobs[i][keep].tolist()
    return list(zip(tokenizer.convert_ids_to_tokens(ids), trained, lps))


COLOURS = {"model": "#c8f0c8", "prompt": "#e4e4e4", "diverge": "#f6b0b0"}


def span(token: str | None, colour: str, title: str) -> str:
    shown = html.escape("∅" if token is None else token.replace("\n", "↵"))
    return (f'<span title="{html.escape(title)}" style="background:{colour};margin:1px;'
            f'padding:0 2px;font-family:monospace">{shown}</span>')


def to_html(view: TurnView) -> str:
    """Turn N above turn N+1, one coloured box per token (choice 2)."""
    lines = []
    for label, pick in ((f"turn {view.turn}", "turn_n"), (f"turn {view.turn + 1}", "turn_next")):
        cells = []
        for r in view.rows:
            token = getattr(r, pick)
            colour = COLOURS["diverge"] if not r.same else COLOURS[r.role]
            cells.append(span(token, colour, f"{r.index}: {r.role}"))
        lines.append(f"<div><b>{label}</b> {''.join(cells)}</div>")
    status = "ok" if view.ok else "diverges"
    lines.append(f'<div class="rlnb-verdict" data-status="{status}">{html.escape(view.verdict)}'
                 "</div>")
    return "\n".join(lines)


def trajectory_html(tokens: list[tuple[str, bool, float]]) -> str:
    """A trajectory's tokens: trained (the model's) green, the environment's grey."""
    cells = [span(t, COLOURS["model" if trained else "prompt"],
                  f"{'trained' if trained else 'environment'}, log-prob {lp:.3f}")
             for t, trained, lp in tokens]
    trained = sum(1 for _, t, _ in tokens if t)
    return (f"<div>{''.join(cells)}</div><div>{trained} of {len(tokens)} tokens trained "
            "(green: the model's; grey: prompt and environment)</div>")
