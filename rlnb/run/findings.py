"""Published findings as ablations: a config pair (or more), seeds, a stated metric and effect.

    finding = FINDINGS["clip_higher"]
    runs = {s.label: [run_setting(finding, s, seed) for seed in (0, 1, 2)]
            for s in finding.settings}
    for row in effect_rows(finding, runs):
        print(row)   # metric, A mean ± sd, B mean ± sd, A − B with its interval, reproduced?

Each finding names the paper's claim, the settings it compares (dotted overrides laid over one
base, so the config difference is exactly ``diff_lines``), the metrics that test it and the sign
the paper predicts. ``benchmarks/bench_findings.py`` runs them in process and prints one table;
``notebooks/07_reproducing_findings.ipynb`` runs the same settings as sweeps of notebook 01
(``sweep_finding``), so they also run headless; docs/algorithms.md#reproducing-published-findings
says what each knob means.

Implementation choices:
1) A run's record is the list of its metrics dicts, as ``metrics.jsonl`` holds them (NaN as
   None), plus ``wall_s``: the cumulative ``timing/train/total_step_time`` (training time,
   validation excluded), so an in-process run and a notebook run are read the same way.
2) A metric is reduced per run to one number: the mean over the last ``last`` training steps
   (``"last_mean"``: smooths the step-to-step noise of a 64-row batch), the last logged value
   (``"final"``), the run's training seconds (``"seconds"``), or the last validation accuracy
   reached within the time both settings of that seed had (``"at_equal_time"``: accuracy per
   wall-clock second, for a setting that costs extra generation).
3) Seeds are paired: seed ``i`` of both settings shares the warm start and the prompt order,
   so the effect is the paired t interval of the per-seed differences (``rlnb.run.stats``).
   "Reproduced" means the 95 % interval lies on the side the paper predicts; an interval holding
   0 is "no (no clear effect)", the other side "no (opposite)". Nothing is tuned until an effect
   appears: the settings below were fixed before the first full run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb.run.stats import difference_ci, mean_sd


@dataclass(frozen=True)
class Setting:
    """One arm of a comparison: a label and the dotted overrides it adds to the base."""

    label: str
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Metric:
    """How one run is reduced to a number (choice 2), and the sign of A − B the paper predicts
    (+1: A higher, -1: A lower, 0: no prediction, the row only describes)."""

    label: str
    key: str
    how: str = "last_mean"  # "last_mean", "final", "seconds", "at_equal_time"
    expect: int = 1
    last: int = 10


@dataclass(frozen=True)
class Finding:
    """A published claim as settings to compare; ``settings[0]`` is A, each other one a B."""

    name: str
    title: str
    claim: str
    citation: str
    base: tuple[str, ...]
    settings: tuple[Setting, ...]
    metrics: tuple[Metric, ...]
    num_steps: int
    curves: tuple[str, ...] = field(default=())  # the metrics to plot against the step
    fast_extra: tuple[str, ...] = field(default=())  # what fast mode needs beyond ``FAST``

    def overrides(self, setting: Setting, seed: int, *, fast: bool = False) -> list[str]:
        """The full dotted overrides of one run: base, the setting, the seed (and in ``fast``
        mode the small sizes of ``FAST`` and the finding's ``fast_extra``)."""
        small = (*FAST, *self.fast_extra) if fast else ()
        return [*self.base, *small, *setting.overrides, f"grpo.seed={seed}"]

    def diff_lines(self) -> list[str]:
        """The config difference between the settings, as a diff of dotted overrides."""
        lines = [f"  {o}" for o in self.base]
        for s in self.settings:
            lines.append(f"# {s.label}")
            lines += [f"+ {o}" for o in s.overrides] or ["  (the base as is)"]
        return lines


# Laid over every finding's base in fast mode (a smoke test: small model, tiny batch, no warm
# start; it learns nothing, so its table says nothing either).
FAST = ("policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1", "sft.enabled=false",
        "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
        "policy.train_global_batch_size=16", "policy.train_micro_batch_size=16",
        "grpo.max_val_samples=16", "data.num_val=16", "grpo.val_period=1")
# Every finding: the tiny default (configs/tiny.yaml), no KL term, no checkpoints or trackers.
COMMON = ("loss_fn.reference_policy_kl_penalty=0.0", "checkpointing.enabled=false")

FINDINGS: dict[str, Finding] = {f.name: f for f in (
    Finding(
        name="length_bias",
        title="1 · Length bias of per-sequence normalisation",
        claim="Averaging the loss per sequence, then over sequences, with the advantage divided by "
              "the group's reward std, makes incorrect responses grow longer over training (a "
              "long wrong answer is penalised less per token); the token-level loss, or Dr. "
              "GRPO's unnormalised sum without ÷ std, does not.",
        citation="Liu et al., Understanding R1-Zero-Like Training: A Critical Perspective "
                 "(Dr. GRPO), arXiv 2503.20783, §3.1 and Fig. 5",
        # sums up to 40: with operands up to 50 the warm start on these demonstrations stops
        # at its 4000-step cap near 16 % accuracy (10 min on a loaded machine, per seed)
        base=(*COMMON, "data.name=addition_think", "data.max_filler=4", "data.max_operand=20",
              "data.num_val=100", "grpo.max_val_samples=100",
              "policy.generation.max_new_tokens=12", "policy.max_total_sequence_length=24",
              "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=8",
              "policy.train_global_batch_size=64", "policy.train_micro_batch_size=64",
              "grpo.val_period=10"),
        settings=(
            Setting("seq-mean + std (GRPO)", ("loss_fn.token_level_loss=false",)),
            Setting("token-level + std", ("loss_fn.token_level_loss=true",)),
            Setting("Dr. GRPO (token sum, no std)", (
                "loss_fn.token_level_loss=true", "grpo.adv_estimator.normalize_rewards=false")),
        ),
        metrics=(Metric("incorrect length (tokens, last 10 steps)",
                        "train/mean_gen_tokens_incorrect", expect=1),
                 Metric("correct length (tokens, last 10 steps)",
                        "train/mean_gen_tokens_correct", expect=0)),
        num_steps=60,
        curves=("train/mean_gen_tokens_incorrect", "train/mean_gen_tokens_correct",
                "train/reward"),
    ),
    Finding(
        name="clip_higher",
        title="2 · Clip-higher keeps entropy up",
        claim="With several optimizer steps per rollout, raising the upper clip ε_high from 0.2 "
              "to 0.28 lets low-probability tokens with positive advantage grow, so token "
              "entropy stays higher (no entropy collapse) and the policy explores more.",
        citation="Yu et al., DAPO: An Open-Source LLM Reinforcement Learning System at Scale, "
                 "arXiv 2503.14476, §3.1 and Fig. 2",
        base=(*COMMON, "policy.train_global_batch_size=64", "policy.train_micro_batch_size=64",
              "grpo.val_period=10"),
        settings=(
            Setting("ε_high = 0.28", ("loss_fn.ratio_clip_max=0.28",)),
            Setting("ε_high = 0.2", ("loss_fn.ratio_clip_max=0.2",)),
        ),
        metrics=(Metric("token entropy (nats, last 10 steps)", "train/approx_entropy", expect=1),
                 Metric("clip fraction (last 10 steps)", "train/clip_fraction", expect=0),
                 Metric("held-out accuracy (final)", "validation/accuracy", how="final",
                        expect=1)),
        num_steps=40,
        curves=("train/approx_entropy", "train/clip_fraction", "validation/accuracy"),
    ),
    Finding(
        name="dynamic_sampling",
        title="3 · Dynamic sampling when groups saturate",
        claim="Once most groups are all-correct they carry no gradient; generating until the "
              "batch is full of groups with mixed rewards (dynamic sampling) keeps the effective "
              "batch full and reaches a given accuracy in fewer steps, at the price of extra "
              "generation per step.",
        citation="Yu et al., DAPO, arXiv 2503.14476, §3.2 and Fig. 6",
        base=(*COMMON, "data.max_operand=20", "data.num_val=100", "grpo.max_val_samples=100",
              "sft.stop_at_accuracy=0.6", "grpo.num_prompts_per_step=8",
              "grpo.num_generations_per_prompt=8", "policy.train_global_batch_size=64",
              "policy.train_micro_batch_size=64", "grpo.val_period=5"),
        settings=(
            # saturated batches need many generation batches: more than 10 would raise
            Setting("dynamic sampling", ("grpo.use_dynamic_sampling=true",
                                         "grpo.dynamic_sampling_max_gen_batches=30")),
            Setting("plain GRPO", ("grpo.use_dynamic_sampling=false",)),
        ),
        metrics=(Metric("held-out accuracy (final, same steps)", "validation/accuracy",
                        how="final", expect=1),
                 Metric("held-out accuracy at equal wall time", "validation/accuracy",
                        how="at_equal_time", expect=0),
                 Metric("training seconds", "timing/train/total_step_time", how="seconds",
                        expect=1),
                 Metric("generated groups with signal (last 10 steps)",
                        "train/groups_with_signal", expect=0)),
        num_steps=40,
        curves=("validation/accuracy", "train/groups_with_signal",
                "train/dynamic_sampling_num_gen_batches"),
        # an untrained model is never right, and dynamic sampling would never find a group with
        # signal: a short warm start on sums up to 10 (cached after the first run)
        fast_extra=("data.max_operand=5", "data.num_val=8", "grpo.max_val_samples=8",
                    "sft.enabled=true", "sft.stop_at_accuracy=0.1", "sft.max_steps=1000",
                    "sft.eval_every=50", "sft.eval_prompts=32"),
    ),
)}


# ---------------------------------------------------------------------------------- runs
def run_setting(finding: Finding, setting: Setting, seed: int, *, num_steps: int | None = None,
                fast: bool = False, extra: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Train one setting in this process (the warm start comes from the cache); its record
    (choice 1). Writes nothing but the warm-start cache."""
    from rlnb.engine.trainers.loops import make_trainer
    from rlnb.run.master_config import load_config
    from rlnb.run.warm_start_cache import cached_warm_start

    config = load_config(None, [*finding.overrides(setting, seed, fast=fast), *extra])
    trainer = make_trainer(config)
    if config.sft.enabled:
        cached_warm_start(trainer, config.sft, log=lambda *a, **k: None)
    steps = finding.num_steps if num_steps is None else num_steps
    return with_wall_time([_plain(m) for m in trainer.train(steps)])


def _plain(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Numbers only, NaN/inf as None (as ``metrics.jsonl`` stores them)."""
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


def sweep_finding(finding: Finding, notebook: str | Path, seeds: Sequence[int], root: str | Path,
                  *, num_steps: int | None = None, fast: bool = False,
                  extra: Sequence[str] = (), progress: bool = True
                  ) -> dict[str, list[list[dict[str, Any]]]]:
    """Run every setting of ``finding`` as an ``rlnb sweep`` of ``notebook`` (notebook 01) over
    ``seeds``, one sweep root per setting under ``root`` (``extra``: overrides added to every
    run); returns label -> records by seed."""
    from rlnb.run.sweep import sweep

    steps = finding.num_steps if num_steps is None else num_steps
    out: dict[str, list[list[dict[str, Any]]]] = {}
    for i, setting in enumerate(finding.settings):
        overrides = [*(o for o in finding.overrides(setting, 0, fast=fast)
                       if not o.startswith("grpo.seed=")), *extra]
        # notebook 01 takes one step by hand before its loop: num_steps - 1 in the loop (that
        # step logs no timing/train/total_step_time, so wall_s counts the loop's steps)
        fixed = {"overrides": overrides, "num_steps": max(steps - 1, 1), "kl_penalty": 0.0,
                 "fast": False}
        result = sweep(notebook, {"seed": list(seeds)}, root=Path(root) / f"setting{i}",
                       parameters=fixed, progress=progress, report=False)
        if result.failed:
            raise RuntimeError(f"{finding.name} / {setting.label}: {len(result.failed)} run(s) "
                               f"failed, first: {result.failed[0].error}")
        out[setting.label] = [read_metrics(r.run_dir) for r in result.runs]
    return out


# ---------------------------------------------------------------------------------- effects
def reduce_run(record: list[dict[str, Any]], metric: Metric, *, until_s: float | None = None
               ) -> float:
    """One run's number for ``metric`` (choice 2); NaN when the run never logged it."""
    if metric.how == "seconds":
        return record[-1]["wall_s"] if record else math.nan
    trained = [r for r in record if r.get("timing/train/total_step_time") is not None]
    if metric.how == "last_mean":
        values = [r[metric.key] for r in trained[-metric.last:] if r.get(metric.key) is not None]
        return sum(values) / len(values) if values else math.nan
    if metric.how == "at_equal_time":
        record = [r for r in record if until_s is None or r["wall_s"] <= until_s + 1e-9]
    elif metric.how != "final":
        raise ValueError(f"unknown metric reduction {metric.how!r}")
    values = [r[metric.key] for r in record if r.get(metric.key) is not None]
    return values[-1] if values else math.nan


def per_seed(runs_a: Sequence[list[dict]], runs_b: Sequence[list[dict]], metric: Metric
             ) -> tuple[list[float], list[float]]:
    """Each seed's number in A and in B (runs paired by position: seed i)."""
    if metric.how != "at_equal_time":
        return [reduce_run(r, metric) for r in runs_a], [reduce_run(r, metric) for r in runs_b]
    a, b = [], []
    for ra, rb in zip(runs_a, runs_b):
        t = min(ra[-1]["wall_s"], rb[-1]["wall_s"])  # the time both had
        a.append(reduce_run(ra, metric, until_s=t))
        b.append(reduce_run(rb, metric, until_s=t))
    return a, b


def verdict(interval, expect: int) -> str:
    """'yes' when the interval lies on the predicted side of 0 (choice 3)."""
    if expect == 0:
        return "n/a (descriptive)"
    if math.isnan(interval.low):
        return "n/a (too few seeds)"
    if (interval.low > 0 and expect > 0) or (interval.high < 0 and expect < 0):
        return "yes"
    if interval.excludes_zero:
        return "no (opposite)"
    return "no (no clear effect)"


def effect_rows(finding: Finding, runs: Mapping[str, Sequence[list[dict]]],
                confidence: float = 0.95) -> list[dict[str, Any]]:
    """One row per (metric, B setting): A's and B's mean ± sd over seeds, the paired interval
    of A − B and the verdict (choice 3)."""
    a_setting, rows = finding.settings[0], []
    for b_setting in finding.settings[1:]:
        for metric in finding.metrics:
            a, b = per_seed(runs[a_setting.label], runs[b_setting.label], metric)
            interval = difference_ci(a, b, paired=True, confidence=confidence)
            rows.append({
                "finding": finding.title, "metric": metric.label,
                "A": a_setting.label, "B": b_setting.label,
                "A mean ± sd": str(mean_sd(a)).split(" (n=")[0],
                "B mean ± sd": str(mean_sd(b)).split(" (n=")[0],
                "A − B [95 % CI]": str(interval).replace(f" ({100 * confidence:g} % paired t)", ""),
                "reproduced": verdict(interval, metric.expect),
                "a": a, "b": b, "interval": interval,
            })
    return rows


def curves_frame(runs: Mapping[str, Sequence[list[dict]]], key: str, x: str = "step"):
    """Long pandas frame ``setting, seed, x, value`` of ``key`` over ``x`` (``"step"`` or
    ``"wall_s"``), for plots with a band over seeds."""
    import pandas as pd

    rows = [{"setting": label, "seed": i, "x": r[x], "value": r[key]}
            for label, records in runs.items() for i, record in enumerate(records)
            for r in record if r.get(key) is not None and r.get(x) is not None]
    return pd.DataFrame(rows, columns=["setting", "seed", "x", "value"])
