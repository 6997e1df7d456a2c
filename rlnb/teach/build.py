"""Build the student and solution notebooks of every exercise from one source each.

    rlnb teach build OUT [--source DIR] [--update | --only-missing | --overwrite]
      OUT/student/NN_name.ipynb    stubs in place of the solutions, no solution cell
      OUT/solution/NN_name.ipynb   the complete exercise

A source is a Python file in the percent format (``notebooks/exercises/NN_name.py``; editors
and jupytext read it as a notebook): ``# %%`` starts a code cell, ``# %% [markdown]`` a
markdown cell whose lines start with ``#``, and ``tags=["..."]`` after either tags it.

    # BEGIN SOLUTION: the leave-one-out mean and std   (inside a code cell)
    ...                                                 the solution
    # END SOLUTION

becomes, in the student copy, ``raise NotImplementedError("implement this: the leave-one-out
mean and std")`` at the same indentation. A cell tagged ``solution`` appears only in the
solution copy (answers to the "predict, then run" questions), one tagged ``student`` only in
the student copy (space for a prediction). Both copies are written without outputs, with the
``parameters`` cell papermill needs.

Implementation choices:
1) Plain JSON (nbformat 4.5) written here, so building needs no Jupyter package; cell ids are
   derived from the cell's position, so a build is the same bytes every time.
2) Every malformed source (a BEGIN without END, an unknown tag, no parameters cell, no
   ``fast`` parameter) is refused with its file and line before anything is written.
3) A build never overwrites a student's work. ``OUT/.rlnb-build.json`` records a hash of each
   notebook as written; a notebook whose bytes differ from that record (a student's answers), or
   from this build's when there is no record, has changes. A rebuild (after updating the code,
   say) replaces the untouched notebooks and refuses, before writing anything, if any notebook
   has changes, naming the first: ``update`` then refreshes the untouched and the missing
   notebooks and keeps the changed ones (after updating rlnb, say), ``only_missing`` writes
   only the notebooks not there (and leaves the rest, changed or not), ``overwrite`` replaces
   them all.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"^# %%(?P<markdown> \[markdown\])?(?: tags=(?P<tags>\[.*\]))?\s*$")
BEGIN = re.compile(r"^(?P<indent>\s*)# BEGIN SOLUTION(?::\s*(?P<hint>.*\S))?\s*$")
END = re.compile(r"^\s*# END SOLUTION\s*$")
TAGS = {"parameters", "solution", "student"}
STUB = "raise NotImplementedError({message})"


@dataclass
class Cell:
    kind: str  # "code" or "markdown"
    lines: list[str]
    tags: list[str] = field(default_factory=list)
    line: int = 0  # where it starts in the source (1-based), for messages


@dataclass
class Exercise:
    """A parsed source: its cells, and the solution blocks as (first line, lines)."""

    path: Path
    cells: list[Cell]

    @property
    def solutions(self) -> list[list[str]]:
        """The body of every solution block (what the student copy must not contain)."""
        blocks = []
        for cell in self.cells:
            if cell.kind != "code":
                continue
            if "solution" in cell.tags:
                blocks.append(cell.lines)
                continue
            inside: list[str] | None = None
            for text in cell.lines:
                if BEGIN.match(text):
                    inside = []
                elif END.match(text) and inside is not None:
                    blocks.append(inside)
                    inside = None
                elif inside is not None:
                    inside.append(text)
        return blocks


def default_source() -> Path:
    """``notebooks/exercises`` of the rlnb checkout this package runs from."""
    return Path(__file__).resolve().parents[2] / "notebooks" / "exercises"


def parse(path: Path) -> Exercise:
    """Read a percent-format source into cells, checking its markers (choice 2)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    cells: list[Cell] = []
    for number, text in enumerate(lines, 1):
        marker = MARKER.match(text)
        if text.startswith("# %%") and marker is None:
            raise ValueError(f"{path}:{number}: a cell marker is '# %%' or '# %% [markdown]', "
                             f"optionally followed by tags=[\"...\"]; got {text!r}")
        if marker is not None:
            tags = _tags(path, number, marker.group("tags"))
            kind = "markdown" if marker.group("markdown") else "code"
            cells.append(Cell(kind, [], tags, number))
        elif cells:
            cells[-1].lines.append(text)
        elif text.strip():
            raise ValueError(f"{path}:{number}: text before the first '# %%' cell marker")
    for cell in cells:
        while cell.lines and not cell.lines[-1].strip():
            cell.lines.pop()
        while cell.lines and not cell.lines[0].strip():
            cell.lines.pop(0)
        if cell.kind == "markdown":
            cell.lines = [_uncomment(path, cell, t) for t in cell.lines]
        else:
            _check_blocks(path, cell)
    _check_parameters(path, cells)
    if not cells or cells[0].kind != "markdown" or not cells[0].lines[0].startswith("# "):
        raise ValueError(f"{path}: the first cell must be a markdown title ('# %% [markdown]' "
                         "then '# # NN · Title')")
    return Exercise(path, cells)


