"""The lab's regions, one function each (``REGIONS``): docs/teaching.md's measured sections and
the exercises' "What happened" answers, written from ``lab_regions.Lab``.

Conventions: accuracies as percentages of the held-out problems, "a → b" before and after; a
conclusion over the runs counted with ``held``; a point difference in percentage points.
"""

from __future__ import annotations

import math

from lab_regions import NAMES, WORDS, Lab, before_after, claim, held, num, pct, span, table

EX = {1: "01_grpo_advantages", 2: "02_clipped_surrogate", 3: "03_loss_aggregation",
      4: "04_kl_estimators", 5: "05_gae", 6: "06_dpo_loss", 7: "07_reward_function"}


def points(x: float) -> str:
    """A signed difference in percentage points."""
    return f"{100 * x:+.1f}".replace("-", "−")


def pts(x: float) -> str:
    """A size in percentage points (no sign)."""
    return f"{100 * abs(x):.1f}"


def direction(values, n: int, up: str, down: str, both: str) -> str:
    """``up`` / ``down`` when every run moved that way (``{runs}`` counted), else ``both``."""
    ups, downs = count(values, lambda x: x > 0), count(values, lambda x: x < 0)
    if ups == n:
        return up.format(runs=held(n, n))
    if downs == n:
        return down.format(runs=held(n, n))
    return both.format(up=held(ups, n), down=held(downs, n))


def minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def count(values, test) -> int:
    return sum(1 for v in values if test(v))


def runs_phrase(lab: Lab) -> str:
    seeds = sorted({s for _, s in lab.runs})
    which = f"seed {seeds[0]}" if len(seeds) == 1 else \
        f"seeds {', '.join(seeds[:-1])} and {seeds[-1]}"
    return f"{which} on " + " and ".join(NAMES.get(c, c) for c in lab.classes)


def header(lab: Lab, what: str) -> str:
    return f"**What happened** ({what}; {runs_phrase(lab)}, measured for docs/teaching.md):"


# --------------------------------------------------------------------------- exercise 1


def ex1_start(lab: Lab) -> str:
    before = lab.live(EX[1], "G = 16 (16 prompts)", "accuracy before")
    return (f"The warm-started model is right on {span(before)} of the held-out problems "
            "(seeds 0-2 on the CPU classes of docs/teaching.md; your seed and machine print "
            "theirs as the runs start).")


def ex1_table(lab: Lab) -> str:
    part, g16, g2 = EX[1], "G = 16 (16 prompts)", "G = 2 (128 prompts)"

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        return [f"{num(live[g16]['train/groups_with_signal'])} / "
                f"{num(live[g2]['train/groups_with_signal'])}",
                before_after(lab, part, g16, c, s), before_after(lab, part, g2, c, s)]
    return table(lab, ["groups with signal, G = 16 / G = 2", "held-out accuracy, G = 16",
                       "G = 2"], row)


def ex1_numbers(lab: Lab) -> dict:
    part, g16, g2 = EX[1], "G = 16 (16 prompts)", "G = 2 (128 prompts)"
    a16, a2 = lab.live(part, g16, "accuracy after"), lab.live(part, g2, "accuracy after")
    diff = [b - a for a, b in zip(a16, a2)]
    return {"s16": lab.live(part, g16, "train/groups_with_signal"),
            "s2": lab.live(part, g2, "train/groups_with_signal"),
            "p": lab.live(part, g16, "train/reward"), "diff": diff,
            "g2": count(diff, lambda d: d > 0), "g16": count(diff, lambda d: d < 0)}


