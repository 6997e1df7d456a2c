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
2) A component's share is what it added to the reward the policy collected: ``w_k · mean_k``
   over ``Σ_j w_j · mean_j``, with ``mean_k`` its mean over the run (``train/reward/<name>``,
   logged unweighted) and ``w_k`` its weight in the total. The weights are read off the log
   itself: every step's ``train/reward`` is ``Σ_k w_k · train/reward/<k>`` (a linear identity of
   the means), so they are the least-squares solution over the steps, accepted only when it is
   exact (to float rounding) and unique. A component of weight 0 is logged but not rewarded (the
   built-in tasks' ``format``, a reward function weighted 0), as is one that was 0 in every step
   (it added nothing whatever its weight); both are listed apart. A total that
   is no weighted sum of its components (reasoning-gym's ``reward: correct``) or too few steps
   to tell give no shares, and the report says so.
3) The truth is ``validation/accuracy`` (the held-out share correct); a run without it has no
   truth to compare with, and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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
    weights: dict[str, float] | None = None  # each component's weight in the total (choice 2)
    components: list[str] = field(default_factory=list)
    unrewarded: list[str] = field(default_factory=list)  # logged, weight 0
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
            lines.append("reward components' shares of what the policy collected: " + ", ".join(
                f"{k} {100 * v:.0f}%" for k, v in self.shares.items()))
        if self.unrewarded:
            lines.append("logged but not part of the reward collected (weight 0, or 0 in every "
                         "step): "
                         + ", ".join(self.unrewarded))
        elif self.weights is None and self.components:
            lines.append("reward components: " + ", ".join(self.components) + " (no shares: the "
                         "log does not show the reward as one weighted sum of them)")
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
    out.components = [k.removeprefix("train/reward/") for k in names]
    out.weights = component_weights(records, names)
    if out.weights is not None:  # choice 2
        means = {k.removeprefix("train/reward/"): sum(vals) / len(vals) for k in names
                 if (vals := [r[k] for r in records if isinstance(r.get(k), (int, float))])}
        paid = {k: w * means[k] for k, w in out.weights.items() if w != 0}
        out.unrewarded = [k for k, w in out.weights.items() if w == 0]
        total = sum(paid.values())
        if total > 0:
            out.shares = {k: v / total for k, v in paid.items()}
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


def component_weights(records, names: list[str], tol: float = 1e-5) -> dict[str, float] | None:
    """Each component's weight in ``train/reward`` as the steps show it (choice 2): the exact,
    unique solution of ``reward = Σ_k w_k · component_k`` over the steps that log them all, with
    weights within 1e-4 of an integer rounded to it; None if there is none. A component that is
    0 in every step added nothing whatever its weight: it gets weight 0."""
    rows = [r for r in records if isinstance(r.get("train/reward"), (int, float))
            and all(isinstance(r.get(k), (int, float)) for k in names)]
    if not names or not rows:
        return None
    A = np.array([[float(r[k]) for k in names] for r in rows])  # [steps, K]
    y = np.array([float(r["train/reward"]) for r in rows])  # [steps]
    live = np.abs(A).max(axis=0) > 0  # [K]
    w = np.zeros(len(names))
    if live.any():
        if int(live.sum()) > len(rows):
            return None
        w_live, _, rank, _ = np.linalg.lstsq(A[:, live], y, rcond=None)
        if rank < int(live.sum()):
            return None
        w[live] = w_live
    if float(np.abs(A @ w - y).max()) > tol * (1.0 + float(np.abs(y).max())):
        return None
    w = np.where(np.abs(w - np.round(w)) < 1e-4, np.round(w), w)
    return {k.removeprefix("train/reward/"): float(v) + 0.0 for k, v in zip(names, w)}
