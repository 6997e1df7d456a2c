"""A user's reward functions, called as TRL calls them: TRL-style format/accuracy functions run
unchanged on hand-written and sampled completions, components and weights, None, async and
whole-group rewards, chat messages, a named notion of correct, every bad output named by function,
row and prompt, and a real tiny GRPO (PPO, async GRPO) step on a list of dicts."""

import asyncio
import math
import re

import pytest
import torch
from tiny_config import TINY

import rlnb
from rlnb.engine.environments.reward_funcs import (
    RewardFunctionError,
    group_reward,
    reward_func_list,
)
from rlnb.engine.environments.reward_table import batch_reward_table, reward_table
from rlnb.engine.environments.reward_task import RewardFuncsTask
from rlnb.engine.environments.user_data import DatasetTask


# --- written the way TRL's tutorials write them (our own code): a format reward with a regex over
# <think>...</think><answer>...</answer>, and an accuracy reward against a `solution` column
def format_reward(completions, **kwargs):
    """1.0 when the whole completion is <think>...</think><answer>...</answer>."""
    pattern = r"^<think>.*?</think><answer>.*?</answer>$"
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    return [1.0 if re.match(pattern, t, re.DOTALL) else 0.0 for t in texts]


def accuracy_reward(completions, solution, **kwargs):
    """1.0 when the <answer> equals the solution; None for a row without a solution."""
    texts = [c[0]["content"] if isinstance(c, list) else c for c in completions]
    out = []
    for text, sol in zip(texts, solution):
        if sol is None:
            out.append(None)
            continue
        m = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
        out.append(1.0 if m and m.group(1).strip() == str(sol) else 0.0)
    return out


ROWS = [{"prompt": f"{a}+{b}=", "solution": str(a + b)} for a in range(8) for b in range(8)]


def task_of(funcs, weights=None, rows=ROWS, **kw):
    return RewardFuncsTask(DatasetTask.from_data(rows, num_val=4), reward_func_list(funcs, weights),
                           **kw)


def test_trl_style_functions_score_hand_written_completions_with_weights():
    task = task_of([format_reward, accuracy_reward], weights=[1.0, 2.0],
                   correct_reward="accuracy_reward")
    completions = ["<think>3+4</think><answer>7</answer>",  # format 1, accuracy 1
                   "7",                                      # 0, 0
                   "<think>?</think><answer>8</answer>",     # 1, 0
                   "<answer>7</answer>"]                     # 0, 1
    t = reward_table(task, {"prompt": "3+4=", "solution": "7"}, completions, generations=2)
    assert [r["format_reward"] for r in t.rows] == [1.0, 0.0, 1.0, 0.0]
    assert [r["accuracy_reward"] for r in t.rows] == [1.0, 0.0, 0.0, 1.0]
    assert [r["total"] for r in t.rows] == [3.0, 0.0, 1.0, 2.0]  # 1*format + 2*accuracy
    assert [r["correct"] for r in t.rows] == [True, False, False, True]
    groups = t.groups()
    assert [g["total"] for g in groups] == [1.5, 1.5]
    assert [g["total_std"] for g in groups] == [1.5, 0.5]
    assert t.no_signal_groups == []


def test_none_scores_count_zero_in_the_total_and_are_never_correct():
    task = task_of([format_reward, accuracy_reward], correct_reward="accuracy_reward")
    rows = [{"prompt": "1+1=", "solution": None}, {"prompt": "1+1=", "solution": "2"}]
    t = reward_table(task, rows, ["<think></think><answer>2</answer>"] * 2, generations=1)
    assert [r["accuracy_reward"] for r in t.rows] == [None, 1.0]
    assert [r["total"] for r in t.rows] == [1.0, 2.0]  # TRL's nansum: None adds nothing
    assert [r["correct"] for r in t.rows] == [False, True]
    assert t.groups()[0]["accuracy_reward"] is None  # a mean over the rows it scores: none


