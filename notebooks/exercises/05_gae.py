# %% [markdown]
# # Exercise 5 · Generalised advantage estimation (PPO with a value model)
#
# PPO learns a critic $V$ and turns the reward at the end of a response into an advantage for
# every token. You will write GAE with its masking, see how λ spreads the credit along a
# response, and predict how λ changes a short real PPO run while the critic is still young.
#
# **Objective:** write GAE backwards over a masked response and see how λ moves the credit along
# it. **Before this:** exercise 2; value functions and the TD error.
#
# **Difficulty:** ★★★ (a recursion with masking: the check's cases include padding, a prompt
# before the response and an environment turn inside it). **Time:** about 30 minutes: sections
# 1-2 in 20, section 3 (predict, run, discuss) in 10; PPO's live runs are the lab's longest,
# and `rlnb preflight` says how long they take on your machine.
# Each function has two hints, folded under its instruction: open the first when stuck, the
# second only after it. **Hand in** this notebook run top to bottom, with your predictions
# written where it says *Your prediction*.

# %% tags=["parameters"]
fast = False  # a smaller model, no warm start, 2 training steps per run (its numbers mean nothing)
seed = 0  # ppo.seed of the live runs
live_steps = None  # training steps per live run (None: the lab's own)
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
from rlnb import teach

import pandas as pd
import torch

torch.set_num_threads(teach.LAB_THREADS)  # one thread: the numbers the solutions quote

# %% [markdown]
# ## 1. The recursion
#
# A response's reward $r$ arrives at its last valid token: $R_t = r$ there and 0 elsewhere.
# $V_t$ is the critic's value of the state *before* token $t$. With discount γ and λ
# (https://arxiv.org/abs/1506.02438):
#
# $$\delta_t = R_t + \gamma V_{t+1} - V_t, \qquad A_t = \delta_t + \gamma\lambda\,A_{t+1},
#   \qquad \text{returns}_t = A_t + V_t$$
#
# computed right to left. Masking: positions with mask 0 are skipped (neither $V_{t+1}$ nor
# $A_{t+1}$ moves across them: an environment turn between two responses is not the end of the
# episode), and past the last valid token $V_{t+1} = A_{t+1} = 0$ (the episode is over;
# right-padding holds no state). λ = 0 gives the one-step TD error $\delta_t$ (all from the
# critic); λ = 1 gives $\sum_l \gamma^l R_{t+l} - V_t$ (the Monte Carlo return minus $V_t$).
#
# **Write** `gae(rewards, values, mask, *, gamma, lam)`: `rewards [B]`, `values` and `mask`
# `[B, T]`, returning `(advantages, returns)`, both `[B, T]` and 0 where the mask is 0.
#
# <details><summary>Hint 1</summary>
#
# Work row by row over the valid positions only, from the last back to the first, carrying two
# numbers from each valid token to the one before it: the next value and the next advantage
# (both 0 after the last valid token). A masked position changes neither.
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# A row's valid positions are `mask[b].nonzero().flatten().tolist()`; the reward belongs to the
# last of them (not to `mask[b].sum() - 1`: the prompt comes first). Then δ = R + γ·V_next − V and
# A = δ + γλ·A_next at each valid position; returns are A + V, times the mask.
#
# </details>

# %%
def gae(rewards, values, mask, *, gamma=1.0, lam=0.95):
    """Raw GAE advantages and returns, [B, T] each, zero where mask is 0."""
    # BEGIN SOLUTION: the reward at the last valid token, then the recursion right to left
    B, T = values.shape
    advantages = torch.zeros_like(values)
    for b in range(B):
        valid = mask[b].nonzero().flatten().tolist()
        next_value, next_advantage = 0.0, 0.0
        for t in reversed(valid):
            reward = rewards[b] if t == valid[-1] else 0.0
            delta = reward + gamma * next_value - values[b, t]
            advantages[b, t] = delta + gamma * lam * next_advantage
            next_value, next_advantage = values[b, t], advantages[b, t]
    return advantages, (advantages + values) * mask
    # END SOLUTION


teach.check_gae(gae)

# %% [markdown]
# ## 2. Where λ puts the credit
#
# One response of 5 tokens with reward 1 and a critic that already values the state 0.6 from
# the third token on. Predict first: with λ = 0, which tokens get a non-zero advantage?

# %% [markdown] tags=["student"]
# *Your prediction:*

# %%
values = torch.tensor([[0.2, 0.3, 0.6, 0.6, 0.6]])
mask = torch.ones_like(values)
table = {f"λ = {lam}": gae(torch.tensor([1.0]), values, mask, gamma=1.0, lam=lam)[0][0].tolist()
         for lam in (0.0, 0.5, 0.95, 1.0)}
