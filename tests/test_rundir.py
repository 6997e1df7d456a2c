"""Run plumbing: atomic writes, the run dir (config checks, metrics.jsonl, rollout parquet), loggers."""

import json
import math
import sys

import numpy as np
import pytest
import torch
import yaml

from rlnb.run.atomic import atomic_dir, atomic_write_text
from rlnb.run.loggers import LoggerConfig, TensorBoardLogger, make_loggers, scalar_metrics
from rlnb.run.rundir import RunDir

CFG = {
    "seed": 1,
    "loss_fn": {"ratio_clip_min": 0.2, "ratio_clip_max": 0.28},
    "grpo": {"max_num_steps": 100, "num_generations_per_prompt": 4},
    "checkpointing": {"save_period": 10},
    "logger": {"tensorboard_enabled": False},
}


def _with(cfg, dotted, value):
    cfg = json.loads(json.dumps(cfg))
    *parents, leaf = dotted.split(".")
    node = cfg
    for p in parents:
        node = node[p]
    node[leaf] = value
    return cfg


# --- atomic


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path):
    atomic_write_text(tmp_path / "a.txt", "old")
    atomic_write_text(tmp_path / "a.txt", "new")
    assert (tmp_path / "a.txt").read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_atomic_dir_leaves_no_final_dir_when_the_block_raises(tmp_path):
    final = tmp_path / "step_000001"
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_dir(final) as tmp:
            (tmp / "weights.bin").write_bytes(b"half")
            raise RuntimeError("boom")
    assert not final.exists()
    assert list(tmp_path.iterdir()) == []


def test_atomic_dir_replaces_an_existing_dir_and_keeps_it_on_failure(tmp_path):
    final = tmp_path / "d"
    with atomic_dir(final) as tmp:
        (tmp / "v").write_text("1")
    with pytest.raises(ValueError):
        with atomic_dir(final) as tmp:
            (tmp / "v").write_text("2")
            raise ValueError
    assert (final / "v").read_text() == "1"
    with atomic_dir(final) as tmp:
        (tmp / "w").write_text("3")
    assert sorted(p.name for p in final.iterdir()) == ["w"]  # replaced as a whole, not merged
    assert [p.name for p in tmp_path.iterdir()] == ["d"]  # no trash or temp left


# --- run dir: config


def test_rundir_layout_and_config_roundtrip(tmp_path):
    run = RunDir(tmp_path / "run", config={**CFG, "shape": (2, 3)})
    assert {p.name for p in run.path.iterdir()} == {
        "config.yaml", "metrics.jsonl", "rollouts", "checkpoints"}
    assert yaml.safe_load(run.config_path.read_text())["shape"] == [2, 3]
    RunDir(run.path, config={**CFG, "shape": (2, 3)})  # same config (tuple vs list): reopens


def test_rundir_refuses_a_different_config_without_resume(tmp_path):
    RunDir(tmp_path / "run", config=CFG)
    with pytest.raises(ValueError) as err:
        RunDir(tmp_path / "run", config=_with(CFG, "loss_fn.ratio_clip_max", 0.3))
    msg = str(err.value)
    assert "different config" in msg and "resume=True" in msg and "new dir" in msg
    assert "loss_fn.ratio_clip_max: 0.28 (saved) -> 0.3 (now)" in msg


def test_resume_allows_only_non_numeric_changes_and_lists_the_others(tmp_path):
    RunDir(tmp_path / "run", config=CFG)
    cfg = _with(_with(CFG, "grpo.max_num_steps", 200), "logger.tensorboard_enabled", True)
    cfg = _with(cfg, "checkpointing.save_period", 5)
    run = RunDir(tmp_path / "run", config=cfg, resume=True)
    assert yaml.safe_load(run.config_path.read_text())["grpo"]["max_num_steps"] == 200

    bad = _with(_with(cfg, "seed", 2), "grpo.num_generations_per_prompt", 8)
    bad["loss_fn"]["new_key"] = 1
    with pytest.raises(ValueError) as err:
        RunDir(tmp_path / "run", config=bad, resume=True)
    msg = str(err.value)
    assert "seed: 1 (saved) -> 2 (now)" in msg
    assert "grpo.num_generations_per_prompt: 4 (saved) -> 8 (now)" in msg
    assert "loss_fn.new_key: '<missing>' (saved) -> 1 (now)" in msg
    assert "max_num_steps" not in msg.split("\n", 1)[1]  # resumable keys are not listed


def test_failed_construction_leaves_no_dir(tmp_path):
    with pytest.raises(TypeError, match="'model.dtype'"):
        RunDir(tmp_path / "new", config={"model": {"dtype": torch.float32}})
    assert not (tmp_path / "new").exists()
    with pytest.raises(ValueError, match="cannot resume"):
        RunDir(tmp_path / "missing", config=CFG, resume=True)
    assert not (tmp_path / "missing").exists()


