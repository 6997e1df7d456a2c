"""The task of a run with reward functions: a task's rows, scored by a user's functions.

    task = RewardFuncsTask(DatasetTask.from_data(rows), reward_func_list([fmt, acc], [0.5, 1]),
                           correct_reward="acc")
    r_i = Σ_k w_k · f_k(row i);  correct_i = f_acc(row i) >= correct_threshold

Implementation choices:
1) The rows are any task's (``train_rows``, ``val_rows``, ``demonstration``): a user's data set
   or a built-in task's; its own ``score`` is not used.
2) A function's None counts 0 in the sum (TRL's nansum) and in its component, which GDPO and
   the logs read; a row the correct-defining function leaves unscored is not correct.
3) ``correct`` (accuracy metrics) is what the user says it is: a function's score (or the total,
   ``data.correct_reward: total``) at least ``data.correct_threshold``. Without one the task has
   no notion of correct (``defines_correct = False``): no accuracy metrics.
4) ``fingerprint`` names the rows and the functions (their source) in the warm start's cache key.
"""

from __future__ import annotations

import inspect
import tokenize
from collections.abc import Callable

import torch

from rlnb.engine.environments.base import Rewards, Task
from rlnb.engine.environments.reward_funcs import (
    RewardCall,
    RewardFunc,
    build_call,
    call_reward_funcs,
    reference,
)
from rlnb.engine.environments.user_data import fingerprint


class RowsOf(Task):
    """A task whose rows are another task's (``self.rows``), scored its own way: a data set
    scored by a user's reward functions, a verifiers environment's tasks by its rubric."""

    rows: Task

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        return self.rows.train_rows(n, seed)

    def val_rows(self, n: int | None = None) -> list[dict]:
        return self.rows.val_rows(n)

    def demonstration(self, row: dict) -> str:
        return self.rows.demonstration(row)


class RewardFuncsTask(RowsOf):
    """Rows from a task (a user's data set, or a built-in task's rows), scored by reward
    functions.

    Args:
        rows: the task whose ``train_rows``/``val_rows`` are used (its own ``score`` is not).
        funcs: the ``RewardFunc``s (``reward_func_list``).
        correct_reward, correct_threshold: what is correct (choice 3).
    """

    def __init__(self, rows: Task, funcs: list[RewardFunc], *,
                 correct_reward: str | None = None, correct_threshold: float = 1.0):
        names = [f.name for f in funcs]
        if correct_reward is not None and correct_reward not in (*names, "total"):
            raise ValueError(f"data.correct_reward={correct_reward!r} is not a reward function "
                             f"of this run ({names}) nor 'total'")
        self.rows, self.funcs = rows, list(funcs)
        self.name = rows.name
        self.correct_reward, self.correct_threshold = correct_reward, correct_threshold
        self.defines_correct = correct_reward is not None
        self.chat = getattr(rows, "chat", False)
        self.fingerprint = fingerprint(getattr(rows, "fingerprint", rows.name),
                                       [(f.ref, f.weight, _source(f.func)) for f in funcs],
                                       correct_reward, correct_threshold)

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """Scores without token ids (``score_rollout`` has them): re-tokenised by nobody, so
        ``completion_ids`` are empty lists here."""
        return self.rewards(build_call(rows, responses, [[] for _ in rows], 1, 0))

    def score_rollout(self, prompts, rows, sampled, *, generations: int, step: int) -> Rewards:
        ids = [r[m.bool()].tolist() for r, m in zip(sampled.response_ids.cpu(),
                                                    sampled.response_mask.cpu())]
        return self.rewards(build_call(rows, sampled.texts, ids, generations, step))

    def rewards(self, call: RewardCall) -> Rewards:
        """The ``Rewards`` of one call: components, weighted total, correct, logged metrics."""
        scores, log = call_reward_funcs(self.funcs, call)
        return self.to_rewards(scores, log)

    def to_rewards(self, scores: dict[str, list[float | None]], log: dict | None = None
                   ) -> Rewards:
        comps = {name: torch.tensor([0.0 if v is None else v for v in vals], dtype=torch.float32)
                 for name, vals in scores.items()}  # [B] each; None counts 0 (TRL's nansum)
        B = len(next(iter(scores.values())))
        total = torch.zeros(B, dtype=torch.float32)
        for f in self.funcs:
            total += f.weight * comps[f.name]
        if self.correct_reward is None:
            correct = torch.zeros(B, dtype=torch.bool)
        else:
            ref = total if self.correct_reward == "total" else comps[self.correct_reward]
            scored = (torch.ones(B, dtype=torch.bool) if self.correct_reward == "total" else
                      torch.tensor([v is not None for v in scores[self.correct_reward]]))
            correct = (ref >= self.correct_threshold) & scored
        metrics = {k: sum(v) / len(v) for k, v in ((log or {}).get("metrics") or {}).items()}
        return Rewards(total, comps, correct, metrics=metrics)


def _source(func: Callable) -> str:
    """The function's source (part of the warm-start key), or its ``module:name`` where Python
    cannot give the source: a C function, code typed at a prompt, or code compiled under a file
    name whose lines are not that code (``tokenize`` then fails on the wrong lines)."""
    try:
        return inspect.getsource(func)
    except (OSError, TypeError, SyntaxError, tokenize.TokenError):
        return reference(func)
