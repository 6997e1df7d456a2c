"""train_for: a wall-time budget with accuracy checkpoints off the clock, that never change what
training draws."""

import json
import math

import pytest
from tiny_config import TINY, with_rewards

from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config
from rlnb.run.training.session import TrainingRun
from rlnb.run.training.timed import train_for

SMALL = [*TINY, "grpo.val_period=0", "sft.enabled=false"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def trainer():
    return with_rewards(GRPOTrainer(load_config(None, SMALL)))


def test_a_budget_of_zero_trains_one_step_and_measures_before_and_after():
    t = trainer()
    curve = train_for(t, 0.0)
    assert [step for _, step, _ in curve] == [0, 1] and t.step_count == 1
    assert curve[0][0] == 0.0 and curve[1][0] > 0 and all(0 <= a <= 1 for _, _, a in curve)


def test_checkpoints_do_not_change_what_training_draws():
    plain = trainer()
    expected = [m["train/loss"] for m in plain.train(3)]
    t = trainer()
    curve = train_for(t, math.inf, every=1e-9, max_steps=3)  # a checkpoint after every step
    assert [step for _, step, _ in curve] == [0, 1, 2, 3]
    assert [s for s, _, _ in curve] == sorted(s for s, _, _ in curve)
    again = trainer()
    assert [m["train/loss"] for m in again.train(3)] == expected
    for (k, p), q in zip(plain.policy.model.named_parameters(), t.policy.model.parameters()):
        assert p.equal(q), k  # validating between steps left the weights' path unchanged


def test_a_training_run_logs_its_steps(tmp_path):
    run = TrainingRun(None, overrides=[*SMALL, "checkpointing.enabled=false"],
                      run_dir=tmp_path / "run", progress=False, log=lambda *a: None)
    with_rewards(run.trainer)
    curve = train_for(run, math.inf, max_steps=2)
    assert [step for _, step, _ in curve] == [0, 2]
    steps = [json.loads(x)["step"] for x in (tmp_path / "run" / "metrics.jsonl").read_text()
             .splitlines()]
    assert steps == [1, 2]
