"""rlnb.run.stats: t quantiles against printed tables, Welch/paired/bootstrap intervals by hand."""

import math

import numpy as np
import pytest

from rlnb.run.stats import difference_ci, mean_sd, t_quantile

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
