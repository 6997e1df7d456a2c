"""Proxy against truth: a run whose reward pays for digits (any digits) rises while its held-out
exact-match accuracy does not, and is flagged; hand-made records where both rise are not."""

import re

import pytest

import rlnb
from rlnb.run.experiments.proxy import proxy_vs_truth

ROWS = [{"prompt": f"{a}+{b}=", "solution": str(a + b)} for a in range(10) for b in range(10)]


def digits_reward(completions, **kwargs):
    """Gameable: the share of digits, right answer or not."""
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def exact_reward(completions, solution, **kwargs):
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


def test_a_reward_that_pays_without_right_answers_is_flagged():
    config = rlnb.load_config(None, [
        "data.name=dataset", "data.correct_reward=exact_reward", "data.num_val=16",
        "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
        "policy.optimizer.lr=3e-2", "grpo.num_prompts_per_step=8"], preset="fast")
    trainer = rlnb.GRPOTrainer(config, reward_funcs=[digits_reward, exact_reward],
                               reward_weights=[1.0, 0.0], train_dataset=ROWS)
    records = []
    for _ in range(30):
        record = {**trainer.step(), "step": trainer.step_count}
        if trainer.step_count % 5 == 0:
            record.update(trainer.validate())
        records.append(record)
    report = proxy_vs_truth(records)
    assert report.reward_gain >= 0.1, report.text()  # the digit share rose
    assert report.truth_gain < report.reward_gain / 2
    assert report.flag and re.search(r"most of it from 'digits_reward'", report.flag)
    assert report.shares["digits_reward"] > 0.9  # exact matches are rare: digits pay


def test_a_reward_that_rises_with_the_held_out_accuracy_is_not_flagged(tmp_path):
    records = [{"step": s, "train/reward": 0.2 + 0.02 * s, "train/reward/correct": 0.2 + 0.02 * s,
                "validation/accuracy": 0.2 + 0.018 * s, "train/mean_gen_tokens_per_sample": 3.0}
               for s in range(1, 31)]
    report = proxy_vs_truth(records)
    assert report.flag is None and report.reward_gain == pytest.approx(0.4)
    assert report.truth_gain == pytest.approx(0.36) and report.length == (3.0, 3.0)
    assert "no sign of the reward rising" in report.text()
    with pytest.raises(ValueError, match="no metrics.jsonl"):
        proxy_vs_truth(tmp_path)
