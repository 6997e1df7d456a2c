"""A user's data as task rows: a Dataset, DatasetDict, DataFrame, list of dicts or a .jsonl /
.json / .parquet / .csv file give the same rows; prompt_key renames; held-out rows given or
carved out with a seed; chat prompts through the tokenizer's own template; then whole runs: `rlnb
train` of a YAML naming `reward_funcs: [module:function]` and `data.path`, its resume and `rlnb
verify`, and the same from Python with data and functions held in memory."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from tiny_config import TINY

import rlnb
from rlnb.engine.environments.tasks import build_task, format_prompt
from rlnb.engine.environments.user_data import DatasetTask, as_rows
from rlnb.run.training.session import TrainingRun
from rlnb.run.training.verify import verify_run

ROWS = [{"question": f"{a}+{b}=", "solution": str(a + b), "level": a % 3}
        for a in range(5) for b in range(4)]  # 20 rows


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


def write_files(folder: Path) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = {s: folder / f"rows{s}" for s in (".jsonl", ".json", ".parquet", ".csv")}
    paths[".jsonl"].write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    paths[".json"].write_text(json.dumps(ROWS))
    pq.write_table(pa.Table.from_pylist(ROWS), paths[".parquet"])
    pd.DataFrame(ROWS).to_csv(paths[".csv"], index=False)
    return paths


@pytest.mark.smoke
def test_every_form_of_data_gives_the_same_rows(tmp_path):
    from datasets import Dataset, DatasetDict

    columns = {k: [r[k] for r in ROWS] for k in ROWS[0]}
    forms = {"list": ROWS, "frame": pd.DataFrame(ROWS), "dataset": Dataset.from_list(ROWS),
             "columns": columns,
             **{k: str(p) for k, p in write_files(tmp_path).items()}}
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    forms["saved"] = str(tmp_path / "saved")
    for name, data in forms.items():
        rows = as_rows(data)
        if name == ".csv":  # CSV has no types: pandas reads the digits back as numbers
            rows = [{**r, "solution": str(r["solution"])} for r in rows]
        assert rows == ROWS, name
    split = as_rows(DatasetDict({"train": Dataset.from_list(ROWS[:15]),
                                 "test": Dataset.from_list(ROWS[15:])}))
    assert split == {"train": ROWS[:15], "test": ROWS[15:]}


def test_prompt_key_renames_and_columns_reach_the_rows():
    task = DatasetTask.from_data(ROWS, prompt_key="question", num_val=4)
    row = task.train_rows(1)[0]
    assert set(row) == {"prompt", "solution", "level"}  # question is now prompt, no copy
    assert task.columns == ["solution", "level"]


def test_held_out_rows_are_carved_with_the_seed_and_never_trained_on():
    a = DatasetTask.from_data(ROWS, prompt_key="question", num_val=5, seed=0)
    b = DatasetTask.from_data(ROWS, prompt_key="question", num_val=5, seed=0)
    c = DatasetTask.from_data(ROWS, prompt_key="question", num_val=5, seed=1)
    held = [r["prompt"] for r in a.val_rows()]
    assert held == [r["prompt"] for r in b.val_rows()] != [r["prompt"] for r in c.val_rows()]
    assert len(held) == 5
    train = a.train_rows(45, seed=3)  # 15 training rows: three epochs
    assert not {r["prompt"] for r in train} & set(held)
    for epoch in range(3):  # each epoch is a permutation of the 15
        assert len({r["prompt"] for r in train[15 * epoch: 15 * epoch + 15]}) == 15
    assert train == a.train_rows(45, seed=3)
    frac = DatasetTask.from_data(ROWS, prompt_key="question", val_fraction=0.25)
    assert len(frac.val_rows()) == 5  # round(0.25 * 20)


def test_held_out_rows_given_as_a_split_a_file_or_eval_dataset(tmp_path):
    from datasets import Dataset, DatasetDict

    dd = DatasetDict({"train": Dataset.from_list(ROWS[:15]), "test": Dataset.from_list(ROWS[15:])})
    task = DatasetTask.from_data(dd, val_split="test", prompt_key="question")
    assert [r["prompt"] for r in task.val_rows()] == [r["question"] for r in ROWS[15:]]
    task = DatasetTask.from_data(ROWS[:15], ROWS[15:], prompt_key="question")
    assert len(task.val_rows()) == 5 and len(task._train) == 15
    (tmp_path / "held.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[15:]))
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS[:15]))
    task = build_task({"name": "dataset", "path": "train.jsonl", "val_split": "held.jsonl",
                       "prompt_key": "question"})
    assert len(task.val_rows()) == 5


BAD = [
    ([{"q": "1+1=", "a": "2"}], {}, "train_dataset has no 'prompt' column (columns: ['q', 'a']);"
                                    " name the prompt column with data.prompt_key"),
    ([{"prompt": "1+1="}, {"prompt": ""}], {}, "row 1's 'prompt' is ''"),
    ([{"prompt": "a"}, {"prompt": [{"role": "user", "content": "b"}]}], {}, "use one format"),
    (ROWS, {"prompt_key": "question", "num_val": 20}, "would leave none of its 20"),
    ([1, 2], {}, "data row 0 is a int"),
    ([], {}, "has no rows"),
]


@pytest.mark.parametrize(("data", "kw", "fragment"), BAD, ids=lambda x: str(x)[:20])
def test_bad_data_is_one_line_naming_the_row_or_the_columns(data, kw, fragment):
    with pytest.raises(ValueError) as err:
        DatasetTask.from_data(data, **kw)
    assert fragment in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_bad_files_are_named(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a"}\n{nope\n')
    with pytest.raises(ValueError, match="line 2 is not JSON"):
        as_rows("bad.jsonl")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        as_rows("missing.jsonl")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ValueError, match="unsupported suffix '.txt'"):
        as_rows("x.txt")


def test_chat_prompts_go_through_the_tokenizers_own_template():
    from rlnb.engine.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    row = {"prompt": [{"role": "system", "content": "add"}, {"role": "user", "content": "2+2"}]}
    with pytest.raises(ValueError, match="the prompts are chat messages, but the tokenizer"):
        format_prompt(row, tok, False)
    tok.chat_template = ("{% for m in messages %}<{{ m['role'][0] }}>{{ m['content'] }}"
                         "{% endfor %}{% if add_generation_prompt %}<a>{% endif %}")
    assert format_prompt(row, tok, False) == "<s>add<u>2+2<a>"
    assert format_prompt({"prompt": "2+2"}, tok, False) == "2+2"  # text stays text


# --- whole runs ---------------------------------------------------------------------------
REWARDS = textwrap.dedent('''
    """A user's reward functions, TRL style."""
    import re


    def format_reward(completions, **kwargs):
        return [1.0 if re.fullmatch(r"\\d+", c.strip()) else 0.0 for c in completions]


    def accuracy_reward(completions, solution, **kwargs):
        return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]
