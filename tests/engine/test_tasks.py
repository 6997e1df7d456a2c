"""Built-in tasks: exact rewards, held-out validation, determinism, MathTask on local files, configs."""

import inspect
import json
import os
import subprocess
import sys
import threading

import pandas as pd
import pytest
import torch
import yaml
from paths import ROOT

import rlnb
from rlnb.config import parse_config
from rlnb.engine.environments.base import check_rewards
from rlnb.engine.environments.math_task import extract_reference
from rlnb.engine.environments.tasks import (
    TASKS,
    AdditionTask,
    AdditionThinkTask,
    MathTask,
    ReverseTask,
    TaskConfig,
    build_task,
    format_prompt,
    make_task,
    register_task,
    task_arguments,
)
from rlnb.run.config.master_config import dump_config

GSM8K_ROWS = [
    {"question": "Natalia sold 48 clips in April and half as many in May. How many in total?",
     "answer": "In May she sold 48/2 = 24 clips.\nIn total 48+24 = 72 clips.\n#### 72"},
    {"question": "Weng earns $12 an hour. How much for 50 minutes?",
     "answer": "12/60 = 0.2 per minute, 0.2*50 = 10.\n#### 10"},
    {"question": "Betty needs $100 and has half. Parents give 15, grandparents twice that. How much more?",
     "answer": "#### 5"},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def score(task, responses, row):
    n = len(responses)
    return task.score([row["prompt"]] * n, responses, [row] * n)


# --- generated tasks


def test_addition_exact_rewards():
    task = AdditionTask()
    row = {"prompt": "12+7=", "answer": "19"}
    r = score(task, ["19", "18", "19 \n", " 19", "", "19x", "0019"], row)
    assert r.total.tolist() == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert r.correct.tolist() == [True, False, True, False, False, False, False]
    # partial credit: a number of at most 3 digits (2*50 = 100) is well formed
    assert r.components["format"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert r.components["correct"].tolist() == r.total.tolist()


def test_reverse_exact_rewards():
    task = ReverseTask()
    row = {"prompt": "rev abcd=", "answer": "dcba"}
    r = score(task, ["dcba", "abcd", "dcba\n", "DCBA", "", "dc", "dcb a"], row)
    assert r.total.tolist() == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert r.components["format"].tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


@pytest.mark.parametrize("task", [AdditionTask(), ReverseTask(), AdditionThinkTask()],
                         ids=["addition", "reverse", "addition_think"])
def test_gdpo_components_have_batch_shape(task):
    rows = task.train_rows(5, seed=1)
    r = task.score([x["prompt"] for x in rows], [x["answer"] for x in rows[:3]] + ["?", ""], rows)
    assert set(r.components) == {"correct", "format"}
    for t in [r.total, *r.components.values()]:
        assert t.shape == (5,) and t.dtype == torch.float32
    assert r.correct.shape == (5,) and r.correct.dtype == torch.bool
    assert r.total.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0]
    check_rewards(r, 5, task.name)
    with pytest.raises(ValueError, match="2 prompts, 1 responses and 2 rows"):
        task.score(["a", "b"], ["a"], rows[:2])


def test_rows_are_correct_problems():
    for row in AdditionTask(max_operand=9, num_val=20).train_rows(200):
        a, b = row["prompt"].removesuffix("=").split("+")
        assert row["answer"] == str(int(a) + int(b)) and 0 <= int(a) <= 9 and 0 <= int(b) <= 9
    for row in ReverseTask(min_len=2, max_len=4).train_rows(200):
        word = row["prompt"].removeprefix("rev ").removesuffix("=")
        assert row["answer"] == word[::-1] and 2 <= len(word) <= 4 and word.isalpha()


@pytest.mark.parametrize("task", [AdditionTask(), ReverseTask(min_len=2, max_len=3)], ids=["addition", "reverse"])
def test_validation_problems_never_appear_in_training(task):
    val = {r["prompt"] for r in task.val_rows()}
    assert len(val) == task.num_val == 200  # distinct problems
    train = {r["prompt"] for r in task.train_rows(20_000, seed=0)}
    assert not val & train
    if task.name == "addition":  # every other problem does turn up in training
        train = {r["prompt"] for r in task.train_rows(40_000, seed=0)}
        assert not val & train
        assert len(train) == task.num_problems - task.num_val == 51 * 51 - 200


def test_rows_are_deterministic_per_seed():
    a, b = AdditionTask(), AdditionTask()
    assert a.train_rows(50, seed=3) == b.train_rows(50, seed=3)
    assert a.train_rows(50, seed=3) != a.train_rows(50, seed=4)
    assert a.train_rows(10, seed=3) == a.train_rows(50, seed=3)[:10]  # a prefix, not reshuffled
    assert a.val_rows() == b.val_rows() and a.val_rows(5) == a.val_rows()[:5]
    assert AdditionTask(seed=1).val_rows() != a.val_rows()  # the task seed picks the held-out set
    assert ReverseTask().train_rows(20, seed=0) == ReverseTask().train_rows(20, seed=0)
    rows = a.val_rows(3)
    rows[0]["answer"] = "edited"
    assert a.val_rows(3)[0]["answer"] != "edited"  # callers get copies


def test_generated_task_argument_errors():
    with pytest.raises(ValueError, match=r"num_val must be in \[1, 4\)"):
        AdditionTask(max_operand=1, num_val=4)
    with pytest.raises(ValueError, match="max_operand must be >= 1"):
        AdditionTask(max_operand=0)
    with pytest.raises(ValueError, match="min_len <= max_len"):
        ReverseTask(min_len=5, max_len=3)
    with pytest.raises(ValueError, match="has 200 validation rows, asked for 201"):
        AdditionTask().val_rows(201)


# --- math


def test_extract_reference():
    assert extract_reference(GSM8K_ROWS[0]["answer"]) == "72"
    assert extract_reference(" 3/4 ") == "3/4" and extract_reference(7) == "7"


@pytest.mark.smoke
def test_math_task_local_jsonl(tmp_path):
    pytest.importorskip("math_verify")
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS)
    task = MathTask(path, num_val=1, seed=0)
    train, val = task.train_rows(2, seed=0), task.val_rows()
    assert len(val) == 1
    assert sorted(r["answer"] for r in train + val) == ["10", "5", "72"]
    assert {r["prompt"] for r in train} | {val[0]["prompt"]} == {r["question"] for r in GSM8K_ROWS}
    assert val[0]["prompt"] not in {r["prompt"] for r in task.train_rows(10, seed=1)}
    assert len(task.train_rows(5)) == 5  # more rows than the data: more epochs

    row = {"prompt": GSM8K_ROWS[0]["question"], "answer": "72"}
    responses = ["72", "#### 72", "so the answer is \\boxed{72}", "71", "I don't know", ""]
    r = score(task, responses, row)
    assert r.total.tolist() == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert r.components["format"].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]
    check_rewards(r, 6, "math")