pd.DataFrame(table, index=[f"token {t}" for t in range(5)]).T.round(3)

# %% tags=["solution"]
# the two limits of the text, computed by hand and compared with rlnb.gae_recursion at γ = 0.9:
# λ = 0 gives δ_t = R_t + γ V_(t+1) - V_t, λ = 1 the discounted return minus V_t
import rlnb

g = 0.9
R = rlnb.token_level_rewards(torch.tensor([1.0]), mask)  # [1, 5]: the reward at the last token
v_next = torch.cat([values[:, 1:], torch.zeros(1, 1)], dim=1)  # V_(t+1), 0 past the end
td_error = R + g * v_next - values
discounted = torch.tensor([[g ** (4 - t) for t in range(5)]])  # Σ_l γ^l R_(t+l): R only at t=4
for lam, expected in ((0.0, td_error), (1.0, discounted - values)):
    library = rlnb.gae_recursion(R, values, mask, gamma=g, lam=lam)
    assert torch.allclose(library, expected) and torch.allclose(gae(
        torch.tensor([1.0]), values, mask, gamma=g, lam=lam)[0], expected)
    print(f"λ = {lam}: rlnb.gae_recursion and yours match the formula: "
          f"{[round(x, 3) for x in expected[0].tolist()]}")

# %% [markdown]
# ## 3. Predict, then run
#
# Two PPO runs of 60 steps (`configs/ppo_tiny.yaml`: a critic warm-up, then the policy) from the
# same warm start, with λ = 1 and λ = 0. The critic starts from the policy's weights with a new
# value head.
#
# **Predict** before running:
# 1. Which run's held-out accuracy rises more in 60 steps?
# 2. Which has the better critic (`critic/explained_var`, 1 = perfect, 0 = no better than the
#    mean return)?

# %% [markdown] tags=["student"]
# *Your predictions:*
#
# 1.
# 2.

# %%
print(teach.EXPERIMENTS["gae_lambda"].describe())
result = teach.run_experiment("gae_lambda", seed=seed, fast=fast, steps=live_steps)
result.table

# %% [markdown] tags=["solution"]
# <!-- lab-numbers: 05-what-happened -->
# **What happened** (60 steps, the first 10 training the critic only; explained variance: last
# 10 steps; seeds 0, 1 and 2 on AVX2 and AVX-512, measured for docs/teaching.md):
#
# | CPU, seed | held-out accuracy, λ = 1 | λ = 0 | critic explained variance, λ = 1 / 0 |
# |---|---|---|---|
# | AVX2, 0 | 20.5% → 23.0% | 20.5% → 0.0% | 0.09 / 0.12 |
# | AVX2, 1 | 26.0% → 33.0% | 26.0% → 0.0% | 0.01 / −0.58 |
# | AVX2, 2 | 32.5% → 44.5% | 32.5% → 1.5% | 0.02 / 0.01 |
# | AVX-512, 0 | 29.0% → 25.0% | 29.0% → 0.0% | 0.09 / −0.21 |
# | AVX-512, 1 | 28.5% → 28.0% | 28.5% → 0.0% | 0.00 / −0.19 |
# | AVX-512, 2 | 32.5% → 50.0% | 32.5% → 0.0% | 0.01 / −0.32 |
#
# 1. λ = 1 moved held-out accuracy by −4.0 to +17.5 points; **λ = 0 destroyed the policy on all
#    six runs** (held-out accuracy 0.0% to 1.5%). With λ = 0 each token's advantage is
#    $\delta_t = R_t + V_{t+1} - V_t$: everywhere but the last token it is the critic's
#    difference alone, and a critic that has just started learning gives noise; rlnb then
#    whitens the advantages over the batch (`normalize_advantages`, pinned), so that noise
#    becomes a full-size push, which PPO follows. λ = 1 uses the real return minus $V_t$: a
#    noisy baseline, but the reward's signal reaches every token.
# 2. The critic's explained variance says little here: 0.00 to 0.09 for λ = 1, −0.58 to 0.12 for
#    λ = 0, where once every answer is wrong the returns are all 0 and easy to fit. A critic
#    that scores well on a collapsed policy is no sign of health. This is why PPO for LLMs uses
#    λ near 1 for the policy (VAPO's decoupled λ: docs/algorithms.md).
# <!-- /lab-numbers -->

# %% [markdown]
# ## Discussion
#
# - Why is the value past the last token 0 and not the critic's value at the padding?
# - rlnb whitens the advantages over the batch's valid tokens after GAE. Does whitening change
#   which tokens are pushed up and which down?
# - GRPO needs no critic. What does PPO's per-token advantage give that GRPO's per-response one
#   cannot, and when would that matter?
