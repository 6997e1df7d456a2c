"""The exercises: built from their sources, student copies free of solution code and stopping at
their first stub (fast=True), solution copies running headless on the real warm-started model
(their comparisons with the trainer and their live runs, a few steps each), what they show
compared with the lab's record (benchmarks/lab_numbers.json) where this machine has one."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

from rlnb.teach.build import BEGIN, END, build, notebook, parse, sources

nbformat = pytest.importorskip("nbformat")
papermill = pytest.importorskip("papermill")

SOURCES = sources(ROOT / "notebooks" / "exercises")
IDS = [p.stem for p in SOURCES]
CELL_TIMEOUT_S = 600  # a hang guard, not a timing check
STUB = re.compile(r'raise NotImplementedError\(("implement this: (?:[^"\\]|\\.)*")\)')


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = tmp_path_factory.mktemp("exercises")
    build(out, ROOT / "notebooks" / "exercises")
    return out


def code(nb) -> str:
    return "\n".join(c["source"] for c in nb["cells"] if c["cell_type"] == "code")


def distinctive_lines(source: Path) -> list[str]:
    """Every line of the source's solution blocks and solution cells that says something (not
    blank, not a lone return, bracket or comment)."""
    lines = []
    for block in parse(source).solutions:
        for text in block:
            t = text.strip()
            if len(t) > 12 and not t.startswith("#"):
                lines.append(t)
    return lines


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_the_student_copy_holds_no_solution_code(built, source):
    """Search each student copy for every distinctive line of the source's
    solutions (the student copy keeps the signatures, docstrings and the check calls)."""
    student = (built / "student" / f"{source.stem}.ipynb").read_text(encoding="utf-8")
    solution = (built / "solution" / f"{source.stem}.ipynb").read_text(encoding="utf-8")
    lines = distinctive_lines(source)
    assert len(lines) >= 2, f"{source.name}: too few solution lines to search for: {lines}"
    for line in lines:
        escaped = json.dumps(line, ensure_ascii=False)[1:-1]  # as in the notebook's JSON (UTF-8)
        assert escaped not in student, f"{source.name}: the student copy contains {line!r}"
        assert escaped in solution, f"{source.name}: the solution copy lacks {line!r}"
    assert "ANSWER_" not in solution, f"{source.name}: an answer placeholder was left in"


@pytest.mark.parametrize("source", SOURCES, ids=IDS)
def test_both_copies_are_clean_notebooks_with_a_fast_parameter(built, source):
    for copy in ("student", "solution"):
        path = built / copy / f"{source.stem}.ipynb"
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
        assert nb.metadata.kernelspec.name == "python3"
        cells = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in cells), path
        params = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
        assert len(params) == 1, f"{path}: {len(params)} parameters cells"
        assert {"fast", "seed", "run_dir"} <= set(papermill.inspect_notebook(str(path))), path
    student = nbformat.read(built / "student" / f"{source.stem}.ipynb", as_version=4)
    stubs = STUB.findall(code(student))
    blocks = [t for c in parse(source).cells if c.kind == "code" for t in c.lines if BEGIN.match(t)]
    assert stubs and len(stubs) == len(blocks), f"{source.name}: {stubs}"


def test_a_build_is_the_same_bytes_every_time(tmp_path):
    a, b = build(tmp_path / "a"), build(tmp_path / "b")
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]


def test_stub_replaces_the_block_at_its_indentation(tmp_path):
    src = tmp_path / "01_x.py"
    src.write_text('# %% [markdown]\n# # 01 · X\n\n# %% tags=["parameters"]\nfast = False\n\n'
                   "# %%\ndef f(x):\n    \"\"\"doc\"\"\"\n    # BEGIN SOLUTION: double it\n"
                   "    y = x * 2\n    return y\n    # END SOLUTION\n\n"
                   '# %% [markdown] tags=["solution"]\n# the answer\n\n'
                   '# %% [markdown] tags=["student"]\n# your answer\n')
    ex = parse(src)
    student, solution = notebook(ex, student=True), notebook(ex, student=False)
    assert student["cells"][2]["source"] == ('def f(x):\n    """doc"""\n    raise '
                                             'NotImplementedError("implement this: double it")')
    assert solution["cells"][2]["source"] == 'def f(x):\n    """doc"""\n    y = x * 2\n    return y'
    assert [c["source"] for c in student["cells"][3:]] == ["your answer"]
    assert [c["source"] for c in solution["cells"][3:]] == ["the answer"]
    assert BEGIN.match("    # BEGIN SOLUTION: x") and END.match("  # END SOLUTION")


@pytest.mark.parametrize("text, message", [
    ("# %% [markdown]\n# # T\n# %%\nfast = 1\n", "exactly one code cell tagged parameters"),
    ('# %% [markdown]\n# # T\n# %% tags=["parameters"]\nseed = 0\n', "must define fast"),
    ('# %% [markdown]\n# # T\n# %% tags=["parameters"]\nfast = 0\n# %%\n# BEGIN SOLUTION: a\nx = 1\n',
     "a BEGIN SOLUTION without an END SOLUTION"),
    ('# %% [markdown]\n# # T\n# %% tags=["parameters"]\nfast = 0\n# %%\n# BEGIN SOLUTION\n'
     "x = 1\n# END SOLUTION\n", "needs a hint"),
    ('# %% [markdown]\n# # T\n# %% tags=["answer"]\nfast = 0\n', "unknown tag ['answer']"),
    ('# %% [markdown]\n# # T\n# %% tags=["parameters"]\nfast = 0\n# %%markdown\n',
     "a cell marker is"),
])
def test_a_malformed_source_is_refused_with_its_file_and_line(tmp_path, text, message):
    (tmp_path / "01_bad.py").write_text(text)
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        build(tmp_path / "out", tmp_path)
    assert "01_bad.py" in str(err.value)
    assert not (tmp_path / "out").exists()  # checked before anything is written


def test_the_command_builds_and_refuses_a_missing_source(tmp_path):
    cmd = [sys.executable, "-m", "rlnb.cli", "teach", "build"]
    ok = subprocess.run([*cmd, str(tmp_path / "out")], capture_output=True, text=True,
                        timeout=300)
    assert ok.returncode == 0, ok.stderr
    assert len(list((tmp_path / "out" / "student").glob("*.ipynb"))) == len(SOURCES)
    bad = subprocess.run([*cmd, str(tmp_path / "x"), "--source", str(tmp_path / "nowhere")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert "no exercise sources at" in bad.stderr and "nowhere" in bad.stderr



def one_exercise(folder: Path, answer: str = "the answer") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "01_x.py").write_text(
        '# %% [markdown]\n# # 01 · X\n\n# %% tags=["parameters"]\nfast = False\n\n'
        "# %%\n# BEGIN SOLUTION: one\nx = 1\n# END SOLUTION\n\n"
        f'# %% [markdown] tags=["solution"]\n# {answer}\n')
    return folder


def test_a_rebuild_never_overwrites_a_students_changes(tmp_path):
    """Built, then a student's answer typed into their copy: building again (after the sources
    changed, say) refuses before writing anything, naming the notebook; the untouched ones are
    replaced by a rebuild; --only-missing writes only what is not there, --overwrite replaces."""
    src, out = one_exercise(tmp_path / "src"), tmp_path / "lab"
    build(out, src)
    student, solution = out / "student" / "01_x.ipynb", out / "solution" / "01_x.ipynb"
    build(out, src)  # untouched: the same bytes, no complaint
    one_exercise(src, "a better answer")  # the code was updated: untouched notebooks follow it
    build(out, src)
    assert "a better answer" in solution.read_text()
    work = student.read_text().replace('x = 1', 'x = 2  # my answer').replace(
        'raise NotImplementedError(\\"implement this: one\\")', 'x = 2  # my answer')
    assert work != student.read_text()
    student.write_text(work)
    one_exercise(src, "the best answer")
    before = solution.read_bytes()
    with pytest.raises(ValueError, match=re.escape(f"{student} has changes since it was built "
                                                   "(1 notebook(s) in all); nothing was written")):
        build(out, src)
    assert student.read_text() == work and solution.read_bytes() == before  # nothing written
    cmd = [sys.executable, "-m", "rlnb.cli", "teach", "build", str(out), "--source", str(src)]
    refused = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--only-missing" in refused.stderr and "--overwrite" in refused.stderr
    assert student.read_text() == work
    # only what is missing: the deleted solution comes back, the student's work stays
    solution.unlink()
    assert build(out, src, only_missing=True) == [solution]
    assert student.read_text() == work and "the best answer" in solution.read_text()
    # on purpose: replaced
    assert build(out, src, overwrite=True) == [student, solution]
    assert "my answer" not in student.read_text()
    with pytest.raises(ValueError, match="exclude each other"):
        build(out, src, overwrite=True, only_missing=True)


def test_update_refreshes_untouched_notebooks_and_keeps_changed_ones(tmp_path):
    """After an rlnb update: the notebooks nobody touched follow the new sources, a deleted one
    comes back, the student's changed copy stays as it is, and the command lists it."""
    src, out = one_exercise(tmp_path / "src"), tmp_path / "lab"
    (src / "02_y.py").write_text((src / "01_x.py").read_text())  # a second exercise
    build(out, src)
    student, solution = out / "student" / "01_x.ipynb", out / "solution" / "01_x.ipynb"
    other = out / "student" / "02_y.ipynb"
    work = student.read_text().replace("implement this: one", "my answer")
    student.write_text(work)
    other.unlink()
    one_exercise(src, "an answer after the update")
    written = build(out, src, update=True)
    assert student not in written and student.read_text() == work
    assert solution in written and "an answer after the update" in solution.read_text()
    assert other in written and other.is_file()
    cmd = [sys.executable, "-m", "rlnb.cli", "teach", "build", str(out), "--source", str(src),
           "--update"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"1 with changes kept as they are\n  kept {student}" in done.stdout
    assert student.read_text() == work


# --- executed headless


LIVE_STEPS = 2  # the live runs of the solution copies: the real model, a few steps


def execute(path: Path, out: Path, cache: Path, parameters: dict | None = None):
    """Run a notebook (default: fast=True); the executed notebook and papermill's error."""
    error = None
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setenv("RLNB_CACHE_DIR", str(cache))
        mp.setenv("JUPYTER_PATH", str(Path(sys.prefix) / "share" / "jupyter"))
        try:
            papermill.execute_notebook(str(path), str(out),
                                       parameters=parameters or {"fast": True},
                                       kernel_name="python3", cwd=str(path.parent),
                                       execution_timeout=CELL_TIMEOUT_S, progress_bar=False)
        except papermill.PapermillExecutionError as err:
            error = err
    return nbformat.read(out, as_version=4), error


def outputs(nb):
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []) if cell.cell_type == "code" else []:
            yield i, out


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """One warm-start cache for the solution copies: each warm start is built once."""
    return tmp_path_factory.mktemp("warm-cache")


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("name", IDS)
def test_the_solution_copy_runs_on_the_real_model_and_every_check_passes(
        built, name, tmp_path, warm_cache):
    """Not fast=True, whose rewards are all 0: the warm-started model, so the cells that
    compare the student's function with the trainer (exercise 1's advantages, 7's reward on
    real samples) and the live runs' own checks (2's clip fraction with one optimizer step)
    see the embedded recipe as it is; a change of recipe that breaks an exercise fails here."""
    nb, error = execute(built / "solution" / f"{name}.ipynb", tmp_path / "out.ipynb",
                        warm_cache, {"live_steps": LIVE_STEPS})
    errors = [f"cell {i}: {o['ename']}: {o['evalue']}" for i, o in outputs(nb)
              if o["output_type"] == "error"]
    assert error is None and not errors, errors
    stdout = "".join(o.get("text", "") for _, o in outputs(nb) if o.get("name") == "stdout")
    checks = len(re.findall(r"^teach\.check_\w+\(", code(nb), flags=re.M))
    assert checks and stdout.count("✓ ") == checks, stdout
    assert f"{LIVE_STEPS} steps in" in stdout and "held-out accuracy" in stdout  # it trained
    stderr = [o["text"][:300] for _, o in outputs(nb) if o.get("name") == "stderr"]
    assert not stderr, stderr
    compare_with_the_record(name, nb)


