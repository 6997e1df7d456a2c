"""Statistics over seeds, for sweeps and ablation studies: mean ± sd, and an interval for the
difference between two settings.

    mean_sd([0.61, 0.58, 0.64])                                   # Summary(n=3, mean=0.61, sd=0.03)
    difference_ci([0.61, 0.58, 0.64], [0.52, 0.55, 0.50])         # Welch t interval, 95 %
    difference_ci(a, b, paired=True)                              # a[i], b[i] share seed i
    difference_ci(a, b, method="bootstrap", n_boot=10_000, seed=0)
    minimal_detectable_effect(sd_diff=0.4, n=5)                   # paired, α = 0.05, power 0.8
    seeds_needed(effect=0.3, sd_diff=0.4)                         # seeds for that power

Plain numbers in, plain numbers out (floats or numpy arrays; NaN values are dropped): no pandas,
no torch, no sweep layout, so a notebook can call it on any two lists.
``rlnb.run.experiments.sweep`` uses it for the report's per-setting summary.

Implementation choices:
1) ``sd`` is the sample standard deviation (``ddof=1``), NaN for fewer than two values; the
   interval is NaN (never a made-up number) when the data cannot support one.
2) ``method="t"`` (the default), unpaired: Welch's t interval, which does not assume equal
   variances. ``se = sqrt(sa²/na + sb²/nb)``, degrees of freedom by Welch-Satterthwaite
   ``df = se⁴ / ((sa²/na)²/(na-1) + (sb²/nb)²/(nb-1))``; needs two values on each side.
   With a handful of seeds (2-5, the usual sweep) this is the interval to read.
3) ``paired=True``: the t interval of the per-seed differences ``a[i] - b[i]`` (``df = n - 1``).
   Seed ``i`` of two settings shares the initial model and the prompt order, so pairing removes
   that shared noise; use it only when every seed ran in both settings.
4) ``method="bootstrap"``: the percentile interval of ``mean(a*) - mean(b*)`` over ``n_boot``
   resamples with replacement of each side (of the differences when paired), from a seeded
   generator so the report is reproducible. With few seeds it is too narrow (three seeds have
   ten distinct resamples): prefer ``"t"`` below about ten seeds.
5) Student t quantiles are computed here (no scipy): with ``x = sqrt(df) tan θ`` the t CDF is
   ``1/2 + c sqrt(df) ∫_0^θ cos^(df-1)(u) du``, ``c = Γ((df+1)/2) / (sqrt(df π) Γ(df/2))``, an
   integral over a bounded interval (Simpson's rule) that bisection inverts; it matches tables
   to 1e-6 (``tests/run/test_stats.py``). ``df = inf`` uses the normal quantile.
6) Power of the paired design: with ``n`` seeds and per-seed differences of sd ``s``, the
   smallest true mean difference the two-sided paired t test at level α detects with
   probability ``power`` is ``MDE = (t_{1-α/2, n-1} + t_{power, n-1})·s/√n``, the usual
   approximation with t quantiles in place of normal ones (it ignores the noncentral t, and is
   slightly optimistic for very few seeds). ``s`` comes from a pilot, or from the run itself.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

NAN = float("nan")


@dataclass(frozen=True)
class Summary:
    """Mean and sample standard deviation of ``n`` values."""

    n: int
    mean: float
    sd: float

    def __str__(self) -> str:
        sd = "n/a" if math.isnan(self.sd) else f"{self.sd:.4g}"
        return f"{self.mean:.4g} ± {sd} (n={self.n})"


@dataclass(frozen=True)
class Interval:
    """``estimate`` = mean(a) - mean(b) and its ``confidence`` interval ``[low, high]``."""

    estimate: float
    low: float
    high: float
    confidence: float
    method: str  # "welch t", "paired t", "bootstrap", "paired bootstrap"
    df: float = NAN  # degrees of freedom of a t interval

    @property
    def excludes_zero(self) -> bool:
        """The interval lies entirely on one side of 0 (False when it is undefined)."""
        return bool(self.low > 0 or self.high < 0)

    def __str__(self) -> str:
        if math.isnan(self.low):
            return f"{self.estimate:+.4g} (no interval: too few values)"
        return (f"{self.estimate:+.4g} [{self.low:+.4g}, {self.high:+.4g}] "
                f"({100 * self.confidence:g} % {self.method})")


def _values(x: Sequence[float]) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    return a[~np.isnan(a)]


def mean_sd(values: Sequence[float]) -> Summary:
    """Mean and sample sd (``ddof=1``) of ``values``, NaNs dropped; sd is NaN for n < 2."""
    v = _values(values)
    if v.size == 0:
        return Summary(0, NAN, NAN)
    return Summary(int(v.size), float(v.mean()), float(v.std(ddof=1)) if v.size > 1 else NAN)


# ---------------------------------------------------------------------------------- t quantiles
def _t_cdf_angle(theta: float, df: float, steps: int = 2000) -> float:
    """P(0 < T < sqrt(df) tan θ) for Student's t with ``df`` degrees of freedom (see 5)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    h = theta / steps  # Simpson's rule: steps is even
    u = np.linspace(0.0, theta, steps + 1)
    f = np.cos(u) ** (df - 1)
    integral = h / 3 * (f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())
    return float(c * math.sqrt(df) * integral)


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` (> 0, may be fractional or inf) degrees of
    freedom: ``t_quantile(0.975, 2) = 4.303``."""
    if not 0 < p < 1:
        raise ValueError(f"p must lie in (0, 1), got {p}")
    if not df > 0:
        raise ValueError(f"df must be positive, got {df}")
    if math.isinf(df):
        return NormalDist().inv_cdf(p)
    if p == 0.5:
        return 0.0
    target = abs(p - 0.5)
    lo, hi = 0.0, math.pi / 2
    for _ in range(60):  # bisection on the angle: 60 halvings reach double precision
        mid = (lo + hi) / 2
        if _t_cdf_angle(mid, df) < target:
            lo = mid
        else:
            hi = mid
    x = math.sqrt(df) * math.tan((lo + hi) / 2)
    return x if p > 0.5 else -x


# ---------------------------------------------------------------------------------- differences
def difference_ci(a: Sequence[float], b: Sequence[float], *, confidence: float = 0.95,
                  method: str = "t", paired: bool = False, n_boot: int = 10_000,
                  seed: int = 0) -> Interval:
    """An interval for ``mean(a) - mean(b)``: Welch's t (default), paired t, or a percentile
    bootstrap (``method="bootstrap"``); see the module docstring for when to use which."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {', '.join(METHODS)}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    if paired:
        x, y = np.asarray(a, dtype=np.float64).ravel(), np.asarray(b, dtype=np.float64).ravel()
        if x.shape != y.shape:
            raise ValueError(f"paired=True needs as many values in a as in b "
                             f"({x.size} vs {y.size})")
        d = _values(x - y)  # a pair with a NaN on either side is dropped
        return METHODS[method](d, None, confidence, n_boot, seed)
    return METHODS[method](_values(a), _values(b), confidence, n_boot, seed)


def _t_interval(a: np.ndarray, b: np.ndarray | None, confidence: float, n_boot: int,
                seed: int) -> Interval:
    if b is None:  # paired: a holds the differences
        estimate = float(a.mean()) if a.size else NAN
        if a.size < 2:
            return Interval(estimate, NAN, NAN, confidence, "paired t")
        se, df, method = float(a.std(ddof=1)) / math.sqrt(a.size), a.size - 1.0, "paired t"
    else:
        estimate = float(a.mean() - b.mean()) if a.size and b.size else NAN
        if a.size < 2 or b.size < 2:
            return Interval(estimate, NAN, NAN, confidence, "welch t")
        va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
        se, method = math.sqrt(va + vb), "welch t"
        # Welch-Satterthwaite; 0/0 when both sides are constant: then the interval is a point
        df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1)) if se > 0 else math.inf
    if se == 0:
        return Interval(estimate, estimate, estimate, confidence, method, df)
    half = t_quantile(0.5 + confidence / 2, df) * se
    return Interval(estimate, estimate - half, estimate + half, confidence, method, float(df))


def _bootstrap_interval(a: np.ndarray, b: np.ndarray | None, confidence: float, n_boot: int,
                        seed: int) -> Interval:
    rng = np.random.default_rng(seed)
    method = "paired bootstrap" if b is None else "bootstrap"
    if a.size == 0 or (b is not None and b.size == 0):
        return Interval(NAN, NAN, NAN, confidence, method)

    def resampled_means(x: np.ndarray) -> np.ndarray:  # [n_boot]
        return x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)

    estimate = float(a.mean() - (0.0 if b is None else b.mean()))
    if a.size < 2 or (b is not None and b.size < 2):  # as for t: two values on each side
        return Interval(estimate, NAN, NAN, confidence, method)
    draws = resampled_means(a) - (0.0 if b is None else resampled_means(b))
    tail = (1 - confidence) / 2
    low, high = np.quantile(draws, [tail, 1 - tail])
    return Interval(estimate, float(low), float(high), confidence, method)


METHODS = {"t": _t_interval, "bootstrap": _bootstrap_interval}


# ---------------------------------------------------------------------------------- power
def _check_power(alpha: float, power: float) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    if not 0.5 <= power < 1:
        raise ValueError(f"power must lie in [0.5, 1), got {power}")


def minimal_detectable_effect(sd_diff: float, n: int, *, alpha: float = 0.05,
                              power: float = 0.8) -> float:
    """The smallest |mean difference| a paired t test on ``n`` seeds (two-sided, level
    ``alpha``) detects with probability ``power``, when the per-seed differences have sd
    ``sd_diff`` (choice 6): ``(t_{1-α/2, n-1} + t_{power, n-1})·sd_diff/√n``. NaN for n < 2
    or an unknown (NaN) sd."""
    _check_power(alpha, power)
    if n < 2 or math.isnan(sd_diff):
        return NAN
    df = n - 1
    return (t_quantile(1 - alpha / 2, df) + t_quantile(power, df)) * sd_diff / math.sqrt(n)


def seeds_needed(effect: float, sd_diff: float, *, alpha: float = 0.05, power: float = 0.8,
                 max_seeds: int = 1000) -> int | None:
    """The fewest seeds (>= 2) whose ``minimal_detectable_effect`` is at most ``|effect|``;
    None when more than ``max_seeds`` would be needed (or the effect is 0 or NaN)."""
    _check_power(alpha, power)
    if math.isnan(effect) or math.isnan(sd_diff) or effect == 0:
        return None
    if sd_diff == 0:
        return 2

    def detects(n: int) -> bool:
        return minimal_detectable_effect(sd_diff, n, alpha=alpha, power=power) <= abs(effect)

    if not detects(max_seeds):
        return None
    lo, hi = 1, max_seeds  # the MDE falls as n grows: bisect for the first n that detects
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if detects(mid) else (mid, hi)
    return hi