def test_correct_by_threshold_on_the_total_and_no_notion_of_correct():
    task = task_of([format_reward, accuracy_reward], correct_reward="total",
                   correct_threshold=1.5)
    t = reward_table(task, {"prompt": "3+4=", "solution": "7"},
                     ["<think></think><answer>7</answer>", "<answer>7</answer>"])
    assert [r["correct"] for r in t.rows] == [True, False]  # totals 2 and 1
    bare = task_of([format_reward])
    assert bare.defines_correct is False
    assert reward_table(bare, {"prompt": "x", "solution": "1"}, ["a"]).rows[0]["correct"] is None


async def _async_length(completions, **kwargs):
    await asyncio.sleep(0)
    return [float(len(c)) for c in completions]


def test_async_functions_are_awaited_also_inside_a_running_event_loop():
    task = task_of([_async_length, format_reward])
    t = reward_table(task, {"prompt": "p", "solution": "1"}, ["ab", "abcd"])
    assert [r["_async_length"] for r in t.rows] == [2.0, 4.0]

    async def in_a_kernel():  # Jupyter runs cells inside an event loop
        return reward_table(task, {"prompt": "p", "solution": "1"}, ["abc"])

    assert asyncio.run(in_a_kernel()).rows[0]["_async_length"] == 3.0


def test_a_group_reward_is_called_once_per_group_with_its_completions():
    calls = []

    @group_reward
    def rank_in_group(prompts, completions, solution, **kwargs):
        calls.append((len(completions), set(prompts), set(solution)))
        order = sorted(range(len(completions)), key=lambda i: len(completions[i]))
        return [float(order.index(i)) for i in range(len(completions))]

    task = task_of([rank_in_group])
    rows = [{"prompt": "a", "solution": "1"}] * 3 + [{"prompt": "b", "solution": "2"}] * 3
    t = reward_table(task, rows, ["xx", "x", "xxx", "x", "xxx", "xx"], generations=3)
    assert calls == [(3, {"a"}, {"1"}), (3, {"b"}, {"2"})]
    assert [r["rank_in_group"] for r in t.rows] == [1.0, 0.0, 2.0, 0.0, 2.0, 1.0]


def test_chat_prompts_and_completions_are_passed_as_messages():
    seen = {}

    def record(prompts, completions, **kwargs):
        seen.update(prompts=prompts, completions=completions)
        return [1.0] * len(completions)

    rows = [{"prompt": [{"role": "user", "content": "2+2?"}], "solution": "4"}] * 8
    task = task_of([record, accuracy_reward], rows=rows)
    assert task.chat
    t = reward_table(task, task.train_rows(1)[0], ["<answer>4</answer>"])
    assert seen["prompts"] == [[{"role": "user", "content": "2+2?"}]]
    assert seen["completions"] == [[{"role": "assistant", "content": "<answer>4</answer>"}]]
    assert t.rows[0]["accuracy_reward"] == 1.0


def _raises_on_seven(completions, solution, **kwargs):
    return [1.0 / (int(s) - 7) for s in solution]


BAD_OUTPUTS = [
    (lambda completions, **kw: [1.0] * (len(completions) - 1), "returned 3 scores for 4"),
    (lambda completions, **kw: 1.0, "returned a float, not a list of 4 scores"),
    (lambda completions, **kw: ["high"] * len(completions), "returned 'high' (str) at row 0"),
    (lambda completions, **kw: [math.nan] * len(completions), "returned nan at row 0"),
    (lambda completions, **kw: [0.0, math.inf, 0.0, 0.0], "returned inf at row 1"),
]


@pytest.mark.parametrize(("func", "fragment"), BAD_OUTPUTS)
def test_a_bad_output_is_one_line_naming_the_function_and_the_row(func, fragment):
    task = task_of([func])
    with pytest.raises(RewardFunctionError) as err:
        reward_table(task, {"prompt": "3+4=", "solution": "7"}, ["a", "b", "c", "d"])
    msg = str(err.value)
    assert fragment in msg and "'<lambda>'" in msg and "\n" not in msg, msg


def test_a_raising_function_is_named_with_the_row_the_prompt_and_its_line():
    task = task_of([format_reward, _raises_on_seven])
    rows = [{"prompt": f"{a}+4=", "solution": str(a + 4)} for a in range(6)]  # row 3: 7
    with pytest.raises(RewardFunctionError) as err:
        reward_table(task, rows, ["x"] * 6, generations=2)
    msg = str(err.value)
    assert msg.startswith("reward function '_raises_on_seven' raised ZeroDivisionError")
    assert "at row 3 (prompt '3+4=')" in msg
    assert "[test_reward_funcs.py:" in msg and "\n" not in msg


