"""Effects between arms of an ablation: each run reduced to one number per metric, the paired
interval of A − B over seeds, and the power of the design beside it.

    metric = Metric("incorrect length", "train/mean_gen_tokens_incorrect", expect=1)
    rows = comparison_rows(["seq-mean", "token-mean"], runs, [metric])
    # runs: arm label -> one record per seed (seed i of every arm at position i)

A run's record is the list of its metrics dicts, as ``metrics.jsonl`` holds them. Used by
``rlnb.ablate`` (``rlnb.run.experiments.ablation``) and by the published findings
(``rlnb.run.experiments.findings``).

Implementation choices:
1) A record's numbers are plain floats, NaN and ±inf as None (as ``metrics.jsonl`` stores
   them), plus ``wall_s``: the cumulative ``timing/train/total_step_time`` (training time,
   validation excluded), so an in-process run and a run read back from disk look the same.
2) A metric is reduced per run to one number: the mean over the last ``last`` training steps
   (``"last_mean"``: smooths the step-to-step noise of one batch), the mean over every training
   step (``"run_mean"``: the area under the curve, for an effect on how fast a quantity
   drifts rather than where it ends), the last logged value
   (``"final"``), the run's training seconds (``"seconds"``), or the last value logged within
   the training time both arms of that seed had (``"at_equal_time"``: for an arm that costs
   extra generation), or the first step at which the metric has risen by ``gain`` over its
   first logged value (``"steps_to"``: steps to +30 held-out points is ``Metric(...,
   "validation/accuracy", how="steps_to", gain=0.30)``; a run that never gets there counts its
   last step, a lower bound, so a censored arm looks better than it is, never worse).
3) Seeds are paired: seed ``i`` of both arms shares the warm start and the prompt order, so
   the effect is the paired t interval of the per-seed differences (``rlnb.run.experiments.stats``),
   and the power line uses the sd of those differences: the smallest effect these seeds detect
   (two-sided α = 1 − confidence, power 0.8) and the seeds the observed effect would need.
4) A verdict reads the interval: with a predicted sign (``expect`` ±1) "yes" when it lies on
   that side of 0, else "not reproduced (...)"; without one it says which arm is higher, or
   "no clear difference" when the interval holds 0.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlnb.run.experiments.stats import (
    difference_ci,
    mean_sd,
    minimal_detectable_effect,
    seeds_needed,
)

HOW = ("last_mean", "run_mean", "final", "seconds", "at_equal_time", "steps_to")


@dataclass(frozen=True)
class Metric:
    """How one run is reduced to a number (choice 2), and the sign of A − B a claim predicts
    (+1: A higher, -1: A lower, 0: no prediction)."""

    label: str
    key: str
    how: str = "last_mean"
    expect: int = 0
    last: int = 10
    gain: float = 0.0  # "steps_to": the rise over the run's first logged value to reach

    def __post_init__(self):
        if self.how not in HOW:
            raise ValueError(f"metric {self.label!r}: unknown reduction how={self.how!r}; "
                             f"valid: {', '.join(HOW)}")
        if self.expect not in (-1, 0, 1):
            raise ValueError(f"metric {self.label!r}: expect must be -1, 0 or 1, got "
                             f"{self.expect!r}")
        if self.last < 1:
            raise ValueError(f"metric {self.label!r}: last must be >= 1, got {self.last}")


def as_metric(spec: str | Metric, last: int = 10) -> Metric:
    """A ``Metric`` as given, or a metric key (``"train/reward"``) averaged over the last
    ``last`` steps."""
    if isinstance(spec, Metric):
        return spec
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"a metric is a metric key such as 'train/reward' or a Metric, got "
                         f"{spec!r}")
    return Metric(f"{spec} (last {last} steps)", spec, last=last)


# ---------------------------------------------------------------------------------- records
def plain(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers only, NaN/inf as None (choice 1)."""
    out = {}
    for k, v in metrics.items():
        if isinstance(v, (int, float)):
            out[k] = v if math.isfinite(v) else None
    return out


