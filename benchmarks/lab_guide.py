"""docs/teaching.md's measured regions: where and how the numbers were measured, the dry run,
the pre-flight check, the platforms, the lab plans' compute times, notebook 01's opening, the
expected outputs and the discussion (``REGIONS``, with the exercises' own from ``lab_prose``)."""

from __future__ import annotations

import math
import re

from lab_prose import (
    EX,
    EXERCISE_REGIONS,
    TABLES,
    count,
    direction,
    ex1_numbers,
    ex3_lengths,
    minutes,
    points,
)
from lab_regions import NAMES, Lab, claim, held, num, pct, span

EMULATION = ("`--capability avx2`: `ATEN_CPU_CAPABILITY=avx2 MKL_ENABLE_INSTRUCTIONS=AVX2 "
             "ONEDNN_MAX_CPU_ISA=AVX2`, which reproduces an AVX2 machine's numbers bit for bit")


def measured_on(lab: Lab) -> str:
    lines = ["Measured with `python benchmarks/bench_lab.py measure` (seeds 0, 1 and 2, one "
             "torch thread):"]
    for c in lab.classes:
        m, rec = lab.machine(c), lab.record["classes"][c]
        if m.get("emulated"):
            lines.append(f"- **{NAMES.get(c, c)}**: the same machine kept within {NAMES[c]} "
                         f"({EMULATION}; its times are the wider machine's), {m['date']}.")
        else:
            lines.append(
                f"- **{NAMES.get(c, c)}**, on its own machine: {m['cores']} cores, torch "
                f"{m['torch']}, transformers {m['transformers']}, Python {m['python']}, "
                f"{m['date']}; load average {rec['load_before'].split()[0]} when it started "
                f"and {rec['load_after'].split()[0]} at the end (other jobs shared the "
                "machine: its times are upper bounds).")
    return "\n".join(lines)


def signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def signed3(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def dry_run(lab: Lab) -> str:
    run = lab.record["dry_run"]
    def command(text: str) -> str:  # the options naming this machine's folders left out
        return re.sub(r" --(cache|times|record) \S+", "", text).replace("|", "/")

    rows = [f"| {s['step']} | `{command(s['command'])}` | {minutes(s['seconds'])} |"
            for s in run["steps"]]
    last = next((x.strip() for x in reversed(run["verify"]) if "bench_lab verify" in x), "")
    return "\n".join([
        f"On {NAMES.get(run['cpu_class'], run['cpu_class'])}, {run['cores']} cores, "
        f"{run['date']} (`python benchmarks/lab_dry_run.py`; the venv: {run['venv_mb']} MB):", "",
        "| step | command | time |", "|---|---|---|", *rows, "",
        f"It ended with `{last}`: every solution ran in default mode, every check passed, and "
        "every figure the guide quotes for seed 0 came out as recorded."])


def preflight(lab: Lab) -> str:
    """The dry run's ``rlnb preflight`` (a student's command, from an empty cache)."""
    run = lab.record["dry_run"]
    step = next(s for s in run["steps"] if s["step"].startswith("rlnb preflight"))
    out = run["preflight_output"]
    estimate = re.search(r"all live runs together: about ([^(]+?) \(", out).group(1)
    block = out.split("warm starts and speed")[1].split("report (if")[0].rstrip()
    return "\n".join([
        f"Measured in the dry run above ({NAMES.get(run['cpu_class'], run['cpu_class'])}, "
        f"{run['cores']} cores, load average {step['load'].split()[0]} at its end), from an "
        f"empty cache: `rlnb preflight` took **{minutes(step['seconds'])}**, most of it building "
        f"the warm starts and timing each live run, and estimated the lab's live runs at "
        f"{estimate}. Its timing part (on a machine doing other work the figures are upper "
        "bounds: the load is printed with them):", "", "```", "warm starts and speed" + block,
        "```"])


PLATFORMS = {"macosx_14_0_arm64": "macOS 14 or later on Apple silicon",
             "macosx_13_0_x86_64": "macOS 13 or later on Intel", "win_amd64": "Windows on x86-64"}


def platforms(lab: Lab) -> str:
    p = lab.record["platforms"]
    lines = [f"- {PLATFORMS.get(name, name)} (`{name}`): "
             + (f"all {p['packages']} have a wheel" if not missing else
                f"{p['packages'] - len(missing)} of {p['packages']} have a wheel; none for "
                f"{', '.join(missing)}")
             for name, missing in p["results"].items()]
    return (f"`rlnb[{p['extra']}]` on the lock is {p['packages']} packages besides rlnb; for "
            f"Python {p['python']} ({p['date']}):\n" + "\n".join(lines))


def _times(lab: Lab) -> tuple[dict, str]:
    """Each notebook's wall time and cells: the dry run's (warm starts cached by preflight),
    else the native class's seed-0 measurement (warm starts built on first use)."""
    if "dry_run" in lab.record and lab.record["dry_run"].get("notebooks"):
        return lab.record["dry_run"]["notebooks"], "the dry run above"
    seeds = lab.record["classes"][lab.native]["seeds"]["0"]
    return seeds, "the measurement of seed 0, warm starts built on first use"


def plan(rows: list[tuple[str, str, str]]) -> str:
    return "\n".join(["| time | step | compute (measured) |", "|---|---|---|",
                      *(f"| {t} | {step} | {compute} |" for t, step, compute in rows)])


def lab_90(lab: Lab) -> str:
    t, where = _times(lab)
    ex = {i: t[EX[i]]["cells"] for i in range(1, 5)}
    total = sum(ex[i]["batch"] + ex[i]["live"] for i in range(1, 4)) + ex[4]["batch"]
    rows = [
        ("0:00", "What GRPO does: P × G samples, a group baseline, the clipped ratio, shown on "
                 "notebook 01's stages and dashboard on the lecturer's screen "
                 "([below](#notebook-01-as-the-opening)) (10 min)",
         f"{minutes(t['opening']['seconds'])} with `-p num_steps 300`, run before class or "
         "while talking"),
        ("0:10", "**Exercise 1**, sections 1-3: baseline, advantages, the real batch (15 min)",
         f"{minutes(ex[1]['batch'])} (the warm-started trainer and one rollout)"),
        ("0:25", "Exercise 1, section 4: predict, run, discuss (10 min)",
         f"{minutes(ex[1]['live'])} (two runs of 100 steps)"),
        ("0:35", "**Exercise 2**: the clipped surrogate, which tokens stop learning, predict, "
                 "run (20 min)", f"{minutes(ex[2]['live'])} (three runs of 60 steps)"),
        ("0:55", "**Exercise 3**: two reductions, token weights on a real batch, predict, run "
                 "(15 min)", f"{minutes(ex[3]['batch'])} + {minutes(ex[3]['live'])}"),
        ("1:10", "**Exercise 4**, sections 1-3: k1/k2/k3, the exact KL, their bias (10 min; the "
                 "live run is homework or a demo)",
         f"{minutes(ex[4]['rest'])} (+ {minutes(ex[4]['live'])} for the run)"),
        ("1:20", "Discussion: the null results of exercises 2 and 3 and why they occur (10 min)",
         "—")]
    return f"""{plan(rows)}

Total compute about {minutes(total)} of the 90 ({minutes(total + ex[4]['live'])} with exercise 4's
live run), from {where}. A student who falls behind can paste the solution copy's cell and go
on; the four notebooks, executed end to end with `rlnb run`, took
{minutes(sum(t[EX[i]]['seconds'] for i in range(1, 5)))} (kernel starts and imports included)."""


def lab_180(lab: Lab) -> str:
    t, where = _times(lab)
    c = {i: t[EX[i]]["cells"] for i in range(1, 8)}
    first = sum(c[i]["batch"] + c[i]["live"] + c[i]["rest"] for i in range(1, 5))
    each = ", ".join(f"exercise {i} {minutes(t[EX[i]]['seconds'])}" for i in range(1, 8))
    rows = [
        ("0:00", "Each student runs notebook 01 (`num_steps = 300`): the stages one by one, "
                 "then live training with the dashboard (20 min)",
         minutes(t["opening"]["seconds"])),
        ("0:20", "As the 90-minute lab from exercise 1, with exercise 4 complete (its live run "
                 "included) (70 min)", minutes(first)),
        ("1:30", "Break (15 min)", "—"),
        ("1:45", "**Exercise 5**: GAE, where λ puts the credit, PPO with λ = 1 and 0 (25 min)",
         f"{minutes(c[5]['live'])} (two PPO runs of 60 steps: a PPO step costs several GRPO "
         "steps)"),
        ("2:10", "**Exercise 6**: the DPO loss and its gradient, then online DPO with the "
                 "student's own loss against GRPO (25 min)",
         f"{minutes(c[6]['live'])} (three runs of 60 steps)"),
        ("2:35", "**Exercise 7**: a reward function for the reverse task, groups with signal on "
                 "real samples, temperature (20 min)",
         f"{minutes(c[7]['batch'])} + {minutes(c[7]['live'])}"),
        ("2:55", "Closing: what each exercise showed at toy scale and what would change at "
                 "scale (5 min)", "—")]
    return f"""{plan(rows)}

All seven notebooks, executed end to end with `rlnb run` (solution copies), took
{minutes(sum(t[EX[i]]['seconds'] for i in range(1, 8)))} of compute ({where}): {each} (each
including its kernel start and imports)."""


def opening(lab: Lab) -> str:
    c = lab.native
    o = lab.got(c, "0", "opening")
    acc = [v for _, v in sorted((int(k), v) for k, v in o["accuracy"].items())]
    p, parts = o["panels"], o["parts"]
    steps = sorted(int(k) for k in o["accuracy"])
    rows = [f"| {lab.label(cl, s)} | {pct(list(x['accuracy'].values())[0])} → "
            f"{pct(list(x['accuracy'].values())[-1])} |"
            for cl, s in lab.runs for x in [lab.got(cl, s, "opening")]]
    claim(p["reward"]["last"] > p["reward"]["first"], "the reward rises")
    command = "OMP_NUM_THREADS=1 rlnb run notebooks/01_grpo_step_by_step.ipynb -p num_steps 300"
    return f"""`{command}` (or the
same in JupyterLab with `num_steps = 300` in its parameters cell; one thread, as the lab's
numbers are measured) took {minutes(o['seconds'])} on the build machine ({NAMES.get(c, c)}):
{minutes(parts['setup'])} to build and load the warm-started trainer, {minutes(parts['stages'])}
for the stages (rollout, advantages, dry run, update, the token views) and the dashboard's set-up,
and {minutes(parts['training'])} for the 300 steps (validation every 50 included). Seed 0 went
from {pct(acc[0])} to {pct(acc[-1])} held-out accuracy. What each dashboard panel should show, in
that run (means over the first 10 steps and the last 10):

- **reward** goes from {num(p['reward']['first'])} to {num(p['reward']['last'])};
- **held-out accuracy** (steps {', '.join(str(x) for x in steps if x % 50 == 0)}):
  {', '.join(pct(a) for x, a in zip(steps, acc) if x % 50 == 0)}, and {pct(acc[-1])} in the
  notebook's last validation: it is not monotone, and one validation of 200 problems moves by a
  few points by chance;
- **KL to the reference** (k3, β = 0.01) goes from {num(p['kl']['first'], 3)} to
  {num(p['kl']['last'], 3)}: the policy leaves the warm start; a steady climb is expected with a
  small β;
- **entropy** (`approx_entropy`) goes from {num(p['entropy']['first'])} to
  {num(p['entropy']['last'])} nats per token;
- **clip fraction** is {num(p['clip']['first_step'], 3)} on the first step, then
  {num(p['clip']['min'], 3)} to {num(p['clip']['max'], 3)}: it is non-zero only because the
  default takes two optimizer steps per rollout (exercise 2);
- **response length** stays between {num(p['length']['min'])} and {num(p['length']['max'])}
  tokens (digits and the end-of-sequence token);
- **groups with signal** stay between {num(p['signal']['min'])} and {num(p['signal']['max'])};
- **timings**: one step about {p['step_seconds']['last']:.2f} s on that machine at its load
  (`rlnb preflight` prints a machine's own figure).

Held-out accuracy after the 300 steps, every run:

| CPU, seed | before → after |
|---|---|
{chr(10).join(rows)}"""


def expected(lab: Lab) -> str:
    c0 = lab.classes
    b1 = {c: lab.got(c, "0", EX[1])["batch"] for c in c0}
    w3 = {c: lab.got(c, "0", EX[3])["weights"] for c in c0}
    lam = lab.got(lab.native, "0", EX[5])["lambdas"]
    grad = lab.got(lab.native, "0", EX[6])["gradient"]
    b7 = {c: lab.got(c, "0", EX[7])["batch"] for c in c0}
    claim(all(b["equal"] for b in b7.values()), "the student's reward equals the task's")
    per = "; ".join(
        f"on {NAMES.get(c, c)} the student's advantages equal the trainer's to "
        f"{b1[c]['trainer_difference']:.1e} and differ from the recipe's by up to "
        f"{b1[c]['recipe_difference']:.2f}, and {b1[c]['zero_groups']} of the "
        f"{len(b1[c]['right_per_group'])} groups are all right or all wrong" for c in c0)
    weights = "; ".join(
        f"{NAMES.get(c, c)}: {num(next(iter(w3[c]['token level'].values())), 4)} at token level, "
        f"and at sequence level {num(w3[c]['sequence level'][min(w3[c]['sequence level'])], 4)} "
        f"for a {min(w3[c]['sequence level'])}-token response down to "
        f"{num(w3[c]['sequence level'][max(w3[c]['sequence level'])], 4)} for a "
        f"{max(w3[c]['sequence level'])}-token one" for c in c0)
    lam_rows = "; ".join(f"{k} gives {', '.join(f'{v:g}' for v in row.values())}"
                         for k, row in lam.items() if k in ("λ = 0.0", "λ = 1.0"))
    grads = "; ".join(f"margin {g['margin']:g} → loss {g['loss']:.4f}, gradient "
                      f"∓{abs(g['chosen']):.4f}" for g in grad)
    b7s = "; ".join(f"{NAMES.get(c, c)}: {pct(b7[c]['accuracy'])} right, "
                    f"{num(b7[c]['signal'])} of the groups with signal" for c in c0)
    bias = EXERCISE_REGIONS["04-bias"](lab)
    return f"""**Exercise 1, group size** (100 steps):

{TABLES[1](lab)}

Before it, the real batch of seed 0 (section 3): {per}.

**Exercise 2, optimizer steps per rollout** (60 steps):

{TABLES[2](lab)}

**Exercise 3, token- vs sequence-level on `addition_think`** (60 steps). On seed 0's batch every
token weighs 1/N_tok at token level and 1/(|o|·N_seq) at sequence level: {weights}.

{TABLES[3](lab)}

**Exercise 4.** The bias table (seed 0, 200 000 samples) is in the solution. {bias} The KL
penalty (100 steps):

{TABLES[4](lab)}

**Exercise 5, PPO with λ = 1 and λ = 0** (60 steps, the first 10 training the critic only).
The λ table for one response (γ = 1, reward 1, values 0.2, 0.3, 0.6, 0.6, 0.6): {lam_rows}.

{TABLES[5](lab)}

**Exercise 6, GRPO against online DPO** (60 steps). The gradient cell: {grads}.

{TABLES[6](lab)}

**Exercise 7, temperature on the reverse task** (60 steps). On seed 0's first batch at τ = 1
the student's reward equals the task's on every sample; {b7s}.

{TABLES[7](lab)}

(Validation samples at the run's temperature: the same model scores differently at τ = 0.3.)"""


def discussion(lab: Lab) -> str:
    n = len(lab.runs)
    d1, d3 = ex1_numbers(lab), ex3_lengths(lab)
    opt = [lab.live(EX[2], x, k) for x in ("4 steps, ε_high 0.2", "4 steps, ε_high 0.28")
           for k in ("train/clip_fraction", "train/approx_entropy", "accuracy after")]
    low, high = opt[0], opt[3]
    ent = [b - a for a, b in zip(opt[1], opt[4])]
    acc = [b - a for a, b in zip(opt[2], opt[5])]
    k = [lab.live(EX[4], b, "train/kl_penalty") for b in ("β = 0.01", "β = 0.5")]
    cost = [a - b for a, b in zip(*(lab.live(EX[4], b, "accuracy after")
                                    for b in ("β = 0.01", "β = 0.5")))]
    lam0 = lab.live(EX[5], "λ = 0.0", "accuracy after")
    g1 = [a - b for a, b in zip(lab.live(EX[6], "GRPO", "accuracy after"),
                                lab.live(EX[6], "GRPO", "accuracy before"))]
    dpo_loss = (lab.live(EX[6], "DPO β = 0.1", "dpo/loss")
                + lab.live(EX[6], "DPO β = 1.0", "dpo/loss"))
    t = {x: [a - b for a, b in zip(lab.live(EX[7], x, "accuracy after"),
                                   lab.live(EX[7], x, "accuracy before"))]
         for x in ("temperature 1.0", "temperature 0.3")}
    collapsed = count(lam0, lambda x: x < 0.05)
    g2 = ("G = 2 ended higher " + held(d1["g2"], n) if d1["g2"] >= d1["g16"] else
          "G = 16 ended higher " + held(d1["g16"], n))
    entropy = direction(ent, n, "raised the entropy {runs}", "lowered the entropy {runs}",
                        "moved the entropy both ways (up {up}, down {down}")
    accuracy = direction(acc, n, "raised held-out accuracy {runs}",
                         "lowered held-out accuracy {runs}",
                         "moved held-out accuracy both ways (up {up}, down {down})")
    joint = ", " if "(" in entropy else " ("  # the change in nats, inside its parenthesis
    right = count(d3["right"], lambda x: x > 0.05)
    wrong = count(d3["wrong"], lambda x: x > 0.05)
    if wrong == n and right == n:
        reading = ("the per-sequence mean lengthened every response here, right or wrong, which "
                   "is not yet Dr. GRPO's claim (that wrong answers in particular grow)")
    elif wrong == n:
        reading = ("wrong answers grew on every run and right ones less often: the direction "
                   "of Dr. GRPO's claim, at this scale")
    else:
        reading = "a trend at most (not on every run, and right answers moved too)"
    return f"""- **Clip-higher (exercise 2).** With four optimizer steps per rollout the clip acts
  on {span(low)} of the tokens; raising ε_high from 0.2 to 0.28 lowered that
  {held(count(zip(low, high), lambda x: x[1] < x[0]), n)}, {entropy}{joint}{span(ent, signed3)}
  nats) and {accuracy}. The answers are 3-4 characters
  long, the model is sure of most of them, and the upper clip binds on few tokens, so there is
  little for clip-higher to release: DAPO's entropy effect needs long responses with many rare
  tokens whose probability the clip holds back. What would a longer task change?
- **Dr. GRPO's length bias (exercise 3).** Under the sequence-level loss wrong answers were
  longer {held(wrong, n)} and right answers {held(right, n)} (sequence minus token level:
  {span(d3['wrong'], signed)} tokens for wrong answers, {span(d3['right'], signed)} for right
  ones): {reading}. The token-weight cell shows why lengths can drift: a short response's
  tokens weigh several times a long one's. Questions: what would separate the two (a reward
  that does not depend on length, more steps)? Why does Dr. GRPO also remove the ÷ std?
- **A 50-times stronger KL penalty cuts the KL by only {span([1 - b / a for a, b in zip(*k)])}
  (exercise 4)**; it cost accuracy {held(count(cost, lambda x: x > 0), n)}. Why is the KL not
  proportional to 1/β? (Near the reference the penalty's gradient is small.) What is the
  penalty for, if not accuracy?
- **λ = 0 {'destroys the policy' if collapsed == n else 'can destroy the policy'} (exercise 5)**
  ({held(collapsed, n)} it ended below 5 % held-out accuracy after 50 policy steps): the
  advantages are then all critic, the critic is young, and whitening makes its noise full
  size. A good one to ask students to predict.
- **G = 2 against G = 16 (exercise 1):** {g2} (G = 2 minus G = 16: {span(d1['diff'], points)}
  points), although {span([1 - x for x in d1['s2']])} of its pairs carry no signal. Students
  usually predict that G = 16 wins. The likely reason G = 2 keeps up is that each step covers
  eight times as many problems; the experiment to tell is one line in `rlnb.teach.EXPERIMENTS`
  (64 × 4, 32 × 8).
- **The DPO loss does not measure progress (exercise 6):** it ended at or above ln 2
  {held(count(dpo_loss, lambda x: x >= math.log(2)), 2 * n)} of both β while GRPO's accuracy
  moved by {span(g1, points)} points: each step's pairs are new samples of the current policy,
  and the wrong answers it still samples are those whose log-ratio to π_ref grew. A loss on
  fresh on-policy data is not a training curve.
- **Temperature (exercise 7):** τ = 1.0 gained more held-out accuracy than τ = 0.3
  {held(count(range(n), lambda i: t['temperature 1.0'][i] > t['temperature 0.3'][i]), n)}
  ({span(t['temperature 1.0'], points)} against {span(t['temperature 0.3'], points)} points).
  Not isolated; see the solution's answer for what to discuss."""


REGIONS = {**EXERCISE_REGIONS, "measured-on": measured_on, "dry-run": dry_run,
           "preflight": preflight, "platforms": platforms, "lab-90": lab_90, "lab-180": lab_180,
           "opening": opening, "expected": expected, "discussion": discussion}