def test_a_correct_reward_that_names_no_function_is_one_clear_error():
    with pytest.raises(ValueError) as err:
        rlnb.GRPOTrainer(config(), reward_funcs=[digits_reward], train_dataset=ROWS)
    assert "data.correct_reward='exact_reward' is not one of reward_funcs ['digits_reward']" in str(
        err.value)
    assert type(err.value) is ValueError  # not pydantic's ValidationError


def test_reward_func_list_refuses_duplicates_lengths_and_non_functions():
    with pytest.raises(ValueError, match="two reward functions are called 'format_reward'"):
        reward_func_list([format_reward, format_reward])
    assert [f.name for f in reward_func_list({"a": format_reward, "b": format_reward})] == [
        "a", "b"]
    named = reward_func_list([{"func": "test_reward_funcs:format_reward", "name": "fmt",
                               "weight": 0.5}, "test_reward_funcs:accuracy_reward"])
    assert [(f.name, f.weight, f.func) for f in named] == [
        ("fmt", 0.5, format_reward), ("accuracy_reward", 1.0, accuracy_reward)]
    with pytest.raises(ValueError, match="reward_weights has 1 entries for 2"):
        reward_func_list([format_reward, accuracy_reward], [1.0])
    with pytest.raises(ValueError, match=r"reward_funcs\[0\] is a int"):
        reward_func_list([3])
    with pytest.raises(ValueError, match="cannot import 'no_such_module_xyz'"):
        reward_func_list(["no_such_module_xyz:f"])
    with pytest.raises(ValueError, match="has no function 'nope'"):
        reward_func_list(["math:nope"])


