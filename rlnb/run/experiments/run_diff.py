"""Two runs side by side: the config keys that differ, the metrics at the end and per stage time,
and whether the two are comparable at all.

    diff = diff_runs("runs/a", "runs/b")      # rlnb diff runs/a runs/b
    print(diff.text())
    diff.curves("train/reward")                # [(steps, values) of a, (steps, values) of b]

Implementation choices:
1) The configs are compared as saved in each run's ``config.yaml``, flattened to dotted keys; a
   key only one run has is shown against ``<absent>``.
2) Two runs are *not comparable* when they train a different task (``data``), model
   (``policy.model_name``, ``policy.tiny``) or held-out set (``data.num_val``, ``data.seed``): a
   warning names the keys, since their curves measure different things.
3) Metrics are compared over the steps both runs logged: the mean of the last ``window``
   records of each (a single step's value is noise at these sizes), and the mean seconds per
   stage (``timing/train/*``) over all their steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb.run.store.foreign_rollouts import foreign_format
from rlnb.run.store.rundir import read_metrics_file
from rlnb.user_files import load_yaml, read_text

ABSENT = "<absent>"
NOT_COMPARABLE = ("data.", "policy.model_name", "policy.tiny.", "policy.tokenizer_name")
SHOWN = ("train/reward", "validation/accuracy", "train/loss", "train/mean_gen_tokens_per_sample",
         "train/approx_entropy", "funnel/trained")


def flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def read_run(path: str | Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(flat config, metric records)`` of a run directory, or a one-line ValueError."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such directory")
    if not path.is_dir():
        raise ValueError(f"{path}: a file, not a run directory (expected the folder holding "
                         "config.yaml and metrics.jsonl)")
    config_file, metrics_file = path / "config.yaml", path / "metrics.jsonl"
    if not config_file.is_file():
        fmt = foreign_format(path)
        if fmt is not None:
            raise ValueError(f"{path}: {fmt} rollout files, not an rlnb run directory; "
                             "rlnb.run.store.foreign_rollouts.import_rollouts(folder, run_dir) "
                             "writes them as one (docs/guide.md#other-frameworks-rollouts)")
        raise ValueError(f"{path}: no config.yaml (not an rlnb run directory)")
    config = load_yaml(read_text(config_file, "config file"), str(config_file))
    if not isinstance(config, dict):
        raise ValueError(f"{config_file}: expected a mapping of config sections")
    return flat(config), [r for r in read_metrics_file(metrics_file) if "step" in r]


@dataclass
class RunDiff:
    """What ``diff_runs`` found (module docstring)."""

    a: str
    b: str
    config: list[tuple[str, Any, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    metrics: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    timing: list[tuple[str, float | None, float | None]] = field(default_factory=list)
    records: tuple[list, list] = ((), ())
    steps: tuple[int, int] = (0, 0)

    def curves(self, key: str) -> list[tuple[list[int], list[float]]]:
        """``key`` against step, for a and for b (records that log it)."""
        return [([r["step"] for r in recs if key in r], [r[key] for r in recs if key in r])
                for recs in self.records]

    def text(self) -> str:
        def num(v):
            return "—" if v is None else f"{v:.4g}"

        lines = [f"a: {self.a} ({self.steps[0]} steps)", f"b: {self.b} ({self.steps[1]} steps)"]
        lines += [f"warning: {w}" for w in self.warnings]
        lines.append(f"config: {len(self.config)} keys differ" + (":" if self.config else ""))
        lines += [f"  {k}: {a!r} -> {b!r}" for k, a, b in self.config]
        if self.metrics:
            lines.append("metrics (mean of the last steps each logged):")
            lines += [f"  {k}: {num(a)} -> {num(b)}" for k, a, b in self.metrics]
        if self.timing:
            lines.append("seconds per step, by stage:")
            lines += [f"  {k}: {num(a)} -> {num(b)}" for k, a, b in self.timing]
        return "\n".join(lines)


def mean_last(records: list[dict], key: str, window: int) -> float | None:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float))][-window:]
    return sum(values) / len(values) if values else None


def diff_runs(a: str | Path, b: str | Path, window: int = 10) -> RunDiff:
    """Compare the runs in directories ``a`` and ``b`` (choices 1-3)."""
    (ca, ra), (cb, rb) = read_run(a), read_run(b)
    out = RunDiff(str(a), str(b), records=(ra, rb), steps=(len(ra), len(rb)))
    for key in sorted(set(ca) | set(cb)):
        va, vb = ca.get(key, ABSENT), cb.get(key, ABSENT)
        if va != vb:
            out.config.append((key, va, vb))
    apart = [k for k, _, _ in out.config if k.startswith(NOT_COMPARABLE)
             and k not in ("data.correct_threshold",)]
    if apart:
        out.warnings.append("not comparable: they train a different task, model or held-out "
                            f"set ({', '.join(apart)})")
    if not ra or not rb:
        out.warnings.append("one of the runs logged no step")
    elif not ({k for r in ra for k in r} & {k for r in rb for k in r}) - {"step"}:
        out.warnings.append("nothing in common: the two runs log no metric under the same name "
                            "(different loops or tools), so there is nothing to set side by side")
    keys = [k for k in SHOWN if any(k in r for r in ra) or any(k in r for r in rb)]
    out.metrics = [(k, mean_last(ra, k, window), mean_last(rb, k, window)) for k in keys]
    stages = sorted({k for r in ra + rb for k in r if k.startswith("timing/train/")})
    out.timing = [(k.removeprefix("timing/train/"), mean_last(ra, k, 10**9),
                   mean_last(rb, k, 10**9)) for k in stages]
    return out