def ex1_answer(lab: Lab) -> str:
    n, d = len(lab.runs), ex1_numbers(lab)
    formula16 = [1 - p ** 16 - (1 - p) ** 16 for p in d["p"]]
    below = count(zip(d["s16"], formula16), lambda x: x[0] < x[1])
    pair = 2 * sum(d["p"]) / n * (1 - sum(d["p"]) / n)  # 2p(1-p) at the mean reward
    if d["g2"] == n:
        winner = f"G = 2 ended higher {held(n, n)} (by {span(d['diff'], pts)} points)"
    elif d["g16"] == n:
        winner = f"G = 16 ended higher {held(n, n)} (by {span(d['diff'], pts)} points)"
    else:
        winner = (f"No consistent winner: G = 2 ended higher {held(d['g2'], n)}, G = 16 "
                  f"{held(d['g16'], n)}" + (f", and they tied {held(n - d['g2'] - d['g16'], n)}"
                                            if n - d["g2"] - d["g16"] else "")
                  + f" (G = 2 minus G = 16: {span(d['diff'], points)} points)")
    return f"""{header(lab, "100 steps")}

{ex1_table(lab)}

1. With p, the training reward, at {span(d['p'], lambda x: f'{x:.2f}')},
   $1 - p^{{16}} - (1-p)^{{16}}$ is nearly 1 and $2p(1-p)$ about {pair:.2f}; measured:
   {span(d['s16'], num)} and {span(d['s2'], num)}, below the formula {held(below, n)} for G = 16,
   because p is not one number: some prompts the model always gets right or always wrong.
2. {winner}, although {span([1 - x for x in d['s2']], pct)} of the G = 2 pairs carried no
   signal: G = 2 trains on 128 different problems per step instead of 16, with about
   {256 * sum(d['s2']) / n:.0f} of its 256 answers in pairs with signal against about
   {256 * sum(d['s16']) / n:.0f} in G = 16's groups. A hundred steps and one validation of 200
   problems move by a few points by chance; we did not isolate the cause, and running 64 × 4
   and 32 × 8 would (one line in `rlnb.teach.EXPERIMENTS`)."""


# --------------------------------------------------------------------------- exercise 2

OPT = ("1 step per rollout", "4 steps, ε_high 0.2", "4 steps, ε_high 0.28")


def ex2_table(lab: Lab) -> str:
    part = EX[2]

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        return [" / ".join(num(live[x]["train/clip_fraction"], 3) for x in OPT),
                " / ".join(num(live[x]["train/approx_entropy"], 3) for x in OPT[1:]),
                pct(live[OPT[0]]["accuracy before"]) + " → "
                + " / ".join(pct(live[x]["accuracy after"]) for x in OPT)]
    return table(lab, ["clip fraction: 1 step / 4 steps ε_hi 0.2 / ε_hi 0.28",
                       "entropy (nats), ε_hi 0.2 / 0.28",
                       "held-out accuracy, 1 step / 0.2 / 0.28"], row)


def ex2_answer(lab: Lab) -> str:
    part, n = EX[2], len(lab.runs)
    one, low, high = (lab.live(part, s, "train/clip_fraction") for s in OPT)
    e_low, e_high = (lab.live(part, s, "train/approx_entropy") for s in OPT[1:])
    a_low, a_high = (lab.live(part, s, "accuracy after") for s in OPT[1:])
    claim(all(x == 0 for x in one), "exactly 0 with one optimizer step per rollout")
    lowered = count(zip(low, high), lambda x: x[1] < x[0])
    ent = [b - a for a, b in zip(e_low, e_high)]
    acc = [b - a for a, b in zip(a_low, a_high)]
    by = span([abs(x) for x in ent], lambda x: num(x, 3))
    entropy = direction(
        ent, n, f"Clip-higher raised the entropy {{runs}}, as DAPO says it should, by {by} nats.",
        f"Clip-higher lowered the entropy {{runs}} (by {by} nats), the opposite of DAPO's claim.",
        "No consistent effect on entropy: it rose {up} and fell {down} "
        f"({span(ent, lambda x: f'{x:+.3f}'.replace('-', '−'))} nats).")
    accuracy = direction(acc, n, f"rose with clip-higher {{runs}} ({span(acc, points)} points)",
                         f"fell with clip-higher {{runs}} ({span(acc, points)} points)",
                         "moved both ways: up {up}, down {down} "
                         f"({span(acc, points)} points), as much as it moves between seeds")

    return f"""{header(lab, "60 steps; clip fraction and entropy: means over the last 10 steps")}

{ex2_table(lab)}

1. Exactly 0 on every step of every run: with one optimizer step per rollout, π_θ is π_old
   when the loss is computed, ρ = 1 for every token and the clip never acts.
2. With four steps the clip acts on {span(low, pct)} of the tokens; clip-higher lowered that
   {held(lowered, n)} (by {span([a - b for a, b in zip(low, high)], pts)} points): the upper
   bound binds less often.
3. {entropy} Held-out accuracy {accuracy}. The answers are 3-4 characters long and the upper
   clip binds on a few tokens in a hundred, so raising it has little to release; DAPO's entropy
   effect comes from long responses with many rare tokens."""


