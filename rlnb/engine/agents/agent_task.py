"""A user's agent code as a task the GRPO loop trains on: rows, and ``agent(client, row)``.

    task = AgentTask(my_agent, train=rows, val=held_out_rows)
    trainer = rlnb.GRPOTrainer(config, task=task)          # every sample is one episode

    task = AgentTask(openenv_agent(make_env, rubric={"win": won}), train=rows)   # reset/step

Implementation choices:
1) Training rows are drawn in passes over ``train``, each pass in a seeded order of its own,
   so row ``i`` of a stream is the same in every process and after a resume.
2) An OpenEnv-style environment (``reset()``/``step(action)`` returning an observation, a reward
   and whether it is done, as a tuple or as attributes) is driven by ``openenv_agent``: each
   observation is the next user message, each reply the next action. Its reward is a number
   or a mapping of named parts, and a ``rubric`` (name -> ``fn(observation, action)``) adds
   named parts of its own; every part is summed over the episode's steps (a reset rewards no
   action) and becomes a reward component (GDPO normalises each apart).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlnb.engine.environments.base import Rewards, Task


class AgentTask(Task):
    """Rows and the agent code that plays one episode per row (module docstring)."""

    chat = True

    def __init__(self, agent: Callable, train: Sequence[dict], val: Sequence[dict] | None = None,
                 *, tools: list | None = None, probe_conversations: list | None = None,
                 prefix_check: bool = True, name: str = "agent"):
        if not callable(agent):
            raise TypeError(f"AgentTask: agent must be callable (client, row), got {agent!r}")
        if not train:
            raise ValueError("AgentTask: train has no rows")
        for i, row in enumerate(train):
            if not isinstance(row, Mapping):
                raise ValueError(f"AgentTask: train row {i} is {type(row).__name__}, not a dict")
        self.agent, self.name = agent, name
        self.rows, self.val = [dict(r) for r in train], [dict(r) for r in (val or [])]
        self.tools, self.probe_conversations = tools, probe_conversations
        self.prefix_check = prefix_check

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        out: list[dict] = []
        rounds = 0
        while len(out) < n:  # choice 1
            order = list(range(len(self.rows)))
            random.Random(f"rlnb/agent/{seed}/{rounds}").shuffle(order)
            out += [dict(self.rows[i]) for i in order]
            rounds += 1
        return out[:n]

    def val_rows(self, n: int | None = None) -> list[dict]:
        rows = self.val if n is None else self.val[:n]
        return [dict(r) for r in rows]

    def demonstration(self, row: dict) -> str:
        """The warm start's target: the row's ``sft_target`` or ``answer`` after its prompt."""
        if "sft_target" not in row and "answer" not in row:
            raise ValueError(f"task {self.name!r}: the warm start trains on each row's 'answer' "
                             f"(or 'sft_target'), and this row has neither (keys: {list(row)}); "
                             "add one, or set sft.enabled=false")
        return super().demonstration(row)

    def score(self, prompts, responses, rows) -> Rewards:
        raise ValueError(f"task {self.name!r} scores whole agent episodes (its agent), not "
                         "single responses")


def step_parts(result: Any) -> tuple[Any, Any, bool]:
    """``(observation, reward, done)`` of a ``reset``/``step`` result (choice 2)."""
    if isinstance(result, tuple):
        if len(result) < 3:
            return result[0], 0.0, False
        obs, reward, done = result[:3]
        if len(result) >= 5:  # gymnasium: (obs, reward, terminated, truncated, info)
            done = bool(result[2]) or bool(result[3])
        return obs, reward, bool(done)
    obs = getattr(result, "observation", result)
    reward = getattr(result, "reward", getattr(obs, "reward", 0.0))
    done = getattr(result, "done", getattr(obs, "done", False))
    return obs, reward, bool(done)


def add_parts(total: dict[str, float], reward: Any, where: str) -> None:
    if reward is None:
        return
    parts = reward if isinstance(reward, Mapping) else {"reward": reward}
    for name, value in parts.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}: reward part {name!r} is {value!r}, not a number")
        total[str(name)] = total.get(str(name), 0.0) + float(value)


def openenv_agent(make_env: Callable[[dict], Any], *, rubric: Mapping[str, Callable] | None = None,
                  system_prompt: str | None = None,
                  observation_text: Callable[[Any], str] = str) -> Callable:
    """An agent that plays ``make_env(row)`` (choice 2)."""

    async def agent(client, row: dict) -> dict[str, float]:
        env = make_env(row)
        obs, _, done = step_parts(env.reset())  # a reset rewards no action
        parts: dict[str, float] = {name: 0.0 for name in rubric or {}}
        messages = ([{"role": "system", "content": system_prompt}] if system_prompt else [])
        messages.append({"role": "user", "content": observation_text(obs)})
        turn = 0
        while not done:
            turn += 1
            reply = await client.chat.completions.create(messages=messages)
            action = reply.choices[0].message.content or ""
            messages.append(reply.choices[0].message)
            obs, reward, done = step_parts(env.step(action))
            add_parts(parts, reward, f"step {turn}")
            for name, fn in (rubric or {}).items():
                add_parts(parts, {name: fn(obs, action)}, f"step {turn}, rubric")
            if not done:
                messages.append({"role": "user", "content": observation_text(obs)})
        if hasattr(env, "close"):
            env.close()
        return parts or {"reward": 0.0}

    return agent
