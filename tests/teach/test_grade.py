"""`rlnb teach grade`: a folder of made-up student notebooks (complete, a named mistake,
unattempted, a check call deleted, a check call edited, a function that never returns, an
unreadable file) graded into the table and the CSV, and bad input refused in one line."""

import copy
import csv
import json
import re
import subprocess
import sys

import pytest
from paths import ROOT

from rlnb.teach.build import build

EXERCISE = "01_grpo_advantages"
GRADE = [sys.executable, "-m", "rlnb.cli", "teach", "grade"]


def filled(student: dict, solution: dict) -> dict:
    """The student copy with every stub cell replaced by the solution's cell of the same
    function (what a student who solved it hands in)."""
    nb = copy.deepcopy(student)
    answers = {c["source"].splitlines()[0]: c["source"] for c in solution["cells"]
               if c["cell_type"] == "code" and c["source"].startswith("def ")}
    for cell in nb["cells"]:
        if "raise NotImplementedError(" in cell["source"]:
            cell["source"] = answers[cell["source"].splitlines()[0]]
    return nb


def edit(nb: dict, old: str, new: str) -> dict:
    nb = copy.deepcopy(nb)
    hits = 0
    for cell in nb["cells"]:
        hits += cell["source"].count(old)
        cell["source"] = cell["source"].replace(old, new)
    assert hits, old
    return nb