# --------------------------------------------------------------------------- exercise 3


def signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def ex3_lengths(lab: Lab) -> dict:
    part = EX[3]
    wrong = [lab.live(part, s, "train/mean_gen_tokens_incorrect") for s in ("token-level",
                                                                            "sequence-level")]
    right = [lab.live(part, s, "train/mean_gen_tokens_correct") for s in ("token-level",
                                                                          "sequence-level")]
    return {"wrong": [b - a for a, b in zip(*wrong)], "right": [b - a for a, b in zip(*right)]}


def ex3_table(lab: Lab) -> str:
    part = EX[3]

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        t, q = live["token-level"], live["sequence-level"]
        return [f"{num(t['train/mean_gen_tokens_incorrect'])} / "
                f"{num(q['train/mean_gen_tokens_incorrect'])}",
                f"{num(t['train/mean_gen_tokens_correct'])} / "
                f"{num(q['train/mean_gen_tokens_correct'])}",
                before_after(lab, part, "token-level", c, s),
                before_after(lab, part, "sequence-level", c, s)]
    return table(lab, ["wrong answers' length, token / sequence", "right answers'",
                       "accuracy, token level", "sequence level"], row)


def ex3_answer(lab: Lab) -> str:
    from rlnb.run.experiments.stats import difference_ci

    part, n = EX[3], len(lab.runs)
    tok = lab.live(part, "sequence-level", "train/mean_gen_tokens_incorrect")
    base = lab.live(part, "token-level", "train/mean_gen_tokens_incorrect")
    d = ex3_lengths(lab)
    ci = difference_ci(tok, base, paired=True)
    longer = count(d["wrong"], lambda x: x > 0.05)

    contains = ci.low <= 0 <= ci.high
    grew = count(d["right"], lambda x: x > 0.05)
    if not contains and longer == n and grew == n:
        second = ("The sequence-level loss lengthened the responses on every run, the right "
                  "ones as much as the wrong ones: here it is a length effect on all answers, "
                  "not Dr. GRPO's bias against short wrong answers in particular (which the "
                  "÷ std of a group also feeds). Held-out accuracy moved little in 60 steps on "
                  "this task, with either loss.")
    else:
        second = (f"One run would not do: the differences range from "
                  f"{span(d['wrong'], signed)} tokens. At this scale (answers of 3-6 "
                  "characters, 60 steps) the length bias is at most a trend; held-out accuracy "
                  "moves little in 60 steps on this task, with either loss.")
    return f"""{header(lab, "60 steps; lengths in tokens, means over the last 10 steps")}

{ex3_table(lab)}

1. Under the sequence-level loss wrong answers were longer {held(longer, n)} (sequence minus
   token level: {span(d['wrong'], signed)} tokens), right answers {held(grew, n)}
   ({span(d['right'], signed)}); Dr. GRPO's claim is that *wrong* answers grow. The
   paired 95 % t interval of the difference for wrong answers over the {WORDS[n]} runs is
   {num(ci.estimate)} [{num(ci.low)}, {num(ci.high)}] tokens
   (`rlnb.run.experiments.stats.difference_ci`): it {'contains' if contains else 'excludes'} 0.
2. {second}"""


