"""Multi-turn rollouts on the tiny model: prompt | turn | observation | turn ..., token-exact."""

import pytest
from tiny_config import TINY

from rlnb.engine.environments.base import Environment, Rewards, StepResult
from rlnb.engine.environments.multiturn import RetryEnvironment
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config

SMALL = [*TINY, "grpo.val_period=0", "sft.enabled=false", "policy.max_total_sequence_length=40"]


class Scripted(Environment):
    """Turn rewards 1, 10, 100...; conversation i ends after turn (i % 3) (0-based)."""

    name = "scripted"

    def __init__(self):
        self.calls = []

    def score(self, prompts, responses, rows):
        return Rewards([0.0] * len(rows))

    def step(self, conversations, rows, turn):
        self.calls.append((turn, [r["i"] for r in rows], [len(c) for c in conversations]))
        done = [turn >= r["i"] % 3 for r in rows]
        return StepResult(
            rewards=Rewards([10.0**turn] * len(rows), {"turn": [float(turn)] * len(rows)},
                            correct=[turn == 1] * len(rows)),
            done=done,
            observations=[None if d else f"<{turn}>" for d in done],
        )


def scripted_trainer(turns=3):
    t = GRPOTrainer(load_config(None, SMALL + [f"grpo.max_rollout_turns={turns}"]))
    t.env = Scripted()
    return t


def test_only_running_conversations_step_and_rewards_sum_over_turns():
    t = scripted_trainer()
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "i": i} for i in range(4)]
    b = t.generate_batch(rows, 1)
    # turn 0: all four; turn 1: rows 1, 2 (i%3 >= 1); turn 2: row 2 only
    assert [(turn, ids) for turn, ids, _ in t.env.calls] == [(0, [0, 1, 2, 3]), (1, [1, 2]),
                                                             (2, [2])]
    # each conversation the environment saw: user, assistant (+ user, assistant per turn)
    assert t.env.calls[1][2] == [4, 4] and t.env.calls[2][2] == [6]
    assert b.rewards.tolist() == [1.0, 11.0, 111.0, 1.0]
    assert b.reward_components["turn"].tolist() == [0.0, 1.0, 3.0, 0.0]
    assert b.correct.tolist() == [False, True, False, False]  # the last step's flag
    assert b.metrics["train/mean_turns"] == pytest.approx((1 + 2 + 3 + 1) / 4)


def test_observations_are_in_the_sequence_but_not_in_the_token_mask():
    t = scripted_trainer()
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1), "i": i} for i in range(3)]
    b = t.generate_batch(rows, 1)
    tok = t.policy.tokenizer
    for r in range(3):
        live = b.attention_mask[r].bool()
        ids, gen = b.input_ids[r][live], b.token_mask[r][live]
        prompt_len = int(b.prompt_ids.shape[1] - (b.attention_mask[r, : b.prompt_ids.shape[1]] == 0).sum())
        env_tokens = ids[prompt_len:][gen[prompt_len:] == 0]
        expected = "".join(f"<{k}>" for k in range(r % 3))
        assert tok.decode(env_tokens.tolist()) == expected
        assert int(gen.sum()) == int(b.response_lengths[r])
    # log-probs of the generated tokens match a training forward over the whole conversation
    fresh = t.policy.logprobs(b.input_ids, b.attention_mask)
    gap = ((fresh - b.generation_logprobs) * b.token_mask).abs().max()
    assert gap < 1e-4
    assert (b.generation_logprobs[b.token_mask == 0] == 0).all()


def test_retry_environment_trains_end_to_end():
    t = GRPOTrainer(load_config(None, SMALL + ["grpo.max_rollout_turns=2", "env.name=retry"]))
    assert isinstance(t.env, RetryEnvironment)
    metrics = t.step()
    rollout = metrics.rollout
    retried = [" no. try again: " in r for r in rollout.responses]
    # a wrong first answer gets the feedback and a second turn; a right one ends the episode
    assert metrics["train/mean_turns"] == pytest.approx(1 + sum(retried) / len(retried))
    assert any(retried)  # the untrained model answers wrongly
    assert all(retried[i] for i in (~rollout.correct).nonzero().flatten().tolist())
    assert metrics["train/global_valid_toks"] == float(rollout.token_mask.sum())
    assert t.step_count == 1


def test_a_multi_turn_env_with_one_turn_is_refused():
    with pytest.raises(ValueError, match="max_rollout_turns is 1"):
        GRPOTrainer(load_config(None, SMALL + ["env.name=retry"]))


def test_unknown_env_name_is_refused():
    with pytest.raises(ValueError, match="env.name"):
        GRPOTrainer(load_config(None, SMALL + ["env.name=chess"]))
