# %% [markdown]
# # Exercise 2 · The clipped surrogate, clip-higher and the dual clip
#
# The policy loss of PPO, GRPO and DAPO is one line per token. You will write it, with DAPO's
# asymmetric clip and the dual clip, check it against rlnb, look at which tokens it stops
# pushing, and predict when the clip acts at all before a short real run shows it.
#
# **Objective:** write the clipped policy loss per token and say which tokens the clip stops
# pushing, and what DAPO's clip-higher and the dual clip change. **Before this:** exercise 1; the
# importance ratio π_θ/π_old.
#
# **Difficulty:** ★★☆ (the formula has cases; the check compares your gradient too).
# **Time:** about 25 minutes: sections 1-2 in 15, section 3 (predict, run, discuss) in 10; how
# long its live runs take on your machine, `rlnb preflight` says.
# Each function has two hints, folded under its instruction: open the first when stuck, the
# second only after it. **Hand in** this notebook run top to bottom, with your predictions
# written where it says *Your prediction*.

# %% tags=["parameters"]
fast = False  # a smaller model, no warm start, 2 training steps per run (its numbers mean nothing)
seed = 0  # grpo.seed of the live runs
live_steps = None  # training steps per live run (None: the lab's own)
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
from rlnb import teach

import torch

torch.set_num_threads(teach.LAB_THREADS)  # one thread: the numbers the solutions quote

# %% [markdown]
# ## 1. The loss per token
#
# The batch was sampled by $\pi_\text{old}$; the update moves $\pi_\theta$. Per token, with
# advantage $A_t$ and probability ratio
#
# $$\rho_t = \frac{\pi_\theta(y_t)}{\pi_\text{old}(y_t)} = \exp\big(\log\pi_\theta(y_t) - \log\pi_\text{old}(y_t)\big),$$
#
# PPO (https://arxiv.org/abs/1707.06347) maximises $\min\big(\rho_t A_t,\ \operatorname{clip}(\rho_t, 1-\varepsilon_\text{lo}, 1+\varepsilon_\text{hi})\,A_t\big)$.
# rlnb *minimises* its negative:
#
# $$\ell_t = \max\big(-A_t\,\rho_t,\ -A_t\,\operatorname{clip}(\rho_t, 1-\varepsilon_\text{lo}, 1+\varepsilon_\text{hi})\big)$$
#
# - The max (the pessimistic bound) means a token stops pulling once it has moved far enough
#   *in the direction of its advantage*: for $A > 0$ above $1+\varepsilon_\text{hi}$, for $A < 0$
#   below $1-\varepsilon_\text{lo}$. On the other side the unclipped term wins, so a step that
#   went the wrong way is always pulled back.
# - **Clip-higher** (DAPO, https://arxiv.org/abs/2503.14476): $\varepsilon_\text{hi} = 0.28 >
#   \varepsilon_\text{lo} = 0.2$, so unlikely good tokens may grow further.
# - **Dual clip** (https://arxiv.org/abs/1912.09729): where $A < 0$, cap the loss at
#   $-A\cdot C$ ($C > 1$, e.g. 3), so a bad token that became very likely ($\rho \gg 1$) cannot
#   produce an unbounded loss.
#
# **Write** `ppo_clip_loss(logprobs, prev_logprobs, advantages, *, eps_low, eps_high,
# dual_clip_c)`: every tensor `[B, T]`, returning the per-token loss `[B, T]` (no mask, no
# mean: exercise 3 does that). `dual_clip_c=None` means no dual clip. The check also compares
# your gradient with respect to `logprobs`.
#
# <details><summary>Hint 1</summary>
#
# The ratio comes from the log-probs: the exponential of a difference. Then two candidate
# losses per token, one with the ratio and one with the clipped ratio, and keep the larger of the
# two (a loss's pessimistic bound). The dual clip comes last, and only where A < 0.
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# `torch.clamp` clips the ratio to [1 − ε_lo, 1 + ε_hi]; `torch.maximum` keeps the larger of two
# tensors element by element; the dual clip is a `torch.where` on `advantages < 0` that keeps
# `torch.minimum` of the loss and its cap −A·C there, the loss elsewhere. Keep every step a
# tensor operation, or the gradient is lost.
#
# </details>

# %%
def ppo_clip_loss(logprobs, prev_logprobs, advantages, *, eps_low=0.2, eps_high=0.28,
                  dual_clip_c=None):
    """Per-token clipped surrogate loss [B, T] (to minimise)."""
    # BEGIN SOLUTION: the ratio, the pessimistic max of the two losses, then the dual clip
    ratio = torch.exp(logprobs - prev_logprobs)
    clipped = ratio.clamp(1 - eps_low, 1 + eps_high)
    loss = torch.maximum(-advantages * ratio, -advantages * clipped)
    if dual_clip_c is not None:
        loss = torch.where(advantages < 0, torch.minimum(loss, -advantages * dual_clip_c), loss)
    return loss
    # END SOLUTION


teach.check_ppo_clip_loss(ppo_clip_loss)

# %% [markdown]
# ## 2. Which tokens stop learning
#
# Autograd tells you which tokens the clip silences: their gradient is exactly 0. Before
# running the cell, predict for each of the six tokens (ratio, advantage) whether its gradient
# is 0 with ε_lo = 0.2 and ε_hi = 0.28.