def test_math_task_scores_off_the_main_thread(tmp_path):
    """math_verify's SIGALRM timeout would raise in a thread (a notebook's training loop)."""
    pytest.importorskip("math_verify")
    task = MathTask(write_jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS), num_val=1)
    out = []
    t = threading.Thread(target=lambda: out.append(score(task, ["\\boxed{10}", "9"], {"prompt": "q", "answer": "10"})))
    t.start()
    t.join()
    assert out[0].total.tolist() == [1.0, 0.0]


def test_math_task_keys_parquet_and_val_file(tmp_path):
    rows = [{"q": f"{i}+{i}?", "a": str(2 * i)} for i in range(6)]
    train = tmp_path / "train.parquet"
    pd.DataFrame(rows).to_parquet(train)
    val = write_jsonl(tmp_path / "val.jsonl", [{"q": "1+2?", "a": "#### 3"}, {"q": "2+2?", "a": "4"}])
    task = MathTask(str(train), val_split=val, prompt_key="q", answer_key="a", num_val=1)
    assert task.val_rows() == [{"prompt": "1+2?", "answer": "3"}]
    assert {r["prompt"] for r in task.train_rows(6)} == {r["q"] for r in rows}
    with pytest.raises(ValueError, match="val_split must be a second local file"):
        MathTask(str(train), val_split="test", prompt_key="q", answer_key="a")