# --------------------------------------------------------------------------- exercise 4

KL = ("β = 0.01", "β = 0.5")


def ex4_bias(lab: Lab) -> str:
    rows = {c: lab.got(c, "0", EX[4])["bias"] for c in lab.classes}
    first = rows[lab.classes[0]]
    same = all(r == first for r in rows.values())
    close, far = first["close"], first["far"]
    se = {k: max(abs(r[f"{k} mean"] - r["exact KL"]) / (r[f"{k} std"] / math.sqrt(200_000))
                 for r in (close, far)) for k in ("k1", "k2", "k3")}
    claim(se["k1"] < 3 and se["k3"] < 3, "k1's and k3's means sit within about two standard "
                                         "errors of the exact KL")
    claim(far["k3 std"] > far["k1 std"], "for the far pair k3's std is the larger one")
    note = ("The same table on every CPU class measured." if same else
            f"Seed 0 on {NAMES.get(lab.classes[0], lab.classes[0])}; the other class differs "
            "in the last digits.")
    return f"""With 200 000 samples the standard error of each mean is its std / 447: k1's and k3's
means sit within {max(se['k1'], se['k3']):.1f} standard errors of the exact KL, k2's gap is a bias
that more samples would not remove (for the far pair it misses by
{pct(abs(far['k2 mean'] - far['exact KL']) / far['exact KL'])}). Compare the stds: for the close
pair k3's is {close['k1 std'] / close['k3 std']:.0f} times smaller than k1's, and k1 is negative
on {pct(close['k1 < 0 (share)'])} of the tokens; for the far pair k3's std is the larger one,
because $e^\\ell$ explodes on tokens the reference likes far more than π does. k3 is the right
default for a KL *penalty*, which keeps π near π_ref, the regime where it has low variance.
({note})"""


def ex4_table(lab: Lab) -> str:
    part = EX[4]

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        return [" / ".join(num(live[x]["train/kl_penalty"], 3) for x in KL),
                before_after(lab, part, KL[0], c, s), before_after(lab, part, KL[1], c, s)]
    return table(lab, ["KL, β = 0.01 / 0.5", "held-out accuracy, β = 0.01", "β = 0.5"], row)


def ex4_answer(lab: Lab) -> str:
    part, n = EX[4], len(lab.runs)
    k_low, k_high = (lab.live(part, s, "train/kl_penalty") for s in KL)
    a_low, a_high = (lab.live(part, s, "accuracy after") for s in KL)
    cut = [1 - b / a for a, b in zip(k_low, k_high)]
    claim(all(c > 0 for c in cut), "a penalty 50 times stronger cut the KL")
    cost = [a - b for a, b in zip(a_low, a_high)]
    second = direction(
        cost, n, f"It cost held-out accuracy {{runs}} ({span(cost, pts)} points).",
        f"It did not cost accuracy: β = 0.5 ended higher {{runs}} ({span(cost, pts)} points).",
        "β = 0.5 ended lower {up} and higher {down} (β = 0.01 minus β = 0.5: "
        f"{span(cost, points)} points): within what the seeds move on their own.")

    return f"""{header(lab, "100 steps; KL: mean k3 per token over the last 10 steps")}

{ex4_table(lab)}

1. A penalty 50 times stronger cut the KL by only {span(cut)} ({span(k_high, lambda x: num(x))}
   against {span(k_low, lambda x: num(x))}): the policy-gradient term still pulls away from the
   warm start, and near the reference the KL term's gradient is small (∂k3/∂log π = 1 − e^ℓ
   ≈ −ℓ for small ℓ: the cell below checks it with autograd), so it pushes back little until
   the policy has moved.
2. {second} The KL penalty trades reward for staying near the reference, which is what it is
   for (against reward hacking and forgetting), not something that helps on this task."""


# --------------------------------------------------------------------------- exercise 5

LAMBDA = ("λ = 1.0", "λ = 0.0")


