"""Agent rollouts: run B episodes of a user's agent code against the in-process client, their
requests batched into shared generation calls, and make each episode one training sample.

    async def agent(client, row):             # or a plain ``def`` with the synchronous client
        reply = await client.chat.completions.create(messages=[...], tools=[...])
        ...
        return {"correct": 1.0}               # a reward, or named reward components

    conv = sample_agent_episodes(agent, generator, tokenizer, rows, limits...)  # Conversations

Implementation choices:
1) Every episode is a task of one event loop; a request waits in the batcher until every
   running episode is waiting too (or has finished), then all of them are sampled in one
   ``generate_ids`` call: B episodes cost about as many generation calls as they have turns,
   not B times that. A synchronous agent runs in a thread of its own (one per episode, so no
   episode waits for a free worker while the batcher waits for it).
2) What an episode returns is its reward: a number (the component ``reward``) or a mapping of
   named components, summed into the total (GDPO normalises each apart). ``correct`` is the
   component ``correct`` when there is one, else total > 0.
3) An episode that cannot be trained is marked, never silently trained with a wrong mask: the
   agent raised (``train/agent/failed_episodes``; if every episode failed, the first error is
   raised, naming the row), its conversation broke (``episode.py``, choice 3), or it ran past
   ``max_turns`` calls or the context (``train/agent/truncated_episodes``: reward 0, trained, as
   a truncated single-turn response is). Marked episodes other than truncated get
   ``sample_mask`` 0.
4) The loop runs in a thread of its own when the caller already runs one (a notebook cell).
5) Several processes: each rank runs the episodes of its rows; the trainer sums the counts
   (``train/agent/*``) over ranks and averages the turns (``agent_metrics``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from rlnb.engine.agents.client import AsyncLocalOpenAI, LocalOpenAI
from rlnb.engine.agents.episode import Episode
from rlnb.engine.agents.sampler import ContextLengthExceeded, PolicySampler, Request
from rlnb.engine.environments.base import Rewards
from rlnb.engine.environments.multiturn import Conversations, right_pad
from rlnb.engine.models.backend import Generations, left_pad


class TurnLimitReached(RuntimeError):
    """An episode asked for more completions than ``grpo.max_rollout_turns``."""


class Batcher:
    """Join the pending requests of all live episodes into one sampling call (choice 1)."""

    def __init__(self, sampler: PolicySampler, live: int):
        self.sampler, self.live = sampler, live
        self.pending: list[tuple[Request, asyncio.Future]] = []
        self.scheduled = False
        self.generation_calls = 0
        self.seconds = 0.0

    def submit(self, request: Request) -> asyncio.Future:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((request, future))
        self.maybe_flush()
        return future

    def finished(self) -> None:
        self.live -= 1
        self.maybe_flush()

    def maybe_flush(self) -> None:
        if self.pending and len(self.pending) >= self.live and not self.scheduled:
            self.scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        batch, self.pending = self.pending, []
        start = time.perf_counter()
        try:
            results = self.sampler.sample([r for r, _ in batch])
        except Exception as err:  # noqa: BLE001 - every waiting episode sees it
            for _, future in batch:
                future.set_exception(err)
            return
        finally:
            self.seconds += time.perf_counter() - start
            self.generation_calls += 1
        for (_, future), result in zip(batch, results):
            future.set_result(result)


def reward_of(value, where: str) -> dict[str, float]:
    """An episode's return value as named components (choice 2)."""
    if isinstance(value, bool) or isinstance(value, (int, float)):
        return {"reward": float(value)}
    if isinstance(value, Mapping) and value:
        out = {}
        for name, v in value.items():
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
                raise ValueError(f"{where}: reward component {name!r} is {v!r}, not a number")
            out[str(name)] = float(v)
        return out
    raise ValueError(f"{where}: the agent returned {value!r}; return a number or a mapping of "
                     "named reward components")


@dataclass
class Outcome:
    """One episode's end: its reward components, and how it ended."""

    components: dict[str, float]
    status: str  # "ok" | "failed" | "truncated"
    error: str | None = None


async def run_episodes(agent: Callable, rows: list[dict], sampler: PolicySampler, tokenizer,
                       max_turns: int) -> tuple[list[Episode], list[Outcome], Batcher]:
    """Run ``agent(client, row)`` for every row (choices 1-3)."""
    batcher = Batcher(sampler, len(rows))
    loop = asyncio.get_running_loop()
    is_async = inspect.iscoroutinefunction(agent) or inspect.iscoroutinefunction(
        type(agent).__call__)  # an instance whose __call__ is async
    pool = (None if is_async else concurrent.futures.ThreadPoolExecutor(
        max_workers=max(1, len(rows)), thread_name_prefix="rlnb-agent"))
    episodes = [Episode(tokenizer) for _ in rows]

    def limited(episode: Episode, submit):
        def go(request: Request):
            if len(episode.calls) >= max_turns:
                raise TurnLimitReached(f"more than {max_turns} completions "
                                       "(grpo.max_rollout_turns)")
            return submit(request)
        return go

    async def one(i: int) -> Outcome:
        episode, where = episodes[i], f"agent episode of row {i}"
        try:
            if is_async:
                client = AsyncLocalOpenAI(generator=sampler.generator, tokenizer=tokenizer,
                                          episode=episode, sampler=sampler,
                                          submit=limited(episode, batcher.submit))
                value = await agent(client, rows[i])
            else:
                def submit_from_thread(request: Request):
                    return asyncio.run_coroutine_threadsafe(
                        wait_for(batcher.submit, request), loop).result()
                client = LocalOpenAI(generator=sampler.generator, tokenizer=tokenizer,
                                     episode=episode, sampler=sampler,
                                     submit=limited(episode, submit_from_thread))
                value = await loop.run_in_executor(pool, agent, client, rows[i])
            return Outcome(reward_of(value, where), "ok")
        except (TurnLimitReached, ContextLengthExceeded) as err:
            return Outcome({}, "truncated", f"{where}, call {len(episode.calls) + 1}: {err}")
        except Exception as err:  # noqa: BLE001 - choice 3: the episode is marked
            return Outcome({}, "failed", f"{where}, call {len(episode.calls) + 1}: "
                                         f"{type(err).__name__}: {err}")
        finally:
            batcher.finished()

    try:
        outcomes = await asyncio.gather(*(one(i) for i in range(len(rows))))
    finally:
        if pool is not None:
            pool.shutdown(wait=False)
    return episodes, list(outcomes), batcher