def test_rundir_refuses_a_foreign_non_empty_dir(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not an rlnb run dir"):
        RunDir(tmp_path, config=CFG)
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_new_default_path(tmp_path):
    assert RunDir.new_default_path(tmp_path, "abl") == tmp_path / "abl"
    first = RunDir.new_default_path(tmp_path)
    first.mkdir()
    second = RunDir.new_default_path(tmp_path)
    assert second.parent == tmp_path and second != first


# --- run dir: metrics


def test_metrics_are_appended_with_non_finite_as_null(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    run.log_metrics(1, {"train/loss": torch.tensor(0.5), "train/n": np.int64(3)})
    run.log_metrics(2, {"train/loss": float("nan"), "train/kl": math.inf})
    assert run.read_metrics() == [
        {"step": 1, "train/loss": 0.5, "train/n": 3},
        {"step": 2, "train/loss": None, "train/kl": None},
    ]
    with pytest.raises(TypeError, match="'train/name'"):
        run.log_metrics(3, {"train/name": "x"})


def test_metrics_tolerate_a_truncated_last_line_and_reopening_cuts_it(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    run.log_metrics(1, {"a": 1.0})
    run.log_metrics(2, {"a": 2.0})
    data = run.metrics_path.read_bytes()
    run.metrics_path.write_bytes(data[:-7])  # a crash mid-way through line 2
    assert run.read_metrics() == [{"step": 1, "a": 1.0}]
    resumed = RunDir(run.path, config=CFG, resume=True)
    resumed.log_metrics(2, {"a": 2.5})
    assert resumed.read_metrics() == [{"step": 1, "a": 1.0}, {"step": 2, "a": 2.5}]
    resumed.truncate_metrics(after_step=1)
    assert resumed.read_metrics() == [{"step": 1, "a": 1.0}]


def test_a_corrupt_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    run.metrics_path.write_text('{"step": 1}\nnot json\n{"step": 3}\n')
    with pytest.raises(ValueError, match="metrics.jsonl:2"):
        run.read_metrics()


# --- run dir: rollouts


def test_rollouts_roundtrip_with_list_columns(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    table = {
        "prompt": ["1+1=", "2+2="],
        "reward": torch.tensor([1.0, 0.0]),
        "token_ids": [[5, 6, 7], [8]],                        # ragged per-row lists
        "generation_logprobs": torch.tensor([[-0.5, -1.0], [-2.0, -0.25]], dtype=torch.bfloat16),
        "token_mask": np.array([[1, 1], [1, 0]]),
    }
    path = run.write_rollouts(1, table)
    assert path.name == "step_000001.parquet"
    df = run.read_rollouts(1)
    assert list(df.columns) == list(table)
    assert df["prompt"].tolist() == ["1+1=", "2+2="]
    assert df["reward"].tolist() == [1.0, 0.0]
    assert [list(r) for r in df["token_ids"]] == [[5, 6, 7], [8]]
    assert [list(r) for r in df["generation_logprobs"]] == [[-0.5, -1.0], [-2.0, -0.25]]
    assert [list(r) for r in df["token_mask"]] == [[1, 1], [1, 0]]
    assert run.rollout_steps() == [1]


def test_rollouts_errors_name_the_column(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    with pytest.raises(ValueError, match="different numbers of rows.*'b': 3"):
        run.write_rollouts(1, {"a": [1, 2], "b": [1, 2, 3]})
    with pytest.raises(ValueError, match="'x' has shape"):
        run.write_rollouts(1, {"x": np.zeros((2, 2, 2))})
    with pytest.raises(FileNotFoundError, match="no rollouts for step 7"):
        run.read_rollouts(7)
    assert run.rollout_steps() == []


# --- loggers


def test_scalar_metrics_skips_non_finite_and_non_numeric():
    got = scalar_metrics({"a": 1, "b": float("nan"), "c": "x", "d": torch.tensor(2.0),
                          "e": torch.ones(2), "f": np.float32(0.5), "g": math.inf})
    assert got == {"a": 1.0, "d": 2.0, "f": 0.5}


def test_logger_config_rejects_unknown_keys():
    with pytest.raises(ValueError, match="logger.tensorboard: unknown key"):
        make_loggers({"tensorboard": True}, run_dir=None)
    assert LoggerConfig().wandb == {"project": "rlnb", "name": None}


def test_make_loggers_always_writes_metrics_jsonl(tmp_path, capsys):
    run = RunDir(tmp_path / "run", config=CFG)
    loggers = make_loggers({"print_metrics": True}, run)
    for lg in loggers:
        lg.log({"train/reward": 0.25, "train/loss": float("nan")}, step=3)
        lg.close()
    assert run.read_metrics() == [{"step": 3, "train/reward": 0.25, "train/loss": None}]
    assert "step 3: train/reward=0.25" in capsys.readouterr().out


def test_missing_optional_trackers_raise_a_pip_hint(tmp_path, monkeypatch):
    run = RunDir(tmp_path / "run", config=CFG)
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb -> ImportError
    with pytest.raises(ImportError, match="pip install wandb"):
        make_loggers({"wandb_enabled": True}, run)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    with pytest.raises(ImportError, match="pip install tensorboard"):
        TensorBoardLogger(tmp_path / "tb")


def test_tensorboard_logger_writes_an_event_file(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = RunDir(tmp_path / "run", config=CFG)
    loggers = make_loggers(LoggerConfig(tensorboard_enabled=True), run)
    for step in (1, 2):
        for lg in loggers:
            lg.log({"train/reward": 0.5 * step, "train/bad": float("nan"), "note": "x"}, step)
    for lg in loggers:
        lg.close()
    events = list((run.path / "tensorboard").glob("events.out.tfevents.*"))
    assert len(events) == 1
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert acc.Tags()["scalars"] == ["train/reward"]
    assert [(e.step, e.value) for e in acc.Scalars("train/reward")] == [(1, 0.5), (2, 1.0)]
