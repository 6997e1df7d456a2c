"""``data.name: reasoning_gym``: reasoning-gym's own data sets, configs, seeds and scorers; held-out
rows never trained on; a mix by weight; the curriculum and its save state; bad input in one line;
the extra named when it is missing. (The envs extra: skipped where reasoning-gym is absent.)"""

import re
import subprocess
import sys

import pytest
import torch

reasoning_gym = pytest.importorskip("reasoning_gym")

import rlnb  # noqa: E402
from rlnb.engine.environments.reasoning_gym_task import ReasoningGymTask  # noqa: E402
from rlnb.engine.environments.tasks import build_task  # noqa: E402

SHORT = {"spell_backward": {"config": {"min_word_len": 3, "max_word_len": 5}}}
SUMS = {"chain_sum": {"config": {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                 "max_digits": 1}}}
# the tiny model on reasoning-gym's questions (52-72 characters)
TINY_RG = ["policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
           "policy.max_total_sequence_length=80", "policy.generation.max_new_tokens=6",
           "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
           "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
           "data.name=reasoning_gym", "data.answer_format=plain", "data.system_prompt=null",
           "data.num_val=16", "sft.enabled=false", "checkpointing.enabled=false",
           "grpo.val_period=0"]


def task(**kw) -> ReasoningGymTask:
    kw = {"datasets": SHORT, "answer_format": "plain", "system_prompt": None, "num_val": 50, **kw}
    return ReasoningGymTask(**kw)


def test_rows_are_the_data_sets_own_with_their_config_and_seed():
    t = task(datasets=SUMS)
    rows = t.train_rows(300, seed=1)
    for row in rows:  # chain_sum's question at its config: two terms of one digit
        m = re.fullmatch(r"State the final answer to the following arithmetic problem: "
                         r"(\d) ([+-]) (\d) =", row["question"])
        assert m, row["question"]
        a, op, b = int(m[1]), m[2], int(m[3])
        assert row["answer"] == str(a + b if op == "+" else a - b)
        assert row["prompt"] == row["question"]  # no system prompt: the question as text
    # the seed drives generation: the same rows again, other rows for another seed
    assert [r["question"] for r in t.train_rows(300, seed=1)] == [r["question"] for r in rows]
    assert [r["question"] for r in t.train_rows(300, seed=2)] != [r["question"] for r in rows]
    # row i is row i whatever the stream's length (lazy: the warm start reads row 10**6)
    assert t.train_rows(10**6 + 5, seed=1)[7] == rows[7]
    assert len(t.train_rows(10**6 + 5, seed=1)[-5:]) == 5


def test_held_out_questions_are_never_trained_on():
    t = task(datasets=SUMS, num_val=150)  # 200 distinct questions: 150 held out
    held = {r["question"] for r in t.val_rows()}
    assert len(held) == 150
    train = {r["question"] for r in t.train_rows(3000, seed=0)}
    assert not held & train
    assert len(train) == 50  # the 50 that are left, each drawn again and again
    assert [r["question"] for r in task(datasets=SUMS, num_val=150).val_rows()] == \
        [r["question"] for r in t.val_rows()]  # the same held-out rows for the same seed
    with pytest.raises(ValueError, match="found only 200 distinct questions"):
        task(datasets=SUMS, num_val=250)


def test_a_mix_draws_by_weight():
    t = task(datasets={**SHORT, "chain_sum": {"weight": 3.0, **SUMS["chain_sum"]}})
    rows = t.train_rows(4000, seed=0)
    share = sum(r["dataset"] == "chain_sum" for r in rows) / len(rows)
    assert abs(share - 0.75) < 0.025  # 3:1; binomial sd 0.007 at n = 4000


def test_the_score_is_the_data_sets_own_scorer():
    t = task()
    row = next(r for r in t.val_rows() if len(r["answer"]) == 5)
    word = row["answer"]
    wrong_last = word[:-1] + ("a" if word[-1] != "a" else "b")
    r = t.score([""] * 4, [word, f" {word}\n", wrong_last, ""], [row] * 4)
    # spell_backward's scorer: 1 for the word reversed; else 1/len per matching leading letter
    assert r.total.tolist() == pytest.approx([1.0, 1.0, 0.8, 0.0])
    assert r.correct.tolist() == [True, True, False, False]
    assert r.components["format"].tolist() == [1.0, 1.0, 1.0, 0.0]  # "" holds no answer
    ds = reasoning_gym.create_dataset("spell_backward", size=1, seed=0)
    assert ds.score_answer(wrong_last, row["entry"]) == pytest.approx(0.8)


