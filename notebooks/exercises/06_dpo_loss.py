# %% [markdown]
# # Exercise 6 · The DPO loss, trained online on the model's own answers
#
# DPO learns from pairs of answers, one preferred, without a reward model or a value model.
# You will write its loss, check it, then train the tiny model with *your* loss on pairs of its
# own right and wrong answers, and predict how that compares with GRPO on the same prompts.
#
# **Objective:** write the DPO loss from a pair's summed log-ratios, then train with it. **Before
# this:** exercise 4 (log-ratios against a reference); the logistic function.

# %% tags=["parameters"]
fast = False  # tests: a smaller model, no warm start, 2 training steps per run
seed = 0  # grpo.seed of the live runs
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
import torch
import torch.nn.functional as F

from rlnb import teach
from rlnb.algorithms.preference import dpo_loss as rlnb_dpo_loss

# %% [markdown]
# ## 1. The loss
#
# Rows come in pairs: row $2k$ is the chosen (preferred) answer of pair $k$, row $2k+1$ the
# rejected one. The implicit reward of a row is its summed log-ratio to the reference over its
# response tokens,
#
# $$\rho_b = \sum_t \big(\log\pi_\theta(y_{bt}) - \log\pi_\text{ref}(y_{bt})\big)\, m_{bt},$$
#
# and DPO (https://arxiv.org/abs/2305.18290) minimises, averaged over pairs,
#
# $$L = -\log\sigma\big(\beta\,(\rho_\text{chosen} - \rho_\text{rejected})\big).$$
#
# It is the Bradley-Terry likelihood of the preference under a reward $\beta\rho$: the
# optimum of the KL-regularised RL objective, written in terms of the policy itself.
#
# **Write** `dpo_loss(logprobs, reference_logprobs, token_mask, *, beta)` for `[B, T]` tensors
# (B even, rows interleaved chosen, rejected), returning a 0-d tensor. The check also
# compares your gradient.