def _tags(path: Path, number: int, text: str | None) -> list[str]:
    if text is None:
        return []
    try:
        tags = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(f"{path}:{number}: tags must be a JSON list of strings, got {text}") \
            from None
    unknown = [t for t in tags if t not in TAGS]
    if not isinstance(tags, list) or unknown:
        raise ValueError(f"{path}:{number}: unknown tag {unknown[:1]}; tags are {sorted(TAGS)}")
    return tags


def _uncomment(path: Path, cell: Cell, text: str) -> str:
    if text == "#":
        return ""
    if not text.startswith("# "):
        raise ValueError(f"{path}: markdown cell at line {cell.line}: every line starts with "
                         f"'# ' (or is '#'), got {text!r}")
    return text[2:]


def _check_blocks(path: Path, cell: Cell) -> None:
    open_at = None
    for offset, text in enumerate(cell.lines):
        where = f"{path}: code cell at line {cell.line}"
        if BEGIN.match(text):
            if open_at is not None:
                raise ValueError(f"{where}: a BEGIN SOLUTION inside another one")
            if not BEGIN.match(text).group("hint"):
                raise ValueError(f"{where}: '# BEGIN SOLUTION' needs a hint: '# BEGIN "
                                 "SOLUTION: what to implement' (the stub's message)")
            open_at = offset
        elif END.match(text):
            if open_at is None:
                raise ValueError(f"{where}: an END SOLUTION without a BEGIN SOLUTION")
            open_at = None
    if open_at is not None:
        raise ValueError(f"{path}: code cell at line {cell.line}: a BEGIN SOLUTION without "
                         "an END SOLUTION")


def _check_parameters(path: Path, cells: list[Cell]) -> None:
    tagged = [c for c in cells if "parameters" in c.tags]
    if len(tagged) != 1 or tagged[0].kind != "code":
        raise ValueError(f"{path}: needs exactly one code cell tagged parameters, found "
                         f"{len(tagged)}")
    tree = ast.parse("\n".join(tagged[0].lines))
    names = {t.id for node in tree.body if isinstance(node, ast.Assign)
             for t in node.targets if isinstance(t, ast.Name)}
    if "fast" not in names:
        raise ValueError(f"{path}: the parameters cell (line {tagged[0].line}) must define "
                         "fast (the tests run every exercise with fast=True)")


# --------------------------------------------------------------------------- writing


def student_lines(cell: Cell) -> list[str]:
    """A code cell's lines with every solution block replaced by its stub."""
    out, inside = [], False
    for text in cell.lines:
        begin = BEGIN.match(text)
        if begin:
            message = json.dumps(f"implement this: {begin.group('hint')}", ensure_ascii=False)
            out.append(begin.group("indent") + STUB.format(message=message))  # a valid literal
            inside = True
        elif END.match(text):
            inside = False
        elif not inside:
            out.append(text)
    return out


def _solution_lines(cell: Cell) -> list[str]:
    return [t for t in cell.lines if not BEGIN.match(t) and not END.match(t)]