def test_answer_tags_and_a_system_prompt():
    t = task(answer_format="answer_tag", system_prompt="default")
    row = t.val_rows(1)[0]
    from reasoning_gym.utils import SYSTEM_PROMPTS

    assert row["prompt"] == [{"role": "system", "content": SYSTEM_PROMPTS["default"]},
                             {"role": "user", "content": row["question"]}]
    a = row["answer"]
    responses = [f"<think>hmm</think><answer>x</answer> then <answer>{a}</answer>",
                 f"<answer> {a} </answer>", a, f"<answer>{a}"]
    r = t.score([""] * 4, responses, [row] * 4)
    assert r.correct.tolist() == [True, True, False, False]  # the last tag, stripped; no tag: 0
    assert r.components["format"].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert t.demonstration(row) == f"<answer>{a}</answer>"
    assert task().demonstration(row) == a  # plain


def test_the_curriculum_raises_a_level_at_its_threshold_and_resumes():
    t = task(curriculum={"enabled": True, "window": 4, "raise_at": 0.75})
    lengths = {len(r["answer"]) for r in t.train_rows(200, seed=0)}
    assert lengths == {3}  # level 0 of spell_backward's curriculum: words of 3 letters
    rows = t.train_rows(8, seed=0)
    yes, no = torch.tensor([True]), torch.tensor([False])
    # 2 of 4 at level 0: below 0.75, the window starts again
    for row, ok in zip(rows[:4], [yes, no, yes, no]):
        assert t.observe([row], ok) == {"curriculum/spell_backward/level": 0.0}
    assert t.levels["spell_backward"] == 0 and t.state_dict()["seen"]["spell_backward"] == [0, 0]
    for row, ok in zip(rows[4:7], [yes, yes, no]):
        t.observe([row], ok)
    assert t.levels["spell_backward"] == 0  # 3 rows: the window is not full yet
    assert t.observe([rows[7]], yes) == {"curriculum/spell_backward/level": 1.0}  # 3 of 4
    # level 1 spans levels 0-1 inclusive: 3 to 5 letters
    assert {len(r["answer"]) for r in t.train_rows(400, seed=0)} == {3, 4, 5}
    # a row drawn before the raise does not count at the new level
    t.observe(rows[:4], torch.tensor([True] * 4))
    assert t.state_dict()["seen"]["spell_backward"] == [0, 0]
    # the held-out rows stay at the configured difficulty (3-5 letters)
    assert {len(r["answer"]) for r in t.val_rows()} == {3, 4, 5}
    fresh = task(curriculum={"enabled": True, "window": 4, "raise_at": 0.75})
    fresh.load_state_dict(t.state_dict())
    assert fresh.levels == t.levels
    assert fresh.train_rows(50, seed=3)[:] == t.train_rows(50, seed=3)[:]


def test_a_trainer_follows_the_curriculum_and_saves_it_with_its_state():
    over = [*TINY_RG, "data.datasets={spell_backward: {}}", "data.curriculum.enabled=true",
            "data.curriculum.window=1", "data.curriculum.raise_at=0.01"]
    config = rlnb.load_config(None, over)
    trainer = rlnb.GRPOTrainer(config)
    trainer.task.observe(trainer.task.train_rows(1, 0)[:], torch.tensor([True]))  # a raise
    state = trainer.state()
    assert state["data_position"]["task"]["levels"] == {"spell_backward": 1}
    m = trainer.step()
    assert m["curriculum/spell_backward/level"] >= 1.0
    again = rlnb.GRPOTrainer(config)
    again.load_state(trainer.state())
    assert again.task.levels == trainer.task.levels
    assert again.next_prompt_rows() == trainer.next_prompt_rows()


def test_a_run_logs_each_data_sets_held_out_accuracy():
    config = rlnb.load_config(None, [*TINY_RG, "grpo.max_val_samples=16",
                                     "data.datasets={spell_backward: {config: {max_word_len: 5}},"
                                     " chain_sum: {config: {max_terms: 2, max_digits: 1}}}"])
    trainer = rlnb.GRPOTrainer(config)
    m = trainer.validate()
    parts = {k: v for k, v in m.items() if k.startswith("validation/rg/")}
    assert set(parts) == {"validation/rg/spell_backward/accuracy",
                          "validation/rg/chain_sum/accuracy"}
    rows = trainer.task.val_rows(16)
    shares = {n: sum(r["dataset"] == n for r in rows) / 16 for n in ("spell_backward",
                                                                     "chain_sum")}
    overall = sum(shares[n] * parts[f"validation/rg/{n}/accuracy"] for n in shares)
    assert overall == pytest.approx(m["validation/accuracy"])
    step = trainer.step()
    assert "train/reward/score" in step and "train/reward/format" in step


