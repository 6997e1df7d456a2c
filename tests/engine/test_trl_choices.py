"""Two of TRL's GRPOTrainer choices as rlnb options, their defaults NeMo-RL's numerics (the
embedded recipe turns them on, with TRL's group baseline): ``grpo.update_rows: shuffled`` (a
rollout's rows permuted across prompts before they split into optimizer steps, as TRL shuffles
its generation batch) and ``grpo.token_normalizer: rollout_mean`` (every step's token-level loss
divided by the rollout's valid tokens over its steps, as TRL's ``dapo`` loss divides by the
generation batch's). Counts derived by hand."""

import torch

from rlnb.engine.trainers.grpo import GRPOTrainer, shuffled_rows
from rlnb.run.config.master_config import load_config, packaged_config

# NeMo-RL's numerics: the options' own defaults, and the override back from the embedded recipe
NEMO = ["grpo.use_leave_one_out_baseline=true", "grpo.update_rows=in_order",
        "grpo.token_normalizer=global_batch"]
SMALL = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
         "sft.enabled=false", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
         "policy.train_global_batch_size=2", "policy.train_micro_batch_size=2", *NEMO]


class Recording:
    """Wraps the trainer's loss: records the token divisor and the rows of each call."""

    def __init__(self, loss_fn):
        self.loss_fn, self.divisors, self.rows = loss_fn, [], []

    def from_logprobs(self, logprobs, data, n_seq, n_tok):
        self.divisors.append(float(n_tok))
        self.rows.append(data["input_ids"].clone())
        return self.loss_fn.from_logprobs(logprobs, data, n_seq, n_tok)


def batch_with_lengths(trainer, lengths):
    """A real rollout whose rows' token masks hold ``lengths`` valid tokens."""
    batch = trainer.compute_advantages(trainer.rollout())
    mask = torch.zeros_like(batch.rollout.token_mask)
    for i, n in enumerate(lengths):
        mask[i, 1:1 + n] = 1
    batch.rollout.token_mask = mask
    return batch


def test_the_rollout_mean_divides_every_step_by_the_rollouts_tokens_over_its_steps():
    seen = {}
    for normalizer in ("global_batch", "rollout_mean"):
        trainer = GRPOTrainer(load_config(None, [*SMALL, f"grpo.token_normalizer={normalizer}"],
                                          preset="fast"))
        batch = batch_with_lengths(trainer, [3, 3, 1, 1])  # two optimizer steps: 6, then 2 tokens
        rec = Recording(trainer.loss_fn)
        metrics = trainer.update(batch, loss_fn=rec).metrics
        seen[normalizer] = rec.divisors
        assert metrics["train/global_valid_toks"] == 4.0  # the counts reported: the real ones
    assert seen == {"global_batch": [6.0, 2.0], "rollout_mean": [4.0, 4.0]}  # (6 + 2) / 2


def test_shuffled_rows_mix_prompts_across_optimizer_steps_in_a_seeded_order():
    data = {"input_ids": torch.arange(8).view(8, 1), "advantages": torch.arange(8.0).view(8, 1),
            "scalar": 3}
    a, b = shuffled_rows(data, "k"), shuffled_rows(data, "k")
    assert torch.equal(a["input_ids"], b["input_ids"]) and a["scalar"] == 3  # seeded
    assert sorted(a["input_ids"].view(-1).tolist()) == list(range(8))  # a permutation
    assert torch.equal(a["input_ids"].float(), a["advantages"])  # every tensor the same order
    assert not torch.equal(shuffled_rows(data, "other")["input_ids"], a["input_ids"])
    orders = {}
    for rows in ("in_order", "shuffled"):
        trainer = GRPOTrainer(load_config(None, [*SMALL, f"grpo.update_rows={rows}"],
                                          preset="fast"))
        batch = trainer.compute_advantages(trainer.rollout())
        told = trainer.row_order(4).tolist()  # what the update is about to take, by its own word
        rec = Recording(trainer.loss_fn)
        trainer.update(batch, loss_fn=rec)
        ids = batch.rollout.input_ids
        orders[rows] = [next(i for i in range(len(ids)) if torch.equal(ids[i], r))
                        for step in rec.rows for r in step]
        assert orders[rows] == told, rows
    assert orders["in_order"] == [0, 1, 2, 3]
    assert sorted(orders["shuffled"]) == [0, 1, 2, 3] and orders["shuffled"] != [0, 1, 2, 3]


def trl_choices(config) -> tuple:
    grpo = config.grpo
    return (grpo.adv_estimator.use_leave_one_out_baseline, grpo.leave_one_out, grpo.update_rows,
            grpo.token_normalizer)


def test_the_embedded_recipe_takes_trls_three_choices_and_every_other_config_nemo_rls():
    trl, nemo = (False, False, "shuffled", "rollout_mean"), (True, True, "in_order", "global_batch")
    assert trl_choices(load_config(None)) == trl  # configs/tiny.yaml
    assert trl_choices(load_config(None, NEMO)) == nemo  # the override back (docs/algorithms.md)
    assert trl_choices(load_config({})) == nemo  # the options' own defaults
    for name in ("async_tiny", "calculator_tiny", "reasoning_gym_tiny", "qwen3_0.6b"):
        assert trl_choices(load_config(packaged_config(name))) == nemo, name
