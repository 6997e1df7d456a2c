"""The diagnosis card: a run's first steps read together into plain findings, each with its fix.

    card = diagnose(records, config=trainer.config)       # metric records of the first steps
    card = diagnose_run("runs/2026-11-28_0130")            # rlnb.run.experiments.diagnosis
    print(card.text())                                     # rlnb doctor RUN_DIR

What it looks for, in the first ``first`` steps (default 20), and the evidence each reads:

- ``truncated``: half or more of the responses hit ``max_new_tokens``
  (``train/truncation_rate``);
- ``too_hard``: no response right in any step (``train/reward/correct``; without it, every
  group's baseline 0);
- ``rewards_constant``: every reward of every step the same value (``train/reward_std`` 0 and
  ``train/reward`` flat);
- ``too_easy``: on average 75 % or more of the groups right on every response
  (``train/baseline_reward/pct_1``);
- ``no_signal``: every group of every step had G equal rewards (``funnel/no_signal``): the loss is
  0 by construction;
- ``ratio_one`` (*expected* with one optimizer step per rollout): π_θ/π_old within 1e-4 of 1 on
  every token (``train/probs_ratio_min``, ``train/probs_ratio_max``);
- ``entropy_collapse``: ``train/approx_entropy`` fell below a quarter of its start (the first
  step's value, measured on the policy the run started from, against the mean of the last three);
- ``kl_runaway``: the KL to the reference (``train/kl_penalty``, nats a token) is far from where
  it starts. The reference is the policy the run started from, so the KL starts at 0 by
  definition: a mean of 0.2 or more over the first three steps is the finding itself (the first
  updates threw the policy off its start: a learning rate far too high); later, it doubled and
  passed 0.2 (the mean of the first three steps against the last three).

Implementation choices:
1) One cause, one finding: a finding that explains another hides it. Truncation hides
   ``too_hard``, ``no_signal`` and all-zero rewards (a cut-off answer cannot be right);
   ``too_hard``, ``rewards_constant`` and ``too_easy`` hide ``no_signal`` (they say *why* the
   groups agree); ``rewards_constant`` hides ``too_easy``; ``too_hard`` hides
   ``rewards_constant`` (all-zero rewards are a task nobody solves; the fix names the reward
   function too).
2) ``ratio_one`` is *expected*, not a problem, when each rollout trains in one optimizer step
   (``policy.train_global_batch_size`` = P x G): the policy that sampled is the one updated, so
   the ratio is 1 and the clip never acts. With several optimizer steps per rollout a ratio of 1
   is a problem (the later steps should see a moved policy) and the card says so, unless no row
   carried gradient (``funnel/trained`` 0 throughout): then nothing could move the policy, and
   the finding that says why (no signal, truncation) is the one shown.
3) Thresholds are stated in each finding's text with the numbers read, so a reader can judge a
   borderline case; they were chosen so that a healthy run of the tiny recipe shows none
   (``tests/engine/test_diagnosis.py`` builds a run for each finding and one healthy run).
4) The signal check (``rlnb.engine.inspection.signal_check``), when given, adds what it
   predicted for the run's G beside what the steps measured.
5) Pure: the records and a config in, the card out; no trainer state is touched.
6) A rule never needs the run's start to look healthy: where a metric's start is known by
   definition (the KL is 0) its level from the first step is read, and where it is not (the
   entropy) the first step, which the starting policy sampled, is the start. A KL that is far
   from 0 from the start hides what only came after its first step (collapse, truncation, a
   task nobody solves any more): those are its consequences, named in a note.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

TRUNCATED_SHARE = 0.5  # of the responses
EASY_PCT = 75.0  # mean percent of groups right on every response
RATIO_TOL = 1e-4
ENTROPY_FALL = 0.25  # last over first
KL_GROWTH, KL_FLOOR = 2.0, 0.2  # nats a token


@dataclass(frozen=True)
class Finding:
    """One thing the card found: ``key`` (a name from the module's table), ``kind``
    (``"problem"`` or ``"expected"``), what the metrics show, and the fix."""

    key: str
    kind: str
    what: str
    fix: str

    def text(self) -> str:
        label = "expected" if self.kind == "expected" else "problem"
        return f"[{label}] {self.key}: {self.what}\n    fix: {self.fix}"


@dataclass
class Diagnosis:
    """The card: the findings (most fundamental first) and the steps read."""

    steps: tuple[int, int] | None
    findings: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        return [f.key for f in self.findings]

    @property
    def problems(self) -> list[Finding]:
        return [f for f in self.findings if f.kind == "problem"]

    def text(self) -> str:
        if self.steps is None:
            return "diagnosis: no training step logged yet"
        a, b = self.steps
        head = f"diagnosis of steps {a}-{b}: " + (
            f"{len(self.problems)} problem(s)" if self.problems else "no problem found")
        return "\n".join([head, *(f.text() for f in self.findings), *self.notes])

    def __repr__(self) -> str:
        return self.text()

    def _repr_html_(self) -> str:
        from html import escape

        rows = "".join(
            f"<tr><td><b>{escape(f.key)}</b><br><i>{escape(f.kind)}</i></td>"
            f"<td>{escape(f.what)}</td><td>{escape(f.fix)}</td></tr>" for f in self.findings)
        head = escape(self.text().splitlines()[0])
        notes = "".join(f"<p>{escape(n)}</p>" for n in self.notes)
        table = (f"<table><tr><th>finding</th><th>what the steps show</th><th>fix</th></tr>"
                 f"{rows}</table>" if rows else "")
        return f"<div class='rlnb-diagnosis'><p><b>{head}</b></p>{table}{notes}</div>"


def flat_config(config: Any) -> dict[str, Any]:
    """A config (loaded model, nested mapping or already dotted) as dotted keys."""
    if config is None:
        return {}
    if hasattr(config, "model_dump"):
        config = config.model_dump(mode="json")
    out: dict[str, Any] = {}

    def walk(d: Mapping, prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, Mapping):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = v

    walk(config, "")
    return out


def _values(records: Sequence[Mapping], key: str) -> list[float]:
    return [float(r[key]) for r in records if isinstance(r.get(key), (int, float))]


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _span(records: Sequence[Mapping]) -> str:
    return f"steps {records[0]['step']}-{records[-1]['step']}"


def _truncated(records, cfg) -> Finding | None:
    rates = _values(records, "train/truncation_rate")
    if not rates:
        gen, cut = _values(records, "funnel/generated"), _values(records, "funnel/truncated")
        rates = [c / g for g, c in zip(gen, cut) if g]
    if not rates or _mean(rates) < TRUNCATED_SHARE:
        return None
    cap = cfg.get("policy.generation.max_new_tokens")
    at = f" ({cap} tokens)" if cap is not None else ""
    return Finding(
        "truncated", "problem",
        f"{100 * _mean(rates):.0f}% of the responses in {_span(records)} hit "
        f"policy.generation.max_new_tokens{at} before ending: a cut-off answer is rarely "
        "right, and its reward says nothing about the answer",
        "raise policy.generation.max_new_tokens; if the model never learned to stop, warm-start "
        "it on complete answers (sft.enabled); grpo.overlong_filtering keeps cut-off responses "
        "out of the loss meanwhile")


def _success(records) -> tuple[list[float], str] | None:
    correct = _values(records, "train/reward/correct")
    if correct:
        return correct, "right answer"
    pct0 = _values(records, "train/baseline_reward/pct_0")
    if pct0 and all(p >= 100.0 - 1e-9 for p in pct0):
        return [0.0 for _ in pct0], "reward above 0"
    return None


def _too_hard(records) -> Finding | None:
    found = _success(records)
    if found is None or any(v > 0 for v in found[0]):
        return None
    n = int(sum(_values(records, "funnel/generated"))) or None
    tries = f"{n} tries" if n else f"{len(records)} steps"
    return Finding(
        "too_hard", "problem",
        f"no {found[1]} in {tries} ({_span(records)}): every group fails every attempt, so "
        "GRPO has nothing to reinforce",
        "make a success reachable: warm-start on the task's answers (sft.enabled), lower the "
        "data's difficulty or use its curriculum, raise grpo.num_generations_per_prompt; if the "
        "task is solvable at this size, check that the reward function reads the response")


def _rewards_constant(records) -> Finding | None:
    stds, means = _values(records, "train/reward_std"), _values(records, "train/reward")
    if not stds or not means or any(s > 1e-9 for s in stds) or max(means) - min(means) > 1e-9:
        return None
    return Finding(
        "rewards_constant", "problem",
        f"every reward in {_span(records)} was {means[0]:g} (std 0 in every step): whatever "
        "the policy writes earns the same, so there is nothing to learn",
        "score a few responses by hand (the reward workbench, or the function on two different "
        "completions) and check the reward reads the completion; a threshold or a clamp that "
        "always fires gives this too")


def _too_easy(records) -> Finding | None:
    pct1 = _values(records, "train/baseline_reward/pct_1")
    if not pct1 or _mean(pct1) < EASY_PCT:
        return None
    return Finding(
        "too_easy", "problem",
        f"{_mean(pct1):.0f}% of the groups in {_span(records)} (mean) were right on every "
        "response: those groups carry no gradient, and the run spends its generation on them",
        "harder data (the task's difficulty settings or its curriculum), or "
        "grpo.use_dynamic_sampling to refill the batch with groups that carry signal")


def _no_signal(records) -> Finding | None:
    gen, none = _values(records, "funnel/generated"), _values(records, "funnel/no_signal")
    if not gen or len(gen) != len(none) or any(n < g for g, n in zip(gen, none)):
        return None
    loss = _values(records, "train/loss")
    zero = " and the loss is exactly 0" if loss and all(v == 0 for v in loss) else ""
    return Finding(
        "no_signal", "problem",
        f"in {_span(records)} every group's G rewards were equal (between groups they differ): "
        f"every advantage is 0{zero} by construction, which is not a bug in the loss",
        "the G responses of a group share their prompt: a reward that reads only the prompt (or a "
        "field the response never changes) does this; otherwise give partial credit or raise "
        "grpo.num_generations_per_prompt")


def _ratio_one(records, cfg) -> Finding | None:
    lo, hi = _values(records, "train/probs_ratio_min"), _values(records, "train/probs_ratio_max")
    if not lo or not hi or any(abs(v - 1) > RATIO_TOL for v in lo + hi):
        return None
    trained = _values(records, "funnel/trained")
    if trained and not any(trained):  # no row carried gradient: nothing could move the policy
        return None
    rows = (cfg.get("grpo.num_prompts_per_step") or 0) * (cfg.get(
        "grpo.num_generations_per_prompt") or 0)
    batch = cfg.get("policy.train_global_batch_size")
    several = bool(rows and batch and batch < rows)
    span = _span(records)
    if several:
        return Finding(
            "ratio_one", "problem",
            f"π_θ/π_old stayed within {RATIO_TOL:g} of 1 on every token in {span}, though each "
            f"rollout trains in {rows // batch} optimizer steps: the later steps should see a "
            "policy the first one moved",
            "check that the old log-probs are the sampling policy's (not recomputed after an "
            "update) and that the learning rate is not 0")
    return Finding(
        "ratio_one", "expected",
        f"π_θ/π_old was 1 (within {RATIO_TOL:g}) on every token in {span}: each rollout trains in "
        "one optimizer step, so the policy updated is the one that sampled and the clip never "
        "acts. This is expected, not a bug",
        "nothing to fix; for the clip to act, train each rollout in several optimizer steps "
        "(policy.train_global_batch_size below P x G)")


def _entropy_collapse(records) -> Finding | None:
    ent = _values(records, "train/approx_entropy")
    if len(ent) < 4:
        return None
    first, last = ent[0], _mean(ent[-3:])  # choice 6: step 1 is the starting policy's
    if first <= 0 or last > ENTROPY_FALL * first:
        return None
    return Finding(
        "entropy_collapse", "problem",
        f"the policy's entropy fell from {first:.3g} (step {records[0]['step']}) to {last:.3g} "
        f"nats a token (mean of the last three of {_span(records)}): it samples nearly one "
        "response, so groups stop differing and exploration ends",
        "lower policy.optimizer.lr; raise loss_fn.ratio_clip_max (clip-higher, e.g. 0.28) so "
        "unlikely tokens can rise; a KL penalty toward the reference "
        "(loss_fn.reference_policy_kl_penalty) holds the policy near its start")


def _kl_from_start(records) -> bool:
    """Whether the KL is already far from its start, 0, over the first steps (choice 6)."""
    kl = _values(records, "train/kl_penalty")
    return bool(kl) and _mean(kl[:3]) >= KL_FLOOR


def _kl_runaway(records) -> Finding | None:
    kl = _values(records, "train/kl_penalty")
    if not kl or not any(kl):
        return None
    first = _mean(kl[:3])
    fix = ("lower policy.optimizer.lr or raise loss_fn.reference_policy_kl_penalty; a reward the "
           "policy can game also pulls it away (compare the proxy reward with the held-out "
           "metric)")
    if _kl_from_start(records):  # choice 6: the KL starts at 0, so this level is the finding
        return Finding(
            "kl_runaway", "problem",
            f"the KL term toward the reference was already {first:.3g} nats a token over the "
            f"first {min(3, len(kl))} step(s) (step 1: {kl[0]:.3g}); the reference is the policy "
            f"the run started from, so it starts at 0 and a healthy run stays under {KL_FLOOR:g} "
            "for its first steps: the first updates threw the policy far from its start",
            "lower policy.optimizer.lr (by 10x or more: a first update this large is a step "
            "size, not a reward problem); raise loss_fn.reference_policy_kl_penalty only once "
            "the first steps stay near the start")
    if len(kl) < 6:
        return None
    last = _mean(kl[-3:])
    if last < KL_FLOOR or last < KL_GROWTH * first:
        return None
    grew = f"({last / first:.0f}x)" if first > 0 else "(from 0)"
    return Finding(
        "kl_runaway", "problem",
        f"the KL term toward the reference grew from {first:.3g} to {last:.3g} {grew} (mean of "
        f"the first and of the last three of {_span(records)}): the policy leaves the reference "
        "faster than the penalty holds it", fix)


FROM_THE_MOVE = ("entropy_collapse", "truncated", "too_hard", "rewards_constant", "no_signal")


def _shown_in(key: str, records, cfg) -> bool:
    """Whether finding ``key`` already shows in ``records`` (the first step, for choice 6)."""
    rules = {"truncated": lambda r: _truncated(r, cfg), "too_hard": _too_hard,
             "rewards_constant": _rewards_constant, "no_signal": _no_signal,
             "entropy_collapse": lambda r: None}  # a collapse needs steps to fall over
    return rules[key](records) is not None


def diagnose(records: Sequence[Mapping[str, Any]], *, config: Any = None, signal: Any = None,
             first: int = 20) -> Diagnosis:
    """Read the first ``first`` training steps of ``records`` (metric records with ``step``)
    into findings (module docstring). ``config``: the run's config (loaded, nested or dotted),
    for the facts a finding names; ``signal``: a ``SignalReport`` of the run's start."""
    steps = [r for r in records if "step" in r and any(k.startswith("train/") for k in r)]
    steps = steps[:first]
    if not steps:
        return Diagnosis(None)
    cfg = flat_config(config)
    found: dict[str, Finding | None] = {
        "truncated": _truncated(steps, cfg),
        "too_hard": _too_hard(steps),
        "rewards_constant": _rewards_constant(steps),
        "too_easy": _too_easy(steps),
        "no_signal": _no_signal(steps),
        "ratio_one": _ratio_one(steps, cfg),
        "entropy_collapse": _entropy_collapse(steps),
        "kl_runaway": _kl_runaway(steps),
    }
    consequences = []
    if _kl_from_start(steps):
        for key in FROM_THE_MOVE:  # choice 6: what only came after step 1
            if found[key] is not None and not _shown_in(key, steps[:1], cfg):
                consequences.append(key)
                found[key] = None
    hides = {"truncated": ("too_hard", "no_signal"), "too_hard": ("rewards_constant", "no_signal"),
             "rewards_constant": ("no_signal", "too_easy"), "too_easy": ("no_signal",)}
    if found["truncated"] and found["rewards_constant"] and not any(
            _values(steps, "train/reward")):
        found["rewards_constant"] = None  # all-zero rewards of cut-off answers: the truncation
    for key, hidden in hides.items():  # choice 1
        if found[key] is not None:
            for h in hidden:
                found[h] = None
    out = Diagnosis((steps[0]["step"], steps[-1]["step"]),
                    [f for f in found.values() if f is not None])
    if consequences:
        out.notes.append("after step 1, as consequences of the KL from the start (not shown "
                         "apart; the same fix): " + ", ".join(consequences))
    if signal is not None:  # choice 4
        G = signal.group_size
        out.notes.append(f"signal check at step {signal.step}: it expected "
                         f"{100 * signal.expected[G]:.0f}% of groups of G={G} without signal")
    gen, none = _values(steps, "funnel/generated"), _values(steps, "funnel/no_signal")
    if gen and len(gen) == len(none):
        out.notes.append(f"measured: {100 * sum(none) / sum(gen):.0f}% of the rows sat in groups "
                         f"without signal over {_span(steps)}")
    return out