def ex5_table(lab: Lab) -> str:
    part = EX[5]

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        return [before_after(lab, part, LAMBDA[0], c, s),
                before_after(lab, part, LAMBDA[1], c, s),
                " / ".join(num(live[x]["critic/explained_var"]) for x in LAMBDA)]
    return table(lab, ["held-out accuracy, λ = 1", "λ = 0",
                       "critic explained variance, λ = 1 / 0"], row)


def ex5_answer(lab: Lab) -> str:
    part, n = EX[5], len(lab.runs)
    b1, a1 = (lab.live(part, LAMBDA[0], k) for k in ("accuracy before", "accuracy after"))
    b0, a0 = (lab.live(part, LAMBDA[1], k) for k in ("accuracy before", "accuracy after"))
    collapsed = count(a0, lambda x: x < 0.05)
    ev = {x: lab.live(part, x, "critic/explained_var") for x in LAMBDA}

    lam0 = (f"**λ = 0 destroyed the policy {held(collapsed, n)}** (held-out accuracy "
            f"{span(a0)})" if collapsed == n else
            f"λ = 0 ended below 5 % {held(collapsed, n)} (held-out accuracy {span(a0)})")
    what = "60 steps, the first 10 training the critic only; explained variance: last 10 steps"
    return f"""{header(lab, what)}

{ex5_table(lab)}

1. λ = 1 moved held-out accuracy by {span([a - b for a, b in zip(a1, b1)], points)} points;
   {lam0}. With λ = 0 each token's advantage is $\\delta_t = R_t + V_{{t+1}} - V_t$: everywhere
   but the last token it is the critic's difference alone, and a critic that has just started
   learning gives noise; rlnb then whitens the advantages over the batch
   (`normalize_advantages`, pinned), so that noise becomes a full-size push, which PPO follows.
   λ = 1 uses the real return minus $V_t$: a noisy baseline, but the reward's signal reaches
   every token.
2. The critic's explained variance says little here: {span(ev[LAMBDA[0]], num)} for λ = 1,
   {span(ev[LAMBDA[1]], num)} for λ = 0, where once every answer is wrong the returns are all 0
   and easy to fit. A critic that scores well on a collapsed policy is no sign of health. This
   is why PPO for LLMs uses λ near 1 for the policy (VAPO's decoupled λ: docs/algorithms.md)."""


# --------------------------------------------------------------------------- exercise 6

DPO = ("GRPO", "DPO β = 0.1", "DPO β = 1.0")


def ex6_table(lab: Lab) -> str:
    part = EX[6]

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        return [pct(live["GRPO"]["accuracy before"]) + " → "
                + " / ".join(pct(live[x]["accuracy after"]) for x in DPO),
                " / ".join(f"{live[x]['dpo/pairs']:.1f}" for x in DPO[1:]),
                " / ".join(num(live[x]["dpo/loss"], 3) for x in DPO[1:])]
    return table(lab, ["held-out accuracy: GRPO / DPO β = 0.1 / β = 1",
                       "pairs per step, β = 0.1 / 1", "DPO loss, β = 0.1 / 1"], row)


