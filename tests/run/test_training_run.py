"""Runs on disk: rlnb train, run directories, rollouts, checkpoints and exact resume."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import yaml
from tiny_config import TINY

from rlnb.run.training.session import TrainingRun

SMALL = [
    *TINY, "grpo.val_period=2", "grpo.max_num_steps=4",
    "sft.max_steps=20", "sft.stop_at_accuracy=null", "checkpointing.save_period=2",
    "loss_fn.reference_policy_kl_penalty=0.05",
]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def comparable(rows):
    return [{k: v for k, v in r.items() if not k.startswith(("timing/", "memory/"))} for r in rows]


@pytest.mark.smoke
def test_run_directory_holds_config_metrics_rollouts_and_checkpoints(tmp_path):
    run = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "run", progress=False, log=lambda *a: None)
    summary = run.train()
    d = tmp_path / "run"
    assert summary["steps"] == 4 and summary["accuracy_before"] is not None
    assert (d / "config.yaml").exists()
    metrics = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1, 2, 3, 4]
    assert "validation/accuracy" in metrics[0] and "train/loss" in metrics[1]
    # one chunk, sealed when train() ended: every step in one file with a step column
    assert [p.name for p in (d / "rollouts").iterdir()] == ["steps_000001.parquet"]
    frame = run.run_dir.read_rollouts(3)
    assert len(frame) == 16
    every = run.run_dir.read_all_rollouts()
    assert every["step"].tolist() == [s for s in (1, 2, 3, 4) for _ in range(16)]
    assert every[every["step"] == 3]["reward"].tolist() == frame["reward"].tolist()
    for col in ("input_ids", "token_mask", "advantages", "generation_logprobs", "prev_logprobs",
                "reference_logprobs", "reward"):
        assert col in frame.columns, col
    assert len(frame["input_ids"][0]) == len(frame["advantages"][0])
    ckpts = sorted(p.name for p in (d / "checkpoints").iterdir())
    assert ckpts == ["step_000002", "step_000004"]
    state = json.loads((d / "checkpoints" / "step_000004" / "trainer_state.json").read_text())
    assert state["current_step"] == 4 and state["data_position"]["consumed_prompts"] == 16
    trained = sum(m["train/global_valid_toks"] for m in metrics if "train/global_valid_toks" in m)
    assert state["total_valid_tokens"] == int(trained) > 0


def test_resume_repeats_the_uninterrupted_run_exactly(tmp_path):
    full = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "full", progress=False, log=lambda *a: None)
    full.train()
    first = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "cut", progress=False, log=lambda *a: None)
    list(first.steps(3))  # step 3 logged after checkpoint 2, then stopped (as if killed)
    assert first.run_dir.rollout_steps() == [1, 2, 3]
    resumed = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "cut", resume=True, progress=False,
                          log=lambda *a: None)
    assert resumed.trainer.step_count == 2
    assert resumed.run_dir.rollout_steps() == [1, 2]  # step 3 dropped with its metrics
    resumed.train()
    a = comparable(full.run_dir.read_metrics())
    b = comparable(resumed.run_dir.read_metrics())
    assert [m["step"] for m in b] == [0, 1, 2, 3, 4]
    assert a == b  # steps 3-4 after the resume match the uninterrupted run, to the bit
    x, y = full.run_dir.read_all_rollouts(), resumed.run_dir.read_all_rollouts()
    assert y["step"].tolist() == x["step"].tolist()  # each step once
    for col in ("reward", "input_ids", "advantages"):
        assert [list(np.atleast_1d(v)) for v in x[col]] == [list(np.atleast_1d(v)) for v in y[col]]


def test_rollouts_every_and_a_ctrl_c_seal_the_rollouts_kept(tmp_path):
    """logger.rollouts_every=3 keeps steps 1 and 3; Ctrl-C during step 4 still leaves them in
    a sealed Parquet chunk."""
    run = TrainingRun(None, overrides=[*SMALL, "logger.rollouts_every=3"], run_dir=tmp_path / "run",
                      progress=False, log=lambda *a: None)
    score = run.trainer.task.score

    def interrupted(*args, **kwargs):  # Ctrl-C while step 4 scores its rollout
        if run.trainer.step_count == 3:
            raise KeyboardInterrupt
        return score(*args, **kwargs)

    run.trainer.task.score = interrupted
    with pytest.raises(KeyboardInterrupt):
        run.train()
    assert [m["step"] for m in run.run_dir.read_metrics()] == [0, 1, 2, 3]
    assert [p.name for p in (tmp_path / "run" / "rollouts").iterdir()] == ["steps_000001.parquet"]
    assert run.run_dir.read_all_rollouts(columns=["reward"])["step"].tolist() == [1] * 16 + [3] * 16


def test_resume_with_a_different_config_is_refused(tmp_path):
    TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "r", progress=False, log=lambda *a: None).train(2)
    with pytest.raises(ValueError, match=r"loss_fn\.ratio_clip_max"):
        TrainingRun(None, overrides=SMALL + ["loss_fn.ratio_clip_max=0.3"], run_dir=tmp_path / "r",
                    resume=True, progress=False, log=lambda *a: None)
    with pytest.raises(ValueError, match="not a run directory"):
        TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "nothing", resume=True, progress=False)


def test_a_run_dir_saved_when_data_held_every_tasks_keys_resumes(tmp_path):
    """An older rlnb's config.yaml held every task's keys in data (at their defaults where the
    task did not read them): the run resumes from it, and the record is rewritten as read."""
    quiet = {"progress": False, "log": lambda *a: None}
    TrainingRun(None, overrides=[*SMALL, "sft.enabled=false"], run_dir=tmp_path / "r",
                **quiet).train(2)
    path = tmp_path / "r" / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    assert "min_len" not in saved["data"]  # written now: the task's own settings only
    old = {"max_filler": 4, "min_len": 3, "max_len": 6, "dataset_name": None,
           "dataset_config": None, "path": None, "split": "train", "val_split": None,
           "prompt_key": "question", "answer_key": "answer", "val_fraction": None}
    path.write_text(yaml.safe_dump({**saved, "data": {**old, **saved["data"]}}))
    resumed = TrainingRun(None, run_dir=tmp_path / "r", resume=True, **quiet)
    assert resumed.trainer.step_count == 2 and resumed.config.data.max_operand == 50
    assert [m.step for m in resumed.steps(1)] == [3]
    assert yaml.safe_load(path.read_text())["data"] == saved["data"]


def test_failed_start_leaves_no_run_directory(tmp_path):
    with pytest.raises(ValueError, match="policy.model_name"):
        TrainingRun(None, overrides=[f"policy.model_name={tmp_path / 'missing'}"],
                    run_dir=tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_rlnb_train_command_prints_a_summary(tmp_path):
    cmd = [sys.executable, "-m", "rlnb.cli", "train", *SMALL, "--steps", "2", "--no-progress",
           "--run-dir", str(tmp_path / "cli")]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "held-out accuracy" in out.stdout and str(tmp_path / "cli") in out.stdout
    bad = subprocess.run([sys.executable, "-m", "rlnb.cli", "train", "loss_fn.ratio_clip_mx=1",
                          "--run-dir", str(tmp_path / "bad")], capture_output=True, text=True,
                         cwd=tmp_path)
    assert bad.returncode == 2 and "did you mean 'ratio_clip_max'" in bad.stderr
    assert not (tmp_path / "bad").exists()


# The default config (configs/tiny.yaml: 16 prompts x 16 responses, validation on, the default
# log-prob reuse), with a short warm start: a run cut at `stop` and resumed repeats the
# uninterrupted run bit for bit, whether validation falls on the stop step or not.
DEFAULT = ["sft.max_steps=20", "sft.stop_at_accuracy=null", "grpo.max_num_steps=5",
           "grpo.max_val_samples=32"]


@pytest.mark.parametrize(("val_period", "save_period", "stop"), [
    (3, 3, 3),  # validation and a checkpoint on the stop step
    (2, 1, 3),  # validation not on the stop step (the cut run validates at its end), and a
])              # checkpoint every step
def test_resume_matrix_on_the_default_config(tmp_path, val_period, save_period, stop):
    over = [*DEFAULT, f"grpo.val_period={val_period}", f"checkpointing.save_period={save_period}"]
    quiet = {"progress": False, "log": lambda *a: None}
    full = TrainingRun(None, overrides=over, run_dir=tmp_path / "full", **quiet)
    full.train()
    cut = TrainingRun(None, overrides=over, run_dir=tmp_path / "cut", **quiet)
    cut.train(stop)
    resumed = TrainingRun(None, run_dir=tmp_path / "cut", resume=True, **quiet)  # its own config
    assert resumed.trainer.step_count == stop
    resumed.train()
    a, b = comparable(full.run_dir.read_metrics()), comparable(resumed.run_dir.read_metrics())
    a_after = [m for m in a if m["step"] > stop]
    b_after = [m for m in b if m["step"] > stop]
    assert [m["step"] for m in b_after] == list(range(stop + 1, 6))
    assert a_after == b_after  # training and validation metrics, to the bit
    for p, q in zip(full.trainer.policy.model.parameters(),
                    resumed.trainer.policy.model.parameters()):
        assert torch.equal(p, q)


def test_warm_start_cache_flag_and_cluster_size_are_honoured(tmp_path):
    quiet = {"progress": False, "log": lambda *a: None}
    TrainingRun(None, overrides=[*SMALL, "sft.cache=false"], run_dir=tmp_path / "a", **quiet)
    assert not (tmp_path / "cache" / "warm_start").exists()  # sft.cache=false: nothing cached
    run = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "b", **quiet)
    assert len(list((tmp_path / "cache" / "warm_start").iterdir())) == 1
    assert "warm start ran 20 SFT steps" in repr(run)
    again = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "c", **quiet)
    assert "warm start loaded from cache" in repr(again)
    with pytest.raises(ValueError, match="cluster.num_processes=2, but 1"):
        TrainingRun(None, overrides=[*SMALL, "cluster.num_processes=2"], run_dir=tmp_path / "d",
                    **quiet)


def test_verify_reports_bit_exact_then_the_first_difference(tmp_path, capsys):
    import pandas as pd

    from rlnb.cli import main
    from rlnb.run.training.verify import verify_run

    quiet = {"progress": False, "log": lambda *a: None}
    TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "run", **quiet).train()
    report = verify_run(tmp_path / "run", log=lambda *a: None)  # from checkpoint 2: steps 3, 4
    assert report.exact and report.steps == [3, 4] and report.weights_checked, report
    assert [r["metrics"] for r in report.rows] == ["same", "same"]
    assert main(["verify", str(tmp_path / "run")]) == 0
    assert "bit-exact" in capsys.readouterr().out
    # made to differ: one logged number of step 4, off by 1e-7
    path = tmp_path / "run" / "metrics.jsonl"
    logged = path.read_text()
    rows = [json.loads(x) for x in path.read_text().splitlines()]
    rows[-1]["train/loss"] += 1e-7
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = verify_run(tmp_path / "run", log=lambda *a: None)
    assert not report.exact and report.first_difference.startswith("step 4, train/loss")
    assert main(["verify", str(tmp_path / "run")]) == 1
    assert "DIFFERS: step 4, train/loss" in capsys.readouterr().out
    # the metrics restored, one logged reward of step 4 changed in its chunk
    path.write_text(logged)
    chunk = tmp_path / "run" / "rollouts" / "steps_000001.parquet"
    frame = pd.read_parquet(chunk)
    frame.loc[frame.index[frame["step"] == 4][0], "reward"] += 1.0
    frame.to_parquet(chunk, index=False)
    report = verify_run(tmp_path / "run", log=lambda *a: None)
    assert report.first_difference == "step 4, rollouts: reward differs", report
    assert [r["rollouts"] for r in report.rows] == ["same", "reward differs"]


def test_the_run_records_which_class_ran_under_each_name(tmp_path):
    """parts.json names the class behind each registered name the config uses; a resume under a
    part replaced on purpose (register_*(..., replace=True)) says which changed, and records it."""
    from rlnb.algorithms.advantages import GRPOAdvantageEstimator
    from rlnb.algorithms.estimators import register_estimator

    lines = []
    run = TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "run", progress=False,
                      log=lines.append)
    list(run.steps(2))
    parts = json.loads((tmp_path / "run" / "parts.json").read_text())
    assert parts == {
        "algorithm=grpo": "rlnb.engine.trainers.grpo.GRPOTrainer",
        "grpo.adv_estimator.name=grpo": "rlnb.algorithms.advantages.GRPOAdvantageEstimator",
        "data.name=addition": "rlnb.engine.environments.generated.AdditionTask",
        "policy.generation.backend=hf": "rlnb.engine.models.hf_backend.HFGenerationBackend",
    }

    class Replacement(GRPOAdvantageEstimator):
        pass

    register_estimator("grpo", Replacement, replace=True)
    try:
        lines.clear()
        TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "run", resume=True, progress=False,
                    log=lines.append)
    finally:
        register_estimator("grpo", GRPOAdvantageEstimator, replace=True)
    changed = [x for x in lines if x.startswith("parts.json:")]
    assert changed == [
        "parts.json: the run now uses other classes under the same names: "
        "grpo.adv_estimator.name=grpo: rlnb.algorithms.advantages.GRPOAdvantageEstimator -> "
        f"{__name__}.{Replacement.__qualname__}"], lines
    recorded = json.loads((tmp_path / "run" / "parts.json").read_text())
    assert recorded["grpo.adv_estimator.name=grpo"].endswith("Replacement")
