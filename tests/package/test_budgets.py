"""The budgets the project sets itself, held by tests so they cannot erode unnoticed: one GRPO
step's reading path, 400 code lines a module, a README read in two minutes, every package
listing its modules, and no UI file that knows a loop by name. Each checker is also shown to
catch a broken budget on a made-up case, so a test that passes is not a checker that cannot fail.
"""

import ast
import re
import sys
from pathlib import Path

from paths import ROOT

sys.path.insert(0, str(ROOT / "tools"))
from step_path import code_lines, path_lines  # noqa: E402

MODULE_CODE_LINES = 400  # CONTRIBUTING.md, "Layers and modules"
README_WORDS = 900  # the whole README (was 1,612 when this test came)
QUICK_START_WORDS = 80  # between the Quick start's heading and its first command
STEADY_STEP_LINES = 2_200  # tools/step_path.py: a steady default GRPO step
MEASURED_STEP_LINES = 2_700  # the second step with a run's probes (the funnel, memory peaks)


def package_modules() -> list[Path]:
    return sorted([*(ROOT / "rlnb").rglob("*.py"), *(ROOT / "widgets").rglob("*.py")])


# --------------------------------------------------------------------------- the step


def test_a_steady_steps_reading_path_is_at_most_2200_lines():
    total, rows = path_lines()
    files = [str(f.relative_to(ROOT)) for _, f in rows]
    assert total <= STEADY_STEP_LINES, (total, files)
    # measurement is not the step: none of its modules is entered without a run's probes
    assert not [f for f in files if f.endswith(("memory.py", "memory_check.py",
                                                 "memory_plan.py", "funnel.py", "probes.py"))]


def test_the_measured_step_holds_its_figure_and_enters_the_probes():
    total, rows = path_lines(measured=True)
    files = {str(f.relative_to(ROOT)) for _, f in rows}
    assert total <= MEASURED_STEP_LINES, (total, sorted(files))
    # the tracer sees what the probes add (a checker that saw nothing would pass any budget),
    # and no file is entered for one helper: the config's, LoRA's, the task registry's
    assert {"rlnb/run/training/probes.py", "rlnb/engine/trainers/funnel.py",
            "rlnb/engine/runtime/memory.py", "rlnb/engine/models/memory_plan.py"} <= files
    assert not files & {"rlnb/engine/models/lora.py", "rlnb/run/config/master_config.py",
                        "rlnb/engine/trainers/loop_config.py",
                        "rlnb/engine/environments/run_task.py"}


# --------------------------------------------------------------------------- modules


def oversized(paths, limit: int = MODULE_CODE_LINES) -> list[str]:
    return [f"{p.relative_to(ROOT) if p.is_relative_to(ROOT) else p}: {n} code lines"
            for p in paths if (n := code_lines(p)) > limit]


def test_no_module_has_more_than_400_code_lines():
    assert oversized(package_modules()) == []


def test_the_module_budget_catches_a_long_module(tmp_path):
    long = tmp_path / "long.py"
    long.write_text('"""A docstring does not count."""\n# nor a comment\n\n'
                    + "".join(f"x{i} = {i}\n" for i in range(401)))
    assert oversized([long]) == [f"{long}: 401 code lines"]
    long.write_text("".join(f"x{i} = {i}\n" for i in range(400)))
    assert oversized([long]) == []


# --------------------------------------------------------------------------- README


def readme_budget(text: str) -> tuple[int, int]:
    """``(words in all, words between the Quick start's heading and its first command)``."""
    section = text.split("## Quick start", 1)[1]
    return len(text.split()), len(section.split("```bash", 1)[0].split())


def test_the_readme_is_read_in_two_minutes():
    words, before = readme_budget((ROOT / "README.md").read_text())
    assert words <= README_WORDS, f"README.md: {words} words (budget {README_WORDS})"
    assert before <= QUICK_START_WORDS, (
        f"README.md: {before} words before the Quick start's first command (budget "
        f"{QUICK_START_WORDS})")


def test_the_readme_budget_catches_a_long_preamble():
    text = "# rlnb\n\n## Quick start\n\n" + "word " * 81 + "\n```bash\nrlnb train\n```\n"
    assert readme_budget(text) == (90, 81)


# --------------------------------------------------------------------------- packages


def unlisted(init: Path) -> list[str]:
    """The modules and sub-packages of ``init``'s folder that its docstring does not name (as
    ``name``, ``name.py`` or ``name/``; CONTRIBUTING.md: a folder's ``__init__.py`` lists its
    modules, one line each)."""
    folder = init.parent
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    names = [p.stem for p in folder.glob("*.py") if p.name != "__init__.py"]
    names += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(n for n in names
                  if not any(f"``{n}{end}``" in doc for end in ("", "/", ".py")))


def test_every_package_lists_its_modules():
    missing = {str(i.relative_to(ROOT)): m for i in package_modules()
               if i.name == "__init__.py" and (m := unlisted(i))}
    assert missing == {}


def test_the_listing_check_catches_a_module_left_out(tmp_path):
    (tmp_path / "__init__.py").write_text('"""Things.\n\n- ``a``: the first;\n"""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    assert unlisted(tmp_path / "__init__.py") == ["b"]


# --------------------------------------------------------------------------- the UI


LOOP_MODULES = ("rlnb.engine.trainers.grpo", "rlnb.engine.trainers.ppo",
                "rlnb.engine.trainers.dpo", "rlnb.engine.trainers.async_grpo")
LOOP_KEYS = re.compile(r"^(grpo|ppo|dpo)\.")


def loop_knowledge(path: Path) -> list[str]:
    """Where a UI file names a loop: an import of a loop's module or trainer, or a string
    holding a loop section's key (``"grpo.adv_estimator.name"``); docstrings and comments are
    prose and may."""
    tree = ast.parse(path.read_text())
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                    ast.AsyncFunctionDef))
                  and n.body and isinstance(n.body[0], ast.Expr)
                  and isinstance(n.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in LOOP_MODULES:
            found.append(f"{path.name}:{node.lineno}: imports {node.module}")
        elif isinstance(node, ast.Name) and node.id.endswith("Trainer") and node.id != "Trainer":
            found.append(f"{path.name}:{node.lineno}: names {node.id}")
        elif (isinstance(node, ast.Constant) and isinstance(node.value, str)
              and id(node) not in docstrings and LOOP_KEYS.match(node.value)):
            found.append(f"{path.name}:{node.lineno}: the key {node.value!r}")
    return found


def test_no_ui_file_knows_a_loop_by_name():
    found = [f for p in sorted((ROOT / "widgets").glob("*.py")) for f in loop_knowledge(p)]
    assert found == []


def test_the_loop_check_catches_a_loop_named_in_code(tmp_path):
    ui = tmp_path / "ui.py"
    ui.write_text('"""GRPOTrainer and grpo.seed in prose are fine."""\n'
                  "from rlnb.engine.trainers.ppo import PPOTrainer\n"
                  "FIELDS = {'grpo.adv_estimator.name': 1}\n"
                  "panels = PPOTrainer.panels\n")
    assert loop_knowledge(ui) == ["ui.py:2: imports rlnb.engine.trainers.ppo",
                                  "ui.py:3: the key 'grpo.adv_estimator.name'",
                                  "ui.py:4: names PPOTrainer"]
