"""Run plumbing: atomic writes, the run dir (config checks, metrics.jsonl, chunked rollouts), loggers."""

import json
import math
import sys

import numpy as np
import pytest
import torch
import yaml

from rlnb.run.store.atomic import atomic_dir, atomic_write_text
from rlnb.run.store.loggers import LoggerConfig, TensorBoardLogger, make_loggers, scalar_metrics
from rlnb.run.store.rundir import RunDir, read_run_rollouts

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
    assert path.name == "_steps_000001.arrows"  # the chunk in progress

    def check(df):
        assert list(df.columns) == list(table)
        assert df["prompt"].tolist() == ["1+1=", "2+2="]
        assert df["reward"].tolist() == [1.0, 0.0]
        assert [list(r) for r in df["token_ids"]] == [[5, 6, 7], [8]]
        assert [list(r) for r in df["generation_logprobs"]] == [[-0.5, -1.0], [-2.0, -0.25]]
        assert [list(r) for r in df["token_mask"]] == [[1, 1], [1, 0]]

    check(run.read_rollouts(1))
    assert run.rollout_steps() == [1]
    run.seal_rollouts()
    assert [p.name for p in run.rollouts_dir.iterdir()] == ["steps_000001.parquet"]
    assert run.rollouts_path(1).name == "steps_000001.parquet"
    check(run.read_rollouts(1))
    frame = run.read_all_rollouts()
    assert list(frame.columns) == ["step", *table] and frame["step"].tolist() == [1, 1]


