"""The training loops (GRPO; PPO, async GRPO and DPO build on the same ``Trainer`` base), the
rollout stage they share, hyperparameter changes between steps, and the supervised warm start."""