def ex6_answer(lab: Lab) -> str:
    part, n = EX[6], len(lab.runs)
    before = lab.live(part, "GRPO", "accuracy before")
    after = {x: lab.live(part, x, "accuracy after") for x in DPO}
    gain = {x: [a - b for a, b in zip(after[x], before)] for x in DPO}
    grpo_best = count(range(n), lambda i: gain["GRPO"][i] >= max(gain[x][i] for x in DPO[1:]))
    pairs = lab.live(part, DPO[1], "dpo/pairs") + lab.live(part, DPO[2], "dpo/pairs")
    loss = {x: lab.live(part, x, "dpo/loss") for x in DPO[1:]}
    above = count(loss[DPO[1]] + loss[DPO[2]], lambda x: x >= math.log(2))

    return f"""{header(lab, "60 steps; pairs and DPO loss: means over the last 10 steps")}

{ex6_table(lab)}

1. GRPO gained the most {held(grpo_best, n)} ({span(gain['GRPO'], points)} points; DPO
   {span(gain[DPO[1]] + gain[DPO[2]], points)}). A DPO step trains on one pair per prompt (about
   30 rows) where GRPO's trains on all 256 answers.
2. {span(pairs, lambda x: f'{x:.1f}')} of the 16 prompts per step had both a right and a wrong
   answer among their 16 samples; the others were all right or all wrong (GRPO's groups
   without signal).
3. The loss on each step's *new* pairs ended at or above ln 2 = 0.693 {held(above, 2 * n)} of
   both β ({span(loss[DPO[1]], lambda x: num(x, 3))} with β = 0.1,
   {span(loss[DPO[2]], lambda x: num(x, 3))} with β = 1), whatever the accuracy did. The
   pairs are fresh samples of the current policy: the wrong answers it still samples are those whose
   probability grew relative to π_ref, while a right answer that π_ref already liked cannot
   gain much log-ratio (π ≤ 1). On-policy, the DPO loss does not measure progress; held-out
   accuracy does."""


# --------------------------------------------------------------------------- exercise 7

TEMP = ("temperature 1.0", "temperature 0.3")


def ex7_table(lab: Lab) -> str:
    part = EX[7]

    def row(c, s):
        live = lab.got(c, s, part)["live"]
        return [" / ".join(num(live[x]["train/groups_with_signal"]) for x in TEMP),
                before_after(lab, part, TEMP[0], c, s), before_after(lab, part, TEMP[1], c, s)]
    return table(lab, ["groups with signal, τ = 1.0 / 0.3", "held-out accuracy, τ = 1.0",
                       "τ = 0.3"], row)


def ex7_answer(lab: Lab) -> str:
    part, n = EX[7], len(lab.runs)
    sig = {x: lab.live(part, x, "train/groups_with_signal") for x in TEMP}
    gain = {x: [a - b for a, b in zip(lab.live(part, x, "accuracy after"),
                                       lab.live(part, x, "accuracy before"))] for x in TEMP}
    more = count(range(n), lambda i: gain[TEMP[0]][i] > gain[TEMP[1]][i])

    shown = {x: [round(v, 2) for v in sig[x]] for x in TEMP}  # as the table shows them
    fewer = count(range(n), lambda i: shown[TEMP[1]][i] < shown[TEMP[0]][i])
    same = count(range(n), lambda i: shown[TEMP[1]][i] == shown[TEMP[0]][i])
    return f"""{header(lab, "60 steps; signal: mean over the last 10 steps")}

{ex7_table(lab)}

(validation samples at the run's temperature, so the two settings start from different
accuracies of the same model)

1. Fewer groups had signal at τ = 0.3 {held(fewer, n)}{f", as many {held(same, n)}" if same else ""}
   ({span(sig[TEMP[1]], num)} against {span(sig[TEMP[0]], num)} at τ = 1.0).
2. τ = 1.0 gained more {held(more, n)} ({span(gain[TEMP[0]], points)} points against
   {span(gain[TEMP[1]], points)} at τ = 0.3). We did not isolate why, and it makes a good
   question for the class: at τ = 0.3 the trainer optimises the sharpened distribution
   softmax(z/0.3), whose log-probs rlnb computes at the sampling temperature
   (docs/algorithms.md#log-probabilities), and its samples are close to the argmax, so the wrong
   answers it samples are the model's confident mistakes."""


EXERCISE_REGIONS = {
    "01-start": ex1_start, "01-what-happened": ex1_answer, "02-what-happened": ex2_answer,
    "03-what-happened": ex3_answer, "04-bias": ex4_bias, "04-what-happened": ex4_answer,
    "05-what-happened": ex5_answer, "06-what-happened": ex6_answer,
    "07-what-happened": ex7_answer}
TABLES = {1: ex1_table, 2: ex2_table, 3: ex3_table, 4: ex4_table, 5: ex5_table, 6: ex6_table,
          7: ex7_table}