def with_wall_time(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``wall_s``, the cumulative training seconds up to each record (choice 1)."""
    total = 0.0
    for r in records:
        total += r.get("timing/train/total_step_time") or 0.0
        r["wall_s"] = total
    return records


def read_metrics(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run directory's ``metrics.jsonl`` as a record (choice 1)."""
    path = Path(run_dir) / "metrics.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    return with_wall_time([json.loads(line) for line in lines if line.strip()])


# ---------------------------------------------------------------------------------- reductions
def reduce_run(record: list[dict[str, Any]], metric: Metric, *, until_s: float | None = None
               ) -> float:
    """One run's number for ``metric`` (choice 2); NaN when the run never logged it."""
    if metric.how == "seconds":
        return record[-1]["wall_s"] if record else math.nan
    if metric.how == "steps_to":
        logged = [r for r in record if r.get(metric.key) is not None]
        if not logged:
            return math.nan
        start = logged[0][metric.key]
        reached = next((r for r in logged if r[metric.key] >= start + metric.gain), None)
        # never reached: the run's last step, a lower bound (censored: choice 2)
        return float((reached or record[-1]).get("step", len(record) - 1))
    trained = [r for r in record if r.get("timing/train/total_step_time") is not None]
    if metric.how in ("last_mean", "run_mean"):
        window = trained[-metric.last:] if metric.how == "last_mean" else trained
        values = [r[metric.key] for r in window if r.get(metric.key) is not None]
        return sum(values) / len(values) if values else math.nan
    if metric.how == "at_equal_time":
        record = [r for r in record if until_s is None or r["wall_s"] <= until_s + 1e-9]
    values = [r[metric.key] for r in record if r.get(metric.key) is not None]
    return values[-1] if values else math.nan


def per_seed(runs_a: Sequence[list[dict]], runs_b: Sequence[list[dict]], metric: Metric
             ) -> tuple[list[float], list[float]]:
    """Each seed's number in A and in B (runs paired by position: seed i)."""
    if metric.how != "at_equal_time":
        return [reduce_run(r, metric) for r in runs_a], [reduce_run(r, metric) for r in runs_b]
    a, b = [], []
    for ra, rb in zip(runs_a, runs_b):
        t = min(ra[-1]["wall_s"], rb[-1]["wall_s"]) if ra and rb else None  # the time both had
        a.append(reduce_run(ra, metric, until_s=t))
        b.append(reduce_run(rb, metric, until_s=t))
    return a, b


def verdict(interval, expect: int) -> str:
    """What the interval of A − B says (choice 4)."""
    if math.isnan(interval.low):
        return "n/a (too few seeds)"
    if expect == 0:
        return "A > B" if interval.low > 0 else "A < B" if interval.high < 0 else \
            "no clear difference"
    if (interval.low > 0 and expect > 0) or (interval.high < 0 and expect < 0):
        return "yes"
    if interval.excludes_zero:
        return "not reproduced (opposite)"
    return "not reproduced (interval holds 0)"


def _short(summary) -> str:
    return str(summary).split(" (n=")[0]


def _seeds_text(n: int | None, effect: float, sd_diff: float) -> str:
    """The seeds the observed effect would need for the power asked (``seeds_needed``)."""
    if math.isnan(sd_diff) or math.isnan(effect):
        return "n/a"
    if effect == 0:
        return "n/a (A − B = 0)"
    return "> 1000" if n is None else str(n)


def comparison_rows(labels: Sequence[str], runs: Mapping[str, Sequence[list[dict]]],
                    metrics: Sequence[Metric], *, confidence: float = 0.95,
                    power: float = 0.8) -> list[dict[str, Any]]:
    """One row per (arm B, metric), B each label after the first (A): A's and B's mean ± sd
    over seeds, the paired interval of A − B, the sd of the per-seed differences, the smallest
    effect these seeds detect and the seeds the observed effect would need (choice 3), and the
    verdict (choice 4). Display columns are strings; ``a``, ``b``, ``interval``, ``sd_diff``,
    ``mde`` and ``n`` keep the numbers."""
    a_label, rows = labels[0], []
    alpha = 1 - confidence
    for b_label in labels[1:]:
        for metric in metrics:
            a, b = per_seed(runs[a_label], runs[b_label], metric)
            interval = difference_ci(a, b, paired=True, confidence=confidence)
            diffs = [x - y for x, y in zip(a, b) if not (math.isnan(x) or math.isnan(y))]
            sd_diff = mean_sd(diffs).sd
            mde = minimal_detectable_effect(sd_diff, len(diffs), alpha=alpha, power=power)
            need = seeds_needed(interval.estimate, sd_diff, alpha=alpha, power=power)
            rows.append({
                "metric": metric.label, "A": a_label, "B": b_label,
                "A mean ± sd": _short(mean_sd(a)), "B mean ± sd": _short(mean_sd(b)),
                f"A − B [{100 * confidence:g} % CI]": _interval_text(interval),
                "seeds": len(diffs),
                "sd(A − B)": "n/a" if math.isnan(sd_diff) else f"{sd_diff:.4g}",
                f"detectable ({100 * power:g} % power)": "n/a" if math.isnan(mde) else f"{mde:.4g}",
                "seeds for A − B": _seeds_text(need, interval.estimate, sd_diff),
                "verdict": verdict(interval, metric.expect) if diffs or _logged(a + b)
                else "n/a (never logged)",
                "key": metric.key, "a": a, "b": b, "interval": interval, "sd_diff": sd_diff,
                "mde": mde, "n": len(diffs),
            })
    return rows


def _logged(values: Sequence[float]) -> bool:
    return any(not math.isnan(v) for v in values)


def _interval_text(interval) -> str:
    text = str(interval)
    return text[:text.rindex(" (")] if "[" in text else text


def power_line(row: Mapping[str, Any], planned: int | None = None, power: float = 0.8,
               confidence: float = 0.95) -> str:
    """One sentence: the smallest effect ``planned`` seeds (default: the row's own) detect,
    from the sd of this row's per-seed differences."""
    n = planned or row["n"]
    alpha = 1 - confidence
    mde = minimal_detectable_effect(row["sd_diff"], n, alpha=alpha, power=power)
    if math.isnan(mde):
        return (f"{row['metric']} ({row['A']} − {row['B']}): no power estimate "
                f"({row['n']} seed(s) with a value; two are needed for an sd)")
    effect = row["interval"].estimate
    need = seeds_needed(effect, row["sd_diff"], alpha=alpha, power=power)
    return (f"{row['metric']} ({row['A']} − {row['B']}): with {n} seeds the smallest effect "
            f"detected with {100 * power:g} % power at α = {alpha:g} is {mde:.4g} (sd of the "
            f"per-seed differences {row['sd_diff']:.4g} over {row['n']} seeds); the observed "
            f"{effect:+.4g} would need {_seeds_text(need, effect, row['sd_diff'])} seeds")


def curves_frame(runs: Mapping[str, Sequence[list[dict]]], key: str, x: str = "step"):
    """Long pandas frame ``setting, seed, x, value`` of ``key`` over ``x`` (``"step"`` or
    ``"wall_s"``), for plots with a band over seeds."""
    import pandas as pd

    rows = [{"setting": label, "seed": i, "x": r[x], "value": r[key]}
            for label, records in runs.items() for i, record in enumerate(records)
            for r in record if r.get(key) is not None and r.get(x) is not None]
    return pd.DataFrame(rows, columns=["setting", "seed", "x", "value"])


X_TITLES = {"step": "training step", "wall_s": "training seconds (mean over seeds)"}


def band_frame(runs: Mapping[str, Sequence[list[dict]]], key: str, x: str = "step"):
    """Per arm and step: ``setting, x, mean, sd, count`` of ``key`` over the seeds, what a band
    plot draws (``rlnb.widgets.findings.band_figure``). ``x="wall_s"`` puts each step at the
    seeds' mean training seconds instead of its number."""
    if x not in X_TITLES:
        raise ValueError(f"x must be one of {', '.join(X_TITLES)}, got {x!r}")
    frame = curves_frame(runs, key)
    if x == "wall_s":
        times = curves_frame(runs, "wall_s").rename(columns={"value": "wall"})
        frame = frame.merge(times[["setting", "seed", "x", "wall"]], on=["setting", "seed", "x"])
    stats = frame.groupby(["setting", "x"])["value"].agg(mean="mean", sd="std", count="count")
    if x == "wall_s":  # the step's place: the seeds' mean training time when they reached it
        stats["wall"] = frame.groupby(["setting", "x"])["wall"].mean()
    stats = stats.reset_index()
    order = {label: i for i, label in enumerate(runs)}  # the arms in the order given
    stats = stats.sort_values(["setting", "x"], key=lambda c: c.map(order) if c.name ==
                              "setting" else c, kind="stable").reset_index(drop=True)
    if x == "wall_s":
        stats["x"] = stats.pop("wall")
    return stats
