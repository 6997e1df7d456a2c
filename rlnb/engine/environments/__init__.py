"""Where rewards come from: the environment interface, the built-in tasks, multi-turn rollouts."""
