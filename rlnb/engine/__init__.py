"""The engine: what turns the algorithm layer's tensor math into training.

- ``models/``: the policy (any Hugging Face causal LM, or the embedded tiny Llama) and the
  generation backends;
- ``environments/``: the environment interface, the built-in verifiable tasks, multi-turn
  rollouts;
- ``trainers/``: the loops (GRPO, PPO, async GRPO, DPO), the rollout stage they share, the warm
  start;
- ``batches.py`` (the plain objects a step passes along; DPO's: ``preference_batch.py``, its pairs
  from a dataset or a task's samples: ``preference_data.py``), ``distributed.py`` (rank-aware
  reductions), ``token_stats.py`` and ``counterfactual.py`` (inspection and replay of a batch).

It imports the algorithm layer and never the run layer or Jupyter; ``import rlnb`` loads it
only on first use.
"""
