# %% [markdown]
# # Exercise 3 · Token-level or sequence-level: averaging the loss (Dr. GRPO's point)
#
# The per-token loss of exercise 2 must become one number. Two ways are in use, and they weigh
# responses of different lengths differently. You will write both, measure each token's
# weight on a real batch, and predict whether the difference shows in a short run on a task
# whose answers can be padded with "thinking" characters.
#
# **Objective:** turn per-token losses into one number in two ways and measure how each weighs
# long and short responses. **Before this:** exercise 2; masked means.
#
# **Difficulty:** ★☆☆ (two masked means; the care is in which count divides).
# **Time:** about 20 minutes: sections 1-2 in 12, section 3 (predict, run, discuss) in 8; how
# long its live runs take on your machine, `rlnb preflight` says.
# Each function has two hints, folded under its instruction: open the first when stuck, the
# second only after it. **Hand in** this notebook run top to bottom, with your predictions
# written where it says *Your prediction*.

# %% tags=["parameters"]
fast = False  # a smaller model, no warm start, 2 training steps per run (its numbers mean nothing)
seed = 0  # grpo.seed of the real batch and of the live runs
live_steps = None  # training steps per live run (None: the lab's own)
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
from rlnb import teach

import torch

torch.set_num_threads(teach.LAB_THREADS)  # one thread: the numbers the solutions quote

# %% [markdown]
# ## 1. Two reductions
#
# A batch has rows $b$ (responses) and positions $t$; `token_mask` $m_{bt}$ is 1 on response
# tokens, `sample_mask` $s_b$ is 0 for rows dropped from the loss (filtered, overlong, ...).
#
# - **token level** (DAPO): one mean over every valid token of the batch,
#   $L = \dfrac{\sum_{b,t} \ell_{bt}\, m_{bt}\, s_b}{\sum_{b,t} m_{bt}\, s_b}$
# - **sequence level** (the GRPO paper): the mean over each response's tokens, then over
#   responses, $L = \dfrac{1}{\sum_b s_b}\sum_b s_b\,\dfrac{\sum_t \ell_{bt}\, m_{bt}}{\sum_t m_{bt}}$
#   (a row with no valid token adds 0 and still counts).
#
# **Write** both, for `per_token` and `token_mask` `[B, T]` and `sample_mask` `[B]`, each
# returning a 0-d tensor.
#
# <details><summary>Hint 1</summary>
#
# A token counts when its own token_mask is 1 and its row's sample_mask is 1: broadcast the
# row mask `[B]` over the tokens with `[:, None]`. The two reductions differ only in what divides:
# all the valid tokens of the batch, or each row's own tokens and then the rows.
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# Token level: the sum of loss × mask over everything, over the sum of the mask. Sequence
# level: for each row, the sum over its tokens over its token count (`.clamp(min=1)` for a row with
# none), then the mean of those per-row values over the rows whose sample_mask is 1.
#
# </details>

# %%
def token_level_loss(per_token, token_mask, sample_mask):
    """One mean over all valid tokens of the batch."""
    # BEGIN SOLUTION: the masked sum over the number of valid tokens
    mask = token_mask * sample_mask[:, None]
    return (per_token * mask).sum() / mask.sum()
    # END SOLUTION


def sequence_level_loss(per_token, token_mask, sample_mask):
    """The mean over each row's valid tokens, then over the valid rows."""
    # BEGIN SOLUTION: each row's mean over its tokens, then the mean over rows with sample_mask 1
    per_row = (per_token * token_mask).sum(-1) / token_mask.sum(-1).clamp(min=1)
    return (per_row * sample_mask).sum() / sample_mask.sum()
    # END SOLUTION


teach.check_token_level_loss(token_level_loss)
teach.check_sequence_level_loss(sequence_level_loss)

# %% [markdown]
# ## 2. How much each token weighs
#
# The gradient of $L$ with respect to $\ell_{bt}$ is the weight token $(b, t)$ gets in the
# update: $1/N_\text{tok}$ for every token at token level, $1/(|o_b|\,N_\text{seq})$ at sequence
# level, where $|o_b|$ is the length of response $b$. So at sequence level a token of a short
# response weighs more than a token of a long one. With a negative advantage, a long wrong
# answer is pushed down *less per token* than a short one: Dr. GRPO
# (https://arxiv.org/abs/2503.20783) argues this lets wrong answers grow longer.
#
# Your reductions on the masks of a real batch (the `addition_think` task, whose answers may
# start with any number of `.` characters), weights read off autograd:

# %%
trainer = teach.warm_trainer(seed=seed, fast=fast,
                             overrides=teach.EXPERIMENTS["length_bias"].common)
