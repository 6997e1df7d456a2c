# %% [markdown]
# # Exercise 1 · The leave-one-out baseline and GRPO's advantages
#
# GRPO has no value model: the baseline of a response is computed from the *other* responses
# to the same prompt. You will write that baseline and the advantage built from it, check them
# against rlnb, run them on a real batch of the tiny model, and predict what the group size
# does to training before a short real run shows it.
#
# Notation (docs/teaching.md has the full sheet): P prompts per step, G responses per prompt
# (a *group*), B = P·G responses; rewards are laid out `[P, G]` here, one row per prompt.
#
# **Objective:** compute a group-relative advantage by hand and say why, in a group with one
# right answer, the answers are weighed on two scales. **Before this:** the policy gradient with
# a baseline; PyTorch tensors and their shapes.
#
# **Difficulty:** ★☆☆ (the first exercise: indexing along the right axis is most of it).
# **Time:** about 35 minutes: sections 1-3 in 20, section 4 (predict, run, discuss) in 15; how
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
import rlnb
from rlnb import teach

import torch

torch.set_num_threads(teach.LAB_THREADS)  # one thread: the numbers the solutions quote

# %% [markdown]
# ## 1. The baseline, leaving one out
#
# Response $i$ of a group with rewards $r_1, \dots, r_G$ is compared with the mean of the
# **others** (RLOO, https://arxiv.org/abs/2402.14740):
#
# $$b_i = \frac{1}{G-1}\sum_{j \ne i} r_j, \qquad
#   \sigma_i = \sqrt{\frac{1}{G-2}\sum_{j \ne i} \big(r_j - b_i\big)^2}$$
#
# Why leave $i$ out? With $b_i$ independent of response $i$, $\mathbb E[(r_i - b_i)\,\nabla\log\pi(y_i)]
# = \mathbb E[r_i\,\nabla\log\pi(y_i)]$: the baseline lowers the variance of the policy gradient
# without biasing it. A baseline that includes $r_i$ is correlated with $y_i$ and shrinks every
# advantage by $(G-1)/G$ in expectation.
#
# $\sigma_i$ is the Bessel-corrected std of the same $G-1$ others. For $G = 2$ there is only one
# other reward and its std is undefined: rlnb defines it as 0.
#
# **Write** `leave_one_out_baseline(rewards)` for `rewards` of shape `[P, G]`, returning
# `(baseline, std)`, both `[P, G]`. A loop over `i` is fine.
#
# <details><summary>Hint 1</summary>
#
# The mean of the others needs no loop: the group's sum minus your own reward, divided by how
# many others there are. Sum along the group, `dim=1`, with `keepdim=True` so it broadcasts
# back to `[P, G]`.
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# For the std, loop over `i`: take the group without column `i` (`torch.cat` of the columns
# before and after it, `[P, G-1]`) and call `.std(dim=1)`, which is Bessel's ÷ (n − 1) by
# default. Start from `torch.zeros_like(rewards)` and leave it at 0 when `G = 2`.
#
# </details>

# %%
def leave_one_out_baseline(rewards):
    """rewards [P, G] -> (baseline [P, G], std [P, G]), both over the other G-1 responses."""
    # BEGIN SOLUTION: the mean and the Bessel std of the other G-1 rewards of each group
    P, G = rewards.shape
    baseline = (rewards.sum(dim=1, keepdim=True) - rewards) / (G - 1)
    std = torch.zeros_like(rewards)
    if G > 2:
        for i in range(G):
            others = torch.cat([rewards[:, :i], rewards[:, i + 1:]], dim=1)  # [P, G-1]
            std[:, i] = others.std(dim=1)
    return baseline, std
    # END SOLUTION


teach.check_leave_one_out_baseline(leave_one_out_baseline)

# %% [markdown]
# ## 2. The advantage
#
# $$A_i = \begin{cases} \dfrac{r_i - b_i}{\sigma_i + \varepsilon} & \sigma_i > 0 \\[2mm]
#   r_i - b_i & \sigma_i = 0 \end{cases} \qquad (\varepsilon = 10^{-6})$$
#
# The same $A_i$ goes to every token of response $i$. Where $\sigma_i = 0$ rlnb does not
# divide: for a response whose others all agree, $(r_i - b_i)/\varepsilon$ would be a million
# times the difference.
#
# **Write** `grpo_advantages(rewards, eps=1e-6)`, `[P, G] -> [P, G]` (use your baseline).
#
# <details><summary>Hint 1</summary>
#
# Two cases per element, chosen by σ: compute both candidates for the whole tensor and pick
# element by element. Don't add ε inside a square root, and don't divide where σ = 0.
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# `torch.where(condition, a, b)` takes `a` where the condition holds and `b` elsewhere; here
# the condition is `std > 0`, `a` the difference divided by `std + eps`, `b` the difference.
#
# </details>

