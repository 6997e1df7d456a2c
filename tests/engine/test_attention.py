"""policy.attn_implementation (rlnb/engine/models/loading.py, policy.py choice 10): eager
attention and SDPA give the same log-probs and gradients to float rounding on every token a
log-prob is read for, on three architectures, in the full pass and the shared-prefix pass; they
differ only where a left-padded row's pad position predicts its first token (a query that attends
to nothing), which the shared pass's once-per-model check must not count."""

import pytest
import torch
from test_shared_prefix import MODELS, full_pass, grpo_rows

import rlnb
from rlnb.engine.models.loading import load_model_and_tokenizer, set_attention
from rlnb.engine.models.policy import position_ids_from_mask
from rlnb.engine.models.shared_prefix import (
    SharedPrefix,
    first_scored_column,
    shared_prefix_logprobs,
)


def read_positions(mask: torch.Tensor) -> torch.Tensor:
    """[B, S] bool: tokens whose log-prob is read at an attended position."""
    read = mask.bool().clone()
    read[:, 1:] &= mask[:, :-1].bool()
    read[:, 0] = False
    return read


def grads(model, logprobs, weight):
    model.zero_grad()
    (logprobs * weight).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.mark.parametrize("name", list(MODELS))
def test_eager_and_sdpa_agree_on_every_read_log_prob_and_gradient(name):
    model = MODELS[name]().float()
    ids, mask, scored = grpo_rows()
    weight = torch.randn(ids.shape, generator=torch.Generator().manual_seed(1)) * scored
    pos, c, read = position_ids_from_mask(mask), first_scored_column(scored), read_positions(mask)
    out = {}
    for impl in ("sdpa", "eager"):
        set_attention(model, impl)
        assert model.config._attn_implementation == impl
        plain = full_pass(model, ids, mask)
        shared = shared_prefix_logprobs(model, ids, mask, pos, c, temperature=0.7)
        out[impl] = (plain.detach(), grads(model, plain, weight),
                     shared.detach(), grads(model, shared, weight))
    for a, b in zip(out["sdpa"], out["eager"]):
        if isinstance(a, list):
            for n, (x, y) in enumerate(zip(a, b)):
                torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-4, msg=f"parameter {n}")
        else:
            torch.testing.assert_close(a[read], b[read], atol=2e-5, rtol=0)
    # a left-padded row's first token is predicted from a pad position: there the two kernels
    # disagree (nothing reads it), so a check over every attended token would refuse eager
    first_after_pad = mask.bool() & ~read & (torch.arange(ids.shape[1]) > 0)
    assert first_after_pad.any()


def test_the_shared_pass_check_accepts_eager_attention():
    model = set_attention(MODELS["tiny llama"]().float(), "eager")
    ids, mask, scored = grpo_rows()
    pos, c = position_ids_from_mask(mask), first_scored_column(scored)
    check = SharedPrefix(True, model)
    assert check.check(model, lambda: full_pass(model, ids, mask),
                       lambda: shared_prefix_logprobs(model, ids, mask, pos, c, 0.7), mask)
    assert check.enabled and check.reason is None


def test_the_option_sets_the_kernel_and_unset_keeps_the_models_own():
    config = rlnb.load_config(None, [])
    assert config.policy.attn_implementation == "eager"  # the embedded recipe's choice
    model, _ = load_model_and_tokenizer(config.policy)
    assert model.config._attn_implementation == "eager"
    unset = rlnb.load_config(None, ["policy.attn_implementation=null"])
    model, _ = load_model_and_tokenizer(unset.policy)
    assert model.config._attn_implementation == "sdpa"  # transformers' own pick with torch
    with pytest.raises(ValueError, match="attn_implementation"):
        rlnb.load_config(None, ["policy.attn_implementation=flash_attention_2"])


def test_a_model_without_the_kernel_is_refused_in_one_line_naming_the_option():
    from transformers import LlamaConfig, LlamaForCausalLM

    class NoSdpa(LlamaForCausalLM):  # a model class that declares no SDPA support
        _supports_sdpa = False

    model = NoSdpa(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32,
                               num_hidden_layers=1, num_attention_heads=2,
                               attn_implementation="eager"))
    with pytest.raises(ValueError, match=r"^policy\.attn_implementation=sdpa: NoSdpa cannot run"):
        set_attention(model, "sdpa")
    assert set_attention(model, None) is model and model.config._attn_implementation == "eager"
