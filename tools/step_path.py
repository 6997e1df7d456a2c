"""How much code one default GRPO step runs through: the files, and their lines of code.

    python tools/step_path.py

Builds the trainer from the embedded default config (without the warm start, which is not part
of a step), traces one ``trainer.step()`` and lists every rlnb source file a Python function was
entered in, with its code lines: non-blank, non-comment and not in a docstring. The total is
what a reader has to follow to understand a step from the notebook cell down to the tensors.
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


def step_files() -> list[Path]:
    """rlnb source files a default ``GRPOTrainer.step()`` enters a function in."""
    import rlnb

    trainer = rlnb.GRPOTrainer(rlnb.load_config(None, ["sft.enabled=false"]))
    trainer.step()  # once untraced: first-call imports are not the step
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


def main() -> int:
    files = step_files()
    total = 0
    print(f"{'lines':>6}  file (one default GRPO step, tiny config, no warm start)")
    for f in files:
        n = code_lines(f)
        total += n
        print(f"{n:6d}  {f.relative_to(ROOT)}")
    print(f"{total:6d}  total in {len(files)} files (target: at most 2,200)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
