"""Any ablation in one call: arms of config overrides, run over the same seeds, one table.

    result = rlnb.ablate({"seq-mean": {"loss_fn.token_level_loss": False},
                          "token-mean": ["loss_fn.token_level_loss=true"]},
                         seeds=[0, 1, 2, 3, 4], steps=40,
                         metrics=["train/mean_gen_tokens_incorrect", "validation/accuracy"])
    result.table                                      # means ± sd, A − B [95 % CI], power
    print(*result.power_lines(planned=8), sep="\\n")   # what 8 seeds could detect
    result.bands("train/mean_gen_tokens_incorrect")   # mean and sd over seeds per step
    band_figure(result, "train/mean_gen_tokens_incorrect")   # rlnb.widgets.findings: its plot
    print(result.command)                             # the call that made it

Implementation choices:
1) A run is (arm, seed): the base config (``config``, ``preset``, then the ``base``
   overrides), the arm's overrides, then the loop's seed (``grpo.seed`` or ``ppo.seed``).
   Seed i of every arm builds the same initial model, warm start, prompt order and sampler
   stream, so the arms are paired (``rlnb.run.experiments.effects``). The warm start is shared when
   the arms leave alone what it depends on (``warm_start_key``); ``shared_warm_start`` says so.
2) Every run's config is loaded before any run starts: a bad override is one ValueError
   naming its arm; an arm may not set the seed (it would unpair the arms).
3) The runs go through ``rlnb sweep``'s executors (``rlnb.run.pools.executors``), as points whose
   runner is ``train_point``: by default one after another in this process (``InProcess``,
   the executors' ``run(points, on_start, on_end)`` interface without a process start per
   run, on a forked torch random state); ``jobs=N``, N processes at a time; ``ray=...``, Ray
   tasks (the root and ``RLNB_CACHE_DIR`` must then be on a filesystem every node sees).
   Before processes run, each seed's warm start is built once here, so two arms of one seed
   never build it at the same time.
4) ``root`` (default ``runs/ablate-<time>``, which must be new or empty) receives
   ``ablation.json`` (the call, and each run's status as it ends), one folder per run
   (``metrics.jsonl``, ``run.json``) and ``table.csv``. A failed run does not stop the
   others; ``ablate`` then raises, naming the first failure and its log.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb.run.experiments.effects import (
    Metric,
    as_metric,
    band_frame,
    comparison_rows,
    plain,
    power_line,
    read_metrics,
)
from rlnb.run.pools.choice import make_executor
from rlnb.run.pools.executors import Outcome, Point, run_point_here
from rlnb.run.store.atomic import atomic_write_text

RUNNER = "rlnb.run.experiments.ablation:train_point"
RECORD, TABLE = "ablation.json", "table.csv"


@dataclass
class Ablation:
    """The result of ``ablate``: the runs, and the table that compares each arm with the first.

    Attributes:
        arms: label -> the arm's dotted overrides (the first arm is A).
        runs: label -> one record per seed (the metrics dicts of each step, ``wall_s`` added).
        warm_starts: label -> each seed's warm-start cache entry (None without a warm start).
    """

    arms: dict[str, list[str]]
    seeds: list[int]
    steps: int
    metrics: list[Metric]
    runs: dict[str, list[list[dict]]]
    root: Path
    seconds: float
    command: str
    warm_starts: dict[str, list[str | None]] = field(default_factory=dict)
    confidence: float = 0.95
    power: float = 0.8

    @property
    def rows(self) -> list[dict[str, Any]]:
        """One dict per (arm B, metric), as ``rlnb.run.experiments.effects.comparison_rows``."""
        return comparison_rows(list(self.arms), self.runs, self.metrics,
                               confidence=self.confidence, power=self.power)

    @property
    def table(self):
        """pandas frame of ``rows`` (the display columns)."""
        import pandas as pd

        hidden = {"key", "a", "b", "interval", "sd_diff", "mde", "n"}
        return pd.DataFrame([{k: v for k, v in r.items() if k not in hidden} for r in self.rows])

    @property
    def shared_warm_start(self) -> bool:
        """Every arm of each seed started from the same warm start (or none had one)."""
        return all(len({paths[i] for paths in self.warm_starts.values()}) == 1
                   for i in range(len(self.seeds)))

    def power_lines(self, planned: int | None = None) -> list[str]:
        """Per row: the smallest effect ``planned`` seeds (default: these) would detect, from
        the sd of this ablation's per-seed differences (a pilot's, when it is one)."""
        return [power_line(r, planned, self.power, self.confidence) for r in self.rows]

    def bands(self, key: str | None = None, x: str = "step"):
        """Per arm and step, the mean, sd and count over seeds of ``key`` (default: the first
        metric's), against the step or the training seconds (``x="wall_s"``): what
        ``rlnb.widgets.findings.band_figure(result, key)`` draws (``rlnb`` never imports
        plotly)."""
        return band_frame(self.runs, key or self.metrics[0].key, x)

    def __repr__(self) -> str:
        return (f"Ablation: {len(self.arms)} arms x {len(self.seeds)} seeds x {self.steps} "
                f"steps in {self.seconds:.0f} s, written to {self.root}\n"
                + self.table.to_string(index=False))


# ---------------------------------------------------------------------------------- inputs
def _arm_overrides(label: str, spec) -> list[str]:
    if isinstance(spec, Mapping):
        # JSON is YAML: true/false, numbers, quoted strings, lists and null read back exactly
        return [f"{k}={json.dumps(v)}" for k, v in spec.items()]
    if isinstance(spec, str) or not isinstance(spec, Sequence) or \
            not all(isinstance(o, str) and "=" in o for o in spec):
        raise ValueError(f"arm {label!r}: give its overrides as a list of 'dotted.key=value' "
                         f"strings or a dict {{dotted key: value}}, got {spec!r}")
    return list(spec)


def _check_inputs(arms, seeds, steps) -> tuple[dict[str, list[str]], list[int]]:
    if not isinstance(arms, Mapping) or len(arms) < 2:
        raise ValueError(f"arms must be a dict of at least two labelled arms, "
                         f"{{label: overrides}}, got {arms!r}")
    out = {}
    for label, spec in arms.items():
        if not isinstance(label, str) or not label:
            raise ValueError(f"an arm's label must be a non-empty string, got {label!r}")
        out[label] = _arm_overrides(label, spec)
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds) \
            or len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds must be distinct whole numbers, got {seeds!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number >= 1, got {steps!r}")
    return out, seeds


def _source(config):
    """The base config as JSON-able data for the run processes."""
    if config is None or isinstance(config, (str, Path)):
        return None if config is None else str(config)
    if hasattr(config, "model_dump"):
        return config.model_dump(mode="json")
    return dict(config)


def _plan(arms, seeds, source, preset, base) -> dict[str, list[list[str]]]:
    """label -> each seed's full overrides, every config loaded once here (choice 2)."""
    from rlnb.run.config.master_config import load_config

    try:
        loop = getattr(load_config(source, base, preset=preset), "algorithm", "grpo")
    except ValueError as err:
        raise ValueError(f"the base config (config, preset, base overrides): {_one_line(err)}"
                         ) from None
    seed_key = f"{loop}.seed"
    plan = {}
    for label, overrides in arms.items():
        if any(o.split("=", 1)[0].strip() == seed_key for o in overrides):
            raise ValueError(f"arm {label!r} sets {seed_key}: the seeds are ablate's (seeds=...), "
                             "the same for every arm")
        plan[label] = [[*base, *overrides, f"{seed_key}={s}"] for s in seeds]
        try:
            for full in plan[label]:
                load_config(source, full, preset=preset)
        except ValueError as err:
            raise ValueError(f"arm {label!r}: {_one_line(err)}") from None
    return plan


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())  # load_config's message spans lines: keep it on one