@pytest.mark.parametrize("override, message", [
    ("data.datasets=spel_backward",
     "data.datasets: reasoning-gym has no data set 'spel_backward'; did you mean "
     "'spell_backward'?"),
    ("data.datasets={spell_backward: {config: {max_len: 3}}}",
     "data.datasets: spell_backward.config.max_len: spell_backward takes no such key; it takes "
     "min_word_len, max_word_len, data_file"),
    ("data.datasets={spell_backward: {config: {seed: 3}}}",
     "data.datasets: spell_backward.config.seed: rlnb sets it"),
    ("data.datasets={spell_backward: {config: {min_word_len: 7, max_word_len: 3}}}",
     "data.datasets: spell_backward.config: max_word_len must be >= min_word_len"),
    ("data.datasets={spell_backward: {weight: 0}}", "data.datasets.spell_backward.weight: "),
    ("data.answer_format=boxed", "data.answer_format: "),
])
def test_bad_settings_are_one_line_naming_the_key(override, message):
    with pytest.raises(ValueError) as err:
        rlnb.load_config(None, ["data.name=reasoning_gym", override])
    head, *lines = str(err.value).splitlines()
    assert head == "invalid config:" and len(lines) == 1, str(err.value)
    assert lines[0].strip().startswith(message), lines[0]


def test_a_curriculum_for_a_data_set_without_one_is_refused():
    from reasoning_gym.factory import CURRICULA, DATASETS

    name = sorted(set(DATASETS) - set(CURRICULA))[0]
    with pytest.raises(ValueError, match=f"reasoning-gym has no curriculum for {name}"):
        rlnb.load_config(None, ["data.name=reasoning_gym", f"data.datasets={name}",
                                "data.curriculum.enabled=true"])


def test_the_cli_says_what_is_wrong_in_one_line_and_exits_2(tmp_path):
    out = subprocess.run([sys.executable, "-m", "rlnb.cli", "train", "--run-dir", "r",
                          "data.name=reasoning_gym", "data.datasets=spel_backward"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 2
    assert "did you mean 'spell_backward'" in out.stderr
    assert not (tmp_path / "r").exists()  # nothing written


def test_without_the_extra_the_error_names_it():
    code = ("import sys; sys.modules['reasoning_gym'] = None\n"
            "import rlnb\n"
            "try:\n"
            "    rlnb.load_config(None, ['data.name=reasoning_gym'])\n"
            "except ValueError as e:\n"
            "    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert ("data.datasets: data.name: reasoning_gym needs reasoning-gym, which is not "
            "installed: pip install -e '.[envs]'") in out.stdout, out.stdout + out.stderr
    assert build_task  # (the default task builds without the extra: test_tasks.py)


@pytest.mark.slow
def test_rlnb_train_of_the_recipe_runs_and_logs_each_data_set(tmp_path):
    import json

    from paths import ROOT

    small = ["policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
             "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
             "policy.train_global_batch_size=16", "policy.train_micro_batch_size=16",
             "grpo.max_num_steps=2", "grpo.val_period=2", "grpo.max_val_samples=16",
             "data.num_val=16", "sft.max_steps=4", "sft.stop_at_accuracy=null",
             "checkpointing.enabled=false"]
    out = subprocess.run([sys.executable, "-m", "rlnb.cli", "train",
                          str(ROOT / "configs" / "reasoning_gym_tiny.yaml"), "--run-dir", "r",
                          "--no-progress", *small], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
    records = [json.loads(x) for x in (tmp_path / "r/metrics.jsonl").read_text().splitlines()]
    last = records[-1]
    assert {"validation/rg/spell_backward/accuracy", "validation/rg/basic_arithmetic/accuracy",
            "train/reward/score", "train/rg/basic_arithmetic/accuracy"} <= set(last)
    written = (tmp_path / "r/config.yaml").read_text()
    assert "reasoning_gym" in written and "spell_backward" in written
