"""The signal check: p^G + (1-p)^G by hand, the probe estimate unbiased for it, the report on a
real tiny trainer with scripted rewards, its warning and advice, and that probing changes
nothing the run then trains on."""

from math import comb

import pytest
from tiny_config import TINY

import rlnb
from rlnb.engine.inspection.signal_check import (
    no_signal_estimate,
    no_signal_probability,
    signal_check,
)


def test_the_formula_by_hand():
    assert no_signal_probability(0.5, 4) == 0.125  # 2 * 0.5^4
    assert no_signal_probability(0.05, 4) == pytest.approx(0.05**4 + 0.95**4)  # 0.8145...
    assert no_signal_probability(0.0, 8) == 1.0
    assert no_signal_probability(0.2, 2) == pytest.approx(0.04 + 0.64)


def test_the_estimate_by_hand():
    # 2 of 4 samples right, G=2: pairs that agree C(2,2)+C(2,2) of C(4,2)=6 -> 1/3 (plug-in: 1/2)
    assert no_signal_estimate([2, 2], 2) == pytest.approx(1 / 3)
    assert no_signal_estimate([4], 3) == 1.0  # all four the same
    assert no_signal_estimate([1, 1, 1, 1], 2) == 0.0  # four distinct rewards
    assert no_signal_estimate([1, 1], 4) == 0.125  # G > n: the plug-in 2 * (1/2)^4
    with pytest.raises(ValueError):
        no_signal_estimate([], 2)


@pytest.mark.parametrize(("p", "n", "G"), [(0.3, 16, 4), (0.1, 8, 8), (0.6, 10, 2)])
def test_the_estimate_is_unbiased_for_p_to_the_G(p, n, G):
    # E over k ~ Binomial(n, p) of the estimate equals p^G + (1-p)^G exactly
    expected = sum(comb(n, k) * p**k * (1 - p) ** (n - k) * no_signal_estimate(
        [c for c in (k, n - k) if c], G) for k in range(n + 1))
    assert expected == pytest.approx(no_signal_probability(p, G), rel=1e-12)


def half_right(completions, **kwargs):
    """Right on every second completion: each prompt's p is exactly 1/2 in any probe."""
    return [float(i % 2) for i in range(len(completions))]


def always_wrong(completions, **kwargs):
    return [0.0] * len(completions)


ROWS = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(6) for b in range(6)]


def trainer_with(func, *extra):
    cfg = rlnb.load_config(None, [*TINY, "data.name=dataset", f"data.correct_reward={func.__name__}",
                                  "grpo.val_period=0", *extra], preset="fast")
    return rlnb.GRPOTrainer(cfg, reward_funcs=[func], train_dataset=ROWS)


def test_a_report_on_rewards_right_half_the_time():
    report = signal_check(trainer_with(half_right), num_prompts=3, samples=16)
    assert [r["p"] for r in report.prompts] == [0.5, 0.5, 0.5]
    # 8 right, 8 wrong of 16: (C(8,G) + C(8,G)) / C(16,G)
    for G in (2, 4, 8, 16):
        assert report.expected[G] == pytest.approx(2 * comb(8, G) / comb(16, G))
    assert report.group_size == 4 and not report.warning and report.advice == []
    assert "G=4* 0.08" in report.summary()  # 2*70/1820 = 0.0769
    assert list(report.expected_frame()["G"]) == [2, 4, 8, 16]


def test_a_task_never_solved_warns_and_says_what_would_help():
    report = signal_check(trainer_with(always_wrong), num_prompts=2, samples=4)
    assert report.expected == {2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}
    assert report.warning
    text = report.summary()
    assert "WARNING: about 100% of this run's groups (G=4)" in text
    assert "an easier split" in text and "warm start" in text
    assert "never solved 2 prompts" in text


def test_the_probe_changes_nothing_the_run_trains_on():
    def run(check: bool):
        t = trainer_with(half_right)
        if check:
            signal_check(t, samples=4)
        assert t.consumed_prompts == 0
        return t.step()

    a, b = run(True), run(False)
    assert a.rollout.responses == b.rollout.responses
    assert a["train/loss"] == b["train/loss"]
