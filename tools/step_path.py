"""How much code one default GRPO step runs through: the files, and their lines of code.

    python tools/step_path.py

Builds the trainer from the embedded default config (without the warm start, which is not part
of a step), traces one ``trainer.step()`` and lists every rlnb source file a Python function was
entered in, with its code lines: non-blank, non-comment and not in a docstring. The total is
what a reader has to follow to understand a step from the notebook cell down to the tensors.

Two steps are traced: a *steady* step (the third of a bare trainer: the algorithm alone, the
first steps' one-time checks done) and the *measured* step (the second of a trainer with the
probes a run attaches, ``rlnb.run.training.probes``: the funnel and the memory peaks beside
their plan). ``tests/package/test_budgets.py`` holds both figures.
"""

from __future__ import annotations

import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def code_lines(path: Path) -> int:
    """Lines that hold code: not blank, not only a comment, not part of a docstring."""
    source = path.read_text()
    docstring_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(
                    getattr(body[0], "value", None), ast.Constant) and isinstance(
                    body[0].value.value, str):
                docstring_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT,
                        tokenize.DEDENT, tokenize.ENCODING, tokenize.ENDMARKER):
            continue
        lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstring_lines)


def step_files(measured: bool = False) -> list[Path]:
    """rlnb source files a default ``GRPOTrainer.step()`` enters a function in: the third step
    of a bare trainer, or (``measured``) the second with a run's probes attached."""
    import rlnb
    from rlnb.run.training.probes import attach_probes

    trainer = rlnb.GRPOTrainer(rlnb.load_config(None, ["sft.enabled=false"]))
    if measured:
        attach_probes(trainer)
    trainer.step()  # once untraced: first-call imports and one-time checks are not the step
    if not measured:
        trainer.step()
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call":
            seen.add(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        trainer.step()
    finally:
        sys.setprofile(None)
    roots = [(ROOT / "rlnb").resolve(), (ROOT / "widgets").resolve()]
    files = {Path(f).resolve() for f in seen}
    return sorted(f for f in files if any(r in f.parents for r in roots))


def path_lines(measured: bool = False) -> tuple[int, list[tuple[int, Path]]]:
    """``(total code lines, [(lines, file)])`` of the step ``step_files`` traces."""
    rows = [(code_lines(f), f) for f in step_files(measured)]
    return sum(n for n, _ in rows), rows


def main() -> int:
    for measured, what, budget in ((False, "a steady default GRPO step", "at most 2,200"),
                                   (True, "the measured step: a run's probes attached",
                                    "held by tests/package/test_budgets.py")):
        total, rows = path_lines(measured)
        print(f"{'lines':>6}  file ({what}; tiny config, no warm start)")
        for n, f in rows:
            print(f"{n:6d}  {f.relative_to(ROOT)}")
        print(f"{total:6d}  total in {len(rows)} files ({budget})\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
