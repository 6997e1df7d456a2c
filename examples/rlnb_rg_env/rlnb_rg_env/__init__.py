"""A verifiers environment (``verifiers.v1``) over reasoning-gym data sets: its tasks are a data
set's questions, its reward is whether the data set's own scorer gives the whole reply full
marks, and two weight-0 rewards log the scorer's value (its partial credit) and the reply's
length. Installed, ``vf.load_taskset(TasksetConfig(id="rlnb-rg-env"))``
finds it; rlnb loads it with ``data: {name: verifiers, env_id: rlnb-rg-env}``.

    env_args: {datasets: {spell_backward: {min_word_len: 3, max_word_len: 5}}, size: 4000}
"""

from __future__ import annotations

from typing import Any

import reasoning_gym
import verifiers.v1 as vf
from pydantic import Field

__all__ = ["ReasoningGymTaskset"]


class QuestionData(vf.TaskData):
    answer: str = ""
    dataset: str = ""
    entry: dict[str, Any] = Field(default_factory=dict)


class QuestionTask(vf.Task[QuestionData]):
    @vf.reward
    async def correct(self, task: QuestionData, trace) -> float:
        """1 where the data set's own scorer gives the reply full marks, else 0."""
        return float(_score(task, trace) == 1.0)

    @vf.reward(weight=0.0)
    async def partial_credit(self, task: QuestionData, trace) -> float:
        """The data set's own scorer on the reply (logged, not rewarded)."""
        return _score(task, trace)

    @vf.reward(weight=0.0)
    async def length(self, trace) -> float:
        """The reply's length in characters (logged, not rewarded)."""
        return float(len(trace.last_reply))


class ReasoningGymConfig(vf.TasksetConfig):
    datasets: dict[str, dict[str, Any]] = Field(
        default_factory=lambda: {"spell_backward": {"min_word_len": 3, "max_word_len": 5}})
    size: int = 4000
    seed: int = 0


class ReasoningGymTaskset(vf.Taskset[QuestionTask, ReasoningGymConfig]):
    def load(self):
        names = list(self.config.datasets)
        sets = {name: reasoning_gym.create_dataset(name, seed=self.config.seed,
                                                   size=self.config.size, **config)
                for name, config in self.config.datasets.items()}
        for i in range(self.config.size):  # the data sets in turn
            name = names[i % len(names)]
            entry = sets[name][i // len(names)]
            yield QuestionTask(QuestionData(prompt=entry["question"], answer=entry["answer"],
                                            dataset=name, entry=entry))


_CACHE: dict[str, Any] = {}


def _score(task: QuestionData, trace) -> float:
    return float(_dataset(task.dataset).score_answer(trace.last_reply or None, task.entry))


def _dataset(name: str):
    if name not in _CACHE:
        _CACHE[name] = reasoning_gym.create_dataset(name, seed=0, size=1)
    return _CACHE[name]
