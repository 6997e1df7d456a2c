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

# %% tags=["parameters"]
fast = False  # tests: a smaller model, no warm start, 2 training steps per run
seed = 0  # grpo.seed of the real batch and of the live runs
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
import torch

from rlnb import teach

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
result = teach.run_experiment("length_bias", seed=seed, fast=fast)
result.table

# %% [markdown] tags=["solution"]
# **What happened** (seed 0, measured for docs/teaching.md):
#
# | seed | length of wrong answers (tokens), token / sequence | of right answers | held-out accuracy after 60 steps |
# |---|---|---|---|
# | 0 | 4.75 / 4.77 | 4.51 / 4.75 | 24% → 19% / 24% → 18% |
# | 1 | 3.40 / 5.23 | 3.16 / 5.26 | 21% → 16% / 21% → 15% |
# | 2 | 4.77 / 5.87 | 4.90 / 5.87 | 21% → 24% / 21% → 16% |
#
# (lengths are means over the last 10 steps)
#
# 1. Under the sequence-level loss responses were longer on two seeds of three, by about 1-2
#    tokens, but right and wrong answers alike; Dr. GRPO's claim is that *wrong* answers grow.
#    The paired 95 % t interval of the difference for wrong answers over the three seeds is
#    +0.98 [−1.28, +3.24] tokens (`rlnb.run.experiments.stats.difference_ci`): it contains 0.
# 2. One seed would not do: seed 0 alone shows no difference at all. At this scale (answers of
#    3-6 characters, 60 steps) the length bias is at most a trend; held-out accuracy barely
#    moves in 60 steps on this task, and mostly falls, with either loss.

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
