"""policy.model_name: random (rlnb/engine/models/random_init.py): a Qwen3 of policy.random_init's
shape with random weights and the padded character tokenizer, trained a GRPO step with and
without LoRA; the real-size recipe configs/qwen3_0.6b.yaml loads and names Qwen3-0.6B's shape."""

import pytest
import torch

from rlnb.engine.models.tiny import CHARACTERS, SPECIAL_TOKENS, build_char_tokenizer
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config, packaged_config

# a small model of the recipe's architecture: 2 layers, width 64, grouped-query attention
SMALL_QWEN3 = ["policy.model_name=random", "policy.random_init.hidden_size=64",
               "policy.random_init.num_hidden_layers=2", "policy.random_init.num_attention_heads=4",
               "policy.random_init.num_key_value_heads=2", "policy.random_init.head_dim=16",
               "policy.random_init.intermediate_size=128", "policy.random_init.vocab_size=512"]


def test_the_padded_tokenizer_decodes_every_id_and_encodes_text_as_before():
    plain, padded = build_char_tokenizer(), build_char_tokenizer(vocab_size=300)
    assert len(padded) == 300 and len(plain) == len(SPECIAL_TOKENS) + len(CHARACTERS)
    text = "12+7=<unused_5>"  # a filler's name as text is characters, not the filler
    assert padded(text)["input_ids"] == plain(text)["input_ids"]
    assert padded.decode([len(plain), 299]) == f"<unused_{len(plain)}><unused_299>"
    with pytest.raises(ValueError, match="vocab_size"):
        build_char_tokenizer(vocab_size=10)


@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_a_small_qwen3_trains_a_grpo_step(lora):
    extra = ["policy.lora.enabled=true", "policy.lora.dim=4"] if lora else []
    config = load_config(None, [*SMALL_QWEN3, *extra, "loss_fn.reference_policy_kl_penalty=0.01",
                                "policy.random_init.tie_word_embeddings=false"], preset="fast")
    trainer = GRPOTrainer(config)
    model = trainer.policy.model
    assert type(model).__name__ == "Qwen3ForCausalLM"
    assert model.config.num_key_value_heads == 2 and model.config.head_dim == 16
    assert model.get_input_embeddings().num_embeddings == len(trainer.policy.tokenizer) == 512
    assert model.lm_head.weight is not model.get_input_embeddings().weight  # tie=false
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert (len(named) < len(list(model.parameters()))) is lora
    # LoRA's B starts at 0, so a first step moves B alone (A's gradient is B-weighted)
    trainable = [p for n, p in named if not lora or "lora_B" in n]
    before = [p.detach().clone() for p in trainable]
    # a reward by position: the random model has signal in every group
    score = trainer.task.score

    def scored(prompts, responses, rows):
        r = score(prompts, responses, rows)
        r.total = (torch.arange(len(prompts)) % 2).float()
        return r

    trainer.task.score = scored
    metrics = trainer.step()
    assert torch.isfinite(torch.tensor(metrics["train/loss"]))
    assert all(not torch.equal(a, b) for a, b in zip(before, trainable))  # every one moved
    assert metrics.rollout.input_ids.max() < 512


def test_the_recipe_loads_with_qwen3_0_6b_shape():
    config = load_config(packaged_config("qwen3_0.6b"))
    p = config.policy
    assert (p.model_name, p.precision, p.generation.backend) == ("random", "bfloat16", "hf")
    assert config.grpo.num_generations_per_prompt == 8
    assert 256 <= p.generation.max_new_tokens <= 512
    shape = p.random_init  # Qwen/Qwen3-0.6B's config.json
    assert (shape.hidden_size, shape.num_hidden_layers, shape.num_attention_heads,
            shape.num_key_value_heads, shape.head_dim, shape.intermediate_size,
            shape.vocab_size, shape.tie_word_embeddings, shape.rope_theta,
            shape.rms_norm_eps) == (1024, 28, 16, 8, 128, 3072, 151936, True, 1e6, 1e-6)


def test_a_random_model_refuses_a_tokenizer_name_and_odd_heads():
    with pytest.raises(ValueError, match="tokenizer_name"):
        load_config(None, ["policy.model_name=random", "policy.tokenizer_name=gpt2"])
    with pytest.raises(ValueError, match="num_key_value_heads"):
        load_config(None, ["policy.random_init.num_key_value_heads=3"])