# %%
def dpo_loss(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    """DPO loss of interleaved (chosen, rejected) rows, averaged over pairs."""
    # BEGIN SOLUTION: each row's summed log-ratio, then -log σ(β·(chosen - rejected)) per pair
    rho = ((logprobs - reference_logprobs) * token_mask).sum(-1)  # [B]
    return -F.logsigmoid(beta * (rho[0::2] - rho[1::2])).mean()
    # END SOLUTION


teach.check_dpo_loss(dpo_loss)

# %% [markdown]
# ## 2. What the gradient does
#
# One pair, 3 tokens each. Before running: does the gradient raise the chosen tokens'
# log-probs, lower the rejected ones', or both? And what happens to it as β(ρ_c − ρ_r) grows?

# %% [markdown] tags=["student"]
# *Your prediction:*

# %%
for margin in (0.0, 2.0, 10.0):
    logprobs = torch.tensor([[-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])
    logprobs[0] += margin / 3  # the chosen row pulled ahead by `margin` in total
    logprobs.requires_grad_()
    reference = torch.full((2, 3), -1.0)
    loss = dpo_loss(logprobs, reference, torch.ones(2, 3), beta=1.0)
    loss.backward()
    print(f"margin {margin:4.1f}: loss {loss.item():.4f}  d loss/d logprob chosen "
          f"{logprobs.grad[0, 0].item():+.4f}  rejected {logprobs.grad[1, 0].item():+.4f}")

# %% [markdown] tags=["solution"]
# Minimising the loss raises the chosen log-probs and lowers the rejected ones equally, by
# $\beta\,\sigma(-\beta\Delta)$ per token, which vanishes once the margin is large: a pair
# the policy already ranks right stops teaching.

# %% tags=["solution"]
# the formula, computed with rlnb's DPO loss: with one pair of 3-token rows and β = 1,
# ∂loss/∂log π of each chosen token is -β·σ(-βΔ) and of each rejected token +β·σ(-βΔ)
for delta in (0.0, 2.0, 10.0):
    lp = torch.full((2, 3), -1.0)
    lp[0] += delta / 3
    lp.requires_grad_()
    rlnb_loss, _ = rlnb_dpo_loss(lp, torch.full((2, 3), -1.0), torch.ones(2, 3), torch.ones(2),
                                 global_valid_seqs=2, reference_policy_kl_penalty=1.0)
    rlnb_loss.backward()
    expected = torch.sigmoid(torch.tensor(-delta))
    assert torch.allclose(lp.grad[0], -expected) and torch.allclose(lp.grad[1], expected)
    print(f"margin {delta:4.1f}: rlnb's gradients {lp.grad[0, 0].item():+.4f} (chosen), "
          f"{lp.grad[1, 0].item():+.4f} (rejected); -sigmoid(-margin) = {-expected.item():+.4f}")

# %% [markdown]
# ## 3. Predict, then run: DPO on its own answers, or GRPO?
#
# Each step samples 16 prompts × 16 answers. GRPO trains on all 256 with group advantages.
# Online DPO keeps one (right, wrong) pair per prompt that has both, and takes one optimizer
# step on **your** `dpo_loss` of those pairs, against the warm start as π_ref. Three runs of
# 60 steps from the same warm start and prompts: GRPO, DPO with β = 0.1 and DPO with β = 1.
#
# **Predict** before running:
# 1. Which gains the most held-out accuracy?
# 2. How many pairs does a step find (`dpo/pairs`, at most 16), and why not 16?
# 3. Which β lowers its loss faster?

# %% [markdown] tags=["student"]
# *Your predictions:*
#
# 1.
# 2.
# 3.

# %%
print(teach.EXPERIMENTS["online_dpo"].describe())
result = teach.run_experiment("online_dpo", seed=seed, fast=fast, dpo_loss=dpo_loss)
result.table

# %% [markdown] tags=["solution"]
# **What happened** (seed 0, measured for docs/teaching.md):
#
# | seed | held-out accuracy after 60 steps: GRPO / DPO β = 0.1 / DPO β = 1 | pairs per step | DPO loss (last 10 steps), β = 0.1 / 1 |
# |---|---|---|---|
# | 0 | 24.5% / 23.5% / 23.5% (from 20.5%) | 13-14 | 0.72 / 0.99 |
# | 1 | 39.5% / 31.0% / 36.5% (from 26.0%) | 15 | 0.73 / 0.99 |
# | 2 | 47.5% / 34.0% / 36.0% (from 32.5%) | 15 | 0.72 / 0.85 |
#
# 1. GRPO gained the most on every seed (4 to 15 points); DPO 1.5 to 10.5. A DPO step trains
#    on one pair per prompt (about 30 rows) where GRPO's trains on all 256 answers, so it is also
#    about three times cheaper per step.
# 2. 13 to 15 of the 16 prompts had both a right and a wrong answer among 16 samples; the
#    others were all right or all wrong (GRPO's groups without signal).
# 3. Neither: the loss on each step's *new* pairs stays at or above ln 2 = 0.69 (0.72 with
#    β = 0.1, 0.85-0.99 with β = 1) while accuracy rises. The pairs are fresh samples of the
#    current policy: the wrong answers it still samples are the ones whose probability grew
#    relative to π_ref, while a right answer that π_ref already liked cannot gain much log-ratio
#    (π ≤ 1). Measured on seed 0 after 60 steps with β = 0.1, on one new batch of 13 pairs:
#    log π of the right answers −1.35 against −2.72 for the wrong ones (π prefers the right
#    answer), yet the implicit rewards ρ were 0.12 against 0.43. On-policy, the DPO loss does not measure
#    progress; held-out accuracy does.

# %% [markdown]
# ## Discussion
#
# - DPO's β plays the role of the KL coefficient of exercise 4. Where is the KL in this loss?
# - Length-normalising ρ (the mean log-ratio instead of the sum, as IPO and SimPO do) changes
#   what? Which exercise made the same point about the policy loss?
# - A pair where both answers are right carries no preference. What plays the role of GRPO's
#   "groups with no signal" here?