def _run_name(index: int, label: str, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9._=+-]+", "_", label).strip("._")[:60] or "arm"
    return f"{index}-{slug}__seed={seed}"


def _new_root(root) -> Path:
    if root is None:
        root = Path("runs") / time.strftime("ablate-%Y%m%d-%H%M%S")
        while root.exists():
            root = root.with_name(root.name + "x")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise ValueError(f"root {root} is a file, not a directory: choose a new folder")
    if root.exists() and any(root.iterdir()):
        raise ValueError(f"root {root} exists and is not empty: choose a new folder")
    return root


def _command(arms, seeds, steps, metrics, base, config, preset, root) -> str:
    parts = [repr(arms), f"seeds={seeds!r}", f"steps={steps}", f"metrics={list(metrics)!r}"]
    parts += [f"base={list(base)!r}"] if base else []
    parts += [f"config={config!r}"] if config is not None else []
    parts += [f"preset={preset!r}"] if preset is not None else []
    return f"rlnb.ablate({', '.join(parts)}, root={str(root)!r})"


# ---------------------------------------------------------------------------------- running
class InProcess:
    """The executors' interface (``run``, ``close``, ``description``), running each point in
    this process, one after another (choice 3)."""

    description = "in this process, one run at a time"

    def run(self, points: Sequence[Point], on_start, on_end) -> None:
        import torch

        for point in points:
            on_start(point)
            with torch.random.fork_rng(devices=[]):  # the caller's random state is left alone
                outcome = run_point_here(point)
            on_end(point, outcome)

    def close(self) -> None:
        pass


