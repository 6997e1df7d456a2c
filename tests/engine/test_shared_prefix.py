"""policy.share_prompt_prefix (rlnb/engine/models/shared_prefix.py): each distinct prompt is
forwarded once and its rows' continuations read its KV cache. The log-probs and the gradient
equal the full pass's to float rounding on three architectures (the tiny Llama, a Qwen3 with
grouped-query attention, GPT-2 with learned positions), for any split and any row order; the
update takes it and moves the weights as the full pass does; models it cannot serve keep the
full pass, with the reason."""

import pytest
import torch
from tiny_config import TINY, with_rewards

from rlnb.engine.models.policy import position_ids_from_mask
from rlnb.engine.models.shared_prefix import (
    SharedPrefix,
    first_scored_column,
    has_dropout,
    shared_prefix_logprobs,
)
from rlnb.engine.models.tiny import build_tiny_llama
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config


def gpt2(dropout: float = 0.0):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=60, n_positions=64, n_embd=32, n_layer=2,
                                      n_head=2, resid_pdrop=dropout, embd_pdrop=dropout,
                                      attn_pdrop=dropout))


def qwen3():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    return Qwen3ForCausalLM(Qwen3Config(vocab_size=60, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        num_key_value_heads=2, head_dim=8))


MODELS = {"tiny llama": lambda: build_tiny_llama(60, hidden_size=32), "qwen3 gqa": qwen3,
          "gpt2": gpt2}


def grpo_rows(P=3, G=4, L=6, R=4, seed=0):
    """A GRPO-shaped batch: P prompts of different lengths left-padded to L, each G times with
    right-padded responses of R columns, rows shuffled. Returns ids, mask, token_mask [B, S]."""
    g = torch.Generator().manual_seed(seed)
    ids, mask, scored = [], [], []
    for p in range(P):
        n = L - p % 3  # prompt p has p mod 3 left pads
        prompt = torch.randint(4, 60, (n,), generator=g)
        for _ in range(G):
            r = int(torch.randint(1, R + 1, (1,), generator=g))  # response length 1..R
            resp = torch.randint(4, 60, (R,), generator=g)
            ids.append(torch.cat([torch.zeros(L - n, dtype=torch.long), prompt, resp]))
            m = torch.cat([torch.zeros(L - n), torch.ones(n), (torch.arange(R) < r).float()])
            mask.append(m.long())
            scored.append(torch.cat([torch.zeros(L), (torch.arange(R) < r).float()]))
    order = torch.randperm(P * G, generator=g)
    return torch.stack(ids)[order], torch.stack(mask)[order], torch.stack(scored)[order]


def full_pass(model, ids, mask):
    from rlnb.algorithms.logprobs import token_logprobs

    logits = model(input_ids=ids, attention_mask=mask,
                   position_ids=position_ids_from_mask(mask)).logits
    return torch.nn.functional.pad(token_logprobs(logits[:, :-1], ids[:, 1:], 0.7), (1, 0))


@pytest.mark.parametrize("name", list(MODELS))
def test_log_probs_and_gradient_equal_the_full_pass(name):
    model = MODELS[name]().float()
    ids, mask, scored = grpo_rows()
    pos = position_ids_from_mask(mask)
    weight = torch.randn(ids.shape, generator=torch.Generator().manual_seed(1)) * scored
    c = first_scored_column(scored)
    assert c == 6  # the prompts' width: every response starts there

    model.zero_grad()
    plain = full_pass(model, ids, mask)
    (plain * weight).sum().backward()
    plain_grads = [p.grad.clone() for p in model.parameters()]
    for split in (c, 4, 2):  # any split gives the same numbers; c shares the most
        model.zero_grad()
        shared = shared_prefix_logprobs(model, ids, mask, pos, split, temperature=0.7)
        assert shared is not None and shared.shape == ids.shape
        attended = mask.bool()
        torch.testing.assert_close(shared[attended], plain.detach()[attended], atol=2e-5,
                                   rtol=0)
        (shared * weight).sum().backward()
        for (n, p), g in zip(model.named_parameters(), plain_grads):
            torch.testing.assert_close(p.grad, g, atol=1e-5, rtol=1e-4,
                                       msg=lambda m, n=n: f"{n}: {m}")


def test_nothing_shared_or_no_split_takes_the_full_pass():
    model = build_tiny_llama(60, hidden_size=32)
    ids, mask, scored = grpo_rows(P=8, G=1)  # every prompt once: nothing to share
    pos = position_ids_from_mask(mask)
    assert shared_prefix_logprobs(model, ids, mask, pos, first_scored_column(scored)) is None
    ids, mask, scored = grpo_rows()
    for split in (0, ids.shape[1]):
        assert shared_prefix_logprobs(model, ids, mask, pos, split) is None
    assert first_scored_column(torch.zeros(3, 5)) == 0


def test_dropout_keeps_the_full_pass():
    assert has_dropout(gpt2(0.1)) and not has_dropout(gpt2(0.0))
    attention_only = qwen3()
    attention_only.config.attention_dropout = 0.1  # applied as a function, not a module
    assert has_dropout(attention_only) and not has_dropout(qwen3())
    assert not has_dropout(build_tiny_llama(60, hidden_size=32))
    off = SharedPrefix(True, gpt2(0.1))
    assert not off.enabled and "dropout" in off.reason
    assert SharedPrefix(False, gpt2(0.1)).reason is None  # not asked for: nothing to explain


def test_a_model_whose_shared_pass_disagrees_is_caught_once():
    model = build_tiny_llama(60, hidden_size=32)
    ids, mask, scored = grpo_rows()
    check = SharedPrefix(True, model)
    plain = full_pass(model, ids, mask).detach()
    assert check.check(model, lambda: plain, lambda: plain + 1e-6, mask) and check.enabled
    check = SharedPrefix(True, model)
    assert not check.check(model, lambda: plain, lambda: plain + 0.01 * mask, mask)
    assert not check.enabled and "differ" in check.reason and check.checked


def run_step(share: bool):
    trainer = with_rewards(GRPOTrainer(load_config(None, [
        *TINY, f"policy.share_prompt_prefix={str(share).lower()}", "grpo.seed=4"])))
    positions = []
    embed = trainer.policy.model.get_input_embeddings()
    hook = embed.register_forward_pre_hook(lambda m, args: positions.append(args[0].numel()))
    rollout = trainer.rollout()
    batch = trainer.compute_advantages(rollout)
    trainer.update(batch, dry_run=True)  # the once-per-model check runs here (no step taken)
    positions.clear()  # count the update's forwards only
    metrics = trainer.update(batch)
    hook.remove()
    return trainer, metrics, sum(positions), rollout


def test_the_update_takes_the_shared_pass_and_moves_the_weights_as_the_full_pass_does():
    shared, m_shared, n_shared, r_shared = run_step(True)
    plain, m_plain, n_plain, r_plain = run_step(False)
    assert torch.equal(r_shared.input_ids, r_plain.input_ids)  # the same rollout
    B, S = r_plain.input_ids.shape
    assert n_plain == B * S  # the full pass: every row's every column
    assert n_shared < 0.8 * n_plain  # 4 prompts forwarded once, not 16 times
    assert shared.policy.shared_prefix.checked and shared.policy.shared_prefix.enabled
    assert m_shared.metrics["train/loss"] == pytest.approx(m_plain.metrics["train/loss"], abs=1e-6)
    assert m_shared.metrics["train/grad_norm"] == pytest.approx(m_plain.metrics["train/grad_norm"],
                                                                rel=1e-5)
    for a, b in zip(shared.policy.model.parameters(), plain.policy.model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
