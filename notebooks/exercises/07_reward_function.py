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

# %% tags=["parameters"]
fast = False  # tests: a smaller model, no warm start, 2 training steps per run
seed = 0  # grpo.seed of the real batch and of the live runs
run_dir = None  # unused (rlnb run passes it to every notebook)

# %%
import torch

from rlnb import teach

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
result = teach.run_experiment(experiment, seed=seed, fast=fast)
result.table

# %% [markdown] tags=["solution"]
# **What happened** (seed 0, measured for docs/teaching.md):
#
# | seed | groups with signal (last 10 steps), τ = 1.0 / 0.3 | held-out accuracy after 60 steps, τ = 1.0 / 0.3 |
# |---|---|---|
# | 0 | 0.62 / 0.63 | 35.0% → 62.0% / 42.0% → 37.0% |
# | 1 | 0.70 / 0.57 | 36.0% → 46.5% / 29.0% → 34.0% |
# | 2 | 0.59 / 0.63 | 45.0% → 65.5% / 40.5% → 35.5% |
#
# (validation samples at the run's temperature, so the two settings start from different
# accuracies of the same model)
#
# 1. About the same share of groups had signal at both temperatures (0.57-0.70), not fewer at
#    τ = 0.3 as one might expect from sharper sampling.
# 2. τ = 1.0 gained 10 to 27 points; τ = 0.3 lost 5 points on two seeds of three. We did not
#    isolate why, and it makes a good question for the class: at τ = 0.3 the trainer optimises
#    the sharpened distribution softmax(z/0.3), whose log-probs rlnb computes at the sampling
#    temperature (docs/algorithms.md#log-probabilities), and its samples are close to the
#    argmax, so the wrong answers it samples are the model's confident mistakes.

# %% [markdown]
# ## Discussion
#
# - A partial-credit reward (the share of letters in the right place) gives more groups
#   signal. What could go wrong when the model optimises it instead of exact match?
# - Your reward accepted `"cba "`. What would a model learn if trailing spaces were rewarded
#   0 but the warm start's data sometimes ended with one?
# - Before a real run on a new task: what would you check first, the reward function on
#   hand-made completions, the signal on samples, or the accuracy of the warm start? Why?
