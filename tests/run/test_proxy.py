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
    # the shares weigh each function as the reward did: exact_reward (weight 0) paid nothing
    assert report.weights == {"digits_reward": 1.0, "exact_reward": 0.0}
    assert report.shares == {"digits_reward": 1.0} and report.unrewarded == ["exact_reward"]


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


def test_shares_weigh_each_component_and_leave_out_the_logged_only_ones():
    # the built-in tasks' log: the reward is `correct`; `format` is logged beside it (weight 0).
    # Dividing each mean by the sum of the means said "correct 17 %, format 83 %" here.
    correct = [0.1, 0.15, 0.2, 0.3, 0.35, 0.4]
    fmt = [0.9, 0.85, 0.95, 0.9, 0.97, 0.99]
    records = [{"step": s, "train/reward": c, "train/reward/correct": c, "train/reward/format": f}
               for s, (c, f) in enumerate(zip(correct, fmt), 1)]
    report = proxy_vs_truth(records)
    assert report.weights == {"correct": 1.0, "format": 0.0}
    assert report.shares == {"correct": 1.0} and report.unrewarded == ["format"]
    assert "correct 100%" in report.text() and "not part of the reward collected (weight 0, or 0 in every step): format" in (
        report.text())
    # weights 2 and 1: a pays 2·mean_a of the collected 2·mean_a + mean_b
    a, b = [0.1, 0.2, 0.4, 0.3], [0.5, 0.1, 0.3, 0.6]
    records = [{"step": s, "train/reward": 2 * x + y, "train/reward/a": x, "train/reward/b": y}
               for s, (x, y) in enumerate(zip(a, b), 1)]
    report = proxy_vs_truth(records)
    assert report.weights == {"a": 2.0, "b": 1.0}
    assert report.shares["a"] == pytest.approx(2 * 0.25 / (2 * 0.25 + 0.375))


def test_a_total_that_is_no_weighted_sum_gives_no_shares():
    # reasoning-gym's `reward: correct`: the reward is 1[score >= 1], not a sum of the parts
    score, reward = [0.5, 0.7, 0.6, 0.9], [0.25, 0.5, 0.25, 0.75]
    records = [{"step": s, "train/reward": r, "train/reward/score": x, "train/reward/format": 1.0}
               for s, (x, r) in enumerate(zip(score, reward), 1)]
    report = proxy_vs_truth(records)
    assert report.weights is None and report.shares == {}
    assert "no shares: the log does not show the reward as one weighted sum" in report.text()
    # fewer steps than components cannot tell the weights apart
    assert proxy_vs_truth(records[:1]).weights is None
