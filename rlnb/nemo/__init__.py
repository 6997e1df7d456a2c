"""NeMo-RL's names, for NeMo-RL users: ``rlnb.nemo.grpo`` mirrors ``nemo_rl.algorithms.grpo``.

Each name has NeMo-RL's meaning and drives rlnb's trainer; docs/nemo_rl_names.md maps every one
to the stage methods it runs. The algorithm names (``GRPOAdvantageEstimator``,
``ClippedPGLossFn``, ...) are importable from ``rlnb`` itself.
"""
