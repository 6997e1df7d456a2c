"""rlnb.run.experiments.stats: t quantiles against printed tables, Welch/paired/bootstrap intervals and the
power of a paired design (detectable effect, seeds needed) by hand."""

import math

import numpy as np
import pytest

from rlnb.run.experiments.stats import (
    difference_ci,
    mean_sd,
    minimal_detectable_effect,
    seeds_needed,
    t_quantile,
)

# Student t quantiles from a printed table (two-sided 95 % and 99 %, one-sided 90 %)
T_TABLE = [
    (0.975, 1, 12.7062), (0.975, 2, 4.3027), (0.975, 3, 3.1824), (0.975, 4, 2.7764),
    (0.975, 5, 2.5706), (0.975, 10, 2.2281), (0.975, 30, 2.0423), (0.975, 120, 1.9799),
    (0.995, 2, 9.9248), (0.995, 5, 4.0321), (0.995, 30, 2.7500), (0.90, 1, 3.0777),
    (0.90, 8, 1.3968),
]


@pytest.mark.parametrize(("p", "df", "want"), T_TABLE)
def test_t_quantile_matches_the_printed_table(p, df, want):
    assert t_quantile(p, df) == pytest.approx(want, abs=1e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-want, abs=1e-4)  # symmetric


def test_t_quantile_exact_cases_and_limits():
    # df=1 is Cauchy: the quantile is tan(pi (p - 1/2)); df=2 has a closed form too
    for p in (0.6, 0.9, 0.975, 0.999):
        assert t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-7)
        a = 4 * p * (1 - p)
        assert t_quantile(p, 2) == pytest.approx((2 * p - 1) * math.sqrt(2 / a), rel=1e-7)
    assert t_quantile(0.975, math.inf) == pytest.approx(1.959964, abs=1e-6)
    assert t_quantile(0.975, 1e6) == pytest.approx(1.959966, abs=1e-5)
    assert t_quantile(0.5, 3) == 0.0
    # fractional degrees of freedom (Welch) lie between their integer neighbours
    assert t_quantile(0.975, 4) < t_quantile(0.975, 3.5) < t_quantile(0.975, 3)
    for bad in [(0.0, 3), (1.0, 3), (0.5, 0), (0.9, -1)]:
        with pytest.raises(ValueError):
            t_quantile(*bad)


def test_mean_sd_is_the_sample_sd_and_drops_nans():
    s = mean_sd([0.61, 0.58, 0.64, float("nan")])
    assert s.n == 3 and s.mean == pytest.approx(0.61)
    assert s.sd == pytest.approx(0.03)  # sqrt(((0)^2 + 0.03^2 + 0.03^2) / 2)
    assert str(s) == "0.61 ± 0.03 (n=3)"
    one = mean_sd([2.0])
    assert one.n == 1 and one.mean == 2.0 and math.isnan(one.sd) and str(one) == "2 ± n/a (n=1)"
    assert mean_sd([]).n == 0 and math.isnan(mean_sd([]).mean)


def test_welch_interval_by_hand():
    a, b = [0.61, 0.58, 0.64], [0.52, 0.55, 0.50, 0.47]
    ci = difference_ci(a, b)
    va, vb = np.var(a, ddof=1) / 3, np.var(b, ddof=1) / 4
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 3)
    assert ci.df == pytest.approx(df) and 4 < df < 5  # Welch-Satterthwaite, not na + nb - 2 = 5
    half = t_quantile(0.975, df) * math.sqrt(va + vb)
    assert ci.estimate == pytest.approx(0.61 - 0.51)
    assert (ci.low, ci.high) == pytest.approx((0.1 - half, 0.1 + half))
    assert ci.method == "welch t" and ci.excludes_zero
    # a wider confidence gives a wider interval around the same estimate
    wide = difference_ci(a, b, confidence=0.99)
    assert wide.low < ci.low and wide.high > ci.high and wide.estimate == ci.estimate


def test_equal_variance_welch_reduces_to_the_pooled_t():
    a, b = [1.0, 2.0, 3.0], [2.0, 3.0, 4.0]  # same sd, same n: df = 4, se = sqrt(2/3)
    ci = difference_ci(a, b)
    assert ci.df == pytest.approx(4.0)
    assert ci.high - ci.estimate == pytest.approx(2.7764 * math.sqrt(2 / 3), abs=1e-4)


def test_paired_interval_uses_the_per_seed_differences():
    a, b = [0.70, 0.62, 0.81], [0.65, 0.58, 0.74]  # the seed effect is shared, the gap steady
    paired, unpaired = difference_ci(a, b, paired=True), difference_ci(a, b)
    d = np.subtract(a, b)
    half = 4.3027 * d.std(ddof=1) / math.sqrt(3)
    assert paired.df == 2 and paired.estimate == pytest.approx(d.mean())
    assert (paired.low, paired.high) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-4)
    assert paired.excludes_zero and not unpaired.excludes_zero  # pairing removed the seed noise
    with pytest.raises(ValueError, match="as many values"):
        difference_ci([1, 2, 3], [1, 2], paired=True)
    # a pair with a NaN on one side is dropped whole
    assert difference_ci([1, 2, 4, float("nan")], [0, 0, 1, 5], paired=True).estimate == pytest.approx(2.0)


