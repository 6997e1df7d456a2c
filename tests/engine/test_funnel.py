"""The sample funnel: where a step's rows went, counted by hand on a small batch, then on a real
step and read back from a run directory."""

import pytest
import torch

from rlnb.engine.trainers.funnel import funnel_lines, sample_funnel


def test_the_funnel_counts_a_hand_made_batch():
    group = torch.tensor([0, 0, 1, 1, 2, 2])
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0])  # only group 0 has signal
    truncated = torch.tensor([False, True, False, False, False, False])
    token_mask = torch.zeros(6, 5)
    token_mask[:, 2:] = 1  # 3 generated tokens a row
    sample_mask = torch.tensor([1.0, 1, 1, 1, 1, 0])  # the last row filtered
    advantages = torch.zeros(6, 5)
    advantages[0, 2:] = 0.7
    advantages[1, 2:] = -0.7
    advantages[1, 4] = 0.0  # one token of row 1 carries nothing
    fmt = torch.tensor([1.0, 0, 1, 1, 0, 1])
    got = sample_funnel(group, rewards, truncated, token_mask, sample_mask, advantages, fmt)
    assert got == {"funnel/generated": 6.0, "funnel/truncated": 1.0, "funnel/no_signal": 4.0,
                   "funnel/filtered": 1.0, "funnel/trained": 2.0,
                   "funnel/generated_tokens": 18.0, "funnel/trained_tokens": 5.0,
                   "funnel/format_failed": 2.0}
    lines = funnel_lines(got)
    assert lines[0].split() == ["generated:", "6", "rows", "(100.0%)"]
    assert "5 of 18 generated carried gradient" in lines[-1]


def test_a_step_without_signal_says_why_its_loss_is_zero():
    record = {"funnel/generated": 16.0, "funnel/no_signal": 16.0, "funnel/filtered": 0.0,
              "funnel/trained": 0.0}
    assert funnel_lines(record)[-1] == "no row carried gradient: every group had equal rewards"
    record["funnel/no_signal"] = 8.0
    assert funnel_lines(record)[-1].endswith("the filters removed every row with signal")


def test_a_real_step_logs_the_funnel_and_the_run_directory_prints_it(tmp_path):
    from rlnb.run.config.master_config import load_config
    from rlnb.run.training.funnel import step_funnel
    from rlnb.run.training.session import TrainingRun

    over = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false"]
    run = TrainingRun(load_config(None, over, preset="fast"), run_dir=tmp_path / "run")
    metrics = list(run.steps(2))[-1]
    run.close()
    # every row is counted once: trained rows had signal and were kept
    assert metrics["funnel/generated"] == 16 and metrics["funnel/trained"] <= (
        16 - metrics["funnel/no_signal"] - metrics["funnel/filtered"] + 1e-9)
    records = [r for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if r]
    assert len(records) == 2
    text = step_funnel(tmp_path / "run")
    assert text.startswith("step 2:") and "generated:     16 rows (100.0%)" in text
    assert step_funnel(tmp_path / "run", step=1).startswith("step 1:")
    with pytest.raises(ValueError, match=r"metrics.jsonl: no step 7 \(logged: 1 to 2\)"):
        step_funnel(tmp_path / "run", step=7)
    with pytest.raises(ValueError, match="no metrics.jsonl"):
        step_funnel(tmp_path)
