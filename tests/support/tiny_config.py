"""The small tiny-model configuration the engine tests share (seconds per run on 2 cores), and a
scripted reward that gives an untrained model a learning signal."""

TINY = [
    "policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
    "policy.max_total_sequence_length=20", "policy.generation.max_new_tokens=4",
    "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
    "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4", "data.num_val=16",
]


def with_rewards(trainer, pattern=(1.0, 0.0, 0.0, 1.0)):
    """Score responses by position instead of correctness, so a fresh model has signal (the
    async loop's collector thread calls it too). Returns the trainer."""
    import torch

    from rlnb.engine.environments.base import Rewards

    def score(prompts, responses, rows):
        r = torch.tensor([pattern[i % len(pattern)] for i in range(len(prompts))])
        return Rewards(total=r, components={}, correct=r > 0)

    trainer.task.score = score
    return trainer
