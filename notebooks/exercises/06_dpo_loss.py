# %% [markdown]
# # Exercise 6 · The DPO loss, trained online on the model's own answers
#
# DPO learns from pairs of answers, one preferred, without a reward model or a value model.
# You will write its loss, check it, then train the tiny model with *your* loss on pairs of its
# own right and wrong answers, and predict how that compares with GRPO on the same prompts.
#
# **Objective:** write the DPO loss from a pair's summed log-ratios, then train with it. **Before
# this:** exercise 4 (log-ratios against a reference); the logistic function.
#
# **Difficulty:** ★★☆ (a masked sum per row, then pairs; the check compares your gradient too).
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
from rlnb.algorithms.preference import dpo_loss as rlnb_dpo_loss

import torch
import torch.nn.functional as F

torch.set_num_threads(teach.LAB_THREADS)  # one thread: the numbers the solutions quote

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
#
# <details><summary>Hint 1</summary>
#
# First one number per row: its log-ratio to the reference summed over its response tokens
# (multiply by the mask before summing). Then pair the rows: the chosen ones are rows 0, 2, 4,
# ..., the rejected ones 1, 3, 5, ...
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# A step-2 slice, `rho[0::2]` and `rho[1::2]`, splits the rows into chosen and rejected;
# `torch.nn.functional.logsigmoid` is log σ, numerically safe; the loss is minus its mean over
# the pairs, with β inside the sigmoid.
#
# </details>

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
result = teach.run_experiment("online_dpo", seed=seed, fast=fast, steps=live_steps,
                             dpo_loss=dpo_loss)
result.table

# %% [markdown] tags=["solution"]
# <!-- lab-numbers: 06-what-happened -->
# **What happened** (60 steps; pairs and DPO loss: means over the last 10 steps; seeds 0, 1 and
# 2 on AVX2 and AVX-512, measured for docs/teaching.md):
#
# | CPU, seed | held-out accuracy: GRPO / DPO β = 0.1 / β = 1 | pairs per step, β = 0.1 / 1 | DPO loss, β = 0.1 / 1 |
# |---|---|---|---|
# | AVX2, 0 | 30.5% → 33.0% / 27.0% / 26.0% | 14.0 / 13.9 | 0.704 / 1.030 |
# | AVX2, 1 | 24.5% → 41.0% / 34.0% / 29.0% | 15.1 / 15.5 | 0.726 / 0.953 |
# | AVX2, 2 | 33.5% → 57.5% / 39.5% / 41.0% | 15.2 / 15.4 | 0.693 / 0.836 |
# | AVX-512, 0 | 21.0% → 26.0% / 20.5% / 23.5% | 13.4 / 13.2 | 0.715 / 1.085 |
# | AVX-512, 1 | 32.0% → 37.5% / 35.5% / 34.0% | 15.5 / 15.2 | 0.738 / 1.244 |
# | AVX-512, 2 | 39.0% → 56.0% / 44.5% / 40.5% | 15.6 / 15.2 | 0.703 / 0.800 |
#
# 1. GRPO gained the most on all six runs (+2.5 to +24.0 points; DPO −4.5 to +9.5). A DPO step
#    trains on one pair per prompt (about 30 rows) where GRPO's trains on all 256 answers.
# 2. 13.2 to 15.6 of the 16 prompts per step had both a right and a wrong answer among their 16
#    samples; the others were all right or all wrong (GRPO's groups without signal).
# 3. The loss on each step's *new* pairs ended at or above ln 2 = 0.693 on eleven of twelve runs
#    of both β (0.693 to 0.738 with β = 0.1, 0.800 to 1.244 with β = 1), whatever the accuracy
#    did. The pairs are fresh samples of the current policy: the wrong answers it still samples
#    are those whose probability grew relative to π_ref, while a right answer that π_ref already
#    liked cannot gain much log-ratio (π ≤ 1). On-policy, the DPO loss does not measure
#    progress; held-out accuracy does.
# <!-- /lab-numbers -->

# %% [markdown]
# ## Discussion
#
# - DPO's β plays the role of the KL coefficient of exercise 4. Where is the KL in this loss?
# - Length-normalising ρ (the mean log-ratio instead of the sum, as IPO and SimPO do) changes
#   what? Which exercise made the same point about the policy loss?
# - A pair where both answers are right carries no preference. What plays the role of GRPO's
#   "groups with no signal" here?