def test_math_task_row_errors(tmp_path):
    bad = [GSM8K_ROWS[0], {"question": "no answer here"}, GSM8K_ROWS[1], {"answer": "#### 1"}]
    path = write_jsonl(tmp_path / "bad.jsonl", bad)
    with pytest.raises(ValueError, match=r"row 1 has no 'answer'.*row 3 has no 'question'"):
        MathTask(path, num_val=1)
    with pytest.raises(ValueError, match=r"row 0 has no 'prompt'.*columns: \['question', 'answer'\]"):
        MathTask(write_jsonl(tmp_path / "ok.jsonl", GSM8K_ROWS), prompt_key="prompt")
    with pytest.raises(ValueError, match="num_val=3 would hold out all 3 rows"):
        MathTask(write_jsonl(tmp_path / "ok.jsonl", GSM8K_ROWS), num_val=3)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        MathTask(str(tmp_path / "missing.jsonl"))
    (tmp_path / "data.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="unsupported suffix"):
        MathTask(str(tmp_path / "data.csv"))


def test_math_task_without_math_verify(tmp_path, monkeypatch):
    task = MathTask(write_jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS), num_val=1)
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` fail
    with pytest.raises(ImportError, match="pip install math-verify"):
        score(task, ["72"], {"prompt": "q", "answer": "72"})


def test_hub_name_offline_fails_clearly(tmp_path):
    """Offline with an empty cache: no network is tried, and the error says why it failed."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HOME": str(tmp_path)}
    code = (
        "from rlnb.engine.environments.math_task import MathTask\n"
        "try:\n    MathTask('openai/gsm8k', 'main')\n"
        "except ValueError as e:\n    print('ERR', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert "ERR could not load data set 'openai/gsm8k'" in out.stdout, out.stderr[-2000:]
    assert "HF_HUB_OFFLINE is set" in out.stdout


# --- prompts, registry, config


def test_format_prompt():
    from rlnb.engine.models.tiny import build_char_tokenizer

    row = {"prompt": "12+7=", "answer": "19"}
    assert format_prompt(row) == "12+7="
    tok = build_char_tokenizer()
    with pytest.raises(ValueError, match="has no chat template"):
        format_prompt(row, tok, chat_template=True)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        format_prompt(row, chat_template=True)
    tok.chat_template = (
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if add_generation_prompt %}<assistant>{% endif %}"
    )
    assert format_prompt(row, tok, chat_template=True) == "<user>12+7=<assistant>"
    with pytest.raises(ValueError, match="no 'prompt' key"):
        format_prompt({"question": "x"})


def test_make_task_and_registry():
    assert list(TASKS) == ["addition", "reverse", "addition_think", "math", "dataset",
                           "reasoning_gym", "verifiers", "calculator"]
    assert isinstance(make_task("addition", max_operand=9, num_val=10), AdditionTask)
    with pytest.raises(ValueError, match=r"unknown task 'additon' \(did you mean 'addition'\?\)"):
        make_task("additon")
    with pytest.raises(ValueError, match="task 'reverse' takes no argument 'max_operand'"):
        make_task("reverse", max_operand=3)


def test_task_config(tmp_path):
    task = build_task(None)
    assert isinstance(task, AdditionTask) and task.max_operand == 50 and task.num_val == 200
    task = build_task({"name": "reverse", "min_len": 2, "max_len": 3, "num_val": 10, "seed": 1})
    assert isinstance(task, ReverseTask) and (task.min_len, task.max_len, task.seed) == (2, 3, 1)
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS)
    task = build_task(TaskConfig(name="math", dataset_name=path, num_val=2))
    assert isinstance(task, MathTask) and len(task.val_rows()) == 2
    with pytest.raises(ValueError, match=r"task.max_opernd: unknown key; did you mean 'max_operand'"):
        parse_config(TaskConfig, {"max_opernd": 3}, "task")
    with pytest.raises(ValueError, match=r"task.name: unknown task 'mathh'"):
        parse_config(TaskConfig, {"name": "mathh"}, "task")
    with pytest.raises(ValueError, match="task.dataset_name: the math task needs dataset_name"):
        build_task({"name": "math"})
    with pytest.raises(ValueError, match=r"task.num_val: .*greater than or equal to 1"):
        build_task({"num_val": 0})
    assert all(f.description for f in TaskConfig.model_fields.values())


def test_each_task_owns_its_settings():
    """A task's Settings are exactly its constructor's keywords, with its defaults, described."""
    for name, cls in TASKS.items():
        fields, params = cls.Settings.model_fields, inspect.signature(cls).parameters
        assert list(fields) and set(fields) == set(params), name
        for key, field in fields.items():
            assert field.description, f"{name}: data.{key} has no description"
            if params[key].default is not params[key].empty:
                assert field.default == params[key].default, (name, key)
        register_task(name, cls)  # each passes the checks a plug-in's registration runs
    assert list(TASKS) == ["addition", "reverse", "addition_think", "math", "dataset",
                           "reasoning_gym", "verifiers", "calculator"]
    # the same data section, read by two tasks: each gets its own keys, defaults filled in
    think = rlnb.load_config(None, ["data.name=addition_think", "data.max_operand=9"]).data
    assert task_arguments(think) == {"num_val": 200, "seed": 0, "max_operand": 9, "max_filler": 4}
    rev = rlnb.load_config(None, ["data.name=reverse", "data.min_len=2"]).data
    assert task_arguments(rev) == {"num_val": 200, "seed": 0, "min_len": 2, "max_len": 6}
    assert (rev.min_len, rev.max_len) == (2, 6)  # read as data.min_len, as before


def one_line_error(overrides) -> str:
    with pytest.raises(ValueError) as err:
        rlnb.load_config(None, overrides)
    head, *lines = str(err.value).splitlines()
    assert head == "invalid config:" and len(lines) == 1, str(err.value)
    return lines[0].strip()


def test_a_key_the_task_does_not_own_is_refused_in_one_line():
    assert one_line_error(["data.name=reverse", "data.max_operand=3"]) == (
        "data.max_operand: task 'reverse' has no such setting ('addition' and 'addition_think' "
        "have it); it takes max_len, min_len, num_val, seed, correct_reward, correct_threshold "
        "(got 3)")
    assert one_line_error(["data.max_filler=2"]) == (
        "data.max_filler: task 'addition' has no such setting ('addition_think' has it); it "
        "takes max_operand, num_val, seed, correct_reward, correct_threshold (got 2)")
    assert one_line_error(["data.max_opernd=3"]).startswith(
        "data.max_opernd: unknown key; did you mean 'max_operand'? task 'addition' takes ")
    # a bad value names its dotted key; a task's own rule lives in its Settings
    assert one_line_error(["data.name=reverse", "data.min_len=abc"]).startswith(
        "data.min_len: Input should be a valid integer")
    assert one_line_error(["data.name=reverse", "data.min_len=5", "data.max_len=3"]) == (
        "data.max_len: must be >= min_len (5) (got 3)")
    assert one_line_error(["data.name=math"]).startswith(
        "data.dataset_name: the math task needs dataset_name")
    assert one_line_error(["data.name=dataset", "data.val_fraction=1.5"]).startswith(
        "data.val_fraction: Input should be less than 1")


def test_a_config_dumped_when_data_held_every_tasks_keys_still_loads(tmp_path):
    """Run directories written before tasks owned their settings dumped every key of the data
    section (at its default where the task did not read it); resume reads them back."""
    old = {"name": "addition", "max_operand": 20, "max_filler": 4, "min_len": 3, "max_len": 6,
           "dataset_name": None, "dataset_config": None, "path": None, "split": "train",
           "val_split": None, "prompt_key": "question", "answer_key": "answer", "num_val": 16,
           "val_fraction": None, "seed": 3, "correct_reward": None, "correct_threshold": 1.0}
    config = rlnb.load_config({"data": old})
    assert task_arguments(config.data) == {"num_val": 16, "seed": 3, "max_operand": 20}
    dumped = yaml.safe_load(dump_config(config))["data"]
    assert dumped == {"name": "addition", "num_val": 16, "seed": 3, "max_operand": 20,
                      "correct_reward": None, "correct_threshold": 1.0}
    assert rlnb.load_config(yaml.safe_load(dump_config(config))) == config
    path = write_jsonl(tmp_path / "gsm.jsonl", GSM8K_ROWS)
    math = rlnb.load_config({"data": {**old, "name": "math", "max_operand": 50,
                                      "dataset_name": path, "num_val": 2}}).data
    assert task_arguments(math)["prompt_key"] == "question" and math.dataset_name == path
    assert len(build_task(math).val_rows()) == 2
    # a dumped config with data.name overridden: the other task's defaults are dropped
    rev = rlnb.load_config(yaml.safe_load(dump_config(rlnb.load_config(None))),
                           ["data.name=reverse"]).data
    assert task_arguments(rev) == {"num_val": 200, "seed": 0, "min_len": 3, "max_len": 6}


def test_the_guide_lists_each_tasks_settings():
    """docs/guide.md's table of the data section says which task owns which setting."""
    text = (ROOT / "docs" / "guide.md").read_text()
    table = text.split("| task (`data.name`) | its settings |")[1].split("\n\n")[0]
    rows = [line.split("|")[1:3] for line in table.splitlines()[2:]]
    listed = {name.strip(" `"): [k.strip(" `") for k in keys.split(",")] for name, keys in rows}
    assert list(listed) == list(TASKS)
    assert {n: set(keys) for n, keys in listed.items()} == {
        n: set(cls.Settings.model_fields) for n, cls in TASKS.items()}


def test_a_tasks_defaults_are_written_once_in_its_settings():
    """Every built-in task's constructor takes its settings without defaults; a call that leaves
    one out gets its Settings' default, so the task built in Python is the one a config builds;
    a constructor default that differs from its Settings' is refused when the class is defined."""
    import inspect

    from rlnb.engine.environments.base import Task
    from rlnb.engine.environments.generated import AdditionTask
    from rlnb.engine.environments.tasks import TASKS, build_task
    from rlnb.run.config.master_config import load_config

    for name, cls in TASKS.items():
        own = inspect.unwrap(cls.__init__)
        written = {p.name for p in inspect.signature(own).parameters.values()
                   if p.name in cls.Settings.model_fields and p.default is not p.empty}
        assert written == set(), f"task {name!r}: defaults written in __init__ too: {written}"
        shown = inspect.signature(cls).parameters
        for key, field in cls.Settings.model_fields.items():
            if key in shown and not field.is_required():
                assert shown[key].default == field.get_default(call_default_factory=True), key
    assert AdditionTask().val_rows() == build_task(load_config(None).data).val_rows()
    assert AdditionTask(max_operand=9, num_val=20).max_operand == 9
    with pytest.raises(TypeError, match=r"Mine.__init__: num_val=16 by default, but "
                                        r"Mine.Settings says 200: write a setting's default "
                                        r"once, in Settings"):
        type("Mine", (Task,), {"__init__": lambda self, num_val=16, seed=0: None})