def test_too_few_values_give_no_interval():
    for ci in (difference_ci([1.0], [2.0, 3.0]), difference_ci([1.0, 2.0], [3.0]),
               difference_ci([1.0], [2.0], paired=True),
               difference_ci([1.0], [2.0, 3.0], method="bootstrap")):
        assert math.isnan(ci.low) and math.isnan(ci.high) and not ci.excludes_zero
        assert "no interval" in str(ci)
    assert difference_ci([1.0], [3.0, 2.0]).estimate == -1.5  # the estimate is still given
    const = difference_ci([1.0, 1.0], [0.0, 0.0])  # no spread at all: a point interval
    assert (const.low, const.high) == (1.0, 1.0)


def test_bootstrap_interval_is_seeded_and_close_to_t_with_many_values():
    rng = np.random.default_rng(1)
    a, b = rng.normal(1.0, 1.0, 200), rng.normal(0.5, 1.0, 200)
    boot = difference_ci(a, b, method="bootstrap", n_boot=4000, seed=3)
    assert boot == difference_ci(a, b, method="bootstrap", n_boot=4000, seed=3)  # reproducible
    t = difference_ci(a, b)
    assert boot.estimate == pytest.approx(t.estimate)
    assert boot.low == pytest.approx(t.low, abs=0.03) and boot.high == pytest.approx(t.high, abs=0.03)
    # the percentile interval never leaves the range of resampled means
    small = difference_ci([1, 2, 3], [2, 3, 5], method="bootstrap")
    assert -4.0 <= small.low <= small.high <= 1.0 and small.method == "bootstrap"
    assert difference_ci([1, 2, 3], [0, 0, 0], method="bootstrap", paired=True).method == "paired bootstrap"


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown method 'z'; choose one of t, bootstrap"):
        difference_ci([1, 2], [3, 4], method="z")
    with pytest.raises(ValueError, match="confidence"):
        difference_ci([1, 2], [3, 4], confidence=95)


# one-sided 80 % quantiles from a printed t table: df 2, 4, 8, 9
T80 = {2: 1.0607, 4: 0.9410, 8: 0.8889, 9: 0.8834}
T975 = {2: 4.3027, 4: 2.7764, 8: 2.3060, 9: 2.2622}


@pytest.mark.parametrize("n", [3, 5, 9, 10])
def test_minimal_detectable_effect_from_table_quantiles(n):
    # MDE = (t_{0.975, n-1} + t_{0.8, n-1}) · sd / √n; sd of the per-seed differences 0.4
    by_hand = (T975[n - 1] + T80[n - 1]) * 0.4 / math.sqrt(n)
    assert minimal_detectable_effect(0.4, n) == pytest.approx(by_hand, abs=1e-4)


def test_minimal_detectable_effect_examples_and_edges():
    assert minimal_detectable_effect(1.0, 5) == pytest.approx(3.7174 / math.sqrt(5), abs=1e-4)
    # df = 2 has a closed form: t_p = (2p - 1)·sqrt(2 / (4p(1 - p)))
    t80 = 0.6 * math.sqrt(2 / (4 * 0.8 * 0.2))
    assert t80 == pytest.approx(1.06066, abs=1e-5)
    assert minimal_detectable_effect(1.0, 3) == pytest.approx((4.302653 + t80) / math.sqrt(3),
                                                              abs=1e-5)
    assert math.isnan(minimal_detectable_effect(1.0, 1))  # one seed: no sd, no test
    assert math.isnan(minimal_detectable_effect(math.nan, 5))
    # a stricter test needs a larger effect
    assert minimal_detectable_effect(1.0, 5, alpha=0.01) > minimal_detectable_effect(1.0, 5)
    with pytest.raises(ValueError, match="power"):
        minimal_detectable_effect(1.0, 5, power=1.2)


def test_seeds_needed_by_hand():
    # sd 1, effect 1: 9 seeds detect (2.3060 + 0.8889)/3 = 1.065 > 1, 10 seeds 3.1456/√10 = 0.995
    assert (T975[8] + T80[8]) / 3 > 1 > (T975[9] + T80[9]) / math.sqrt(10)
    assert seeds_needed(1.0, 1.0) == 10
    assert seeds_needed(-1.0, 1.0) == 10  # the sign does not matter
    assert seeds_needed(0.0, 1.0) is None and seeds_needed(0.01, 1.0) is None  # > 1000
    assert seeds_needed(0.5, 0.0) == 2  # no spread between seeds: two suffice
