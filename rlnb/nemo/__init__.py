"""NeMo-RL's module layout for a NeMo-RL user's code: ``rlnb.nemo.X`` mirrors
``nemo_rl.algorithms.X`` with NeMo-RL's names, signatures and return values, as thin adapters over
rlnb's one implementation of each computation.

    from rlnb.nemo.loss_functions import ClippedPGLossFn     # or rlnb.nemo.loss
    from rlnb.nemo.advantage_estimator import GRPOAdvantageEstimator
    from rlnb.nemo.grpo import scale_rewards, dynamic_sampling, setup, grpo_train

Modules: ``advantage_estimator``, ``loss`` (and the older ``loss_functions``), ``grpo``, ``ppo``,
``utils``, ``reward_functions``, ``async_utils.replay_buffer``, ``batched_data_dict``.
``dpo`` (NeMo-RL's DPO names), ``batch_stages`` (the per-batch stages of the GRPO and PPO loops
on NeMo-RL's batches) and ``async_utils`` (its replay buffer) complete the layout.
docs/nemo_rl_names.md lists every name, what runs it, and each deliberate difference. NeMo-RL's
YAML configs load with ``rlnb.load_config`` (``rlnb.run.config.nemo.translate``).
"""
