"""The training loops (GRPO; PPO, async GRPO and DPO build on the same ``Trainer`` base), what
each declares for the UI (its stages and panels, ``views``), the loop registry (``loops``), the
rollout stage they share, hyperparameter changes between steps, and the supervised warm start."""