def train_point(parameters: Mapping[str, Any]) -> None:
    """A point's runner: train one (arm, seed) and write its ``metrics.jsonl`` and
    ``run.json`` into ``parameters["run_dir"]``."""
    from rlnb.run.config.master_config import load_config
    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    config = load_config(parameters["config"], parameters["overrides"],
                         preset=parameters["preset"])
    trainer, warm = trainer_with_warm_start(config)
    try:
        records = [plain(m) for m in trainer.train(parameters["steps"])]
    finally:
        trainer.close()
    run_dir = Path(parameters["run_dir"])
    atomic_write_text(run_dir / "metrics.jsonl", "".join(json.dumps(r) + "\n" for r in records))
    info = {"overrides": parameters["overrides"], "steps": parameters["steps"],
            "warm_start": warm and warm.get("path"), "warm_start_cached": warm and warm["cached"]}
    atomic_write_text(run_dir / "run.json", json.dumps(info, indent=1) + "\n")


def _build_warm_starts(source, preset, plan: dict[str, list[list[str]]]) -> None:
    """Each seed's warm start, built (or found) once in this process (choice 3)."""
    from rlnb.run.config.master_config import load_config
    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    for overrides in next(iter(plan.values())):
        config = load_config(source, overrides, preset=preset)
        if config.sft.enabled and config.sft.cache:
            trainer, _ = trainer_with_warm_start(config)
            trainer.close()