async def wait_for(submit, request):
    return await submit(request)


def run_coroutine(coro):
    """Run ``coro`` to its end, in a thread of its own under a running loop (choice 4)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict = {}

    def target():
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as err:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = err

    thread = threading.Thread(target=target, name="rlnb-agent-loop")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


# the counts of ``sample_agent_episodes``' metrics: each rank counts its own episodes
AGENT_COUNTS = ("train/agent/failed_episodes", "train/agent/truncated_episodes",
                "train/agent/broken_episodes", "train/agent/malformed_tool_calls",
                "train/agent/unknown_tool_calls")


def agent_metrics(dist, metrics: dict[str, float]) -> dict[str, float]:
    """A rollout's agent metrics over ranks (choice 5; ``dist``: the trainer's
    ``Distributed``): the counts summed, ``train/mean_turns`` and
    ``train/agent/generation_calls`` averaged (every rank runs as many episodes)."""
    counts = [k for k in AGENT_COUNTS if k in metrics]
    summed = dist.sum(torch.tensor([metrics[k] for k in counts], dtype=torch.float64))
    out = dict(zip(counts, summed.tolist()))
    out.update(dist.mean_dict({k: metrics[k] for k in ("train/mean_turns",
                                                       "train/agent/generation_calls")
                               if k in metrics}))
    return out


def sample_agent_episodes(agent: Callable, generator, tokenizer, rows: list[dict], *,
                          max_turns: int, max_new_tokens: int, max_total_length: int,
                          rewards_of: Callable | None = None
                          ) -> tuple[Conversations, torch.Tensor, dict[str, float]]:
    """Run one episode per row and lay them out as a rollout: ``(Conversations,
    sample_mask [B], metrics)``. ``rewards_of(components, B) -> (total [B], correct [B])``
    replaces choice 2's sum and rule (a verifiers rubric's weights: ``verifiers_agent.py``)."""
    sampler = PolicySampler(generator, tokenizer, max_total_length, max_new_tokens)
    start = time.perf_counter()
    episodes, outcomes, batcher = run_coroutine(
        run_episodes(agent, rows, sampler, tokenizer, max_turns))
    seconds = time.perf_counter() - start
    failed = [o for o in outcomes if o.status == "failed"]
    if len(failed) == len(rows):
        raise ValueError(f"every agent episode failed; the first: {failed[0].error}")
    B, pad = len(rows), tokenizer.pad_token_id
    names = sorted({k for o in outcomes for k in o.components})
    components = {k: torch.tensor([o.components.get(k, 0.0) for o in outcomes]) for k in names}
    if rewards_of is not None:
        total, correct = rewards_of(components, B)
    else:
        total = sum(components.values()) if components else torch.zeros(B)
        correct = components["correct"] > 0 if "correct" in components else total > 0
    samples = [e.sample() for e in episodes]
    empty = [not s[0] for s in samples]
    first = [s[0] or [tokenizer.bos_token_id or pad] for s in samples]
    prompt_ids, prompt_mask = left_pad(first, pad)
    response_ids, response_mask = right_pad([s[1] for s in samples], pad)
    token_mask, _ = right_pad([s[2] for s in samples], 0.0, torch.float32)
    logprobs, _ = right_pad([s[3] for s in samples], 0.0, torch.float32)
    keep = [o.status != "failed" and e.broken is None and not gone
            for o, e, gone in zip(outcomes, episodes, empty)]
    truncated = torch.tensor([o.status == "truncated" or bool(e.calls and e.calls[-1].sampled
                              .finish_reason == "length") for o, e in zip(outcomes, episodes)])
    texts = [tokenizer.decode(s[1], skip_special_tokens=True) for s in samples]
    turns = torch.tensor([len(e.calls) for e in episodes])
    metrics = {
        "train/agent/failed_episodes": float(len(failed)),
        "train/agent/truncated_episodes": float(sum(o.status == "truncated" for o in outcomes)),
        "train/agent/broken_episodes": float(sum(e.broken is not None for e in episodes)),
        "train/agent/malformed_tool_calls": float(sum(e.counts.get("malformed_tool_calls", 0)
                                                      for e in episodes)),
        "train/agent/unknown_tool_calls": float(sum(e.counts.get("unknown_tool_calls", 0)
                                                    for e in episodes)),
        "train/agent/generation_calls": float(batcher.generation_calls),
    }
    conv = Conversations(
        generations=Generations(prompt_ids, prompt_mask, response_ids, response_mask, logprobs,
                                truncated, texts),
        token_mask=token_mask, rewards=Rewards(total, components, correct), turns=turns,
        seconds_generation=batcher.seconds, seconds_environment=seconds - batcher.seconds)
    conv.prompts = [tokenizer.decode(s[0], skip_special_tokens=False) for s in samples]
    return conv, torch.tensor(keep, dtype=torch.float32), metrics