''')
RUN = [*TINY, "grpo.val_period=2", "grpo.max_val_samples=8", "grpo.max_num_steps=4",
       "sft.max_steps=4", "sft.batch_size=8", "sft.stop_at_accuracy=null",
       "checkpointing.save_period=2"]


def rlnb_cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": ""}
    return subprocess.run([sys.executable, "-m", "rlnb.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_rlnb_train_of_a_yaml_with_reward_funcs_and_a_data_path_resumes_and_verifies(tmp_path):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    (tmp_path / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "task.yaml").write_text(textwrap.dedent("""
        reward_funcs:
          - my_rewards:format_reward
          - {func: my_rewards:accuracy_reward, weight: 2.0}
        data:
          name: dataset
          path: problems.jsonl
          prompt_key: question
          answer_key: solution
          num_val: 4
          correct_reward: accuracy_reward
    """))
    out = rlnb_cli("train", "task.yaml", "--run-dir", "r", "--no-progress", *RUN, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr.strip() == "", out.stderr
    assert "held-out accuracy" in out.stdout
    records = [json.loads(x) for x in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if "train/reward" in r]
    assert len(trained) == 4
    for r in trained:
        assert r["train/reward"] == pytest.approx(r["train/reward/format_reward"]
                                                  + 2 * r["train/reward/accuracy_reward"])
    assert "validation/accuracy" in records[0]
    written = (tmp_path / "r/config.yaml").read_text()
    assert "my_rewards:accuracy_reward" in written and "problems.jsonl" in written
    out = rlnb_cli("verify", "r", "--from-step", "2", cwd=tmp_path)
    assert out.returncode == 0 and "bit-exact" in out.stdout, out.stdout + out.stderr
    out = rlnb_cli("train", "--resume", "r", "--no-progress", "grpo.max_num_steps=6",
                   cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    steps = [json.loads(x)["step"] for x in (tmp_path / "r/metrics.jsonl").read_text()
             .splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5, 6]


def fmt(completions, **kwargs):
    return [1.0 if c[:1].isdigit() else 0.0 for c in completions]


def exact(completions, solution, **kwargs):
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


@pytest.mark.slow
def test_a_run_of_data_and_functions_held_in_python_resumes_and_verifies(tmp_path):
    data = {"reward_funcs": [fmt, exact], "train_dataset": ROWS[:16],
            "eval_dataset": ROWS[16:]}
    overrides = [*RUN, "data.name=dataset", "data.prompt_key=question",
                 "data.answer_key=solution", "data.correct_reward=exact"]
    run = TrainingRun(None, overrides=overrides, run_dir="py", progress=False,
                      log=lambda *a: None, **data)
    summary = run.train()
    run.close()
    assert summary["steps"] == 4 and summary["accuracy_after"] is not None
    assert run.trainer.config.reward_funcs[1].func == "test_user_data:exact"
    report = verify_run("py", 2, log=lambda *a: None, **data)
    assert report.exact, report.summary()
    resumed = TrainingRun(run_dir="py", resume=True, overrides=["grpo.max_num_steps=5"],
                          progress=False, log=lambda *a: None, **data)
    assert resumed.trainer.step_count == 4
    resumed.train()
    resumed.close()
    # from the command line the functions and data held in Python are not there: one line, exit 2
    out = rlnb_cli("verify", "py", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "reward_funcs[0]: cannot import 'test_user_data'" in out.stderr, out.stderr


def test_a_warm_start_needs_a_demonstration_column(tmp_path):
    overrides = [*RUN, "data.name=dataset", "data.prompt_key=question"]
    with pytest.raises(ValueError, match="has no 'answer' column .* data.answer_key"):
        TrainingRun(None, overrides=overrides, run_dir="w", progress=False, log=lambda *a: None,
                    reward_funcs=[fmt], train_dataset=ROWS)
    assert not (tmp_path / "w").exists()


def test_two_data_sets_under_one_config_never_share_a_warm_start():
    from rlnb.engine.trainers.warm_start import warm_start_key

    cfg = rlnb.load_config(None, [*TINY, "data.name=dataset", "data.prompt_key=question"],
                           preset="fast")
    a = rlnb.GRPOTrainer(cfg, reward_funcs=[fmt], train_dataset=ROWS)
    b = rlnb.GRPOTrainer(cfg, reward_funcs=[fmt], train_dataset=ROWS[::-1])
    c = rlnb.GRPOTrainer(cfg, reward_funcs=[exact], train_dataset=ROWS)
    keys = {warm_start_key(t, cfg.sft) for t in (a, b, c)}
    assert len(keys) == 3