def ablate(arms: Mapping[str, Sequence[str] | Mapping[str, Any]], *,
           seeds: Sequence[int] | int = (0, 1, 2), steps: int = 20,
           metrics: Sequence[str | Metric] = ("train/reward",), base: Sequence[str] = (),
           config=None, preset: str | None = None, last: int = 10, root=None,
           jobs: int | None = None, ray: str | bool | None = False,
           cpus_per_run: int | None = None, gpus_per_run: int | None = None,
           confidence: float = 0.95, power: float = 0.8, progress: bool = True) -> Ablation:
    """Train every arm on every seed for ``steps`` steps and compare each arm with the first.

    Args:
        arms: label -> the arm's overrides, ``["loss_fn.ratio_clip_max=0.28"]`` or
            ``{"loss_fn.ratio_clip_max": 0.28}``; the first arm is A, each other one a B.
        seeds: the seeds every arm runs (paired, choice 1); steps: training steps per run.
        metrics: metric keys (each averaged over its run's last ``last`` steps) or
            ``rlnb.run.experiments.effects.Metric`` objects (a reduction, a predicted sign).
        base, config, preset: what every arm starts from (dotted overrides, a YAML path, dict
            or ``MasterConfig``, a preset name), as ``rlnb.load_config``.
        root: the folder the runs are written to (choice 4).
        jobs, ray, cpus_per_run, gpus_per_run: where the runs go, as ``rlnb sweep``'s flags;
            all None/False: in this process, one after another (choice 3).
        confidence: of the paired t interval; power: of the detectable-effect column.
    Returns:
        An ``Ablation``: ``.table``, ``.runs``, ``.power_lines()``, ``.bands()``, ``.command``.
    """
    arms, seeds = _check_inputs(arms, seeds, steps)
    metric_list = [as_metric(m, last) for m in ([metrics] if isinstance(metrics, str) else metrics)]
    if not metric_list:
        raise ValueError("metrics is empty: name at least one metric key, e.g. 'train/reward'")
    base = [base] if isinstance(base, str) else list(base)
    source = _source(config)
    plan = _plan(arms, seeds, source, preset, base)
    in_process = jobs is None and ray is False and cpus_per_run is None and gpus_per_run is None
    executor = InProcess() if in_process else make_executor(
        jobs=jobs, cpus_per_run=cpus_per_run, gpus_per_run=gpus_per_run, ray=ray)
    root = _new_root(root).resolve()
    command = _command(arms, seeds, steps, metrics, base, config, preset, root)
    points, where = [], {}
    for i, (label, runs) in enumerate(plan.items()):
        for seed, overrides in zip(seeds, runs):
            name = _run_name(i, label, seed)
            points.append(Point(name, "", str(root / name), {
                "config": source, "preset": preset, "overrides": overrides, "steps": steps,
                "run_dir": str(root / name)}, str(root / "logs" / f"{name}.log"), runner=RUNNER))
            where[name] = (label, seed)
    record = {"command": command, "runs": {p.name: {"arm": where[p.name][0],
                                                    "seed": where[p.name][1],
                                                    "status": "pending"} for p in points}}
    say = print if progress else (lambda *a, **k: None)
    root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(root / RECORD, json.dumps(record, indent=1) + "\n")
    say(f"ablate: {len(arms)} arms x {len(seeds)} seeds x {steps} steps, "
        f"{executor.description}, into {root}", flush=True)
    done: dict[str, Outcome] = {}

    def on_start(point: Point) -> None:
        record["runs"][point.name]["status"] = "running"
        atomic_write_text(root / RECORD, json.dumps(record, indent=1) + "\n")

    def on_end(point: Point, outcome: Outcome) -> None:
        done[point.name] = outcome
        record["runs"][point.name].update(status="ok" if outcome.ok else "failed",
                                          error=outcome.error, seconds=round(outcome.seconds, 2))
        atomic_write_text(root / RECORD, json.dumps(record, indent=1) + "\n")
        label, seed = where[point.name]
        say(f"[{len(done)}/{len(points)}] {label} | seed {seed}: "
            + (f"ok in {outcome.seconds:.1f} s" if outcome.ok else f"FAILED: {outcome.error}"),
            flush=True)

    start = time.perf_counter()
    try:
        if hasattr(executor, "connect"):  # Ray: join or start the cluster
            executor.connect()
        if not in_process:
            _build_warm_starts(source, preset, plan)
        executor.run(points, on_start, on_end)
    finally:
        executor.close()
    failed = [p for p in points if not done.get(p.name, Outcome(False, "never ran", 0)).ok]
    if failed:
        first = failed[0]
        log = "" if in_process else f" (log: {first.log})"
        raise RuntimeError(f"ablate: {len(failed)} of {len(points)} run(s) failed; first, "
                           f"{where[first.name][0]!r} seed {where[first.name][1]}: "
                           f"{done[first.name].error if first.name in done else 'never ran'}"
                           f"{log}")
    runs = {label: [] for label in arms}
    warm = {label: [] for label in arms}
    for point in points:
        label = where[point.name][0]
        runs[label].append(read_metrics(point.run_dir))
        info = json.loads((Path(point.run_dir) / "run.json").read_text(encoding="utf-8"))
        warm[label].append(info["warm_start"])
    result = Ablation(arms, seeds, steps, metric_list, runs, root, time.perf_counter() - start,
                      command, warm, confidence, power)
    result.table.to_csv(root / TABLE, index=False)
    return result

