"""How a task row becomes the text the policy generates from.

    format_prompt({"prompt": "12+7="})                                 # "12+7=" (the tiny model)
    format_prompt({"prompt": [{"role": "user", "content": "12+7?"}]}, tokenizer)  # its template

A prompt is text or chat messages (TRL's standard and conversational formats); messages, and text
under ``policy.chat_template``, go through the tokenizer's own chat template with the
assistant's turn opened.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def is_messages(prompt: Any) -> bool:
    """Whether a prompt is chat-formatted: a list of ``{"role", "content"}`` dicts."""
    return isinstance(prompt, (list, tuple)) and all(
        isinstance(m, Mapping) and "role" in m and "content" in m for m in prompt)


def format_prompt(row: dict, tokenizer=None, chat_template: bool = False) -> str:
    """The text to generate from: the row's prompt as is (tiny model), or wrapped in the
    tokenizer's chat template as one user turn with the assistant's turn opened. A prompt of
    chat messages (``[{"role", "content"}, ...]``) always goes through the chat template."""
    if "prompt" not in row:
        raise ValueError(f"row has no 'prompt' key (keys: {list(row)})")
    messages = row["prompt"]
    if isinstance(messages, str):
        if not chat_template:
            return messages
        messages = [{"role": "user", "content": messages}]
    elif not is_messages(messages):
        raise ValueError(f"a prompt is text or a list of {{'role', 'content'}} messages, got "
                         f"{messages!r}")
    if tokenizer is None:
        raise ValueError("a chat template needs a tokenizer (format_prompt(row, tokenizer))")
    if getattr(tokenizer, "chat_template", None) is None:
        why = ("the prompts are chat messages" if not chat_template
               else "policy.chat_template=true")
        raise ValueError(f"{why}, but the tokenizer ({type(tokenizer).__name__}) has no chat "
                         "template: give prompts as text (and policy.chat_template=false), or a "
                         "model whose tokenizer has one")
    return tokenizer.apply_chat_template(list(messages), add_generation_prompt=True,
                                         tokenize=False)
