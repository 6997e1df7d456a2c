"""Environments: score a batch of responses, or step a batch of multi-turn conversations.

    single turn:  prompt -> response -> score(prompt, response, row) -> reward
    multi turn:   [user, assistant, user, assistant, ...] -> step(...) -> reward, done, next turn

An environment is where verifiable rewards come from: a task checks the answer (exact match,
``math_verify``), a game answers the last move. The trainer calls ``step`` after every
generation turn; a single-turn environment only writes ``score``.

Implementation choices:
1) ``Rewards`` carries the total reward ``[B]``, its named components ``[B]`` each (GDPO
   normalises every component separately; the trainer logs them as ``reward/<name>``) and a
   ``correct`` flag ``[B]`` for accuracy metrics, which need not be ``total > 0`` once the
   reward is shaped.
2) Lists are accepted wherever a tensor is expected and converted on construction (total and
   components to float32, correct to bool), so a custom environment can stay plain Python.
3) Rewards are checked at the boundary (``check_rewards``): one NaN reward would silently turn a
   whole group's advantages into NaN, so a bad value fails with the environment, the row and
   the value.
4) Multi-turn follows NeMo-RL's ``run_multi_turn_rollout``: the caller passes only the rows that
   are still running, appends each observation as the next user turn, and sums the per-turn
   rewards of a row into its episode reward; ``correct`` is taken from the row's last step.
5) A task owns its settings: its ``Settings`` class attribute, a pydantic model (``TaskSettings``,
   the held-out rows every built-in task has, or a subclass with the task's own keys), whose
   fields are the ``data`` keys it reads beside ``data.name``, each handed to its constructor by
   name (``tasks.py``); their defaults are written there only (``task_settings.py``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from rlnb.config import Config
from rlnb.engine.environments.task_settings import TaskSettings, take_defaults


@dataclass
class Rewards:
    """What an environment returns for B responses.

    Args:
        total: ``[B]`` float32, the reward the advantages are computed from.
        components: name -> ``[B]`` float32, the parts of the reward (for GDPO and logging).
        correct: ``[B]`` bool, whether each response solved the task; ``None`` means
            ``total > 0``.
        metrics: scalars the environment reports about this batch, logged as
            ``train/<name>`` (what a TRL-style reward function passes to ``log_metric``).
    """

    total: torch.Tensor
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    correct: torch.Tensor | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        self.total = _as_tensor(self.total, torch.float32)
        self.components = {
            str(k): _as_tensor(v, torch.float32) for k, v in dict(self.components).items()
        }
        if self.correct is None:
            self.correct = self.total > 0
        self.correct = _as_tensor(self.correct, torch.bool)

    def __len__(self) -> int:
        return int(self.total.shape[0]) if self.total.ndim > 0 else 0


def _as_tensor(x, dtype: torch.dtype) -> torch.Tensor:
    # Keep a tensor's device; only convert lists/tuples/numpy arrays and the dtype.
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    return t.to(dtype) if t.dtype != dtype else t


@dataclass
class StepResult:
    """One environment step over B conversations.

    Args:
        rewards: the reward of this turn, ``[B]`` tensors (see ``Rewards``).
        done: ``[B]`` whether each conversation has ended.
        observations: ``[B]`` the text of the next user/environment turn for rows not done,
            ``None`` for rows that are done.
    """

    rewards: Rewards
    done: list[bool]
    observations: list[str | None]


def check_rewards(rewards: Rewards, batch_size: int, env_name: str) -> Rewards:
    """Check shapes and values of an environment's rewards; raise ``ValueError`` naming the
    environment, the row and the value. Returns ``rewards`` unchanged."""
    where = f"environment {env_name!r}"
    if not isinstance(rewards, Rewards):
        raise ValueError(f"{where} must return Rewards, got {type(rewards).__name__}")
    named = {"total": rewards.total, "correct": rewards.correct}
    named.update({f"components[{k!r}]": v for k, v in rewards.components.items()})
    for name, t in named.items():
        if t.ndim != 1 or t.shape[0] != batch_size:
            raise ValueError(
                f"{where} returned {name} of shape {tuple(t.shape)}, expected [{batch_size}] "
                "(one value per response)"
            )
        if name == "correct":
            continue
        bad = ~torch.isfinite(t)
        if bool(bad.any()):  # one CPU-GPU sync per tensor, once per step
            i = int(bad.nonzero()[0, 0])
            raise ValueError(f"{where} returned {name} = {t[i].item()!r} for row {i}")
    return rewards


class Environment(ABC):
    """Base class: ``score`` a batch of single-turn responses, or ``step`` conversations.

    A single-turn environment implements ``score`` only; the default ``step`` scores the last
    assistant message and ends every conversation. A multi-turn environment overrides ``step``
    and returns ``done=False`` with an observation for the rows that go on.
    """

    name: str = "environment"
    # False when ``Rewards.correct`` means nothing (a user's reward functions with no
    # ``data.correct_reward``): no accuracy metrics are computed from it
    defines_correct: bool = True

    @abstractmethod
    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """Rewards for B responses: ``prompts``, ``responses``, ``rows`` are ``[B]`` lists."""

    def score_rollout(self, prompts: list[str], rows: list[dict], sampled, *, generations: int,
                      step: int) -> Rewards:
        """What the rollout stage calls with one generation call's output ``sampled`` (its
        ``texts``, ``response_ids`` and ``response_mask``), G = ``generations`` consecutive rows
        per prompt, at training step ``step``. Default: ``score``; an environment that reads the
        token ids or the step (a user's TRL-style reward functions) overrides it."""
        return self.score(prompts, sampled.texts, rows)

    def step(
        self, conversations: list[list[dict[str, str]]], rows: list[dict], turn: int
    ) -> StepResult:
        """One turn for B conversations (each a list of ``{"role", "content"}`` messages ending
        with the assistant's reply). ``turn`` counts assistant turns from 0.

        Default: single turn. The prompt is the last user message before the reply.
        """
        if len(conversations) != len(rows):
            raise ValueError(
                f"environment {self.name!r}: {len(conversations)} conversations but "
                f"{len(rows)} rows"
            )
        prompts, responses = [], []
        for i, conv in enumerate(conversations):
            if not conv or conv[-1].get("role") != "assistant":
                last = conv[-1].get("role") if conv else "nothing"
                raise ValueError(
                    f"environment {self.name!r}: conversation {i} must end with an assistant "
                    f"message, got {last!r}"
                )
            responses.append(conv[-1]["content"])
            users = [m["content"] for m in conv[:-1] if m.get("role") == "user"]
            prompts.append(users[-1] if users else "")
        rewards = check_rewards(self.score(prompts, responses, rows), len(rows), self.name)
        return StepResult(rewards=rewards, done=[True] * len(rows), observations=[None] * len(rows))


class Task(Environment):
    """An environment that also provides its rows: ``train_rows`` and held-out ``val_rows``.
    ``Settings`` are the ``data`` keys its constructor takes (choice 5)."""

    name = "task"
    Settings: type[Config] = TaskSettings

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        take_defaults(cls)  # its settings' defaults are its Settings' (task_settings.py)

    @abstractmethod
    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        """``n`` training rows, the same for the same ``seed``; never a validation problem."""

    @abstractmethod
    def val_rows(self, n: int | None = None) -> list[dict]:
        """The first ``n`` held-out rows (all of them for ``None``), always the same."""

    def demonstration(self, row: dict) -> str:
        """What the warm start trains on for ``row`` (``row_demonstration``)."""
        return row_demonstration(row)

    @classmethod
    def turns_needed(cls, settings) -> tuple[int, str]:
        """The fewest model turns an episode needs under ``settings`` (the task's ``Settings``,
        the ``data`` section, or the task itself: they hold the same names), and why: a
        ``max_rollout_turns`` below it is refused when the config loads
        (``tasks.check_rollout_turns``). One, for a single-turn task."""
        return 1, ""


def row_demonstration(row: dict) -> str:
    """A row's supervised target: its ``sft_target`` (``addition_think``), else its ``answer``."""
    return str(row["sft_target"] if "sft_target" in row else row["answer"])


def check_batch(name: str, prompts: list[str], responses: list[str], rows: list[dict]):
    """One prompt, one response and one row per response, else a ValueError naming the task."""
    if not len(prompts) == len(responses) == len(rows):
        raise ValueError(
            f"task {name!r}: {len(prompts)} prompts, {len(responses)} responses and "
            f"{len(rows)} rows; expected one of each per response"
        )


def take_rows(rows: list[dict], n: int | None, what: str) -> list[dict]:
    """Copies of the first ``n`` validation ``rows`` (all of them for None); asking for more
    than there are is a ValueError naming ``what`` holds them (``"task 'math'"``)."""
    if n is None:
        n = len(rows)
    if not 0 <= n <= len(rows):
        raise ValueError(f"{what} has {len(rows)} validation rows, asked for {n}")
    return [dict(r) for r in rows[:n]]  # copies: a caller editing a row must not change ours