# %%
ratios = torch.tensor([[0.7, 0.7, 1.1, 1.25, 1.35, 1.35]])
advantages = torch.tensor([[1.0, -1.0, 1.0, 1.0, 1.0, -1.0]])
prev = torch.full_like(ratios, -2.0)
logprobs = (prev + ratios.log()).requires_grad_()
ppo_clip_loss(logprobs, prev, advantages).sum().backward()
for r, a, g in zip(ratios[0].tolist(), advantages[0].tolist(), logprobs.grad[0].tolist()):
    print(f"ρ = {r:4.2f}  A = {a:+.0f}  gradient {g:+.3f}  {'silenced' if g == 0 else ''}")

# %% [markdown]
# ## 3. Predict, then run: when does the clip act?
#
# A GRPO step samples 256 responses and then takes optimizer steps on them. The ratio compares
# the policy being trained with the one that sampled: on the first optimizer step after a
# rollout the two are the same policy.
#
# Three runs of 60 steps from the same warm start: one optimizer step per rollout (a global
# batch of 256 rows), four (global batches of 64) with ε_high = 0.2, and four with ε_high = 0.28.
#
# **Predict** before running:
# 1. `train/clip_fraction` (the share of tokens whose ratio left the clip range) of the first run.
# 2. Does clip-higher lower or raise the clip fraction, and by a lot or a little?
# 3. Does clip-higher change held-out accuracy or token entropy (`train/approx_entropy`) after
#    60 steps? (DAPO's claim: it keeps entropy up.)

# %% [markdown] tags=["student"]
# *Your predictions:*
#
# 1.
# 2.
# 3.

# %%
print(teach.EXPERIMENTS["optimizer_steps"].describe())
result = teach.run_experiment("optimizer_steps", seed=seed, fast=fast, steps=live_steps)
result.table

# %% tags=["solution"]
# answer 1 as a check: with one optimizer step per rollout π_θ is π_old, the clip never acts
clip = result.table.filter(like="train/clip_fraction").iloc[:, 0]
assert clip["1 step per rollout"] == 0, clip
print(f"clip fraction with one optimizer step per rollout: {clip['1 step per rollout']}")

# %% [markdown] tags=["solution"]
# <!-- lab-numbers: 02-what-happened -->
# **What happened** (60 steps; clip fraction and entropy: means over the last 10 steps; seeds 0,
# 1 and 2 on AVX2 and AVX-512, measured for docs/teaching.md):
#
# | CPU, seed | clip fraction: 1 step / 4 steps ε_hi 0.2 / ε_hi 0.28 | entropy (nats), ε_hi 0.2 / 0.28 | held-out accuracy, 1 step / 0.2 / 0.28 |
# |---|---|---|---|
# | AVX2, 0 | 0.000 / 0.099 / 0.080 | 0.602 / 0.586 | 30.5% → 29.0% / 28.5% / 35.0% |
# | AVX2, 1 | 0.000 / 0.108 / 0.123 | 0.523 / 0.507 | 24.5% → 27.0% / 35.0% / 37.0% |
# | AVX2, 2 | 0.000 / 0.091 / 0.077 | 0.430 / 0.413 | 33.5% → 50.0% / 50.5% / 46.5% |
# | AVX-512, 0 | 0.000 / 0.091 / 0.083 | 0.663 / 0.622 | 21.0% → 26.5% / 28.0% / 29.0% |
# | AVX-512, 1 | 0.000 / 0.136 / 0.109 | 0.495 / 0.508 | 32.0% → 36.0% / 36.0% / 33.5% |
# | AVX-512, 2 | 0.000 / 0.075 / 0.062 | 0.372 / 0.369 | 39.0% → 47.5% / 55.5% / 56.0% |
#
# 1. Exactly 0 on every step of every run: with one optimizer step per rollout, π_θ is π_old
#    when the loss is computed, ρ = 1 for every token and the clip never acts.
# 2. With four steps the clip acts on 7.5% to 13.6% of the tokens; clip-higher lowered that on
#    five of six runs (by 1.4 to 2.8 points): the upper bound binds less often.
# 3. No consistent effect on entropy: it rose on one of six runs and fell on five of six runs
#    (−0.040 to +0.013 nats). Held-out accuracy moved both ways: up on four of six runs, down on
#    two of six runs (−4.0 to +6.5 points), as much as it moves between seeds. The answers are
#    3-4 characters long and the upper clip binds on a few tokens in a hundred, so raising it
#    has little to release; DAPO's entropy effect comes from long responses with many rare
#    tokens.
# <!-- /lab-numbers -->

# %% [markdown]
# ## Discussion
#
# - Why is the clip fraction of a one-step-per-rollout run exactly 0, not merely small?
# - The responses of this task are 3-4 characters long and the model is small. Why would the
#   upper clip bind more often on long reasoning traces with rare tokens (DAPO's setting)?
# - The dual clip only acts where A < 0 and ρ > C. When does a token's ratio reach 3 within
#   one rollout's optimizer steps?
# - Take the ratio from the generation engine's log-probs instead of the trainer's (π_gen vs
#   π_old): what changes, and why do NeMo-RL and rlnb recompute them? (docs/algorithms.md,
#   importance-sampling correction.)
