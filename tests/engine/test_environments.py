"""The environment interface: Rewards, reward checks, the default single-turn step and a multi-turn env."""

import math

import pytest
import torch

from rlnb.engine.environments.base import (
    Environment,
    Rewards,
    StepResult,
    check_rewards,
)


class EchoEnv(Environment):
    """Reward 1 when the response equals the row's answer; remembers what it was asked."""

    name = "echo"

    def __init__(self, bad_row=None):
        self.bad_row = bad_row
        self.seen = None

    def score(self, prompts, responses, rows):
        self.seen = (prompts, responses)
        total = [float(r == row["answer"]) for r, row in zip(responses, rows)]
        if self.bad_row is not None:
            total[self.bad_row] = math.nan
        return Rewards(total=total, components={"match": total})


class GuessEnv(Environment):
    """Multi-turn: the assistant guesses a number; the env answers 'higher'/'lower' until it hits."""

    name = "guess"

    def score(self, prompts, responses, rows):
        raise AssertionError("a multi-turn env scores inside step")

    def step(self, conversations, rows, turn):
        hits, obs = [], []
        for conv, row in zip(conversations, rows):
            guess = int(conv[-1]["content"])
            hits.append(guess == row["target"])
            obs.append(None if guess == row["target"] else ("higher" if guess < row["target"] else "lower"))
        reward = [1.0 if h else -0.1 for h in hits]
        return StepResult(Rewards(reward, {"hit": [float(h) for h in hits]}, hits), hits, obs)


def conv(user, assistant):
    return [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]


def test_rewards_convert_lists_and_default_correct():
    r = Rewards(total=[1, 0, 0.5], components={"a": [1, 0, 1]})
    assert r.total.dtype == torch.float32 and r.components["a"].dtype == torch.float32
    assert r.correct.dtype == torch.bool
    assert r.correct.tolist() == [True, False, True]  # default: total > 0
    assert len(r) == 3
    r = Rewards(total=torch.tensor([1.0, 1.0]), correct=[False, True])
    assert r.correct.tolist() == [False, True]


def test_check_rewards_names_env_row_and_value():
    ok = Rewards(total=[1.0, 0.0, 1.0], components={"fmt": [1.0, 1.0, 0.0]})
    assert check_rewards(ok, 3, "echo") is ok
    with pytest.raises(ValueError, match=r"'echo'.*total = nan for row 2"):
        check_rewards(Rewards(total=[1.0, 0.0, math.nan]), 3, "echo")
    with pytest.raises(ValueError, match=r"components\['fmt'\] = inf for row 0"):
        check_rewards(Rewards(total=[1.0, 0.0], components={"fmt": [math.inf, 0.0]}), 2, "x")
    with pytest.raises(ValueError, match=r"'echo'.*total of shape \(3,\), expected \[4\]"):
        check_rewards(ok, 4, "echo")
    with pytest.raises(ValueError, match=r"correct of shape \(2, 1\)"):
        check_rewards(Rewards(total=[1.0, 0.0], correct=[[True], [False]]), 2, "echo")
    with pytest.raises(ValueError, match="must return Rewards"):
        check_rewards([1.0, 0.0], 2, "echo")


def test_default_step_is_single_turn():
    env = EchoEnv()
    convs = [conv("1+1=", "2"), conv("2+2=", "5"), [*conv("a", "b"), *conv("3+3=", "6")]]
    rows = [{"answer": "2"}, {"answer": "4"}, {"answer": "6"}]
    out = env.step(convs, rows, turn=0)
    assert out.rewards.total.tolist() == [1.0, 0.0, 1.0]
    assert out.rewards.components["match"].tolist() == [1.0, 0.0, 1.0]
    assert out.done == [True, True, True]
    assert out.observations == [None, None, None]
    # the prompt scored is the last user message before the reply
    assert env.seen == (["1+1=", "2+2=", "3+3="], ["2", "5", "6"])


def test_default_step_checks_rewards_and_conversations():
    with pytest.raises(ValueError, match=r"'echo'.*nan for row 1"):
        EchoEnv(bad_row=1).step([conv("q", "a"), conv("q", "a")], [{"answer": "a"}] * 2, 0)
    with pytest.raises(ValueError, match="conversation 1 must end with an assistant message"):
        EchoEnv().step([conv("q", "a"), [{"role": "user", "content": "q"}]], [{}, {}], 0)
    with pytest.raises(ValueError, match="2 conversations but 1 rows"):
        EchoEnv().step([conv("q", "a"), conv("q", "a")], [{}], 0)


def test_multi_turn_step_continues_the_conversation():
    env = GuessEnv()
    rows = [{"target": 3}, {"target": 1}]
    guesses = [["1", "1"], ["3", None], ["2", None]]  # a scripted policy; row 1 hits at once
    convs = [[{"role": "user", "content": "guess 0-4"}] for _ in rows]
    active, episode_reward, turns = [0, 1], [0.0, 0.0], [0, 0]
    for turn, moves in enumerate(guesses):
        if not active:
            break
        for i in active:
            convs[i].append({"role": "assistant", "content": moves[i]})
        out = env.step([convs[i] for i in active], [rows[i] for i in active], turn)
        check_rewards(out.rewards, len(active), env.name)
        for j, i in enumerate(active):
            episode_reward[i] += float(out.rewards.total[j])  # NeMo-RL sums per-turn rewards
            turns[i] = turn + 1
            if not out.done[j]:
                convs[i].append({"role": "user", "content": out.observations[j]})
        active = [i for j, i in enumerate(active) if not out.done[j]]
    assert turns == [2, 1]
    assert [m["content"] for m in convs[0]] == ["guess 0-4", "1", "higher", "3"]
    assert convs[1][-1] == {"role": "assistant", "content": "1"}
    assert episode_reward == pytest.approx([0.9, 1.0])


