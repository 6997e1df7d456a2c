"""``rlnb teach grade``: a folder of students' notebooks, each function checked by rlnb's own
checks, into a table (and a CSV for a gradebook).

    rlnb teach grade SUBMISSIONS [--csv FILE] [--timeout S] [--source DIR]

SUBMISSIONS holds one folder per student (``SUBMISSIONS/alice/05_gae.ipynb``), or notebooks
named ``STUDENT-NN_name.ipynb`` side by side (``alice-05_gae.ipynb``), or is one notebook. A
notebook's exercise is the one ``rlnb teach build`` wrote into its metadata, else the
``NN_name`` in its file name. Each graded function gets one status:

    passed           rlnb's check passes
    mistake: KEY     it matches a named mistake (the message is in the CSV)
    wrong            it differs from rlnb's and no known mistake explains it
    error            it raised, returned the wrong type, shape or number of values
    not attempted    the stub is still there, or the function is missing
    check removed    the check call the exercise makes is missing or edited in the notebook
                     (the grader's own verdict is in the CSV)
    timed out        it ran past --timeout

and each notebook: how many of its "Your prediction" cells hold an answer, and whether it was
run (has outputs).

Implementation choices:
1) Nothing the notebook shows is trusted: its outputs are ignored. Its imports, function and
   class definitions and call-free assignments (every code cell, in order: ``definitions``) run
   in a fresh Python process with a time limit (``grade_worker.py``), never in the grader's,
   and rlnb's checks are called there exactly as the built exercise calls them. No live run,
   no training, no other cell runs.
2) The built student copy (rebuilt from the sources) says which check calls the notebook must
   hold: each must stand unchanged at the top level of a code cell, else "check removed".
3) Nothing stops at the first failure: every notebook, every function is graded. A notebook
   that cannot be read, or is no exercise, is a row of its own, one line on stderr, and makes
   the exit status 2 once everything else is graded and written.
"""

from __future__ import annotations

import ast
import csv
import json
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rlnb.teach.build import notebook, parse, sources

STATUS_WIDTH = 26


@dataclass
class Graded:
    """One notebook's grades: ``rows`` maps each graded function to its result dict."""

    student: str
    exercise: str
    path: Path
    rows: dict[str, dict] = field(default_factory=dict)
    predictions: str = ""
    ran: str = ""
    problem: str | None = None  # unreadable, or no exercise


# --------------------------------------------------------------------------- what to grade


def check_calls(exercise_source: Path) -> list[tuple[str, str]]:
    """The top-level check calls of the exercise's student copy, as (function, call source)."""
    built = notebook(parse(exercise_source), student=True)
    calls = []
    for cell in built["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.parse(cell["source"]).body:
            if _is_check(node):
                names = [a.id for a in node.value.args if isinstance(a, ast.Name)]
                calls.append((names[-1], ast.unparse(node.value)))
    return calls


def _is_check(node: ast.stmt) -> bool:
    return (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name) and node.value.func.value.id == "teach"
            and node.value.func.attr.startswith("check_"))


