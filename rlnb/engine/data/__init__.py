"""The plain objects a step passes along, and where DPO's pairs come from.

- ``batches``: RolloutBatch -> AdvantageBatch -> UpdateResult -> StepMetrics;
- ``views``: what a notebook sees of them: a frame per batch and a few readable lines;
- ``batch_join``: joining rollout batches, and turning them into plain data (checkpoints);
- ``preference_batch``: DPO's PreferenceBatch -> PreferenceScores -> DPOUpdateResult;
- ``preference_data``: preference pairs from a dataset's rows or a task's scored samples.
"""