# %%
def grpo_advantages(rewards, eps=1e-6):
    """rewards [P, G] -> advantages [P, G] with the leave-one-out baseline and std."""
    # BEGIN SOLUTION: (r - b) / (σ + eps) where σ > 0, else r - b
    baseline, std = leave_one_out_baseline(rewards)
    centred = rewards - baseline
    return torch.where(std > 0, centred / (std + eps), centred)
    # END SOLUTION


teach.check_grpo_advantages(grpo_advantages)

# %% [markdown]
# A few groups by hand. Before running the cell: in a group of four with one right answer,
# which is larger in size, the right answer's advantage or a wrong answer's?

# %% [markdown] tags=["student"]
# *Your prediction:*

# %%
examples = torch.tensor([[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
print("leave-one-out (yours):\n", grpo_advantages(examples))
group = torch.arange(3).repeat_interleave(4)  # [B]: the prompt of each row
print("without leave-one-out (rlnb):\n",
      rlnb.grpo_advantages(group, examples.flatten(), leave_one_out=False).view(3, 4))

# %% [markdown] tags=["solution"]
# The lone right answer of `[1, 0, 0, 0]` gets +1 while each wrong answer gets −0.58: the right
# answer's others all agree (σ = 0), so it keeps the raw difference, while the wrong answers
# are divided by the std of `[1, 0, 0]`. Leave-one-out with ÷ std mixes two scales in one group
# (docs/algorithms.md#grpo). Without leave-one-out, GRPO gives ±1.5 and ∓0.5 here
# (`rlnb.grpo_advantages(..., leave_one_out=False)`): the rarer outcome always weighs more,
# which Dr. GRPO (https://arxiv.org/abs/2503.20783) argues biases training towards questions
# that are almost always right or almost always wrong.

# %% [markdown]
# ## 3. On a real batch
#
# One rollout of the warm-started tiny model (16 prompts × 16 answers of 2-digit additions;
# reward 1 for the right sum). Your advantages against the trainer's own `compute_advantages`.
#
# Which advantage does the trainer use? rlnb's embedded recipe (`configs/tiny.yaml`) takes the
# group's own mean and std, the response itself included (`use_leave_one_out_baseline: false`,
# one of TRL's choices that learned faster on this task). This exercise teaches leave-one-out,
# so its trainer **pins** the setting (`teach.EXPERIMENTS["group_size"].pinned`, printed
# below): your advantages must equal the trainer's, and differ from the recipe's.

# %%
experiment = teach.EXPERIMENTS["group_size"]
trainer = teach.warm_trainer(seed=seed, fast=fast, overrides=experiment.pinned)
print("pinned:", " ".join(experiment.pinned))
batch = trainer.rollout()
P, G = trainer.loop_config.num_prompts_per_step, trainer.loop_config.num_generations_per_prompt
rewards = batch.rewards.view(P, G)  # rows of the batch are grouped: prompt p is rows p·G..p·G+G-1
mine = grpo_advantages(rewards).flatten()
rlnb_adv = trainer.compute_advantages(batch).sequence_advantages()
prompt_of_row = torch.arange(P).repeat_interleave(G)  # [B]
recipe = rlnb.grpo_advantages(prompt_of_row, rewards.flatten(), leave_one_out=False)
print(f"largest difference from the trainer's advantages (leave-one-out): "
      f"{(mine - rlnb_adv).abs().max():.1e}")
print(f"largest difference from the embedded recipe's (the group's own mean and std): "
      f"{(mine - recipe).abs().max():.2f}")
print(f"rewards per group: {rewards.sum(1).int().tolist()} right of {G}")
print(f"groups whose advantages are all 0 (all right or all wrong): "
      f"{int((mine.view(P, G).abs().sum(1) == 0).sum())} of {P}")

# %% tags=["solution"]
# what the cell above shows, as a check: the same advantages as the trainer's (which pins
# leave-one-out), not the recipe's whenever a group has signal
assert (mine - rlnb_adv).abs().max() < 1e-5, (mine - rlnb_adv).abs().max()
assert trainer.loop_config.adv_estimator.use_leave_one_out_baseline

# %% tags=["solution"]
# section 1's factor on this batch, against rlnb.grpo_advantages without the std: the
# leave-one-out difference r_i - b_i is G/(G-1) times r_i - mean(r), so a baseline that
# includes r_i shrinks every difference by (G-1)/G
loo = rlnb.grpo_advantages(prompt_of_row, rewards.flatten(), normalize_rewards=False)
with_self = rlnb.grpo_advantages(prompt_of_row, rewards.flatten(), leave_one_out=False,
                                 normalize_rewards=False)
by_hand = (rewards - rewards.mean(dim=1, keepdim=True)).flatten()  # [B]
assert torch.allclose(with_self, by_hand) and torch.allclose(loo, by_hand * G / (G - 1))
assert torch.allclose((rewards - leave_one_out_baseline(rewards)[0]).flatten(), loo)
print(f"r - b_loo = G/(G-1) (r - mean r) on all {P * G} rows, G/(G-1) = {G / (G - 1):.4f}")

# %% [markdown]
# ## 4. Predict, then run: how large should a group be?
#
# A step samples B = P·G responses. With the same B = 256, compare 16 prompts × 16 answers
# (the default) with 128 prompts × 2 answers, for 100 steps from the same warm start, both
# with your advantage (leave-one-out, pinned).
#
# <!-- lab-numbers: 01-start -->
# The warm-started model is right on 21.0% to 39.0% of the held-out problems (seeds 0-2 on the
# CPU classes of docs/teaching.md; your seed and machine print theirs as the runs start).
# <!-- /lab-numbers -->
#
# **Predict** before running the next cells:
# 1. `train/groups_with_signal` (the share of groups whose rewards are not all equal) for each
#    setting. Hint: with accuracy p, a group of G has signal with probability
#    $1 - p^G - (1-p)^G$.
# 2. Which reaches the higher held-out accuracy after 100 steps?
# 3. With G = 2 and leave-one-out, what is the advantage of the right answer of a (1, 0) pair?

# %% [markdown] tags=["student"]
# *Your predictions:*
#
# 1.
# 2.
# 3.

# %%
print(teach.EXPERIMENTS["group_size"].describe())
result = teach.run_experiment("group_size", seed=seed, fast=fast, steps=live_steps)
result.table

# %% [markdown] tags=["solution"]
# <!-- lab-numbers: 01-what-happened -->
# **What happened** (100 steps; seeds 0, 1 and 2 on AVX2 and AVX-512, measured for
# docs/teaching.md):
#
# | CPU, seed | groups with signal, G = 16 / G = 2 | held-out accuracy, G = 16 | G = 2 |
# |---|---|---|---|
# | AVX2, 0 | 0.86 / 0.30 | 30.5% → 33.0% | 30.5% → 38.5% |
# | AVX2, 1 | 0.82 / 0.38 | 24.5% → 44.0% | 24.5% → 53.5% |
# | AVX2, 2 | 0.91 / 0.34 | 33.5% → 62.0% | 33.5% → 69.5% |
# | AVX-512, 0 | 0.78 / 0.30 | 21.0% → 29.5% | 21.0% → 36.5% |
# | AVX-512, 1 | 0.90 / 0.39 | 32.0% → 45.5% | 32.0% → 51.5% |
# | AVX-512, 2 | 0.89 / 0.30 | 39.0% → 63.0% | 39.0% → 71.0% |
#
# 1. With p, the training reward, at 0.36 to 0.63, $1 - p^{16} - (1-p)^{16}$ is nearly 1 and
#    $2p(1-p)$ about 0.50; measured: 0.78 to 0.91 and 0.30 to 0.39, below the formula on all six
#    runs for G = 16, because p is not one number: some prompts the model always gets right or
#    always wrong.
# 2. G = 2 ended higher on all six runs (by 5.5 to 9.5 points), although 60.9% to 70.3% of the G
#    = 2 pairs carried no signal: G = 2 trains on 128 different problems per step instead of 16,
#    with about 86 of its 256 answers in pairs with signal against about 221 in G = 16's groups.
#    A hundred steps and one validation of 200 problems move by a few points by chance; we did
#    not isolate the cause, and running 64 × 4 and 32 × 8 would (one line in
#    `rlnb.teach.EXPERIMENTS`).
# <!-- /lab-numbers -->
#
# 3. A (1, 0) pair has σ = 0 for both (each has one other), so rlnb keeps the raw difference:
#    +1 and −1. Pairs carry signal only when one is right and one is wrong.

# %% tags=["solution"]
# the hint's formula against simulation: 20 000 groups of G answers, each right with
# probability p; a group has signal when rlnb's advantages are not all 0
sim = torch.Generator().manual_seed(seed + 1)
for size in (16, 2):
    for p in (0.1, 0.3, 0.5):
        right = (torch.rand(20_000, size, generator=sim) < p).float()  # [groups, G]
        prompts = torch.arange(20_000).repeat_interleave(size)
        adv = rlnb.grpo_advantages(prompts, right.flatten()).view(20_000, size)
        share = (adv != 0).any(dim=1).float().mean().item()
        formula = 1 - p ** size - (1 - p) ** size
        assert abs(share - formula) < 0.015, (size, p, share, formula)
        print(f"G = {size:2d}, p = {p}: groups with signal {share:.3f}, formula {formula:.3f}"
              + (f", 2p(1-p) = {2 * p * (1 - p):.3f}" if size == 2 else ""))

# %% [markdown]
# ## Discussion
#
# - Leave-one-out changes the baseline by a factor: show that
#   $r_i - b_i^{\text{loo}} = \frac{G}{G-1}\,(r_i - \bar r)$. So why do RLOO and GRPO still
#   differ after dividing by a std?
# - A group whose rewards are all equal contributes exactly zero gradient. What does that cost
#   when the model is almost always right? (DAPO's dynamic sampling: docs/algorithms.md.)
# - Where would the baseline's bias matter more: G = 2 or G = 64?
