# %% [markdown]
# # Exercise 7 · A reward function for a new task, and whether its groups carry signal
#
# The tutorials train on addition. Here the task is new: reverse a word (`"rev abc="` →
# `"cba"`). You will write its reward function, check it against the task's own, count the
# groups that carry a learning signal on real samples of the tiny model, and predict how the
# sampling temperature changes that count and training.
#
# **Objective:** write a reward function the way TRL calls it and count the groups that carry a
# learning signal. **Before this:** exercise 1 (a group whose rewards all agree has zero
# advantage).
#
# **Difficulty:** ★☆☆ (string handling; the check's cases hold the edge cases). **Time:** about
# 20 minutes: sections 1-3 in 12, section 4 (predict, run, discuss) in 8; how long its live
# runs take on your machine, `rlnb preflight` says.
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
# ## 1. The reward
#
# A verifiable reward checks the answer: 1 for an exactly right completion, 0 otherwise. The
# details are the whole job. For this task, as for rlnb's `reverse` task:
# - the prompt is `"rev WORD="` and the right completion is WORD reversed;
# - trailing whitespace is allowed (`"cba "`, `"cba\n"`); a leading space is wrong, and so is
#   anything else before or after the answer, and upper case.
#
# **Write** `reverse_reward(prompts, completions) -> list[float]`, TRL's reward-function
# signature (lists of strings, one float per completion).
#
# <details><summary>Hint 1</summary>
#
# Take the word out of the prompt (between `"rev "` and `"="`), reverse it, and compare it with
# the completion once its trailing whitespace is gone, and only that.
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# `str.removeprefix`, `str.removesuffix`, a slice with step −1 (`word[::-1]`), and
# `completion.rstrip()` with no argument (spaces and newlines); 1.0 or 0.0 per completion, in a
# list.
#
# </details>

# %%
def reverse_reward(prompts, completions):
    """1.0 for the reversed word (trailing whitespace allowed), else 0.0."""
    # BEGIN SOLUTION: the word between "rev " and "=", reversed, against the stripped completion
    rewards = []
    for prompt, completion in zip(prompts, completions):
        word = prompt.removeprefix("rev ").removesuffix("=")
        rewards.append(1.0 if completion.rstrip() == word[::-1] else 0.0)
    return rewards
    # END SOLUTION


teach.check_reverse_reward(reverse_reward)

# %% [markdown]
# ## 2. Groups with signal
#
# GRPO learns only from groups whose rewards are not all equal (exercise 1: an all-equal group
# has zero advantages). Before training on a new reward, count them.
#
# **Write** `fraction_with_signal(rewards)`: rewards `[P, G]`, returning the fraction of the P
# groups whose G rewards are not all equal (a float).
#
# <details><summary>Hint 1</summary>
#
# A group is a row. Its rewards are not all equal exactly when its largest reward is above its
# smallest one, whatever the rewards are (0/1 or partial credit).
#
# </details>
# <details><summary>Hint 2 (stronger)</summary>
#
# `rewards.max(dim=1).values` and `rewards.min(dim=1).values` give one number per group;
# comparing them gives one flag per group, and the mean of the flags, as a Python `float`, is the
# fraction.
#
# </details>

# %%
def fraction_with_signal(rewards):
    """The share of groups (rows) whose rewards differ."""
    # BEGIN SOLUTION: a group has signal when its largest and smallest rewards differ
    return float((rewards.max(dim=1).values > rewards.min(dim=1).values).float().mean())
    # END SOLUTION


teach.check_fraction_with_signal(fraction_with_signal)

# %% [markdown]
# ## 3. On real samples
#
# The tiny model warm-started on the reverse task (a short supervised run, cached), 16 words ×
# 16 samples. Your reward against the task's own, and the signal:

