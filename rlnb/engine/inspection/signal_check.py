"""The signal check: before training, how many of the run's groups will carry no signal?

    P(a group of G has no signal) = p^G + (1 - p)^G        (0/1 rewards, success rate p)
                                  = Σ_v q_v^G              (any reward: q_v = P(reward = v))

A group whose G rewards are all equal has zero advantage under any group baseline (GRPO,
RLOO, GDPO), so it adds nothing to the gradient: at p = 0.5 and G = 4, 2 · 0.5^4 = 12.5 % of
groups are lost; at p = 0.05 and G = 4, 81 %. The check samples ``samples`` responses per prompt
from the starting policy for the rows the run is about to train on, estimates each prompt's
distribution of rewards, and reports the expected share of groups with no signal for the run's
G and for G in {2, 4, 8, 16}. docs/guide.md#will-the-groups-carry-signal.

Implementation choices:
1) Each prompt's share is estimated without the plug-in bias of (k/n)^G: the chance that G of
   its n samples, drawn without replacement, all agree, Σ_v C(k_v, G) / C(n, G), is unbiased
   for Σ_v q_v^G (a U-statistic). For G > n it falls back to the plug-in Σ_v (k_v / n)^G.
2) The probe samples on its own random state and leaves the data position where it is, so a
   run checked first trains exactly as one that was not.
3) The probe's prompts are the next rows of the run's own training stream, so the estimate is
   of the groups the next steps will see; the share measured while training
   (``train/groups_with_signal``) drifts from it as the policy learns.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from math import comb

from rlnb.engine.trainers.rollout import sample_and_score
from rlnb.engine.trainers.validation import isolated_rng

GROUP_SIZES = (2, 4, 8, 16)


def no_signal_probability(p: float, G: int) -> float:
    """``p^G + (1 - p)^G``: the chance that G samples of a 0/1 reward with success rate ``p``
    all agree."""
    return p**G + (1 - p) ** G


def no_signal_estimate(counts: list[int], G: int) -> float:
    """The chance that G fresh samples of one prompt all score the same, from ``counts`` of
    each distinct reward among its n probe samples (choice 1)."""
    n = sum(counts)
    if n < 1 or G < 1:
        raise ValueError(f"need samples (got {n}) and G >= 1 (got {G})")
    if G <= n:
        return sum(comb(k, G) for k in counts) / comb(n, G)
    return sum((k / n) ** G for k in counts)


@dataclass
class SignalReport:
    """What ``signal_check`` found: per prompt and, averaged over prompts, per G."""

    group_size: int
    samples: int
    step: int
    prompts: list[dict] = field(default_factory=list)
    expected: dict[int, float] = field(default_factory=dict)  # G -> share of groups
    advice: list[str] = field(default_factory=list)

    @property
    def warning(self) -> bool:
        """Most groups of the run's G would carry no signal."""
        return self.expected[self.group_size] > 0.5

    def to_frame(self):
        import pandas as pd

        return pd.DataFrame(self.prompts)

    def expected_frame(self):
        import pandas as pd

        return pd.DataFrame([{"G": G, "expected share with no signal": v,
                              "this run": G == self.group_size}
                             for G, v in sorted(self.expected.items())])

    def summary(self) -> str:
        ps = [r["p"] for r in self.prompts if r["p"] is not None]
        lines = [f"signal check: {len(self.prompts)} prompts x {self.samples} samples of the "
                 f"policy at step {self.step}"]
        if ps:
            never = sum(p == 0 for p in ps)
            always = sum(p == 1 for p in ps)
            lines.append(f"  success rate p: mean {sum(ps) / len(ps):.2f}; never solved "
                         f"{never} prompts, always solved {always}")
        shares = "  ".join(f"G={G}{'*' if G == self.group_size else ''} {v:.2f}"
                           for G, v in sorted(self.expected.items()))
        lines.append(f"  expected share of groups with no signal: {shares}  (* this run)")
        lines += [f"  {a}" for a in self.advice]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def signal_check(trainer, *, num_prompts: int | None = None, samples: int = 16,
                 group_sizes=GROUP_SIZES) -> SignalReport:
    """Sample ``samples`` responses for each of the next ``num_prompts`` training rows (default:
    four steps' worth) from ``trainer``'s policy and estimate the share of groups with no signal
    for its G and for ``group_sizes`` (choices 1-3)."""
    loop = trainer.loop_config
    G = loop.num_generations_per_prompt
    if samples < 2:
        raise ValueError(f"samples must be >= 2 to see rewards differ, got {samples}")
    n_prompts = num_prompts or 4 * loop.num_prompts_per_step
    rows = trainer.prompt_rows_at(trainer.consumed_prompts, n_prompts)  # position unchanged
    with isolated_rng(loop.seed * 7_919 + trainer.step_count + 13, trainer.policy.device):
        batch = sample_and_score(trainer.rollout_inputs(), trainer.generator, rows, samples,
                                 trainer.step_count)
    rewards = batch.rewards.view(len(rows), samples).tolist()  # [P, n]
    correct = batch.correct.view(len(rows), samples).float().mean(1).tolist()  # [P]
    prompts = [batch.prompts[i * samples] for i in range(len(rows))]
    return report_from_samples(prompts, rewards, G, trainer.step_count,
                               correct if trainer.task.defines_correct else None, group_sizes)


def report_from_samples(prompts: list[str], rewards: list[list[float]], group_size: int,
                        step: int, success: list[float] | None = None,
                        group_sizes=GROUP_SIZES) -> SignalReport:
    """The report from rewards already sampled: ``rewards[i]`` the n_i rewards of prompt ``i``
    (a probe's samples, or a stored step's group), ``success[i]`` its success rate if the task
    has one. ``samples`` is the smallest n_i."""
    sizes = sorted({*group_sizes, group_size})
    report = SignalReport(group_size, min(map(len, rewards)), step)
    for i, prompt in enumerate(prompts):
        tally = Counter(rewards[i])  # reward value -> how many of the n samples
        counts = list(tally.values())
        entry = {"prompt": prompt, "p": None if success is None else float(success[i]),
                 "counts": dict(sorted(tally.items()))}
        entry.update({f"no signal, G={g}": no_signal_estimate(counts, g) for g in sizes})
        report.prompts.append(entry)
    report.expected = {g: sum(r[f"no signal, G={g}"] for r in report.prompts) / len(prompts)
                       for g in sizes}
    report.advice = advice(report)
    return report


def advice(report: SignalReport) -> list[str]:
    """What would help when most groups of the run's G would carry no signal."""
    if not report.warning:
        return []
    G, share = report.group_size, report.expected[report.group_size]
    out = [f"WARNING: about {share:.0%} of this run's groups (G={G}) would carry no signal: "
           "their advantages are 0 and they add nothing to the gradient."]
    larger = [g for g in sorted(report.expected) if g > G and report.expected[g] <= 0.5]
    if larger:
        out.append(f"- a larger G: at G={larger[0]} about {report.expected[larger[0]]:.0%}")
    ps = [r["p"] for r in report.prompts if r["p"] is not None]
    low = sum(p < 0.5 for p in ps)
    if ps and low >= len(ps) / 2:
        out.append("- an easier split (most prompts are rarely solved), or a warm start "
                   "(sft.enabled: a supervised run first) so the policy is right sometimes")
    elif ps:
        out.append("- a harder split: most prompts are nearly always solved")
    else:
        out.append("- an easier split, or a warm start (sft.enabled), so rewards differ within "
                   "a group")
    out.append(f"- ({report.samples} samples per prompt: a prompt solved less often than 1 in "
               f"{report.samples} looks never solved)")
    return out