def compare_with_the_record(name: str, nb) -> None:
    """What the notebook shows before any training (the warm start's held-out accuracy, the
    real batch, the tables of its cells) against the lab's record for this machine's CPU class
    and packages: the numbers docs/teaching.md and the solutions quote (no record: skip)."""
    import torch
    import transformers

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_lab import read_exercise, read_record
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    cls = torch.backends.cpu.get_cpu_capability()
    record = read_record().get("classes", {}).get(cls)
    if record is None or (record["machine"]["torch"], record["machine"]["transformers"]) != (
            torch.__version__, transformers.__version__):
        pytest.skip(f"no lab record for CPU class {cls} with these packages "
                    "(python benchmarks/bench_lab.py measure)")
    # as JSON holds them (a table's integer keys become strings)
    got = json.loads(json.dumps(read_exercise(name, json.loads(nbformat.writes(nb)))))
    expected = record["seeds"]["0"][name]
    for setting, row in got.pop("live").items():
        assert row["accuracy before"] == expected["live"][setting]["accuracy before"], (
            f"{name}, '{setting}': held-out accuracy before training is "
            f"{row['accuracy before']}, the lab's record {expected['live'][setting]['accuracy before']}"
            " (the text quotes the record): rerun `python benchmarks/bench_lab.py measure` "
            "(and --capability avx2), then `write`")
    for part, value in got.items():
        assert value == expected[part], f"{name}: {part} is {value}, the record {expected[part]}"


@pytest.mark.notebook
@pytest.mark.parametrize("name", IDS)
def test_the_student_copy_stops_at_its_first_stub(built, name, tmp_path):
    path = built / "student" / f"{name}.ipynb"
    nb, error = execute(path, tmp_path / "out.ipynb", tmp_path / "cache")
    assert error is not None and error.ename == "NotImplementedError", error
    assert error.evalue.startswith("implement this: ")
    first_stub = STUB.search(code(nb))
    # the stub's message, then where to write (rlnb.teach.display: one line, no frames)
    assert error.evalue.startswith(json.loads(first_stub.group(1)) + " (in ")
    assert error.evalue.endswith(": write your code in place of the raise line)")
    failed = [i for i, o in outputs(nb) if o["output_type"] == "error"]
    assert len(failed) == 1
    stub_cell = next(i for i, c in enumerate(nb.cells) if "implement this" in c.source)
    assert failed[0] == stub_cell  # the first cell with a stub, not a later one
