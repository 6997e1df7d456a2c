"""The lab's quoted numbers: every lab-numbers region of docs/teaching.md and of the exercise
sources is what benchmarks/lab_numbers.json (the lab's own commands, run by
benchmarks/bench_lab.py) renders, no percentage stands outside a region, and a figure edited by
hand, or a record that no longer supports a sentence, is caught."""

import json
import shutil
import subprocess
import sys

import pytest
from paths import ROOT

RECORD = ROOT / "benchmarks" / "lab_numbers.json"


def check(root):
    return subprocess.run([sys.executable, "benchmarks/bench_lab.py", "check", "--root",
                           str(root)], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.fixture
def copy(tmp_path):
    """The text files, the record and the rendering scripts, in a tree of their own."""
    for rel in ("docs/teaching.md", "benchmarks/lab_numbers.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    shutil.copytree(ROOT / "notebooks" / "exercises", tmp_path / "notebooks" / "exercises")
    return tmp_path


def test_the_text_is_what_the_record_renders():
    done = check(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every region as the record renders it" in done.stdout


def test_the_record_holds_three_seeds_on_each_class_it_names():
    record = json.loads(RECORD.read_text())
    for cls, measured in record["classes"].items():
        assert set(measured["seeds"]) == {"0", "1", "2"}, cls
        for seed, parts in measured["seeds"].items():
            assert set(parts) >= {"01_grpo_advantages", "07_reward_function", "opening"}, (
                cls, seed)


def test_a_number_changed_by_hand_is_caught(copy):
    text = (copy / "docs" / "teaching.md").read_text()
    start = text.index("<!-- lab-numbers: expected -->")
    i = text.index("%", start)  # the first percentage of the expected outputs
    edited = text[:i - 1] + ("1" if text[i - 1] != "1" else "2") + text[i:]
    (copy / "docs" / "teaching.md").write_text(edited)
    done = check(copy)
    assert done.returncode == 1 and "teaching.md" in done.stdout, done.stdout


def test_a_percentage_outside_the_regions_is_caught(copy):
    path = copy / "notebooks" / "exercises" / "02_clipped_surrogate.py"
    path.write_text(path.read_text().replace(
        "# ## 3. Predict, then run: when does the clip act?",
        "# ## 3. Predict, then run: when does the clip act? (it acted on 7.5% of the tokens)"))
    done = check(copy)
    assert done.returncode == 1, done.stdout
    assert "02_clipped_surrogate.py" in done.stdout and "a percentage outside" in done.stdout


def test_a_record_that_breaks_a_sentence_stops_the_rendering(copy):
    """Exercise 2's first answer says the clip fraction is exactly 0 with one optimizer step
    per rollout: a record where it is not must not render that sentence."""
    record = json.loads((copy / "benchmarks" / "lab_numbers.json").read_text())
    cls = next(iter(record["classes"]))
    live = record["classes"][cls]["seeds"]["0"]["02_clipped_surrogate"]["live"]
    live["1 step per rollout"]["train/clip_fraction"] = 0.01
    (copy / "benchmarks" / "lab_numbers.json").write_text(json.dumps(record))
    done = check(copy)
    assert done.returncode != 0
    assert "no longer supports: 'exactly 0 with one optimizer step" in done.stdout + done.stderr
