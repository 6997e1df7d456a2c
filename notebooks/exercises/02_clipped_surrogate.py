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

# %% tags=["parameters"]
fast = False  # tests: a smaller model, no warm start, 2 training steps per run
seed = 0  # grpo.seed of the live runs
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
import torch

from rlnb import teach

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
result = teach.run_experiment("optimizer_steps", seed=seed, fast=fast)
result.table

# %% [markdown] tags=["solution"]
# **What happened** (seed 0, measured for docs/teaching.md):
#
# | seed | clip fraction: 1 step / 4 steps ε_hi 0.2 / 4 steps ε_hi 0.28 | entropy (nats), ε_hi 0.2 / 0.28 | held-out accuracy after 60 steps, 1 step / 0.2 / 0.28 |
# |---|---|---|---|
# | 0 | 0 / 0.069 / 0.052 | 0.670 / 0.692 | 29.5% / 34.0% / 25.5% |
# | 1 | 0 / 0.088 / 0.076 | 0.580 / 0.564 | 37.5% / 40.0% / 35.5% |
# | 2 | 0 / 0.061 / 0.058 | 0.474 / 0.493 | 48.0% / 46.0% / 51.5% |
#
# (all from 20.5%, 26.0% and 32.5%; clip fraction and entropy are means over the last 10 steps)
#
# 1. Exactly 0 on every step: with one optimizer step per rollout, π_θ is π_old when the loss
#    is computed, ρ = 1 for every token and the clip never acts.
# 2. Clip-higher lowers the clip fraction a little on every seed (0.3 to 1.7 points): the
#    upper bound binds less often. With four steps only 5-9 % of the tokens are clipped at all.
# 3. No consistent effect: entropy moves by ±0.02 nats in both directions and accuracy by up to
#    8.5 points either way across seeds, as large as the seed-to-seed spread. The answers are
#    3-4 characters long and the upper clip binds on a few percent of the tokens, so raising it
#    changes little; DAPO's entropy effect comes from long responses with many rare tokens.

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
