"""The small tiny-model configuration the engine tests share (seconds per run on 2 cores)."""

TINY = [
    "policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
    "policy.max_total_sequence_length=20", "policy.generation.max_new_tokens=4",
    "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
    "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4", "data.num_val=16",
]
