"""A verifiers tool environment as an agent task: its tasks are the rows, its toolsets the tools,
its ``@vf.stop`` hooks end an episode, its rubric scores the whole conversation.

    class Calc(vf.Toolset):
        @vf.tool
        async def calc(self, x: str) -> str: ...
    class MyTask(vf.Task[MyData]):
        @classmethod
        def toolsets(cls, config): return [Calc(vf.ToolsetConfig())]
        @vf.reward
        async def correct(self, task, trace) -> float: ...

    trainer = rlnb.GRPOTrainer(config, environment=MyTaskset(vf.TasksetConfig()))
    # with grpo.max_rollout_turns > 1: every sample is one episode of the chat loop below

    r = Σ_k w_k · score_k   (the task's @vf.reward methods on the episode's whole trace)

Implementation choices:
1) verifiers 0.4 (``verifiers.v1``) runs an episode as a harness program that reaches the
   model over HTTP through its interception server, with tools served by MCP servers built
   and installed with ``uv`` in a runtime. None of that runs offline or in one process, so
   rlnb runs the loop of verifiers' tool-less-program harness (``null``) itself, in process,
   against the in-process client (``client.py``): the task's system prompt and prompt, then
   model turns; each tool call is executed and answered by a ``tool`` message; the episode
   ends at the first reply without a tool call. The client records every turn's token ids
   and log-probs as sampled (``episode.py``): the episode is one trainable sample.
2) Tools: each of the task's toolsets (``Task.toolsets``, and the taskset's shared
   ``Taskset.toolsets``) registers its ``@vf.tool`` methods on an MCP server object, as its
   tool server would (``Toolset.register``), and the episode lists and calls them on that
   object without a transport: the tool schemas are MCP's, derived from the signatures, and
   names carry the server's prefix (``<server>_<tool>``; ``TOOL_PREFIX = None``: bare) as
   verifiers' chat program names them. ``setup`` and ``setup_task`` run per episode on fresh
   toolset objects. Bad calls are answered, as verifiers' program answers them: JSON that
   does not parse, arguments that are not an object, an unknown tool, a tool that raises or
   rejects its arguments (MCP's error text) -- never raised.
3) Ends: verifiers' turn limit is ``grpo.max_rollout_turns`` (stop condition ``max_turns``);
   ``@vf.stop`` hooks on the trace are asked before each model turn, as verifiers asks them.
   A stopped episode is scored, as verifiers scores it.
4) Scoring: the episode's trace (every message; the model's replies ``sampled``, with their
   tool calls) is scored offline by the task's metrics and rewards (``VerifiersTask``'s
   scoring, the same code as its single-turn path). A reward of weight w is the component
   w · score (``train/reward/<name>``), so the components sum to verifiers' ``trace.reward``;
   correct is the run's ``data.correct_reward`` at its threshold when set, else total > 0.
5) A ``vf.Env`` handed over whose own ``run`` drives the episode (an engine answering the
   model: verifiers' multi-turn environments) plays through its one seat in process
   (``verifiers_env.py``), each turn a segment of the same loop (``verifiers_loop.py``).
6) Refused when the task is built, naming the hook: what rlnb's loop does not run and would
   otherwise skip silently -- ``@vf.stop`` hooks on a request or a response, toolsets that keep
   state across calls (verifiers' state channel), and what the single-turn path refuses too
   (``@vf.intercept`` and lifecycle hooks, rewards needing a runtime, judges:
   ``VerifiersTask``).
"""

from __future__ import annotations

import torch

from rlnb.engine.agents.agent_task import AgentTask
from rlnb.engine.agents.rollouts import run_coroutine
from rlnb.engine.agents.verifiers_env import run_env_episode
from rlnb.engine.agents.verifiers_loop import Conversation, Tools, tool_servers
from rlnb.engine.environments.verifiers_task import VerifiersTask


