"""The package: exports, import hygiene, rlnb.widgets mapping, env/pyproject drift, README, CLI."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib
import yaml
from paths import ROOT

import rlnb

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


SEED_NAMES = [
    "GRPOAdvantageEstimator", "GDPOAdvantageEstimator", "ReinforcePlusPlusAdvantageEstimator",
    "GeneralizedAdvantageEstimator", "RawRewardAdvantageEstimator", "ClippedPGLossFn", "NLLLoss",
    "PreferenceLoss", "DPOLossFn", "MseValueLossFn", "SequencePackingLossWrapper",
    "calculate_baseline_and_std_per_prompt", "calculate_kl", "masked_mean", "masked_var",
    "clipped_pg_loss", "grpo_advantages", "gae_advantages", "dpo_loss", "dynamic_sampling",
    "ReplayBuffer", "scale_rewards", "shape_rewards", "overlong_filter", "clip_advantages",
]


def test_seed_names_and_pure_functions_are_importable_from_rlnb():
    missing = [n for n in SEED_NAMES if not hasattr(rlnb, n)]
    assert not missing
    assert set(rlnb.__all__) >= set(SEED_NAMES)
    assert all(hasattr(rlnb, n) for n in rlnb.__all__)


@pytest.mark.smoke
def test_import_rlnb_needs_no_jupyter_packages():
    code = (
        "import sys, rlnb, rlnb.cli\n"
        "bad = [m for m in ('ipywidgets', 'plotly', 'IPython', 'jupyterlab', 'papermill', "
        "'rlnb.widgets') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_import_rlnb_and_the_notebook_commands_load_no_torch():
    """`import rlnb` loads nothing until a name is used, and what `rlnb run`, `sweep` and
    `launch` (and a sweep point's process) load before a kernel starts never imports torch or
    transformers: 2-3 s of start-up for every such process. A name still loads what it needs."""
    code = (
        "import sys, rlnb, rlnb.cli, rlnb.run.notebooks.execute, rlnb.run.experiments.sweep, rlnb.run.pools.executors, "
        "rlnb.run.pools.launch, rlnb.run.store.rundir, rlnb.run.experiments.sweep_summary\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "rlnb.grpo_advantages\n"
        "assert 'torch' in sys.modules\n"
        "from rlnb import GRPOTrainer\n"
        "assert GRPOTrainer.__module__ == 'rlnb.engine.trainers.grpo'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def _install_and_import(tmp_path, editable: bool):
    """Build the wheel (or the PEP 660 editable wheel) with the project's build backend, unpack
    it into a fresh folder, and import from there in a neutral working directory.

    Nothing is installed into the running environment (``pip install --prefix`` would
    uninstall the environment's own rlnb as a side effect).
    """
    hook = "build_editable" if editable else "build_wheel"
    build = (
        "import sys; from setuptools import build_meta as b; "
        f"print(b.{hook}(sys.argv[1]))"
    )
    out = tmp_path / "dist"
    name = subprocess.run([sys.executable, "-c", build, str(out)], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout.strip().splitlines()[-1]
    site = tmp_path / "site"
    zipfile.ZipFile(out / name).extractall(site)
    code = (
        "import site, sys\n"
        f"sys.path = [p for p in sys.path if p not in ('', {str(ROOT)!r})]\n"
        f"site.addsitedir({str(site)!r})\n"
        "import importlib.util as u\n"
        "import rlnb, rlnb.widgets\n"
        "print(rlnb.__file__); print(rlnb.widgets.__file__)\n"
        "print(u.find_spec('widgets') is None)\n"
        "from importlib.resources import files\n"
        "print((files('rlnb.configs') / 'tiny.yaml').is_file())\n"
    )
    return subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path,
                          capture_output=True, text=True).stdout.split()


@pytest.mark.parametrize("editable", [False, True], ids=["wheel", "editable"])
def test_widgets_folder_installs_as_rlnb_widgets_without_a_top_level_name(tmp_path, editable):
    rlnb_file, widgets_file, no_top_level, has_default_config = _install_and_import(tmp_path, editable)
    assert has_default_config == "True", "configs/tiny.yaml is not installed as rlnb.configs"
    assert Path(widgets_file).parent.name == "widgets"
    if editable:  # served from the checkout
        assert Path(widgets_file).parent == ROOT / "widgets"
    else:  # copied into site-packages under rlnb/
        assert Path(widgets_file).parent.parent.name == "rlnb" and str(tmp_path) in widgets_file
        assert str(tmp_path) in rlnb_file
    assert no_top_level == "True", "a top-level 'widgets' module is importable: name collision"


def test_pyproject_lists_every_package_folder():
    """setuptools installs only the packages pyproject.toml lists: a folder left out would be
    missing from a wheel (an editable install still finds it, so nothing else would notice)."""
    folders = {".".join(("rlnb", *p.parent.relative_to(ROOT / "rlnb").parts))
               for p in (ROOT / "rlnb").rglob("__init__.py")}
    listed = PYPROJECT["tool"]["setuptools"]["packages"]
    assert sorted(listed) == sorted(folders | {"rlnb.widgets", "rlnb.configs"})


def _pins(path: Path) -> dict[str, str]:
    """``{normalised name: version}`` of a pip constraints file."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[re.sub(r"[-_.]+", "-", name).lower()] = version
    return pins


def test_the_lock_pins_every_dependency_and_agrees_with_constraints():
    """requirements-lock.txt (tools/update_lock.sh) holds an exact version of every package
    pyproject.toml asks for, in every extra, and torch at constraints.txt's pin."""
    lock = _pins(ROOT / "requirements-lock.txt")
    project = PYPROJECT["project"]
    specs = list(project["dependencies"])
    for extra, deps in project["optional-dependencies"].items():
        if extra != "vllm":  # vLLM lives in its own venv (tests/run_vllm_tier.sh)
            specs += deps
    names = {re.sub(r"[-_.]+", "-", re.split(r"[<>=!\[ ;]", s)[0]).lower() for s in specs}
    assert not names - set(lock), f"the lock lacks {sorted(names - set(lock))}"
    for name, version in _pins(ROOT / "constraints.txt").items():
        assert lock.get(name) == version, (name, lock.get(name), version)


def test_this_environment_is_the_lock():
    """The suite's figures and the warm-start record hold for the lock's versions: say so plainly
    when the environment drifted from it (pip install -c requirements-lock.txt ...)."""
    from importlib.metadata import distributions

    # the first of each name on sys.path is the one Python imports: later ones are shadowed
    # (setuptools, once imported, e.g. by inductor's C++ builder, appends its _vendor folder with
    # its own copies of platformdirs and others)
    installed = {}
    for d in distributions():
        installed.setdefault(re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(),
                             d.version.split("+")[0])
    lock = _pins(ROOT / "requirements-lock.txt")
    drift = {n: (installed[n], v) for n, v in lock.items() if n in installed and installed[n] != v}
    assert not drift, (
        f"installed versions differ from requirements-lock.txt (installed, locked): {drift}; "
        "reinstall with pip install -c requirements-lock.txt -e '.[notebook,dev,ray,envs]'")


def test_environment_yml_matches_pyproject_and_constraints():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    deps = env["dependencies"]
    python = next(d for d in deps if isinstance(d, str) and d.startswith("python="))
    major, minor = map(int, python.split("=")[1].split(".")[:2])
    floor = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert (major, minor) >= tuple(map(int, floor.split(".")))
    assert "pip" in deps
    pip = next(d["pip"] for d in deps if isinstance(d, dict))
    constraints = [
        line.strip() for line in (ROOT / "constraints.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for pin in constraints:  # every pin of constraints.txt, exactly
        assert pin in pip, f"environment.yml lacks the pin {pin}"
    package = [d for d in pip if d.startswith("-e .")]
    assert len(package) == 1
    extras = set(re.search(r"\[(.*)\]", package[0]).group(1).split(","))
    assert extras == {"notebook", "dev"}
    assert extras <= set(PYPROJECT["project"]["optional-dependencies"])
    declared = {re.split(r"[<>=!\[ ]", d)[0].lower() for d in PYPROJECT["project"]["dependencies"]}
    assert "-c requirements-lock.txt" in pip  # the exact versions, as the README installs
    for line in pip:  # anything else listed must be a declared dependency
        if not line.startswith(("-e", "-c")):
            assert re.split(r"[<>=!\[ ]", line)[0].lower() in declared, line


def _quick_start_blocks():
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w*)\n(.*?)```", section, re.S)


def test_readme_quick_start_has_two_shell_blocks_installing_the_lock():
    assert (ROOT / "README.md").read_text().startswith("# rlnb\n")
    blocks = _quick_start_blocks()
    assert [lang for lang, _ in blocks] == ["bash", "bash"]
    for _, body in blocks:
        assert "-c requirements-lock.txt" in body
    assert "bash tests/run_all.sh" in blocks[1][1]  # which runs pytest, then the tiers
    assert "pytest -q -n 2" in (ROOT / "tests" / "run_all.sh").read_text()
    # the first command is the main tutorial, headless; it must exist where the README says
    first = re.search(r"^rlnb run (\S+)$", blocks[0][1], re.M)
    assert first and first.group(1) == "notebooks/01_grpo_step_by_step.ipynb"
    assert (ROOT / first.group(1)).is_file()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "README.md" in ci and "pytest" not in ci  # CI reads the command, never copies it


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_readme_and_guide_python_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spaces = []
    for doc, count in (("README.md", 1), ("docs/guide.md", 5)):
        examples = re.findall(r"```python\n(.*?)```", (ROOT / doc).read_text(), re.S)
        assert len(examples) == count, doc
        for example in examples:
            spaces.append({})
            if example.startswith("import verifiers") and not _importable("verifiers"):
                continue  # the envs extra's example: tests/engine/test_verifiers.py says so
            exec(compile(example, doc, "exec"), spaces[-1])
    stages, own_task, environment, tool_environment, agents, algorithms = spaces
    # an agent task and the client on its own (guide: "Agents")
    assert agents["trainer"].step_count == 1 and agents["metrics"]["train/mean_turns"] > 1
    assert "train/agent/generation_calls" in agents["metrics"]
    assert len(agents["reply"].choices) == 2 and agents["reply"].choices[0].token_ids
    # a verifiers environment handed over in Python (guide: "Tasks from the field")
    if environment:
        trainer = environment["trainer"]
        assert trainer.task.name == "verifiers" and len(trainer.task.tasks) == 2500
        assert len(trainer.task.val_rows()) == 100 and trainer.task.defines_correct
        assert "train/reward/exact" in trainer.step()
    # a verifiers environment with a tool: agent episodes (guide: "verifiers tool environments")
    if tool_environment:
        trainer = tool_environment["trainer"]
        assert type(trainer.task).__name__ == "VerifiersAgentTask"
        assert trainer.task.tools[0]["function"]["name"] == "calc"
        assert "train/reward/correct" in trainer.step()
    # a user's reward functions and data (guide: "Your own task"): one step, each component
    assert own_task["trainer"].step_count == 1
    assert {"train/reward/format_reward", "train/reward/accuracy_reward"} <= set(
        own_task["metrics"])
    # the first: one GRPO step by hand, then five more through train()
    assert stages["trainer"].step_count == 6
    assert stages["rpp"].estimator == "reinforce_plus_plus" and stages["grpo"].estimator == "grpo"
    # the second prints what its comments say, derived by hand: leave-one-out baselines of the
    # group [1, 0, 0] are [0, .5, .5] with stds [0, .7071, .7071] (the first member's others are
    # equal: its raw difference stays), and the all-correct group gets 0; the ratio is e^0.1
    assert algorithms["advantages"].tolist() == pytest.approx(
        [1.0, -0.5 / (0.5**0.5 + 1e-6), -0.5 / (0.5**0.5 + 1e-6), 0, 0, 0], abs=1e-6)
    metrics = algorithms["metrics"]
    assert metrics["probs_ratio"] == pytest.approx(2.718281828**0.1, rel=1e-5)
    assert metrics["probs_ratio_clamped"] == pytest.approx(metrics["probs_ratio"])  # < 1.28


@pytest.mark.smoke
def test_cli_demo_runs_and_shows_every_estimator():
    out = subprocess.run([sys.executable, "-m", "rlnb.cli", "demo", "--seed", "1"], cwd=ROOT,
                         check=True, capture_output=True, text=True).stdout
    for label in ("GRPO (RLOO baseline)", "Reinforce++", "GSPO sequence ratios", "k3:"):
        assert label in out


def test_cli_rejects_unknown_commands():
    res = subprocess.run([sys.executable, "-m", "rlnb.cli", "trian"], cwd=ROOT,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "invalid choice: 'trian'" in res.stderr


def _help(capsys, *command: str) -> str:
    """What ``rlnb [COMMAND] --help`` prints, through the CLI's own entry point."""
    from rlnb.cli import main

    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


def test_cli_help_is_plain_text_and_train_names_every_loop(capsys, monkeypatch):
    import argparse

    from rlnb.cli import build_parser
    from rlnb.engine.trainers.loops import LOOPS

    monkeypatch.setenv("COLUMNS", "100")  # argparse wraps to the terminal: one width for all
    subparsers = next(a for a in build_parser()._actions
                      if isinstance(a, argparse._SubParsersAction))
    commands = list(subparsers.choices)
    assert {"demo", "train", "verify", "run", "sweep", "launch"} <= set(commands)
    texts = {"rlnb": _help(capsys)} | {c: _help(capsys, c) for c in commands}
    for command, text in texts.items():
        # a terminal shows no reStructuredText or Markdown: ``rlnb`` would print as-is
        assert "`" not in text, f"rlnb {command} --help has backquotes:\n{text}"
        assert not re.search(r":(func|class|mod|meth|ref):", text), command
    for command in commands:  # each command says what it does on its own help page
        assert subparsers.choices[command].description, f"rlnb {command} has no description"
    top = " ".join(texts["rlnb"].split())
    train = " ".join(texts["train"].split())
    for name in LOOPS:  # every registered loop, by its config name and its display name
        assert f"algorithm: {name}" in train, f"rlnb train --help does not name the {name} loop"
        assert name.upper() in top, f"rlnb --help does not name the {name} loop"
    # the async loop is GRPO with grpo.async_grpo.enabled (loops.should_use_async_rollouts)
    assert "async GRPO" in top and "async GRPO" in train
    assert "grpo.async_grpo.enabled" in train


def _project_text_files():
    """Every text file a reader of the project meets (sources, docs, notebooks, configs, tests)."""
    suffixes = {".py", ".md", ".ipynb", ".yaml", ".yml", ".toml", ".txt", ".sh", ".cfg"}
    folders = ["rlnb", "widgets", "docs", "notebooks", "benchmarks", "configs", "tests", ".ci"]
    files = [ROOT / "README.md", ROOT / "pyproject.toml", ROOT / "environment.yml",
             ROOT / "constraints.txt"]
    for folder in folders:
        files += [p for p in sorted((ROOT / folder).rglob("*"))
                  if p.is_file() and "__pycache__" not in p.parts
                  and (p.suffix in suffixes or p.parent.name == ".ci")]
    return files


def test_the_project_speaks_of_itself_only():
    # an issue tracker's numbers and planning files a reader does not have; an external project's
    # issue is cited by its URL (".../issues/719"), which this pattern leaves alone
    issue = re.compile(r"\bissue\s*#?\s*\d+", re.I)
    outside = re.compile(r"\b(?:STYLE|DESIGN)\.md\b")
    files = _project_text_files()
    names = {p.relative_to(ROOT).as_posix() for p in files}
    assert {"README.md", "docs/algorithms.md", "rlnb/cli/__init__.py",
            "notebooks/01_grpo_step_by_step.ipynb", "configs/tiny.yaml"} <= names
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in (*issue.finditer(line), *outside.finditer(line)):
                found.append(f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r}")
    assert not found, "mentions of things outside the project:\n" + "\n".join(found)


def _anchor(heading: str) -> str:
    """A Markdown heading's link anchor, as GitHub makes it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_into_a_doc_names_a_heading_it_has():
    """``docs/x.md#anchor`` in code, docs and notebooks points at a heading of that file."""
    headings = {}
    for md in [*ROOT.glob("docs/*.md"), ROOT / "README.md", ROOT / "CONTRIBUTING.md"]:
        headings[md.name] = {_anchor(m.group(1)) for m in
                             re.finditer(r"^#+\s+(.*)$", md.read_text(), re.M)}
    broken = []
    for path in _project_text_files():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for name, anchor in re.findall(r"([A-Za-z_]+\.md)#([\w\-]+)", line):
                if name in headings and anchor not in headings[name]:
                    broken.append(f"{path.relative_to(ROOT)}:{number}: {name}#{anchor}")
    assert not broken, "links to headings that do not exist:\n" + "\n".join(broken)
