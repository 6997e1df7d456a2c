"""The inspection room: one frozen batch looked at closely, with no training step taken.

- ``token_stats``: per-token ratio, KL, entropy and log-prob gap, for token views;
- ``counterfactual``: the batch replayed through several estimators and loss settings;
- ``mechanisms``: what each published knob does to the batch, per response and per token;
- ``signal_check``: before training, how many of the run's groups will carry no signal;
- ``diagnosis``: a run's first steps read into findings with their fixes (the doctor's card);
- ``staleness``: a stale batch's importance weights, and the pushes the correction keeps.
"""