def check_hooks(task, taskset, env_id: str) -> None:
    """Refuse what the loop does not run (choice 6)."""
    from verifiers.v1.session import hook_boundary
    from verifiers.v1.state import State
    from verifiers.v1.trace import Trace
    from verifiers.v1.utils.generic import concrete_type

    # (@vf.intercept hooks and lifecycle hooks: refused on both paths, VerifiersTask._check_hooks)
    for fn in task.hooks("stop"):
        if hook_boundary(fn, allow_trace=True) is not Trace:
            raise ValueError(f"verifiers environment {env_id!r}: @vf.stop {fn.__name__!r} "
                             "reads a request or response at the interception server; rlnb asks "
                             "stops on the trace only (annotate its parameter `trace: vf.Trace`)")
    for server in tool_servers(task, taskset):
        state = concrete_type(type(server), State) or State
        if state is not State:
            raise ValueError(f"verifiers environment {env_id!r}: toolset "
                             f"{type(server).__name__!r} keeps state ({state.__name__}) across "
                             "calls through verifiers' state channel, which rlnb's in-process "
                             "loop does not run")


class VerifiersAgentTask(AgentTask):
    """A verifiers environment with tools (or ``@vf.stop`` hooks) as episodes (module
    docstring). ``rows``: the single-turn ``VerifiersTask`` of the same environment, whose rows,
    held-out split, warm-start answers and scoring it uses."""

    def __init__(self, rows: VerifiersTask, *, max_turns: int):
        self.vf_rows = rows
        self.max_turns = max_turns
        self.env = rows.env  # a verifiers Env whose own run drives the episode, or None
        self.taskset = rows.taskset
        self.weights: dict[str, float] = {}  # each reward's weight, as the traces record it
        for task in rows.tasks[:1]:
            check_hooks(task, self.taskset, rows.env_id)
        # the rows, their held-out split and warm-start answers stay the verifiers task's
        super().__init__(self.episode, train=rows.train_rows(1), name=rows.env_id)
        # the tools as the template renders them, for the prefix check before training
        first = rows.tasks[0]
        self.tools = run_coroutine(Tools(tool_servers(first, self.taskset)).open(first)
                                   ).schemas or None
        self.fingerprint = [*rows.fingerprint, "agent", max_turns]
        self.correct_reward = rows.correct_reward
        self.correct_threshold = rows.correct_threshold

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        return self.vf_rows.train_rows(n, seed)

    def val_rows(self, n: int | None = None) -> list[dict]:
        return self.vf_rows.val_rows(n)

    def demonstration(self, row: dict) -> str:
        return self.vf_rows.demonstration(row)

    async def episode(self, client, row: dict) -> dict[str, float]:
        """One episode (choices 1-3): the chat loop on the task's prompt, or the environment's
        own ``run`` (``verifiers_env.py``); its reward components (choice 4)."""
        task = self.vf_rows.tasks[row["vf_index"]]
        if self.env is not None:
            trace = await run_env_episode(self, client, task)
        else:
            prompt = row["prompt"]
            messages = ([{"role": "user", "content": prompt}] if isinstance(prompt, str)
                        else [dict(m) for m in prompt])
            conv = await Conversation.open(self, client, task, messages)
            await conv.segment()
            trace = conv.trace
        return await self._components(task, trace)

    async def stopped(self, trace, stops) -> bool:
        """Whether the episode ends before another model turn (choice 3)."""
        if trace.num_turns >= self.max_turns:
            trace.stop("max_turns")
            return True
        from verifiers.v1.session import call_hook
        from verifiers.v1.trace import Trace

        for fn in stops:
            result = await call_hook(fn, {Trace: trace})
            if not isinstance(result, bool):
                raise ValueError(f"@vf.stop {fn.__name__!r} returned "
                                 f"{type(result).__name__}, not bool")
            if result:
                trace.stop(fn.__name__)
                return True
        return False

    async def _components(self, task, trace) -> dict[str, float]:
        """The trace scored (choice 4): each reward of weight != 0, its raw score (the weights
        are applied by ``rewards_of``)."""
        await self.vf_rows.score_trace(task, trace)
        out = {}
        for name, reward in trace.rewards.items():
            if reward is not None and reward.weight != 0:
                out[name] = float(reward.score)
                self.weights[name] = reward.weight  # the rubric's, or what an env's run gave
        return out

    def rewards_of(self, components: dict[str, torch.Tensor], B: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(total [B], correct [B])`` of a batch of episodes' components (choice 4):
        Σ w · score, and the run's notion of correct."""
        total = torch.zeros(B)
        for name, scores in components.items():
            total += self.weights[name] * scores
        if self.correct_reward is None:
            return total, total > 0
        ref = total if self.correct_reward == "total" else components.get(
            self.correct_reward, torch.zeros(B))
        return total, ref >= self.correct_threshold
