"""The chat-template inspector: turn N against turn N+1 token by token, and a trajectory's tokens
by who wrote them.

    TemplateInspector(tokenizer, conversation).display()      # a turn picker, the two rows
    TemplateInspector(tokenizer, batch=batch, row=3).display()  # a trajectory from a run

Tokens of the model's turns are green, the prompt's and the environment's grey, the first
position where turn N+1 rewrote turn N red, with the verdict under them
(``rlnb.engine.agents.inspector``). With a ``RolloutBatch``, the trajectory view shows which
tokens trained (the token mask) and which were the environment's; "Previous" / "Next" move
through the batch's rows.
"""

from __future__ import annotations

from rlnb.engine.agents.inspector import (
    compare_turns,
    to_html,
    trajectory_html,
    trajectory_tokens,
)
from rlnb.engine.agents.templates import plain_messages
from rlnb.widgets.static import LiveAndStatic


class TemplateInspector(LiveAndStatic):
    """Turn N against turn N+1 of ``conversation`` (a turn picker), or row ``row`` of ``batch``
    (Previous / Next buttons)."""

    def __init__(self, tokenizer, conversation=None, *, tools=None, batch=None, row: int = 0):
        import ipywidgets as widgets

        if (conversation is None) == (batch is None):
            raise ValueError("TemplateInspector: give a conversation or a batch (one of them)")
        self.tokenizer, self.tools, self.batch = tokenizer, tools, batch
        self.html = widgets.HTML()
        if conversation is not None:
            self.messages = plain_messages(conversation)
            turns = sum(m["role"] == "assistant" for m in self.messages)
            last_ends = self.messages and self.messages[-1]["role"] == "assistant"
            options = list(range(1, turns + (0 if last_ends else 1)))
            if not options:
                raise ValueError("TemplateInspector: the conversation has no assistant turn "
                                 "followed by another message")
            self.picker = widgets.Dropdown(options=[(f"turn {t} vs {t + 1}", t) for t in options],
                                           value=options[0], description="compare")
            self.picker.observe(lambda _: self.refresh(), names="value")
            self.widget = widgets.VBox([self.picker, self.html])
        else:
            self.row = row
            self.prev = widgets.Button(description="Previous")
            self.next = widgets.Button(description="Next")
            self.label = widgets.Label()
            self.prev.on_click(lambda _: self.move(-1))
            self.next.on_click(lambda _: self.move(1))
            self.widget = widgets.VBox([widgets.HBox([self.prev, self.next, self.label]),
                                        self.html])
        self.refresh()

    @property
    def turn(self) -> int:
        return self.picker.value

    def move(self, by: int) -> None:
        self.row = (self.row + by) % len(self.batch.input_ids)
        self.refresh()

    def view_html(self) -> str:
        if self.batch is None:
            return to_html(compare_turns(self.tokenizer, self.messages, self.turn, self.tools))
        tokens = trajectory_tokens(self.batch, self.row, self.tokenizer)
        reward = float(self.batch.rewards[self.row])
        return (f"<div>row {self.row}: reward {reward:g}</div>" + trajectory_html(tokens))

    def refresh(self) -> None:
        self.html.value = self.view_html()
        if self.batch is not None:
            self.label.value = f"row {self.row} of {len(self.batch.input_ids)}"

    def static_html(self) -> str:
        return self.view_html()

    def __repr__(self) -> str:
        if self.batch is None:
            return compare_turns(self.tokenizer, self.messages, self.turn, self.tools).verdict
        return f"TemplateInspector(row {self.row} of {len(self.batch.input_ids)})"