batch = trainer.rollout()
tm, sm = batch.token_mask, batch.sample_mask
lengths = tm.sum(-1)
for name, reduce in (("token level", token_level_loss), ("sequence level", sequence_level_loss)):
    per_token = torch.zeros_like(tm, requires_grad=True)
    reduce(per_token, tm, sm).backward()
    weight = per_token.grad.sum(-1) / lengths.clamp(min=1)  # each row's weight per token
    by_length = {int(n): f"{float(weight[lengths == n].mean()):.5f}"
                 for n in lengths.unique() if n > 0}
    print(f"{name:15s} weight per token, by response length: {by_length}")

# %% tags=["solution"]
# the weights of the formula, 1/N_tok and 1/(|o_b| N_seq) on kept rows, against rlnb's own
# reduction coefficients (rlnb.reduction_coefficients) and against autograd on rlnb's reduction
import rlnb

kept = tm * sm[:, None]  # [B, T]: the tokens that enter the loss
n_tok, n_seq = kept.sum(), sm.sum()
formula = {"token_mean": kept / n_tok,
           "sequence_mean": kept / (lengths.clamp(min=1)[:, None] * n_seq)}
for reduction, expected in formula.items():
    coefficients = rlnb.reduction_coefficients(tm, sm, reduction=reduction)
    ell = torch.zeros_like(tm, requires_grad=True)
    rlnb.reduce_loss(ell, tm, sm, token_level_loss=reduction == "token_mean",
                     global_valid_toks=n_tok, global_valid_seqs=n_seq).backward()
    assert torch.allclose(coefficients, expected) and torch.allclose(ell.grad, expected)
    print(f"{reduction}: the formula's weights match rlnb's coefficients and its gradient")

# %% [markdown]
# ## 3. Predict, then run
#
# 60 GRPO steps on `addition_think` (sums up to 40; the reward ignores the `.` filler, so only
# the loss can make responses longer or shorter), once with each reduction, same warm start and
# prompts.
#
# **Predict** before running:
# 1. Under the sequence-level loss, do wrong answers (`train/mean_gen_tokens_incorrect`) end up
#    longer than under the token-level loss?
# 2. By how many tokens, and would you trust that difference from one seed?

# %% [markdown] tags=["student"]
# *Your predictions:*
#
# 1.
# 2.

# %%
print(teach.EXPERIMENTS["length_bias"].describe())
result = teach.run_experiment("length_bias", seed=seed, fast=fast, steps=live_steps)
result.table

# %% [markdown] tags=["solution"]
# <!-- lab-numbers: 03-what-happened -->
# **What happened** (60 steps; lengths in tokens, means over the last 10 steps; seeds 0, 1 and 2
# on AVX2 and AVX-512, measured for docs/teaching.md):
#
# | CPU, seed | wrong answers' length, token / sequence | right answers' | accuracy, token level | sequence level |
# |---|---|---|---|---|
# | AVX2, 0 | 3.23 / 5.13 | 3.30 / 5.57 | 32.0% → 23.0% | 32.0% → 22.0% |
# | AVX2, 1 | 4.88 / 4.97 | 5.47 / 5.17 | 27.0% → 21.0% | 27.0% → 29.0% |
# | AVX2, 2 | 4.16 / 6.49 | 4.24 / 6.72 | 11.0% → 14.0% | 11.0% → 20.0% |
# | AVX-512, 0 | 3.84 / 5.43 | 3.67 / 5.31 | 33.0% → 32.0% | 33.0% → 28.0% |
# | AVX-512, 1 | 3.82 / 3.58 | 3.57 / 3.29 | 22.0% → 15.0% | 22.0% → 25.0% |
# | AVX-512, 2 | 3.58 / 4.00 | 3.67 / 4.04 | 23.0% → 22.0% | 23.0% → 29.0% |
#
# 1. Under the sequence-level loss wrong answers were longer on five of six runs (sequence minus
#    token level: −0.24 to +2.33 tokens), right answers on four of six runs (−0.31 to +2.48);
#    Dr. GRPO's claim is that *wrong* answers grow. The paired 95 % t interval of the difference
#    for wrong answers over the six runs is 1.02 [−0.10, 2.13] tokens
#    (`rlnb.run.experiments.stats.difference_ci`): it contains 0.
# 2. One run would not do: the differences range from −0.24 to +2.33 tokens. At this scale
#    (answers of 3-6 characters, 60 steps) the length bias is at most a trend; held-out accuracy
#    moves little in 60 steps on this task, with either loss.
# <!-- /lab-numbers -->

# %% [markdown]
# ## Discussion
#
# - Dr. GRPO also removes the ÷ std of exercise 1. Which bias does each of its two changes
#   remove?
# - Under several processes, rlnb divides by the *global* token count of the batch (summed over
#   ranks and micro-batches), not each micro-batch's. What goes wrong if each micro-batch
#   divides by its own count? (docs/algorithms.md, masked helpers and reductions.)
# - When would the length bias show: what would have to be true of the task and of the
#   responses' lengths?
