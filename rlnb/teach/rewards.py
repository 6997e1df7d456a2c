"""Exercise 7's checks: a reward function for the ``reverse`` task, and the fraction of groups
that carry a learning signal.

    reward("rev abc=", completion) = 1 if completion.rstrip() == "cba" else 0
    signal = #{groups whose rewards are not all equal} / #groups

The reward's reference is ``ReverseTask.score`` (``rlnb/engine/environments/tasks.py``: exact
match after removing trailing whitespace; a leading space is wrong), called TRL-style as
``reward(prompts, completions) -> list[float]``. The signal's reference is
``rlnb.engine.trainers.rollout.groups_with_signal``, the metric ``train/groups_with_signal``.
"""

from __future__ import annotations

import torch

from rlnb.teach.check import Case, Exercise, Mistake, check


def _word(prompt: str) -> str:
    return prompt.removeprefix("rev ").removesuffix("=")


def reference_reward(prompts: list[str], completions: list[str]) -> list[float]:
    """rlnb's reward of the reverse task for each completion."""
    from rlnb.engine.environments.tasks import ReverseTask

    rows = [{"prompt": p, "answer": _word(p)[::-1]} for p in prompts]
    return ReverseTask(min_len=1, max_len=2, num_val=1).score(prompts, completions, rows) \
        .total.tolist()


def reference_signal(rewards: torch.Tensor) -> float:
    """rlnb's fraction of groups (rows of ``rewards [P, G]``) whose rewards differ."""
    from rlnb.engine.trainers.rollout import groups_with_signal

    P, G = rewards.shape
    with_signal, groups = groups_with_signal(torch.arange(P).repeat_interleave(G),
                                             rewards.reshape(-1))
    return with_signal / groups


def _reward(compare):
    def reward(prompts, completions):
        return [float(compare(c, _word(p)[::-1], _word(p))) for p, c in zip(prompts, completions)]

    return reward


REWARD_MISTAKES = [
    Mistake("strip_both_ends", "accepting leading spaces too (.strip()): the task strips "
            "trailing whitespace only, and ' cba' is wrong",
            _reward(lambda c, ans, w: c.strip() == ans)),
    Mistake("no_strip", "comparing without removing the trailing whitespace ('cba ' and "
            "'cba\\n' are right answers)", _reward(lambda c, ans, w: c == ans)),
    Mistake("not_reversed", "comparing with the word itself instead of the word reversed",
            _reward(lambda c, ans, w: c.rstrip() == w)),
    Mistake("kept_equals_sign", "taking the word with its '=' (the prompt is 'rev WORD=': "
            "strip 'rev ' and '=')",
            _reward(lambda c, ans, w: c.rstrip() == (w + "=")[::-1])),
    Mistake("substring", "rewarding any completion that contains the answer ('answer in "
            "completion') instead of an exact match", _reward(lambda c, ans, w: ans in c)),
    Mistake("prefix", "rewarding any completion that starts with the answer ('cbax' is "
            "wrong)", _reward(lambda c, ans, w: c.startswith(ans))),
    Mistake("case_insensitive", "ignoring case ('CBA' is wrong: the task is lowercase)",
            _reward(lambda c, ans, w: c.rstrip().lower() == ans)),
    Mistake("newline_only", "removing trailing newlines only (.rstrip('\\n')): trailing "
            "spaces are allowed too ('cba ' is right), so .rstrip() with no argument",
            _reward(lambda c, ans, w: c.rstrip("\n") == ans)),
]


def _pairs(*rows):
    return {"prompts": [p for p, _ in rows], "completions": [c for _, c in rows]}


REWARD_CASES = [
    Case("right and wrong", _pairs(("rev abc=", "cba"), ("rev abc=", "abc"),
                                   ("rev hello=", "olleh"), ("rev hello=", "olle"))),
    Case("whitespace", _pairs(("rev abc=", "cba "), ("rev abc=", "cba\n"), ("rev abc=", " cba"),
                              ("rev dog=", "  god"))),
    Case("extra characters", _pairs(("rev abc=", "cbax"), ("rev abc=", "xcba"),
                                    ("rev abc=", "cba="), ("rev abc=", "=cba"))),
    Case("case and palindromes", _pairs(("rev abc=", "CBA"), ("rev level=", "level"),
                                        ("rev noon=", "noon "), ("rev ab=", ""))),
]


def _completion(case: Case, name: str, index: tuple) -> str:
    i = index[0]
    return (f"completion {i} ({case.inputs['completions'][i]!r} for prompt "
            f"{case.inputs['prompts'][i]!r})")


REWARD = Exercise(
    function="reverse_reward",
    reference_name="the reverse task's reward (rlnb ReverseTask.score)",
    reference=reference_reward,
    cases=REWARD_CASES,
    mistakes=REWARD_MISTAKES,
    outputs=("rewards",),
    positional=2,
    element=_completion,
)


def _signal(test):
    def signal(rewards):
        return float(sum(bool(test(row)) for row in rewards) / len(rewards))

    return signal


SIGNAL_MISTAKES = [
    Mistake("any_positive", "counting the groups with at least one positive reward: a group "
            "where every answer is right has no signal either",
            _signal(lambda row: (row > 0).any())),
    Mistake("not_all_correct", "counting the groups that are not all right: a group where "
            "every answer is wrong has no signal either",
            _signal(lambda row: not bool((row == 1).all()))),
    Mistake("mean_between", "testing 0 < mean < 1: that holds for 0/1 rewards only (a group "
            "of equal partial rewards, all 0.5, has no signal)",
            _signal(lambda row: 0 < float(row.mean()) < 1)),
    Mistake("wrong_axis", "comparing along the prompts (dim 0) instead of within each group "
            "(dim 1): rewards are [P, G]",
            lambda rewards: float((rewards.max(0).values > rewards.min(0).values).double()
                                  .mean())),
    Mistake("count_not_fraction", "the number of groups instead of the fraction",
            lambda rewards: float((rewards.max(1).values > rewards.min(1).values).sum())),
    Mistake("per_group", "one flag per group instead of their fraction: take the mean of the "
            "flags (as a float)",
            lambda rewards: (rewards.max(1).values > rewards.min(1).values).double()),
]


def _r(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


SIGNAL_CASES = [
    Case("0/1 rewards", {"rewards": _r([[1, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0],
                                        [0, 0, 1, 0], [0, 0, 0, 0]])},
         "two mixed groups, one all right, two all wrong"),
    Case("partial credit", {"rewards": _r([[0.5, 0.5, 0.5], [0.5, 1.0, 0.5], [0.0, 0.25, 0.0],
                                           [1.0, 1.0, 1.0]])},
         "rewards between 0 and 1: an all-0.5 group has no signal"),
    Case("one group", {"rewards": _r([[0, 1]])}, "P = 1"),
]

SIGNAL = Exercise(
    function="fraction_with_signal",
    reference_name="rlnb's groups_with_signal",
    reference=reference_signal,
    cases=SIGNAL_CASES,
    mistakes=SIGNAL_MISTAKES,
    outputs=("fraction",),
)


def check_reverse_reward(fn) -> None:
    """Check ``fn(prompts: list[str], completions: list[str]) -> list[float]``."""
    check(REWARD, fn)


def check_fraction_with_signal(fn) -> None:
    """Check ``fn(rewards [P, G]) -> float``."""
    check(SIGNAL, fn)
