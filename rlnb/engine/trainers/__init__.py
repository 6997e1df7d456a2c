"""The training loops (GRPO; PPO, async GRPO and DPO build on the same ``Trainer`` base), what
each declares for the UI, the loop registry, the stages they share and the supervised warm start.

- ``base``: ``Trainer``: a loop's parts, its data stream, the rollout stage's plumbing, the loop;
- ``setup``: what a trainer checks and builds before its first step (config, task, environment);
- ``validation``: held-out validation on its own random state (a mixin of ``Trainer``);
- ``save_state``: what a trainer saves and restores (a mixin of ``Trainer``);
- ``rollout``: stage 1, every loop's: sample, score, log-probs, the reward metrics;
- ``dynamic_rollout``: DAPO's dynamic sampling: generation batches joined until they fill a step;
- ``advantage_inputs``: stage 2's inputs: rewards scaled and shaped, the filters, group signal;
- ``funnel``: the sample funnel: of the rows generated, which reached the gradient;
- ``memory_check``: the memory plan of a loop beside the measured peaks of its stages;
- ``grpo``, ``grpo_config``: GRPO's stages and step, and its config section;
- ``async_grpo``, ``collector``: async GRPO, and the collector that generates ahead;
- ``ppo``: PPO with a value model; ``dpo``, ``dpo_config``, ``dpo_scores``: DPO and its pairs;
- ``loop_config``: the keys every loop shares and the rules between sections;
- ``loops``: the loop registry (``algorithm:``), ``make_trainer``;
- ``views``: what a loop declares for the UI: stages, panels, config-panel fields;
- ``hyperparameters``: ``reconfigure``: hyperparameters changed between steps;
- ``warm_start``: the supervised warm start and its cache key.
"""