def test_rollouts_errors_name_the_column(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    with pytest.raises(ValueError, match="different numbers of rows.*'b': 3"):
        run.write_rollouts(1, {"a": [1, 2], "b": [1, 2, 3]})
    with pytest.raises(ValueError, match="'x' has shape"):
        run.write_rollouts(1, {"x": np.zeros((2, 2, 2))})
    with pytest.raises(ValueError, match="must not contain a 'step' column"):
        run.write_rollouts(1, {"step": [1, 2]})
    with pytest.raises(FileNotFoundError, match="no rollouts for step 7"):
        run.read_rollouts(7)
    assert run.rollout_steps() == []
    run.write_rollouts(2, {"a": [1]})
    with pytest.raises(ValueError, match="step 2 is already written; steps must increase"):
        run.write_rollouts(2, {"a": [1]})
    assert run.rollout_steps() == [2]


def step_table(step: int) -> dict:
    """Three rows whose every value says which step and row they are."""
    return {"prompt": [f"{step}+{i}=" for i in range(3)],
            "reward": [step + i / 10 for i in range(3)],
            "token_ids": [[step] * (i + 1) for i in range(3)]}


def assert_step(frame, step: int) -> None:
    want = step_table(step)
    assert frame["prompt"].tolist() == want["prompt"]
    assert frame["reward"].tolist() == want["reward"]
    assert [list(r) for r in frame["token_ids"]] == want["token_ids"]


def names(run: RunDir) -> list[str]:
    return sorted(p.name for p in run.rollouts_dir.iterdir())


def test_rollouts_are_chunked_and_every_step_reads_back(tmp_path):
    import pyarrow.parquet as pq

    run = RunDir(tmp_path / "run", config=CFG, rollout_chunk_steps=50)
    for step in range(1, 121):
        run.write_rollouts(step, step_table(step))
    # two chunks of 50 sealed, steps 101-120 in progress
    assert names(run) == ["_steps_000101.arrows", "steps_000001.parquet", "steps_000051.parquet"]
    for step in range(121, 251):
        run.write_rollouts(step, step_table(step))
    assert names(run) == [f"steps_{first:06d}.parquet" for first in (1, 51, 101, 151, 201)]
    chunk = pq.ParquetFile(run.rollouts_dir / "steps_000051.parquet")
    assert chunk.num_row_groups == 50 and chunk.metadata.num_rows == 150  # a row group per step
    assert run.rollout_steps() == list(range(1, 251))
    for step in range(1, 251):
        assert_step(run.read_rollouts(step), step)
    frame = run.read_all_rollouts(first_step=49, last_step=52)
    assert frame["step"].tolist() == [49] * 3 + [50] * 3 + [51] * 3 + [52] * 3
    assert frame["reward"].tolist() == [s + i / 10 for s in (49, 50, 51, 52) for i in range(3)]
    assert len(read_run_rollouts(run.path)) == 750
    only = read_run_rollouts(run.path, 250, columns=["reward"])
    assert list(only.columns) == ["step", "reward"] and only["reward"].tolist() == [250, 250.1, 250.2]
    with pytest.raises(ValueError, match="no rollout column 'rewards'.*'reward'"):
        run.read_all_rollouts(columns=["rewards"])


def test_a_stopped_run_continues_its_chunk_and_resume_truncation_cuts_chunks(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG, rollout_chunk_steps=4)
    for step in range(1, 4):
        run.write_rollouts(step, step_table(step))
    run.seal_rollouts()  # a run that stops seals its short chunk
    assert names(run) == ["steps_000001.parquet"]
    again = RunDir(run.path, config=CFG, rollout_chunk_steps=4)  # the run continues
    for step in range(4, 11):
        again.write_rollouts(step, step_table(step))
    # the short chunk was taken back: 1-4 and 5-8 sealed, 9-10 in progress
    assert names(again) == ["_steps_000009.arrows", "steps_000001.parquet", "steps_000005.parquet"]
    again.truncate_rollouts(after_step=6)  # resuming from checkpoint 6
    assert again.rollout_steps() == [1, 2, 3, 4, 5, 6]
    assert names(again) == ["steps_000001.parquet", "steps_000005.parquet"]
    for step in (7, 8, 9):  # the resumed run logs 7.. once, into the cut chunk
        again.write_rollouts(step, step_table(step))
    assert names(again) == ["_steps_000009.arrows", "steps_000001.parquet", "steps_000005.parquet"]
    again.truncate_rollouts(after_step=2)
    assert names(again) == ["steps_000001.parquet"] and again.rollout_steps() == [1, 2]
    for step in range(3, 6):
        again.write_rollouts(step, step_table(step))
    assert again.rollout_steps() == [1, 2, 3, 4, 5]
    again.truncate_rollouts(after_step=4)  # the chunk in progress (5) is cut
    assert again.rollout_steps() == [1, 2, 3, 4]
    for step in range(1, 5):
        assert_step(again.read_rollouts(step), step)


def test_a_column_change_starts_a_new_chunk_and_a_castable_type_does_not(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    run.write_rollouts(1, {"reward": [1.5, 0.5]})
    run.write_rollouts(2, {"reward": [1, 0]})  # ints into the float column: same chunk
    run.write_rollouts(3, {"reward": [2.0, 0.0], "extra": ["a", "b"]})  # a column more
    run.seal_rollouts()
    assert names(run) == ["steps_000001.parquet", "steps_000003.parquet"]
    frame = run.read_all_rollouts()
    assert frame["reward"].tolist() == [1.5, 0.5, 1.0, 0.0, 2.0, 0.0]
    assert frame["extra"].isna().tolist() == [True] * 4 + [False] * 2
    assert frame["extra"].tolist()[4:] == ["a", "b"]


def write_per_step_files(run_dir, steps) -> None:
    """What runs written before chunking hold: rollouts/step_XXXXXX.parquet, no step column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    for step in steps:
        pq.write_table(pa.table(step_table(step)),
                       run_dir / "rollouts" / f"step_{step:06d}.parquet")


def test_older_runs_per_step_files_are_still_read_and_resumed(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    write_per_step_files(run.path, [1, 2, 3])
    assert run.rollout_steps() == [1, 2, 3]
    assert_step(run.read_rollouts(2), 2)
    frame = read_run_rollouts(run.path)
    assert frame["step"].tolist() == [1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert frame["prompt"].tolist()[3:6] == step_table(2)["prompt"]
    run.truncate_rollouts(after_step=2)  # an older run resumed from checkpoint 2
    run.write_rollouts(3, step_table(3))
    run.write_rollouts(4, step_table(4))
    run.seal_rollouts()
    assert names(run) == ["step_000001.parquet", "step_000002.parquet", "steps_000003.parquet"]
    assert run.rollout_steps() == [1, 2, 3, 4]
    assert read_run_rollouts(run.path)["step"].tolist() == [s for s in (1, 2, 3, 4) for _ in "abc"]
    with pytest.raises(ValueError, match="not a run directory"):
        read_run_rollouts(tmp_path / "nothing")


def test_a_torn_last_batch_is_dropped_and_written_over(tmp_path):
    run = RunDir(tmp_path / "run", config=CFG)
    for step in (1, 2):
        run.write_rollouts(step, step_table(step))
    stream = run.rollouts_path(2)
    whole = stream.stat().st_size
    run.write_rollouts(3, step_table(3))
    torn = stream.read_bytes()
    for cut in (whole + 1, (whole + len(torn)) // 2, len(torn) - 1):  # a kill mid-write of step 3
        stream.write_bytes(torn[:cut])
        reader = RunDir(run.path, config=CFG)
        assert reader.rollout_steps() == [1, 2]
        reader.write_rollouts(3, step_table(4))  # the next writer cuts the torn bytes first
        assert reader.rollout_steps() == [1, 2, 3]
        assert_step(reader.read_rollouts(2), 2)
        assert_step(reader.read_rollouts(3), 4)


def killed_table(step: int) -> dict:
    """Rollouts large enough (64 rows of 300 tokens) that a kill often lands mid-write."""
    return {"prompt": [f"{step}+{i}=" for i in range(64)],
            "reward": [step + i / 100 for i in range(64)],
            "token_ids": [[step, i, *range(300)] for i in range(64)]}


WRITER = """
import sys
from rlnb.run.store.rundir import RunDir, read_run_rollouts

run = RunDir(sys.argv[1], config={"seed": 1}, rollout_chunk_steps=4)
start = max(run.rollout_steps(), default=0) + 1
for step in range(start, start + 100_000):
    run.write_rollouts(step, killed_table(step))
    print(step, flush=True)
"""


def test_a_killed_writer_loses_at_most_the_step_in_progress(tmp_path):
    """A real process writing rollouts is SIGKILLed three times; each time every step it
    reported as written reads back exactly, the sealed chunks are intact, and the next writer
    continues where it stopped."""
    import inspect
    import os
    import re
    import signal
    import subprocess
    import time

    import pyarrow.parquet as pq

    from rlnb.run.store.rollout_store import RolloutStore

    code = inspect.getsource(killed_table) + WRITER
    folder = tmp_path / "run"
    written = 0
    # a kill at a different place in a chunk of 4 each time, and a little later into the step
    # each time (mid-conversion, mid-write, mid-seal: where it lands is not checked)
    for target, delay in ((9, 0.0), (22, 0.002), (37, 0.005)):
        proc = subprocess.Popen([sys.executable, "-c", code, str(folder)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in proc.stdout:
            written = int(line)
            if written >= target:
                break
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.stderr.read() == ""
        proc.stdout.close()
        proc.stderr.close()
        steps = RolloutStore(folder / "rollouts").steps()  # a reader that writes nothing
        assert steps == list(range(1, len(steps) + 1)) and len(steps) >= written
        for path in (folder / "rollouts").glob("steps_*.parquet"):  # sealed: whole chunks
            first = int(re.fullmatch(r"steps_(\d+)\.parquet", path.name)[1])
            got = sorted(set(pq.read_table(path, columns=["step"])["step"].to_pylist()))
            assert got == list(range(first, first + 4))
        frame = read_run_rollouts(folder)
        for step in steps:
            rows = frame[frame["step"] == step]
            assert rows["reward"].tolist() == killed_table(step)["reward"]
            assert [list(r) for r in rows["token_ids"]] == killed_table(step)["token_ids"]
        assert len(list((folder / "rollouts").glob("_steps_*.arrows"))) <= 1


def test_rollouts_every_keeps_step_1_and_every_kth_step():
    every3 = LoggerConfig(rollouts_every=3)
    assert [s for s in range(1, 11) if every3.keeps_rollouts(s)] == [1, 3, 6, 9]
    assert [s for s in range(1, 5) if LoggerConfig().keeps_rollouts(s)] == [1, 2, 3, 4]
    off = LoggerConfig(rollouts_every=3, log_rollouts=False)
    assert not any(off.keeps_rollouts(s) for s in range(1, 11))


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