def predict(nb: dict) -> dict:
    nb = copy.deepcopy(nb)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and cell["source"].startswith("*Your prediction"):
            cell["source"] += "\nthe right answer's advantage is larger"
    return nb


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """Seven hand-ins of exercise 1, graded once; (stdout, stderr, exit status, CSV rows)."""
    root = tmp_path_factory.mktemp("grade")
    build(root / "lab", ROOT / "notebooks" / "exercises")
    student = json.loads((root / "lab" / "student" / f"{EXERCISE}.ipynb").read_text())
    solution = json.loads((root / "lab" / "solution" / f"{EXERCISE}.ipynb").read_text())
    right = filled(student, solution)
    submissions = {
        "alice": predict(right),  # complete, with predictions
        # the std with ÷ n: a named mistake, which the advantages inherit
        "bob": edit(right, "std[:, i] = others.std(dim=1)",
                    "std[:, i] = others.std(dim=1, unbiased=False)"),
        "carol": student,  # handed in untouched
        # the check call deleted, and σ + ε divided everywhere (the check would have said so)
        "dave": edit(edit(right, "\nteach.check_grpo_advantages(grpo_advantages)", "\n"),
                     "torch.where(std > 0, centred / (std + eps), centred)",
                     "centred / (std + eps)"),
        # the check call edited to check rlnb's own function instead of the student's
        "erin": edit(right, "teach.check_leave_one_out_baseline(leave_one_out_baseline)",
                     "teach.check_leave_one_out_baseline(teach.advantages.reference_baseline)"),
        # a baseline that never returns: stopped by the time limit, the others still graded
        "frank": edit(right, "    P, G = rewards.shape\n", "    while True:\n        pass\n"),
    }
    for name, nb in submissions.items():
        (root / "subs" / name).mkdir(parents=True)
        (root / "subs" / name / f"{EXERCISE}.ipynb").write_text(json.dumps(nb))
    (root / "subs" / "gina").mkdir()
    (root / "subs" / "gina" / f"{EXERCISE}.ipynb").write_text('{"cells": [')  # cut off
    done = subprocess.run([*GRADE, str(root / "subs"), "--csv", str(root / "grades.csv"),
                           "--timeout", "5"], capture_output=True, text=True, timeout=900,
                          cwd=root)
    with open(root / "grades.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    return done, rows


def cells_of(stdout: str, student: str) -> list[str]:
    line = next(x for x in stdout.splitlines() if x.startswith(student + " "))
    return re.split(r"\s{2,}", line.strip())


@pytest.mark.slow
def test_the_table_has_one_row_per_student_and_a_status_per_function(graded):
    done, _ = graded
    out = done.stdout
    header = next(x for x in out.splitlines() if x.startswith(EXERCISE))
    assert re.split(r"\s{2,}", header.strip()) == [
        EXERCISE, "leave_one_out_baseline", "grpo_advantages", "predictions", "run"]
    assert cells_of(out, "alice") == ["alice", "passed", "passed", "2/2", "no"]
    assert cells_of(out, "bob") == ["bob", "mistake: population_std", "mistake: population_std",
                                    "0/2", "no"]
    assert cells_of(out, "carol") == ["carol", "not attempted", "not attempted", "0/2", "no"]
    assert cells_of(out, "dave") == ["dave", "passed", "check removed", "0/2", "no"]
    assert cells_of(out, "erin") == ["erin", "check removed", "passed", "0/2", "no"]
    assert cells_of(out, "frank") == ["frank", "timed out", "timed out", "0/2", "no"]
    assert cells_of(out, "gina") == ["gina", "unreadable", "unreadable"]
    # every notebook graded although one could not be read: exit 2, and that one named once
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "gina" in done.stderr and "unreadable" in done.stderr


@pytest.mark.slow
def test_the_csv_holds_each_status_with_the_mistake_and_the_graders_own_verdict(graded):
    _, rows = graded
    by = {(r["student"], r["function"]): r for r in rows}
    assert len(rows) == 6 * 2 + 1
    assert by["alice", "grpo_advantages"]["status"] == "passed"
    assert by["alice", "grpo_advantages"]["predictions"] == "2/2"
    bob = by["bob", "leave_one_out_baseline"]
    assert bob["mistake"] == "population_std"
    assert bob["detail"].startswith("leave_one_out_baseline: your std matches the std of the "
                                    "others with ÷ n")
    assert by["carol", "grpo_advantages"]["detail"].startswith(
        "NotImplementedError: implement this: ")
    # a deleted check call does not pass: the grader's own check names the mistake it hid
    dave = by["dave", "grpo_advantages"]
    assert dave["status"] == "check removed" and dave["mistake"] == "divide_zero_std"
    assert "teach.check_grpo_advantages(grpo_advantages)" in dave["detail"]
    assert "the grader's own check: mistake: divide_zero_std" in dave["detail"]
    assert by["erin", "leave_one_out_baseline"]["detail"].endswith("own check: passed")
    assert by["frank", "grpo_advantages"]["status"] == "timed out"
    assert by["gina", ""]["status"] == "unreadable"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "broken.ipynb").write_text("{")
    (tmp_path / "empty").mkdir()
    (tmp_path / "subs").mkdir()
    (tmp_path / "subs" / f"a-{EXERCISE}.ipynb").write_text('{"cells": []}')
    cases = [
        ([str(tmp_path / "nowhere")], "nowhere: no such folder"),
        ([str(tmp_path / "notes.txt")], "notes.txt: not a notebook (.ipynb) nor a folder"),
        ([str(tmp_path / "broken.ipynb")], "broken.ipynb: not a readable notebook ("),
        ([str(tmp_path / "empty")], "empty: no notebook (.ipynb) in it"),
        ([str(tmp_path / "subs"), "--csv", str(tmp_path / "no" / "g.csv")],
         "--csv " + str(tmp_path / "no" / "g.csv") + ": the folder"),
        ([str(tmp_path / "subs"), "--timeout", "0"], "--timeout must be > 0 seconds, got 0"),
    ]
    for args, message in cases:
        done = subprocess.run([*GRADE, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stdout == "", (args, done.stdout, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert not (tmp_path / "no").exists()


def test_the_grader_runs_definitions_only():
    """What the worker gets: imports, functions and call-free assignments; no call, no live run,
    no magic; the check calls found at the top level; a cell that does not parse named."""
    from rlnb.teach.grade import check_calls, definitions

    code, calls, broken = definitions([
        "import torch\nfrom rlnb import teach\nEPS = 1e-6\nx = torch.zeros(3)\n",
        "%time\ndef f(r):\n    return r * EPS\n\n\nteach.check_gae(f)\nrun_everything()",
        "def g(:\n",
    ])
    assert code.split("\n\n") == ["import torch", "from rlnb import teach", "EPS = 1e-06",
                                  "def f(r):\n    return r * EPS"]
    assert calls == {"teach.check_gae(f)"}
    assert broken == ["code cell 3 does not parse (invalid syntax, line 1)"]
    calls = check_calls(ROOT / "notebooks" / "exercises" / "04_kl_estimators.py")
    assert calls == [("k1", "teach.check_kl_estimator('k1', k1)"),
                     ("k2", "teach.check_kl_estimator('k2', k2)"),
                     ("k3", "teach.check_kl_estimator('k3', k3)"),
                     ("exact_kl", "teach.check_exact_kl(exact_kl)")]