# %%
experiment = teach.EXPERIMENTS["reward_temperature"]
trainer = teach.warm_trainer(seed=seed, fast=fast, overrides=experiment.common)
batch = trainer.rollout()
P, G = trainer.loop_config.num_prompts_per_step, trainer.loop_config.num_generations_per_prompt
prompts = [row["prompt"] for row in batch.rows]
mine = torch.tensor(reverse_reward(prompts, batch.responses)).view(P, G)
print("rewards equal to the task's:", torch.equal(mine.flatten(), batch.rewards))
print("accuracy of the samples:", float(mine.mean()))
print("fraction of groups with signal:", fraction_with_signal(mine))
for p in range(3):
    print(f"  {prompts[p * G]!r}: {batch.responses[p * G:p * G + 6]} ...")

# %% tags=["solution"]
# the task's own reward is the one you wrote: equal on every real sample
assert torch.equal(mine.flatten(), batch.rewards), (mine.flatten() - batch.rewards).abs().max()

# %% [markdown]
# ## 4. Predict, then run: the temperature
#
# Sampling at temperature τ divides the logits by τ: τ < 1 makes the likeliest answer more
# likely. Two GRPO runs of 60 steps on the reverse task from the same warm start, at τ = 1.0
# and τ = 0.3 (training and validation both sample at τ).
#
# **Predict** before running:
# 1. `train/groups_with_signal` at each temperature.
# 2. Which gains more held-out accuracy in 60 steps?

# %% [markdown] tags=["student"]
# *Your predictions:*
#
# 1.
# 2.

# %%
print(experiment.describe())
result = teach.run_experiment(experiment, seed=seed, fast=fast, steps=live_steps)
result.table

# %% [markdown] tags=["solution"]
# <!-- lab-numbers: 07-what-happened -->
# **What happened** (60 steps; signal: mean over the last 10 steps; seeds 0, 1 and 2 on AVX2 and
# AVX-512, measured for docs/teaching.md):
#
# | CPU, seed | groups with signal, τ = 1.0 / 0.3 | held-out accuracy, τ = 1.0 | τ = 0.3 |
# |---|---|---|---|
# | AVX2, 0 | 0.61 / 0.61 | 41.5% → 66.0% | 42.5% → 40.5% |
# | AVX2, 1 | 0.72 / 0.62 | 34.5% → 52.5% | 29.0% → 40.0% |
# | AVX2, 2 | 0.59 / 0.61 | 45.0% → 54.5% | 40.5% → 44.5% |
# | AVX-512, 0 | 0.59 / 0.52 | 44.5% → 69.0% | 41.5% → 34.5% |
# | AVX-512, 1 | 0.72 / 0.57 | 29.5% → 54.5% | 29.0% → 38.5% |
# | AVX-512, 2 | 0.56 / 0.61 | 44.5% → 65.5% | 40.5% → 44.5% |
#
# (validation samples at the run's temperature, so the two settings start from different
# accuracies of the same model)
#
# 1. Fewer groups had signal at τ = 0.3 on three of six runs, as many on one of six runs (0.52
#    to 0.62 against 0.56 to 0.72 at τ = 1.0).
# 2. τ = 1.0 gained more on all six runs (+9.5 to +25.0 points against −7.0 to +11.0 at τ =
#    0.3). We did not isolate why, and it makes a good question for the class: at τ = 0.3 the
#    trainer optimises the sharpened distribution softmax(z/0.3), whose log-probs rlnb computes
#    at the sampling temperature (docs/algorithms.md#log-probabilities), and its samples are
#    close to the argmax, so the wrong answers it samples are the model's confident mistakes.
# <!-- /lab-numbers -->

# %% [markdown]
# ## Discussion
#
# - A partial-credit reward (the share of letters in the right place) gives more groups
#   signal. What could go wrong when the model optimises it instead of exact match?
# - Your reward accepted `"cba "`. What would a model learn if trailing spaces were rewarded
#   0 but the warm start's data sometimes ended with one?
# - Before a real run on a new task: what would you check first, the reward function on
#   hand-made completions, the signal on samples, or the accuracy of the warm start? Why?
