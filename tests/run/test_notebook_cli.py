"""rlnb run / sweep / launch: real papermill runs of the fixture notebooks in tests/support/notebooks/."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from paths import FAKE_NB, ROOT, TRAIN_NB

from rlnb.run.experiments.sweep import grid_points, parse_grid, run_name, sweep_table
from rlnb.run.notebooks.parameters import (
    check_parameters,
    config_override_problem,
    format_value,
    notebook_parameters,
    parse_value,
    split_parameters,
)
from rlnb.run.store.rundir import RunDir

pytest.importorskip("papermill")
pytest.importorskip("nbconvert")

TRAIN = TRAIN_NB  # two GRPO steps of the tiny model
FAKE = FAKE_NB  # made-up curves, fails on demand
NB01 = ROOT / "notebooks" / "01_grpo_step_by_step.ipynb"  # GRPO; seed = 0, fast = False, ...
NB05 = ROOT / "notebooks" / "05_ppo_value_model.ipynb"  # PPO (ppo_tiny): its ppo.* keys are valid
GRID = ["-p", "loss_fn.ratio_clip_max", "0.2,0.28", "-p", "seed", "0,1", "-p", "fail_above", "0.5"]
NAMES = [
    "loss_fn.ratio_clip_max=0.2__seed=0", "loss_fn.ratio_clip_max=0.2__seed=1",
    "loss_fn.ratio_clip_max=0.28__seed=0", "loss_fn.ratio_clip_max=0.28__seed=1",
]
PLOTLY_CDN = re.compile(r"<script[^>]*src=[\"'][^\"']*(cdn\.plot\.ly|cdn\.jsdelivr)", re.I)


# --- parameters


def test_parse_value_reads_yaml_scalars():
    assert parse_value("3") == 3 and isinstance(parse_value("3"), int)
    assert parse_value("0.28") == 0.28
    assert parse_value("1e-3") == 0.001  # YAML 1.1 alone would keep it a string
    assert parse_value("true") is True and parse_value("false") is False
    assert parse_value("null") is None
    assert parse_value("Qwen/Qwen2.5-0.5B") == "Qwen/Qwen2.5-0.5B"
    assert parse_value("'3'") == "3"
    assert parse_value("[1, 2]") == [1, 2]
    assert parse_value("2024-01-02") == "2024-01-02"  # not a datetime.date
    assert parse_value("") == ""
    with pytest.raises(ValueError, match="cannot read the value"):
        parse_value("[1,")


def test_format_value_reads_back_unchanged():
    for value in [3, 0.28, 1e-3, True, None, "abc", "3", "true", "", [1, "a"], float("inf")]:
        assert parse_value(format_value(value)) == value, value


def test_dotted_parameters_become_config_overrides():
    assert split_parameters({"seed": 1, "loss_fn.ratio_clip_max": 0.28, "fast": True}) == {
        "seed": 1, "fast": True, "overrides": ["loss_fn.ratio_clip_max=0.28"]}
    # given overrides come first, then the dotted keys in order
    assert split_parameters({"overrides": ["a.b=1"], "c.d": "x", "e.f": None}) == {
        "overrides": ["a.b=1", "c.d=x", "e.f=null"]}
    assert split_parameters({"policy.model_name": "123"})["overrides"] == ['policy.model_name="123"']
    for bad in ["bad key", "class", "a..b", "a.1b", "1x"]:
        with pytest.raises(ValueError, match="not a Python name|dotted config key"):
            split_parameters({bad: 1})


def test_grid_splits_commas_outside_brackets_and_keeps_the_order():
    grid, fixed = parse_grid([["b", "2,1"], ["seed", "0, 1, 2"], ["fast", "true"],
                              ["overrides", "[x.y=1, z.w=2]"], ["name", "'a,b'"]])
    assert grid == {"b": [2, 1], "seed": [0, 1, 2]}
    assert fixed == {"fast": True, "overrides": ["x.y=1", "z.w=2"], "name": "a,b"}
    points = grid_points(grid)
    assert [tuple(p.values()) for p in points] == [(2, 0), (2, 1), (2, 2), (1, 0), (1, 1), (1, 2)]
    with pytest.raises(ValueError, match="given twice"):
        parse_grid([["seed", "0,1"], ["seed", "2"]])


def test_run_names_are_readable_and_filesystem_safe():
    assert run_name({"loss_fn.ratio_clip_max": 0.2, "seed": 0}) == "loss_fn.ratio_clip_max=0.2__seed=0"
    assert run_name({"model": "Qwen/Qwen2.5 0.5B"}) == "model=Qwen_Qwen2.5_0.5B"
    assert run_name({}) == "run"
    long_a, long_b = run_name({"x": "a" * 300}), run_name({"x": "a" * 299})
    assert len(long_a) <= 120 and long_a != long_b
    assert run_name({"x": "a" * 300}) == long_a  # stable across calls (and processes)


def test_notebook_parameters_reads_the_tagged_cell():
    assert notebook_parameters(TRAIN) == {"fast", "seed", "run_dir", "overrides", "fail_on_rank"}
    assert notebook_parameters(FAKE) == {"fast", "seed", "run_dir", "overrides", "fail_above",
                                         "hold_file"}


def notebook_with(tmp_path: Path, source: str) -> Path:
    """A one-cell notebook whose cell, tagged ``parameters``, is ``source``."""
    path = tmp_path / "params.ipynb"
    path.write_text(json.dumps({
        "cells": [{"cell_type": "code", "metadata": {"tags": ["parameters"]}, "source": source,
                   "outputs": [], "execution_count": None}],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


PARAMS_CELL = """
rate = 0.5
steps = 3
fast = False
name = "x"
items = [1, 2]
table = {"a": 1}
anything = None
computed = 2 ** 10
typed: int = 4
overrides = []
steps = 5  # the last assignment is the default papermill leaves
"""


def test_values_that_fit_their_defaults_pass_the_check(tmp_path):
    nb = notebook_with(tmp_path, PARAMS_CELL)
    fits = {"rate": 1, "steps": 7, "fast": True, "name": "y", "items": [], "table": {"b": [1]},
            "anything": "text", "computed": "not checked", "typed": -2}
    assert check_parameters(nb, fits) == fits  # an int where the default is a float, ...
    from_python = {"steps": np.int64(2), "rate": np.float32(0.5), "items": (3,)}
    assert check_parameters(nb, from_python) == from_python  # numpy scalars, a tuple
    for value in [None, 3, 0.1, True, "s", [1], {"k": "v"}]:  # a None default takes anything
        assert check_parameters(nb, {"anything": value}) == {"anything": value}
    # config keys the notebook may accept: a valid key and value, a loop section of another
    # algorithm (notebook 05 runs PPO), NeMo-RL's top-level name of an estimator key, and a
    # value that fails only with the default config's other keys (async_tiny sets the rest)
    for key, value in [("loss_fn.ratio_clip_max", 0.28), ("ppo.ppo_epochs", 2),
                       ("value_loss_fn.cliprange", None), ("grpo.normalize_rewards", False),
                       ("grpo.async_grpo.enabled", True), ("grpo.num_generations_per_prompt", 1)]:
        assert check_parameters(nb, {key: value})["overrides"] == [f"{key}={format_value(value)}"]
    assert check_parameters(nb, {"overrides": ["grpo.seed=3"], "grpo.val_period": 0}) == {
        "overrides": ["grpo.seed=3", "grpo.val_period=0"]}


@pytest.mark.parametrize(("params", "message"), [
    ({"steps": "abc"}, "-p steps: 'abc' is not an int (the default in params.ipynb's parameters "
                       "cell is 5)"),
    ({"steps": 2.0}, "-p steps: 2.0 is not an int"),  # an int stays an int
    ({"steps": True}, "-p steps: True is not an int"),  # a bool is not an int
    ({"steps": None}, "-p steps: None is not an int"),
    ({"typed": "x"}, "-p typed: 'x' is not an int (the default in params.ipynb's parameters "
                     "cell is 4)"),
    ({"rate": "fast"}, "-p rate: 'fast' is not a number (the default in params.ipynb's "
                       "parameters cell is 0.5)"),
    ({"rate": False}, "-p rate: False is not a number"),
    ({"fast": 3}, "-p fast: 3 is not a bool (true or false) (the default in params.ipynb's "
                  "parameters cell is False)"),
    ({"name": 3}, "-p name: 3 is not a str (the default in params.ipynb's parameters cell is "
                  "'x'); quote it to pass it as text: -p name '\"3\"'"),
    ({"items": 1}, "-p items: 1 is not a list (the default in params.ipynb's parameters cell "
                   "is [1, 2])"),
    ({"table": [1]}, "-p table: [1] is not a dict"),
    ({"loss_fn.ratio_clip_mx": 0.28},
     "-p loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?"),
    ({"loss_fn.ratio_clip_max": "abc"},
     "-p loss_fn.ratio_clip_max: Input should be a valid number, unable to parse string as a "
     "number (got 'abc')"),
    ({"los_fn.ratio_clip_max": 0.2},
     "-p los_fn.ratio_clip_max: los_fn: unknown section; did you mean 'loss_fn'?"),
    ({"grpo.normalize_rewards": "maybe"},  # checked where NeMo-RL's name goes
     "-p grpo.normalize_rewards: grpo.adv_estimator.normalize_rewards: Input should be a valid "
     "boolean"),
    ({"ppo.ppo_epochs": "two"}, "-p ppo.ppo_epochs: Input should be a valid integer"),
    ({"overrides": ["grpo.seed=1", "loss_fn.ratio_clip_mx=1"]},
     "-p overrides: loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?"),
    ({"overrides": ["grpo.seed"]}, "-p overrides: override 'grpo.seed' must look like "
                                   "dotted.key=value"),
], ids=lambda x: str(x)[:30])
def test_values_that_do_not_fit_are_refused_with_the_parameter_named(tmp_path, params, message):
    nb = notebook_with(tmp_path, PARAMS_CELL)
    with pytest.raises(ValueError) as err:
        check_parameters(nb, params)
    assert str(err.value).startswith(message), str(err.value)
    assert "\n" not in str(err.value)


def test_a_config_override_is_judged_on_its_own_key_only():
    assert config_override_problem("loss_fn.ratio_clip_max=0.28") is None
    assert config_override_problem("loss_fn.ratio_clip_mx=0.28") == (
        "loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?")
    # inside a value given as a mapping: the path names the key within it
    assert config_override_problem("policy.generation={temprature: 1.0}") == (
        "policy.generation.temprature: unknown key; did you mean 'temperature'?")
    assert config_override_problem("policy.optimizer={lr: x}") == (
        "policy.optimizer.lr: Input should be a valid number, unable to parse string as a number "
        "(got 'x')")
    # a cross-field check about the section (load_config refuses it on the default config) is
    # the notebook's to make: its base config may set the other key
    assert config_override_problem("loss_fn.ratio_clip_min=1.5") is None
    assert config_override_problem("grpo.batch_multiplier=2") is None


def test_run_dir_tolerates_the_notebook_files_only(tmp_path):
    ok = tmp_path / "ok"
    (ok / "ranks").mkdir(parents=True)
    (ok / "notebook.ipynb").write_text("{}")
    RunDir(ok, config={"a": 1})
    assert (ok / "config.yaml").is_file()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an rlnb run dir"):
        RunDir(other, config={"a": 1})


# --- the commands, through the real console entry


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Offline, one thread, a private cache, and a decoy 'python3' kernelspec first on
    JUPYTER_PATH: a run that picked it could not start a kernel at all."""
    tmp = tmp_path_factory.mktemp("env")
    decoy = tmp / "jupyter" / "kernels" / "python3"
    decoy.mkdir(parents=True)
    (decoy / "kernel.json").write_text(json.dumps({
        "argv": ["/nonexistent/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "decoy", "language": "python"}))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "RLNB_CACHE_DIR": str(tmp / "cache"), "JUPYTER_PATH": str(tmp / "jupyter")}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU"):
        env.pop(key, None)
    return env


def rlnb(*args, cwd, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlnb.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def outputs(notebook: Path) -> str:
    """Every text output of an executed notebook, joined."""
    nb = json.loads(notebook.read_text())
    parts = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("text") or out.get("data", {}).get("text/plain") or out.get("evalue", "")
            parts.append("".join(text) if isinstance(text, list) else text)
    return "\n".join(parts)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, env):
    cwd = tmp_path_factory.mktemp("run")
    proc = rlnb("run", TRAIN, "-p", "seed", "1", "-p", "loss_fn.ratio_clip_max", "0.31",
                "--run-dir", "out", "--no-progress", cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return cwd / "out", proc


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.smoke
def test_run_executes_the_notebook_into_its_run_dir(trained):
    run_dir, proc = trained
    assert "run directory  out" in proc.stdout
    assert "trained 2 steps" in outputs(run_dir / "notebook.ipynb")
    assert "trained 2 steps" in (run_dir / "notebook.html").read_text()
    meta = json.loads((run_dir / "notebook.ipynb").read_text())["metadata"]["papermill"]
    assert meta["parameters"]["run_dir"] == str(run_dir.resolve())  # injected, absolute
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    # steps 1-2 in one chunk, sealed when the notebook's run.train() ended
    assert sorted(p.name for p in (run_dir / "rollouts").iterdir()) == ["steps_000001.parquet"]
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["loss_fn"]["ratio_clip_max"] == 0.31 and config["grpo"]["seed"] == 1


@pytest.mark.notebook
@pytest.mark.slow
def test_run_kernel_is_this_interpreter_not_the_first_python3_kernelspec(trained):
    run_dir, _ = trained  # env put a broken 'python3' kernelspec first on JUPYTER_PATH
    info = json.loads((run_dir / "rank0.json").read_text())
    assert info["executable"] == sys.executable
    assert info["world_size"] == info["num_processes"] == 1


@pytest.mark.notebook
@pytest.mark.slow
def test_run_failing_cell_exits_1_and_keeps_the_notebook(tmp_path, env):
    proc = rlnb("run", FAKE, "-p", "fail_above", "0", "--no-progress", cwd=tmp_path, env=env)
    assert proc.returncode == 1
    assert "FAILED" in proc.stdout and "RuntimeError: boom: diverged" in proc.stdout
    assert re.search(r"cell In \[\d+\]", proc.stdout)
    (run_dir,) = (tmp_path / "runs").iterdir()  # the default runs/<stem>-<time>
    assert re.fullmatch(r"fake_metrics-\d{8}-\d{6}", run_dir.name)
    nb = json.loads((run_dir / "notebook.ipynb").read_text())
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert [e["ename"] for e in errors] == ["RuntimeError"]
    assert "logged 4 steps" in outputs(run_dir / "notebook.ipynb")  # the cells before it ran
    html = (run_dir / "notebook.html").read_text()
    assert "boom: diverged" in html
    # the saved widget state is dropped from the export: the widget shows its static fallback
    # instead of a view that needs the html-manager script from a CDN
    assert "widget-state+json" in (run_dir / "notebook.ipynb").read_text()
    assert "IntSlider(value=7" in html and "html-manager" not in html


@pytest.mark.parametrize("args, message", [
    (["missing.ipynb"], "no notebook at"),
    ([FAKE, "-p", "seed", "[1,"], "cannot read the value"),
    ([FAKE, "-p", "sed", "1"], "has no parameter sed"),
    ([FAKE, "-p", "bad key", "1"], "not a Python name"),
    ([FAKE, "-p", "run_dir", "x"], "--run-dir"),
    ([FAKE, "--kernel", "no-such-kernel"], "no Jupyter kernel named"),
    ([FAKE, "--run-dir", "busy"], "not empty"),
], ids=["missing", "unparseable", "unknown", "bad-name", "run-dir", "kernel", "busy-run-dir"])
def test_bad_arguments_exit_2_and_write_nothing(tmp_path, env, args, message):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("x")
    proc = rlnb("run", *args, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]
    assert [p.name for p in (tmp_path / "busy").iterdir()] == ["keep.txt"]


@pytest.mark.parametrize("args, message", [
    (["run", NB01, "-p", "seed", "abc"], "rlnb run: -p seed: 'abc' is not an int (the default in "
                                         "01_grpo_step_by_step.ipynb's parameters cell is 0)"),
    (["run", NB01, "-p", "loss_fn.ratio_clip_mx", "0.28"],
     "rlnb run: -p loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?"),
    (["run", NB01, "-p", "loss_fn.ratio_clip_max", "abc"],
     "rlnb run: -p loss_fn.ratio_clip_max: Input should be a valid number"),
    (["run", NB01, "-p", "fast", "3"], "rlnb run: -p fast: 3 is not a bool (true or false) (the "
                                       "default in 01_grpo_step_by_step.ipynb's parameters cell "
                                       "is False)"),
    (["run", NB05, "-p", "ppo.ppo_epochs", "two"],
     "rlnb run: -p ppo.ppo_epochs: Input should be a valid integer"),
    (["sweep", NB01, "-p", "seed", "0,x,2", "-p", "fast", "true", "--root", "sw"],
     "rlnb sweep: -p seed: 'x' is not an int"),
    (["sweep", NB01, "-p", "loss_fn.ratio_clip_max", "0.2,big", "--root", "sw"],
     "rlnb sweep: -p loss_fn.ratio_clip_max: Input should be a valid number"),
    (["launch", "--num-processes", "2", NB01, "-p", "kl_penalty", "abc"],
     "rlnb launch: -p kl_penalty: 'abc' is not a number (the default in "
     "01_grpo_step_by_step.ipynb's parameters cell is 0.01)"),
], ids=["int", "unknown-key", "key-value", "bool", "ppo-key-value", "sweep", "sweep-key",
        "launch"])
def test_values_that_do_not_fit_exit_2_before_a_kernel_starts(tmp_path, env, args, message):
    proc = rlnb(*args, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(message), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr  # no kernel, no progress bar
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no runs/, no sweep root


@pytest.fixture(scope="module")
def swept(tmp_path_factory, env):
    cwd = tmp_path_factory.mktemp("sweep")
    proc = rlnb("sweep", FAKE, *GRID, "--root", "sw", cwd=cwd, env=env, timeout=400)
    return cwd / "sw", proc


@pytest.mark.notebook
@pytest.mark.slow
def test_sweep_runs_every_point_and_reports_the_failure(swept):
    root, proc = swept
    assert proc.returncode == 1, proc.stderr[-3000:]
    # mathjax/: the report.html's local MathJax (rlnb.run.notebooks.mathjax)
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == sorted(
        [*NAMES, "logs", "mathjax"])
    assert sorted(p.name for p in (root / "logs").iterdir()) == sorted(f"{n}.log" for n in NAMES)
    # one at a time (no --jobs): each point starts after the one before ends
    assert re.search(r"\[3/4 done, 1 running, 0 failed\] start  loss_fn.ratio_clip_max=0.28 seed=1\n"
                     r"\[4/4 done, 0 running, 1 failed\] FAILED loss_fn.ratio_clip_max=0.28 seed=1 in "
                     r"[\d.]+ s: cell In \[\d+\] raised RuntimeError: boom", proc.stdout), proc.stdout
    assert "3 of 4 runs ok" in proc.stdout
    assert f"FAILED      {NAMES[3]}: cell In [" in proc.stdout
    record = json.loads((root / "sweep.json").read_text())
    assert [r["name"] for r in record["runs"]] == NAMES  # first key slowest
    assert [r["status"] for r in record["runs"]] == ["ok", "ok", "ok", "failed"]
    assert "RuntimeError: boom" in record["runs"][3]["error"]
    for name in NAMES:  # every run has its notebook, html and the config it was given
        assert (root / name / "notebook.ipynb").is_file() and (root / name / "notebook.html").is_file()
        clip = float(name.split("=")[1].split("__")[0])
        assert yaml.safe_load((root / name / "config.yaml").read_text())["loss_fn"]["ratio_clip_max"] == clip


@pytest.mark.notebook
@pytest.mark.slow
def test_sweep_table_has_parameters_status_and_final_metrics(swept):
    root, _ = swept
    table = sweep_table(root)
    assert list(table["run"]) == NAMES
    assert list(table["status"]) == ["ok", "ok", "ok", "failed"]
    assert list(table["seed"]) == [0, 1, 0, 1]
    assert list(table["loss_fn.ratio_clip_max"]) == [0.2, 0.2, 0.28, 0.28]
    # the fixture logs train/reward = clip * step + 0.01 * seed for steps 0..3
    want = [0.2 * 3 + 0.00, 0.2 * 3 + 0.01, 0.28 * 3 + 0.00, 0.28 * 3 + 0.01]
    assert table["train/reward"].tolist() == pytest.approx(want)
    assert table["validation/accuracy"].tolist() == pytest.approx([0.5, 0.5, 0.58, 0.58])
    assert list(table["steps"]) == [3, 3, 3, 3]
    assert table["error"].iloc[3].startswith("cell In [") and table["error"].iloc[0] == ""
    csv = pd.read_csv(root / "summary.csv")
    assert list(csv["run"]) == NAMES and list(csv["status"]) == list(table["status"])


@pytest.mark.notebook
@pytest.mark.slow
def test_sweep_figures_have_a_trace_per_run_and_seed_means(swept):
    root, _ = swept
    pytest.importorskip("plotly")
    from rlnb.widgets import sweep_figures

    reward, accuracy = sweep_figures(root)
    for fig in (reward, accuracy):
        names = [t.name for t in fig.data]
        assert names[:2] == NAMES[:2] and set(NAMES) <= set(names)
        means = [t for t in fig.data if t.name.startswith("mean over seeds")]
        assert len(means) == 2  # one per ratio_clip_max; the failed run is left out of its mean
    (mean_028,) = [t for t in reward.data if t.name.endswith("ratio_clip_max=0.28")]
    assert list(mean_028.y) == pytest.approx([0.28 * s for s in range(4)])
    dashed = [t.name for t in reward.data if t.line.dash == "dash"]
    assert dashed == [NAMES[3]]


@pytest.mark.notebook
@pytest.mark.slow
def test_sweep_report_renders_offline(swept):
    root, _ = swept
    html = (root / "report.html").read_text()
    for name in NAMES:
        assert name in html
    assert "failed" in html and "boom" in html
    assert "plotly.js v" in html  # the bundle itself, inline
    assert not PLOTLY_CDN.search(html)
    assert html.count("Plotly.newPlot") >= 2
    nb = json.loads((root / "report.ipynb").read_text())
    figures = [o for c in nb["cells"] for o in c.get("outputs", [])
               if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert len(figures) == 2
    titles = [f["data"]["application/vnd.plotly.v1+json"]["layout"]["title"]["text"]
              for f in figures]
    assert titles == ["train/reward", "validation/accuracy"]


@pytest.mark.notebook
@pytest.mark.slow
def test_sweep_report_summarises_each_setting_over_seeds(swept):
    root, _ = swept
    html = (root / "report.html").read_text()
    assert "Per setting" in html and "Differences between settings" in html
    # final train/reward: clip 0.2 ends at 0.60 and 0.61 (seeds 0, 1); clip 0.28's seed 1 failed
    assert "0.605 ± 0.007071 (n=2)" in html and "0.84 ± n/a (n=1)" in html


@pytest.mark.notebook
@pytest.mark.distributed
@pytest.mark.slow
def test_launch_runs_two_ranks(tmp_path, env):
    proc = rlnb("launch", "--num-processes", "2", TRAIN, "-p", "seed", "2", "--run-dir", "out",
                "--no-progress", cwd=tmp_path, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = tmp_path / "out"
    assert "trained 2 steps" in outputs(run_dir / "notebook.ipynb")
    assert "trained 2 steps" in outputs(run_dir / "ranks" / "rank1.ipynb")
    assert (run_dir / "notebook.html").is_file()
    infos = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert sorted(i["rank"] for i in infos) == [0, 1]
    assert all(i["world_size"] == i["num_processes"] == 2 for i in infos)
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["grpo"]["seed"] == 2
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # rank 0 alone writes


@pytest.mark.notebook
@pytest.mark.distributed
@pytest.mark.slow
def test_launch_with_a_failing_rank_exits_1_and_names_it(tmp_path, env):
    proc = rlnb("launch", "--num-processes", "2", TRAIN, "-p", "fail_on_rank", "1",
                "--run-dir", "out", "--no-progress", cwd=tmp_path, env=env, timeout=400)
    assert proc.returncode == 1
    assert "rank 1: cell In [" in proc.stdout and "boom on rank 1" in proc.stdout
    # rank 0 waited in a collective until the launcher ended it; its notebook says so
    assert re.search(r"rank 0: (stopped before the end|wrote no notebook)", proc.stdout)
    assert "boom on rank 1" in outputs(tmp_path / "out" / "ranks" / "rank1.ipynb")
    assert (tmp_path / "out" / "notebook.html").is_file()


# --- the pieces the notebooks use


def test_auto_accelerator_is_none_in_one_process(monkeypatch):
    import rlnb

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert rlnb.auto_accelerator() is None
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert rlnb.auto_accelerator() is None
    assert rlnb.run.experiments.sweep.sweep_table is sweep_table  # reachable after a bare `import rlnb`
