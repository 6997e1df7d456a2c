"""The engine: what turns the algorithm layer's tensor math into training.

- ``runtime/``: what every loop runs on: rank-aware reductions, stage timers, progress bars;
- ``models/``: the policy (any Hugging Face causal LM, or the embedded tiny Llama) and the
  generation backends;
- ``environments/``: the environment interface, the built-in verifiable tasks, multi-turn
  rollouts;
- ``data/``: the plain objects a step passes along (``batches.py``, joined by
  ``batch_join.py``; DPO's ``preference_batch.py``, its pairs from a dataset or a task's samples:
  ``preference_data.py``);
- ``agents/``: agent episodes through the chat template and the in-process OpenAI client;
- ``trainers/``: the loops (GRPO, PPO, async GRPO, DPO), the rollout stage they share, the
  advantage stage's inputs, the warm start;
- ``inspection/``: the inspection room: one frozen batch's token statistics, counterfactual
  replay, what each published knob does to it, the signal check before training.

The folders import in that order, each only the ones before it (``tests/package/test_layers.py``
checks). The engine imports the algorithm layer and never the run layer or Jupyter;
``import rlnb`` loads it only on first use.
"""