def _python(source: str) -> str:
    """A cell's source with IPython's magics and shell lines blanked (they are not Python)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def definitions(cells: list[str]) -> tuple[str, set[str], list[str]]:
    """From a notebook's code cells: the code the grader runs (imports, definitions, and
    assignments to names whose value calls nothing), the check calls found at the top level,
    and the cells that do not parse."""
    kept, calls, broken = [], set(), []
    for i, source in enumerate(cells):
        try:
            tree = ast.parse(_python(source))
        except SyntaxError as err:
            broken.append(f"code cell {i + 1} does not parse ({err.msg}, line {err.lineno})")
            continue
        for node in tree.body:
            if _is_check(node):
                calls.add(ast.unparse(node.value))
            elif isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                   ast.AsyncFunctionDef, ast.ClassDef)):
                kept.append(node)
            elif (isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None
                  and all(isinstance(t, ast.Name) for t in _targets(node))
                  and not any(isinstance(n, ast.Call) for n in ast.walk(node.value))):
                kept.append(node)
    return "\n\n".join(ast.unparse(n) for n in kept), calls, broken


def _targets(node) -> list:
    return node.targets if isinstance(node, ast.Assign) else [node.target]


# --------------------------------------------------------------------------- reading


def find_submissions(folder: Path, exercises: dict[str, Path]) -> list[Graded]:
    """Every ``.ipynb`` under ``folder`` (or ``folder`` itself), with its student and exercise."""
    paths = [folder] if folder.is_file() else sorted(
        p for p in folder.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
    found = []
    for path in paths:
        rel = path.relative_to(folder) if folder.is_dir() else Path(path.name)
        graded = Graded(student="", exercise="", path=path)
        try:
            nb = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
                raise ValueError("no cells: not a notebook")
        except (OSError, UnicodeDecodeError, ValueError) as err:
            graded.problem = f"unreadable: {str(err)[:120]}"
            nb = None
        stem = Path(((nb or {}).get("metadata", {}).get("rlnb") or {}).get("source", "")).stem
        named = [s for s in exercises if s in path.stem]
        graded.exercise = stem if stem in exercises else (named[0] if named else "")
        if not graded.exercise and graded.problem is None:
            graded.problem = "not an exercise notebook (no rlnb metadata, no NN_name in its name)"
        # a folder per student; else the file's name without the exercise; else the folder's
        graded.student = (rel.parts[0] if len(rel.parts) > 1 else
                          path.stem.replace(graded.exercise, "").strip("-_ ")
                          or (folder.resolve().name if folder.is_dir() else path.stem))
        if nb is not None and graded.problem is None:
            graded.rows = {"_nb": nb}  # read by grade_one
        found.append(graded)
    return found


def predictions(nb: dict) -> str:
    """``filled/total`` over the cells that start with "*Your prediction"."""
    cells = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
             for c in nb["cells"] if c.get("cell_type") == "markdown"]
    asked = [c for c in cells if c.lstrip().startswith("*Your prediction")]
    filled = [c for c in asked if re.sub(r"\*Your predictions?:\*|^\s*\d+\.\s*$", "", c,
                                         flags=re.M).strip()]
    return f"{len(filled)}/{len(asked)}"


# --------------------------------------------------------------------------- grading


def grade_one(graded: Graded, calls: list[tuple[str, str]], timeout: float) -> None:
    """Fill ``graded.rows`` with one result per graded function (choices 1 and 2)."""
    nb = graded.rows.pop("_nb")
    code_cells = ["".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                  for c in nb["cells"] if c.get("cell_type") == "code"]
    graded.predictions = predictions(nb)
    graded.ran = "yes" if any(c.get("outputs") for c in nb["cells"]
                              if c.get("cell_type") == "code") else "no"
    code, present, broken = definitions(code_cells)
    spec = {"code": code, "calls": [{"function": f, "call": c} for f, c in calls],
            "seconds": timeout}
    try:
        proc = subprocess.run([sys.executable, "-m", "rlnb.teach.grade_worker"],
                              input=json.dumps(spec), capture_output=True, text=True,
                              timeout=timeout * (len(calls) + 1) + 60)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        results = json.loads(lines[-1][len("RESULT "):]) if lines else None
        if results is None:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            results = [{"status": "error", "detail": f"the grader's worker failed: {tail}"}] * \
                len(calls)
    except subprocess.TimeoutExpired:
        results = [{"status": "timed out", "detail": "the notebook's process was stopped"}] * \
            len(calls)
    for (function, call), result in zip(calls, results):
        result = dict(result)
        if result["status"] == "not attempted" and broken:
            result["detail"] = f"{result['detail']}; {'; '.join(broken)}"
        if call not in present and result["status"] != "not attempted":
            result["detail"] = (f"the notebook does not hold `{call}` (deleted or edited); "
                                f"the grader's own check: {result['status']}")
            result["status"] = "check removed"
        graded.rows[function] = result


def grade(folder: Path, source: Path | None = None, *, timeout: float = 60.0,
          say=print) -> list[Graded]:
    """Grade every notebook under ``folder``; ``say`` gets one line per notebook as it goes."""
    exercises = {p.stem: p for p in sources(source)}
    graded = find_submissions(folder, exercises)
    calls = {name: check_calls(path) for name, path in exercises.items()}
    for i, g in enumerate(graded):
        if g.problem is None:
            grade_one(g, calls[g.exercise], timeout)
        say(f"  [{i + 1}/{len(graded)}] {g.student} {g.exercise or g.path.name}: "
            + (g.problem or ", ".join(r["status"] for r in g.rows.values())))
    return graded


# --------------------------------------------------------------------------- reporting


def table(graded: list[Graded], source: Path | None = None) -> str:
    """One block per exercise: a row per student, a column per graded function."""
    exercises = {p.stem: p for p in sources(source)}
    students = sorted({g.student for g in graded if g.exercise})
    blocks = []
    for name in sorted({g.exercise for g in graded if g.exercise}):
        functions = [f for f, _ in check_calls(exercises[name])]
        width = max([len(s) for s in students] + [len(name)]) + 2
        lines = [name.ljust(width) + "".join(f.ljust(STATUS_WIDTH) for f in functions)
                 + "predictions  run"]
        for student in students:
            mine = [g for g in graded if g.student == student and g.exercise == name]
            if not mine:
                cells = ["not handed in"] * len(functions) + ["", ""]
            elif mine[0].problem:
                cells = [mine[0].problem.split(":")[0]] * len(functions) + ["", ""]
            else:
                cells = [mine[0].rows[f]["status"] for f in functions] + [
                    mine[0].predictions, mine[0].ran]
            lines.append(student.ljust(width) + "".join(
                c[:STATUS_WIDTH - 1].ljust(STATUS_WIDTH) for c in cells[:-2])
                + cells[-2].ljust(13) + cells[-1])
        blocks.append("\n".join(lines))
    stray = [g for g in graded if not g.exercise]
    if stray:
        blocks.append("\n".join(f"{g.path}: {g.problem}" for g in stray))
    return "\n\n".join(blocks)


def write_csv(graded: list[Graded], path: Path) -> None:
    """One row per student, exercise and function (and one per unreadable notebook)."""
    with path.open("w", newline="", encoding="utf-8") as f:
        out = csv.writer(f)
        out.writerow(["student", "exercise", "function", "status", "mistake", "predictions",
                      "ran", "notebook", "detail"])
        for g in graded:
            if g.problem:
                out.writerow([g.student, g.exercise, "", g.problem.split(":")[0], "", "", "",
                              str(g.path), g.problem])
            for function, r in g.rows.items():
                out.writerow([g.student, g.exercise, function, r["status"], r.get("mistake", ""),
                              g.predictions, g.ran, str(g.path), r.get("detail", "")])


def _unreadable(path: Path) -> str | None:
    """Why ``path`` is not a readable notebook, or None."""
    try:
        nb = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        return f"not a readable notebook ({str(err)[:100]})"
    return None if isinstance(nb, dict) and isinstance(nb.get("cells"), list) else \
        "not a notebook (no cells)"


def run_grade(folder: str, *, csv_path: str | None, timeout: float, source: str | None,
              prog: str = "rlnb teach grade") -> int:
    """The command: bad input exits 2 with one line before anything is graded or written."""
    folder_path = Path(folder)
    problem = None
    if not folder_path.exists():
        problem = f"{folder}: no such folder"
    elif folder_path.is_file() and folder_path.suffix != ".ipynb":
        problem = f"{folder}: not a notebook (.ipynb) nor a folder of notebooks"
    elif folder_path.is_dir() and not any(p for p in folder_path.rglob("*.ipynb")
                                          if ".ipynb_checkpoints" not in p.parts):
        problem = f"{folder}: no notebook (.ipynb) in it"
    elif folder_path.is_file() and _unreadable(folder_path):
        problem = f"{folder}: {_unreadable(folder_path)}"
    elif csv_path and not Path(csv_path).resolve().parent.is_dir():
        problem = f"--csv {csv_path}: the folder {Path(csv_path).parent} does not exist"
    elif csv_path and Path(csv_path).is_dir():
        problem = f"--csv {csv_path}: is a folder; give a file name"
    elif not timeout > 0:
        problem = f"--timeout must be > 0 seconds, got {timeout}"
    try:
        exercises = sources(source) if problem is None else []
    except FileNotFoundError as err:
        problem = str(err)
    if problem:
        print(f"{prog}: {problem}", file=sys.stderr)
        return 2
    print(f"{prog}: {folder} ({len(exercises)} exercises known)")
    graded = grade(folder_path, source, timeout=timeout)
    print()
    print(table(graded, source))
    if csv_path:
        write_csv(graded, Path(csv_path))
        print(f"\n{prog}: wrote {csv_path} (one row per student, exercise and function)")
    bad = [g for g in graded if g.problem]
    for g in bad:
        print(f"{prog}: {g.path}: {g.problem}", file=sys.stderr)
    return 2 if bad else 0
