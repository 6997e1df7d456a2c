"""`rlnb diff`: two real runs side by side, their differing keys and the comparability warning;
bad input in one line, exit 2."""

import subprocess
import sys

import pytest
from paths import ROOT

from rlnb.run.config.master_config import load_config
from rlnb.run.experiments.run_diff import diff_runs
from rlnb.run.training.session import TrainingRun

QUIET = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false"]


def make_run(path, overrides, steps=2):
    run = TrainingRun(load_config(None, [*QUIET, *overrides], preset="fast"), run_dir=path)
    list(run.steps(steps))
    run.close()
    return path


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    return (make_run(root / "a", []), make_run(root / "b", ["policy.optimizer.lr=1e-3"], 3),
            make_run(root / "c", ["data.name=reverse"]))


def test_two_runs_of_one_task_differ_in_the_key_that_was_changed(runs):
    a, b, _ = runs
    diff = diff_runs(a, b)
    assert [k for k, _, _ in diff.config] == ["policy.optimizer.lr"]
    assert diff.config[0][1:] == (3e-4, 1e-3) and diff.warnings == [] and diff.steps == (2, 3)
    keys = [k for k, _, _ in diff.metrics]
    assert "train/reward" in keys and "funnel/trained" in keys
    steps, values = diff.curves("train/reward")[1]
    assert steps == [1, 2, 3] and len(values) == 3
    assert any(stage == "generation" for stage, _, _ in diff.timing)
    text = diff.text()
    assert "config: 1 keys differ:" in text and "policy.optimizer.lr: 0.0003 -> 0.001" in text


def test_runs_of_different_tasks_are_flagged_not_comparable(runs):
    a, _, c = runs
    diff = diff_runs(a, c)
    assert diff.warnings and diff.warnings[0].startswith("not comparable")
    assert "data.name" in diff.warnings[0]


def test_the_cli_prints_the_diff_and_refuses_a_folder_that_is_no_run(runs, tmp_path):
    a, b, _ = runs

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "rlnb.cli", "diff", *map(str, args)],
                              cwd=ROOT, capture_output=True, text=True)

    ok = cli(a, b)
    assert ok.returncode == 0 and "policy.optimizer.lr" in ok.stdout and ok.stderr == ""
    bad = cli(a, tmp_path)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip() == f"rlnb diff: {tmp_path}: no config.yaml (not an rlnb run directory)"
    (tmp_path / "config.yaml").write_text("a: [unclosed\n")
    bad = cli(a, tmp_path)
    assert bad.returncode == 2 and "config.yaml is not valid YAML at line 2" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    (tmp_path / "config.yaml").write_text("grpo:\n  seed: 1\n  seed: 2\n")  # edited by hand
    bad = cli(a, tmp_path)
    assert bad.returncode == 2 and bad.stderr.strip() == (
        f"rlnb diff: {tmp_path / 'config.yaml'}: key 'grpo.seed' appears twice, at lines 2 and 3 "
        "(YAML would keep only the last; OmegaConf refuses it): remove one")


def test_another_tools_folder_a_foreign_file_and_runs_with_nothing_in_common(runs, tmp_path,
                                                                            capsys):
    from rlnb.cli import main

    a, _, _ = runs

    def refused(*args):
        assert main([*map(str, args)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        return err

    log = tmp_path / "trl_log.jsonl"  # a file, not a folder
    log.write_text('{"step": 1, "reward": 0.5}\n')
    assert refused("diff", a, log) == (f"rlnb diff: {log}: a file, not a run directory "
                                       "(expected the folder holding config.yaml and "
                                       "metrics.jsonl)")
    assert refused("doctor", tmp_path / "gone") == f"rlnb doctor: {tmp_path / 'gone'}: no such directory"
    foreign = tmp_path / "foreign"  # an rlnb config beside a CSV written under the log's name
    foreign.mkdir()
    (foreign / "config.yaml").write_text((a / "config.yaml").read_text())
    (foreign / "metrics.jsonl").write_text("step,reward\n1,0.5\n")
    for command in ("diff", "doctor"):
        args = (a, foreign) if command == "diff" else (foreign,)
        assert refused(command, *args) == (f"rlnb {command}: {foreign / 'metrics.jsonl'}:1 is not "
                                           "valid JSON (Expecting value: line 1 column 1 (char 0))")
    (foreign / "metrics.jsonl").write_text('{"step": 1, "loss/dpo": 0.7}\n')
    diff = diff_runs(a, foreign)
    assert diff.warnings == ["nothing in common: the two runs log no metric under the same name "
                             "(different loops or tools), so there is nothing to set side by side"]
