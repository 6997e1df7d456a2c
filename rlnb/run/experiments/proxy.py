"""Proxy against truth: the training reward beside the held-out metric over a run, what each
reward component contributes, how the response length drifts, and a flag when the reward rises
while the held-out metric does not (the reward is being gamed, or measures something else).

    report = proxy_vs_truth("runs/2026-11-28_0130")     # or a list of metric records
    print(report.text())
    report.reward, report.truth                          # [(step, value)], for a plot

Implementation choices:
1) "Rises" compares the mean of the last third of the logged points with the mean of the first
   third (single steps are noise at these sizes). The flag is raised when the reward rose by at
   least ``min_gain`` and the held-out metric rose by less than half of what the reward did, in
   the same units (both are shares of 1 for 0/1 rewards).
2) A component's share is its mean over the run divided by the sum of the components' means
   (``train/reward/<name>``): which part of the reward the policy collected.
3) The truth is ``validation/accuracy`` (the held-out share correct); a run without it has no
   truth to compare with, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rlnb.run.store.rundir import read_metrics_file

TRUTH = "validation/accuracy"
LENGTH = "train/mean_gen_tokens_per_sample"


def thirds(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """Means of the first and the last third of ``points`` (choice 1); None under 3 points."""
    if len(points) < 3:
        return None
    k = len(points) // 3
    first = [v for _, v in points[:k]]
    last = [v for _, v in points[-k:]]
    return sum(first) / len(first), sum(last) / len(last)


@dataclass
class ProxyReport:
    reward: list[tuple[int, float]] = field(default_factory=list)
    truth: list[tuple[int, float]] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)
    length: tuple[float, float] | None = None
    reward_gain: float | None = None
    truth_gain: float | None = None
    flag: str | None = None

    def text(self) -> str:
        lines = []
        if self.reward_gain is not None:
            lines.append(f"training reward: {self.reward_gain:+.3f} (last third against first)")
        if self.truth_gain is not None:
            lines.append(f"held-out accuracy: {self.truth_gain:+.3f}")
        elif not self.truth:
            lines.append("no held-out metric (validation/accuracy) to compare the reward with")
        if self.shares:
            lines.append("reward components' shares: " + ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in self.shares.items()))
        if self.length is not None:
            lines.append(f"response length: {self.length[0]:.1f} -> {self.length[1]:.1f} tokens")
        lines.append(self.flag or "no sign of the reward rising without the held-out metric")
        return "\n".join(lines)


def proxy_vs_truth(run, min_gain: float = 0.1) -> ProxyReport:
    """The report for a run directory or a list of metric records (module docstring)."""
    if isinstance(run, (str, Path)):
        path = Path(run) / "metrics.jsonl"
        if not path.is_file():
            raise ValueError(f"{run}: no metrics.jsonl (not an rlnb run directory)")
        records = read_metrics_file(path)
    else:
        records = list(run)
    out = ProxyReport()
    out.reward = [(r["step"], r["train/reward"]) for r in records if "train/reward" in r]
    out.truth = [(r["step"], r[TRUTH]) for r in records if TRUTH in r]
    names = sorted({k for r in records for k in r if k.startswith("train/reward/")})
    means = {}
    for k in names:
        values = [r[k] for r in records if isinstance(r.get(k), (int, float))]
        means[k.removeprefix("train/reward/")] = sum(values) / len(values)
    total = sum(means.values())
    if total > 0:
        out.shares = {k: v / total for k, v in means.items()}  # choice 2
    lengths = thirds([(r["step"], r[LENGTH]) for r in records if LENGTH in r])
    out.length = lengths
    reward, truth = thirds(out.reward), thirds(out.truth)
    out.reward_gain = None if reward is None else reward[1] - reward[0]
    out.truth_gain = None if truth is None else truth[1] - truth[0]
    if (out.reward_gain is not None and out.truth_gain is not None
            and out.reward_gain >= min_gain and out.truth_gain < out.reward_gain / 2):
        top = max(out.shares, key=out.shares.get) if out.shares else None
        out.flag = (f"the training reward rose {out.reward_gain:+.3f} while held-out accuracy "
                    f"moved {out.truth_gain:+.3f}: the reward may be paying for something other "
                    "than right answers" + (f" (most of it from '{top}')" if top else "")
                    + "; check the components on sampled completions (RewardWorkbench)")
    return out
