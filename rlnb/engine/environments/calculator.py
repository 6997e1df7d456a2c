"""``calculator``: a tool-using agent task. ``"37*48"`` is asked as a chat message; the model may
call the ``calc`` tool, reads its result and answers ``"1776"``.

    U:37*48                                                   (the tiny model's chat template)
    A:<tool_call>{"name":"calc","arguments":{"x":"37*48"}}</tool_call></s>
    T:1776
    A:1776</s>

The products of two ``digits``-digit numbers are beyond what the tiny model can compute, so
answering right means calling the tool: the reward (``correct``: 1 for the right number) rises
as the policy learns to call it. The episode is agent code (``agent``) run against the in-process
OpenAI-compatible client (``rlnb.engine.agents``); the trainer runs it for every sample.

Implementation choices:
1) The warm start demonstrates both ways: a share ``tool_demos`` of the rows (chosen by the
   question, so every process agrees) call the tool and copy its result, the others answer
   directly. The policy starts out calling the tool sometimes; GRPO rewards the calls that led
   to right answers. (The demonstration of a tool call includes the tool's reply, which the
   warm start trains on too: it is never sampled, the model stops at ``</s>``.)
2) ``calc`` evaluates ``a op b`` for integers and ``+ - *`` only (no ``eval``); anything else is
   answered ``error: ...``, as is a call to another tool, so the agent never raises on the
   model's mistakes.
3) An episode makes at most ``max_tool_calls`` tool calls, then its last reply is the answer:
   it needs ``max_tool_calls + 1`` model turns, and a smaller ``grpo.max_rollout_turns`` is
   refused when the config loads (``turns_needed``): every episode that used its calls would
   end truncated with reward 0.
"""

from __future__ import annotations

import json
import random
import re

import torch
from pydantic import Field

from rlnb.engine.environments.base import Rewards, TaskSettings, check_batch
from rlnb.engine.environments.generated import GeneratedTask

TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Evaluate 'a op b' for integers a, b and op one of + - *.",
    "parameters": {"type": "object", "properties": {"x": {"type": "string"}},
                   "required": ["x"]}}}]
EXPRESSION = re.compile(r"\s*(-?\d{1,12})\s*([-+*])\s*(-?\d{1,12})\s*")


def calc(expression: str) -> str:
    """The ``calc`` tool (choice 2)."""
    m = EXPRESSION.fullmatch(expression)
    if m is None:
        return "error: expected 'a op b'"
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return str({"+": a + b, "-": a - b, "*": a * b}[op])


def run_tool(name: str, arguments: str) -> str:
    """A tool call's result text (choice 2: errors are answers, not exceptions)."""
    if name != "calc":
        return f"error: no tool {name!r}"
    try:
        args = json.loads(arguments)
    except ValueError:
        return "error: arguments are not JSON"
    if not isinstance(args, dict) or not isinstance(args.get("x"), str):
        return "error: expected {'x': 'a op b'}"
    return calc(args["x"])


class CalculatorTask(GeneratedTask):
    """``"a*b"`` with ``digits``-digit ``a, b``, asked as a chat message; an agent episode with
    the ``calc`` tool (module docstring)."""

    name = "calculator"
    chat = True  # the prompts are chat messages: the tokenizer needs a chat template

    class Settings(TaskSettings):
        """``data.name: calculator``'s settings."""

        digits: int = Field(2, ge=1, le=6, description="digits of each factor")
        tool_demos: float = Field(0.3, ge=0, le=1, description=(
            "share of warm-start demonstrations that call the tool"))
        max_tool_calls: int = Field(1, ge=0, description="tool calls an episode may make")

    def __init__(self, digits: int, tool_demos: float, max_tool_calls: int,
                 num_val: int, seed: int):
        self.digits, self.tool_demos, self.max_tool_calls = digits, tool_demos, max_tool_calls
        self.answer_pattern = re.compile(r"-?\d+")
        super().__init__(num_val=num_val, seed=seed)

    @property
    def num_problems(self) -> int:
        return (9 * 10 ** (self.digits - 1)) ** 2

    def draw(self, rng: random.Random) -> dict:
        low, high = 10 ** (self.digits - 1), 10 ** self.digits - 1
        a, b = rng.randint(low, high), rng.randint(low, high)
        question = f"{a}*{b}"
        return {"prompt": [{"role": "user", "content": question}], "question": question,
                "answer": str(a * b)}

    def key(self, row: dict) -> str:
        return row["question"]

    @classmethod
    def turns_needed(cls, settings) -> tuple[int, str]:
        """Choice 3: ``max_tool_calls`` tool calls, then the answer in a turn of its own."""
        calls = settings.max_tool_calls
        return calls + 1, (f"data.max_tool_calls={calls}: that many tool calls, then the answer "
                           "in a turn of its own")

    def demonstration(self, row: dict) -> str:
        """Choice 1: a tool call, its result and the answer, or the answer alone."""
        if random.Random(f"rlnb/calculator/demo/{row['question']}").random() >= self.tool_demos:
            return row["answer"]
        call = json.dumps({"name": "calc", "arguments": {"x": row["question"]}},
                          separators=(",", ":"))
        return f"<tool_call>{call}</tool_call></s>\nT:{row['answer']}\nA:{row['answer']}"

    async def agent(self, client, row: dict) -> dict[str, float]:
        """One episode: ask, run the tool calls the model makes (up to ``max_tool_calls``),
        and score the final reply."""
        messages = list(row["prompt"])
        for calls in range(self.max_tool_calls + 1):
            reply = await client.chat.completions.create(messages=messages, tools=TOOLS)
            message = reply.choices[0].message
            messages.append(message)
            if not message.tool_calls or calls == self.max_tool_calls:
                break
            for call in message.tool_calls:
                messages.append({"role": "tool", "tool_call_id": call.id,
                                 "content": run_tool(call.function.name,
                                                     call.function.arguments)})
        answer = (message.content or "").strip() if not message.tool_calls else ""
        return {"correct": float(answer == row["answer"])}

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """A single reply as the final answer (what a single-turn caller gets)."""
        check_batch(self.name, prompts, responses, rows)
        correct = torch.tensor([r.strip() == row["answer"] for r, row in zip(responses, rows)])
        return Rewards(correct.float(), {"correct": correct.float()}, correct)
