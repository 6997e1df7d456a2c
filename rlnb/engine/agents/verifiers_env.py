"""A verifiers environment whose own ``run`` drives the episode, played in process: verifiers'
multi-turn environments (a game engine or a simulator answering the model), as agent episodes.

    class Guess(vf.Env[GuessConfig]):                 # one seat: GuessConfig.player
        async def run(self, task, agents):
            async with agents.player.interaction(task) as chat:
                segment = await chat.turn()           # the model answers the task's prompt
                while not segment.terminated and segment.last_reply != task.data.answer:
                    segment = await chat.turn("higher" if ... else "lower")
            chat.trace.record_reward("won", float(...), 1.0)

    trainer = rlnb.GRPOTrainer(config, environment=Guess(GuessConfig(taskset=...)))

Implementation choices:
1) The env's seat is an in-process stand-in for verifiers' ``Agent``: ``interaction(task)``
   gives an object with ``turn(message=None)`` and ``trace``, and ``run(task)`` plays the task
   once, with verifiers' rules for both (a prompted task opens with a bare ``turn()``; a task
   with ``prompt=None`` waits for the env's first message; a turn after the exchange ended is
   an error; a turn that the turn limit or a ``@vf.stop`` refuses returns a ``terminated``
   segment). Each turn is a segment of ``verifiers_loop.Conversation``: the model's turns,
   its tool calls answered, until a reply without one.
2) The whole episode is one conversation through the in-process client, so one trainable
   sample: the model's tokens trained, the env's messages not (``episode.py``). An env with
   several seats, a ``finalize`` of its own, or another harness is refused when the task is
   built (``verifiers_task.env_of``).
3) The rewards ``run`` records on the trace (``trace.record_reward``) join the task's rubric:
   the trace is scored afterwards as in the tool loop (``VerifiersAgentTask._components``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from rlnb.engine.agents.verifiers_loop import Conversation


class Seat:
    """The env's one seat (choice 1): ``interaction`` and ``run`` as verifiers' ``Agent``."""

    trainable = True

    def __init__(self, owner, client):
        self.owner, self.client = owner, client
        self.chat: Interaction | None = None

    @contextlib.asynccontextmanager
    async def interaction(self, task) -> AsyncIterator[Interaction]:
        if self.chat is not None:
            raise ValueError("the environment opened a second interaction in one episode; rlnb "
                             "trains one conversation per episode")
        self.chat = Interaction(await Conversation.open(self.owner, self.client, task, []),
                                task)
        try:
            yield self.chat
        finally:
            if self.chat.conv.trace.stop_condition is None:
                self.chat.conv.trace.stop("user_closed")

    async def run(self, task):
        """One play of ``task`` (a bare turn on its prompt), its trace."""
        async with self.interaction(task) as chat:
            await chat.turn()
        return chat.trace


class Interaction:
    """``turn`` and ``trace`` of one exchange (choice 1)."""

    def __init__(self, conv, task):
        self.conv, self.task = conv, task
        self.started = self.over = False

    @property
    def trace(self):
        return self.conv.trace

    async def turn(self, message=None):
        from verifiers.v1.agent import Segment
        from verifiers.v1.types import ToolMessage

        if self.over:
            raise RuntimeError("the exchange is over (the run ended); read interaction.trace")
        prompted = not self.started and self.task.data.prompt is not None
        if message is None and not prompted:
            raise ValueError("nothing to run a turn on: a bare turn() takes a prompted task's "
                             "opening reply; this exchange takes its next user message")
        if message is not None and prompted:
            raise ValueError("the task's prompt opens this exchange: take its first reply with "
                             "a bare turn() before answering")
        if not self.started:
            self.opening()
        self.started = True
        new = ([{"role": "user", "content": message}] if isinstance(message, str)
               else [dict(m) if isinstance(m, dict) else m.model_dump() for m in message or []])
        for m in new:
            self.conv.messages.append(m)
            self.conv.add(m)
        turns, nodes = self.trace.num_turns, len(self.trace.nodes)
        await self.conv.segment()
        if self.trace.num_turns == turns:
            self.over = True
            return Segment(messages=[], terminated=True)
        out, saw = [], False
        for node in self.trace.nodes[nodes:]:
            if node.sampled:
                out.append(node.message)
                saw = True
            elif saw and isinstance(node.message, ToolMessage):
                out.append(node.message)
        return Segment(messages=out)

    def opening(self) -> None:
        """The task's system prompt and prompt, before the first turn."""
        data = self.task.data
        first = [] if data.system_prompt is None else [
            {"role": "system", "content": data.system_prompt}]
        if isinstance(data.prompt, str):
            first.append({"role": "user", "content": data.prompt})
        elif data.prompt is not None:
            first += [m.model_dump() for m in data.prompt]
        for m in first:
            self.conv.messages.append(m)
            self.conv.add(m)


class Agents:
    """``agents.<seat>``: the one seat under the env config's name for it."""

    def __init__(self, name: str, seat: Seat):
        self._name, self._seat = name, seat

    def __getattr__(self, name: str) -> Seat:
        if name.startswith("_") or name != self._name:
            raise AttributeError(f"no agent {name!r}; this config declares [{self._name!r}]")
        return self._seat


async def run_env_episode(owner, client, task):
    """One episode of ``owner.env`` on ``task`` (choices 1-3): its seat's trace."""
    from verifiers.v1.configs.agent import agent_config_fields

    env = owner.env
    name = next(iter(agent_config_fields(env.config)))
    seat = Seat(owner, client)
    agents = Agents(name, seat)
    await env.setup(agents)
    await env.run(task, agents)
    if seat.chat is None:
        raise ValueError(f"environment {type(env).__name__}.run never opened its seat's "
                         "interaction: nothing to train")
    return seat.chat.trace