# --- real training steps on the tiny model, data as a list of dicts
def digits_reward(completions, **kwargs):
    """A reward a fresh tiny model meets sometimes: the share of digits in the completion."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def exact_reward(completions, solution, trainer_state, **kwargs):
    assert trainer_state.global_step >= 0  # TRL's TrainerState, global_step = the step
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


def config(*extra, algorithm="grpo"):
    overrides = [*TINY, "data.name=dataset", "data.correct_reward=exact_reward", *extra]
    if algorithm == "ppo":
        return rlnb.load_config(rlnb.run.config.master_config.packaged_config("ppo_tiny"),
                                [o.replace("grpo.", "ppo.") for o in overrides], preset="fast")
    return rlnb.load_config(None, overrides, preset="fast")


def test_a_real_grpo_step_with_reward_funcs_and_a_list_of_dicts():
    trainer = rlnb.GRPOTrainer(config("grpo.val_period=0"),
                               reward_funcs=[digits_reward, exact_reward],
                               reward_weights=[0.5, 1.0], train_dataset=ROWS)
    assert trainer.config.data.name == "dataset"
    assert [(f.func, f.weight) for f in trainer.config.reward_funcs] == [
        ("test_reward_funcs:digits_reward", 0.5), ("test_reward_funcs:exact_reward", 1.0)]
    before = {k: v.clone() for k, v in trainer.policy.model.named_parameters()}
    batch = trainer.rollout()
    digits = torch.tensor(digits_reward(batch.responses))
    exact = torch.tensor([float(r.strip() == row["solution"])
                          for r, row in zip(batch.responses, batch.rows)])
    assert torch.allclose(batch.rewards, 0.5 * digits + exact)
    assert batch.metrics["train/reward/digits_reward"] == pytest.approx(float(digits.mean()))
    assert batch.metrics["train/reward/exact_reward"] == pytest.approx(float(exact.mean()))
    assert torch.equal(batch.correct, exact > 0)
    # completion_ids are the sampled tokens (through EOS), as TRL passes them
    table = batch_reward_table(trainer.task, batch)
    assert [r["total"] for r in table.rows] == pytest.approx(batch.rewards.tolist())
    advantages = trainer.compute_advantages(batch)
    result = trainer.update(advantages)
    assert math.isfinite(result.metrics["train/loss"])
    assert any(not torch.equal(before[k], v) for k, v in trainer.policy.model.named_parameters())
    gdpo = trainer.compute_advantages(batch, adv_estimator={"name": "gdpo"})
    assert torch.isfinite(gdpo.advantages).all()  # one GRPO advantage per component


def test_the_trl_style_pair_runs_unchanged_in_a_real_step_on_chat_data():
    """format_reward and accuracy_reward as written above, on a conversational math data set
    built here, through a real rollout of the tiny model whose tokenizer has a chat template."""
    from rlnb.engine.models.policy import Policy

    cfg = config("grpo.val_period=0", "data.correct_reward=accuracy_reward")
    policy = Policy(cfg.policy, seed=cfg.grpo.seed)
    policy.tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    rows = [{"prompt": [{"role": "user", "content": f"{a}*{b}="}], "solution": str(a * b)}
            for a in range(7) for b in range(7)]
    trainer = rlnb.GRPOTrainer(cfg, policy=policy, reward_funcs=[format_reward, accuracy_reward],
                               train_dataset=rows)
    metrics = trainer.step()
    batch = metrics.rollout
    assert batch.prompts[0] == batch.rows[0]["prompt"][0]["content"]  # through the template
    messages = [[{"role": "assistant", "content": r}] for r in batch.responses]
    assert batch.reward_components["format_reward"].tolist() == format_reward(messages)
    assert batch.reward_components["accuracy_reward"].tolist() == accuracy_reward(
        messages, [r["solution"] for r in batch.rows])
    assert math.isfinite(metrics["train/loss"])


def test_reward_funcs_reach_the_completion_ids_and_the_step():
    seen = []

    def record(completions, completion_ids, trainer_state, **kwargs):
        seen.append((list(completions), [list(i) for i in completion_ids],
                     trainer_state.global_step, sorted(kwargs)))
        return [0.0] * len(completions)

    trainer = rlnb.GRPOTrainer(config("grpo.val_period=0", "data.correct_reward=null"),
                               reward_funcs=[record], train_dataset=ROWS)
    trainer.step()
    trainer.rollout()
    (texts, ids, step0, keys), (_, _, step1, _) = seen
    assert (step0, step1) == (0, 1)
    assert keys == ["log_extra", "log_metric", "prompts", "solution"]
    tok = trainer.policy.tokenizer
    for text, row_ids in zip(texts, ids):
        assert tok.decode(row_ids, skip_special_tokens=True) == text
        assert tok.eos_token_id not in row_ids[:-1]  # through the first EOS, no further


def test_log_metric_lands_in_the_step_metrics():
    def measured(completions, log_metric, **kwargs):
        log_metric("completion_chars", sum(map(len, completions)) / len(completions))
        return [0.0] * len(completions)

    trainer = rlnb.GRPOTrainer(config("grpo.val_period=0", "data.correct_reward=null"),
                               reward_funcs=[measured], train_dataset=ROWS)
    batch = trainer.rollout()
    assert batch.metrics["train/completion_chars"] == pytest.approx(
        sum(map(len, batch.responses)) / len(batch.responses))
    assert "train/mean_gen_tokens_correct" not in batch.metrics  # no notion of correct
    assert "validation/accuracy" not in trainer.validate()


@pytest.mark.parametrize("loop", ["ppo", "async"])
def test_ppo_and_async_grpo_take_the_same_arguments(loop):
    if loop == "ppo":
        cfg = config("ppo.val_period=0", "ppo.policy_training_start_step=0", algorithm="ppo")
        trainer = rlnb.PPOTrainer(cfg, reward_funcs=[digits_reward, exact_reward],
                                  train_dataset=ROWS)
    else:
        cfg = config("grpo.val_period=0", "grpo.async_grpo.enabled=true",
                     "loss_fn.use_importance_sampling_correction=true")
        trainer = rlnb.AsyncGRPOTrainer(cfg, reward_funcs=[digits_reward, exact_reward],
                                        train_dataset=ROWS)
    try:
        metrics = trainer.step()
    finally:
        trainer.close()
    assert "train/reward/digits_reward" in metrics
    assert math.isfinite(metrics["train/reward"])