def notebook(exercise: Exercise, *, student: bool) -> dict:
    """The nbformat 4.5 notebook of one copy."""
    cells = []
    for cell in exercise.cells:
        if ("solution" in cell.tags and student) or ("student" in cell.tags and not student):
            continue
        tags = [t for t in cell.tags if t == "parameters"]
        if cell.kind == "markdown":
            source = cell.lines
        else:
            source = student_lines(cell) if student else _solution_lines(cell)
        entry = {"cell_type": cell.kind, "id": f"{cell.kind}-{len(cells)}",
                 "metadata": {"tags": tags} if tags else {},
                 "source": "\n".join(source)}
        if cell.kind == "code":
            entry.update(execution_count=None, outputs=[])
        cells.append(entry)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python",
                           "name": "python3"},
            "language_info": {"name": "python"},
            "rlnb": {"copy": "student" if student else "solution",
                     "source": exercise.path.name},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def sources(source: str | Path | None = None) -> list[Path]:
    """The exercise sources (``NN_name.py``) in ``source`` (default ``default_source()``)."""
    folder = Path(source) if source is not None else default_source()
    if not folder.is_dir():
        raise FileNotFoundError(f"no exercise sources at {folder}: give --source DIR (the "
                                "notebooks/exercises folder of an rlnb checkout)")
    found = sorted(p for p in folder.glob("[0-9][0-9]_*.py"))
    if not found:
        raise FileNotFoundError(f"no exercise sources (NN_name.py) in {folder}")
    return found


RECORD = ".rlnb-build.json"  # what each notebook was when written (choice 3)


class ChangedNotebooks(ValueError):
    """A rebuild would replace notebooks changed since they were built (choice 3)."""


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def build(out: str | Path, source: str | Path | None = None, *, overwrite: bool = False,
          only_missing: bool = False, update: bool = False) -> list[Path]:
    """Write ``out/student/*.ipynb`` and ``out/solution/*.ipynb``; returns the paths written.
    Every source is parsed (and checked) and every existing notebook compared with what was
    built there before anything is written (choice 3): a changed one raises
    ``ChangedNotebooks`` unless ``update`` (refresh the others, keep it), ``only_missing``
    (write the notebooks not there) or ``overwrite`` (replace them all)."""
    if sum((overwrite, only_missing, update)) > 1:
        raise ValueError("update, only_missing and overwrite exclude each other: choose one")
    exercises = [parse(p) for p in sources(source)]
    out = Path(out)
    record_path = out / RECORD
    try:
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    except (OSError, ValueError):
        record = {}
    planned: dict[Path, str] = {}
    for copy in ("student", "solution"):
        for ex in exercises:
            text = json.dumps(notebook(ex, student=copy == "student"), indent=1,
                              ensure_ascii=False) + "\n"
            planned[out / copy / f"{ex.path.stem}.ipynb"] = text
    changed = []
    for path, text in planned.items():
        if path.is_file():
            now = _digest(path.read_bytes().decode("utf-8", errors="replace"))
            if now not in (record.get(path.relative_to(out).as_posix()), _digest(text)):
                changed.append(path)
    if only_missing:
        planned = {p: t for p, t in planned.items() if not p.exists()}
    elif update:
        planned = {p: t for p, t in planned.items() if p not in changed}
    elif changed and not overwrite:
        raise ChangedNotebooks(
            f"{changed[0]} has changes since it was built ({len(changed)} notebook(s) in all); "
            "nothing was written. --update refreshes the others and keeps the changed ones; "
            "--only-missing writes only the notebooks not there; --overwrite replaces them "
            "(the changes are lost)")
    written = []
    for path, text in planned.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        record[path.relative_to(out).as_posix()] = _digest(text)
        written.append(path)
    if written:
        record_path.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    return written


def run_build(out, source, *, prog: str, overwrite: bool = False,
              only_missing: bool = False, update: bool = False) -> int:
    """The command: build, print what was written; a bad source, or notebooks changed since
    they were built, exit 2 with one line (nothing written)."""
    try:
        written = build(out, source, overwrite=overwrite, only_missing=only_missing,
                        update=update)
    except (ValueError, FileNotFoundError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    if update:
        kept = sorted(p for p in Path(out).glob("*/*.ipynb") if p not in written)
        print(f"{prog}: {len(written)} notebook(s) refreshed or written, {len(kept)} with "
              "changes kept as they are" + "".join(f"\n  kept {p}" for p in kept))
        return 0
    if only_missing:
        print(f"{prog}: {len(written)} missing notebook(s) written"
              + "".join(f"\n  {p}" for p in written))
        return 0
    n = len(written) // 2
    print(f"{prog}: {n} exercises\n"
          f"  student copies   {Path(out) / 'student'}  (stubs; hand these out)\n"
          f"  solution copies  {Path(out) / 'solution'}")
    return 0

