"""The GPU tier (``-m gpu``; skipped where torch sees no CUDA device, run by
benchmarks/gpu_check.py on a GPU machine): the policy in bf16 on the card, the sampler's
log-probs against the policy's there, GRPO steps with LoRA and with ``policy.compile``, DPO and
PPO steps, and the memory plan against the allocator's measured peaks (within 15 %)."""

import math

import pytest
import torch

from rlnb.engine.trainers.loops import make_trainer
from rlnb.run.config.master_config import load_config, packaged_config
from rlnb.run.training.probes import attach_probes

pytestmark = pytest.mark.gpu

SMALL = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
         "sft.enabled=false", "policy.precision=bfloat16"]
QWEN3 = ["policy.model_name=random", "policy.random_init.hidden_size=256",
         "policy.random_init.num_hidden_layers=4", "policy.random_init.num_attention_heads=4",
         "policy.random_init.num_key_value_heads=2", "policy.random_init.head_dim=64",
         "policy.random_init.intermediate_size=768", "policy.random_init.vocab_size=32000"]


def finite(metrics) -> bool:
    return all(math.isfinite(v) for k, v in metrics.items() if isinstance(v, float))


def on_cuda(trainer) -> bool:
    return all(p.device.type == "cuda" for p in trainer.policy.model.parameters())


def test_the_policy_lives_on_the_card_in_bf16_and_the_sampler_gives_its_logprobs():
    trainer = make_trainer(load_config(None, SMALL, preset="fast"))
    assert on_cuda(trainer) and trainer.policy.model.dtype == torch.bfloat16
    batch = trainer.rollout()
    lp = trainer.policy.logprobs(batch.input_ids, batch.attention_mask)
    m = batch.token_mask.bool()
    # the same weights, the same tokens: bf16 rounding apart (sampler and scoring pass)
    assert (lp[m] - batch.generation_logprobs[m]).abs().max() < 0.1
    assert finite(trainer.step())


@pytest.mark.parametrize("extra", [["policy.lora.enabled=true"], ["policy.compile.enabled=true"],
                                   QWEN3], ids=["lora", "compile", "qwen3"])
def test_grpo_steps_on_the_card(extra):
    trainer = make_trainer(load_config(None, [*SMALL, *extra], preset="fast"))
    assert on_cuda(trainer)
    for _ in range(2):  # the untrained model scores 0 everywhere: the steps run, finite
        assert finite(trainer.step())


@pytest.mark.parametrize("recipe", ["dpo_tiny", "ppo_tiny"])
def test_dpo_and_ppo_steps_on_the_card(recipe):
    section = recipe.split("_")[0]
    config = load_config(packaged_config(recipe), [
        f"{section}.val_period=0", "sft.enabled=false", "policy.precision=bfloat16",
        f"{section}.val_at_start=false"], preset="fast")
    trainer = make_trainer(config)
    assert on_cuda(trainer) and finite(trainer.step())


def test_the_memory_plan_is_within_15_percent_of_the_allocators_peaks():
    trainer = make_trainer(load_config(None, [*SMALL, *QWEN3,
                                              "loss_fn.reference_policy_kl_penalty=0.01"],
                                       preset="fast"))
    attach_probes(trainer)  # as a run does: the second step is measured (run/training/probes.py)
    trainer.step()
    metrics = trainer.step()
    for stage in ("generation", "logprobs", "update"):
        plan, peak = metrics[f"memory/{stage}_plan_gib"], metrics[f"memory/{stage}_peak_gib"]
        assert abs(plan - peak) / peak < 0.15, (stage, plan, peak)
