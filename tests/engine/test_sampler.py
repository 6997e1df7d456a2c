"""The lean sampling loop draws what ``model.generate`` draws: the same tokens and log-probs for a
seed, with padding, groups of repeated prompts, rows ending at different steps, top-k / top-p /
temperature, on two architectures and on a recurrent model whose cache cannot be repeated; stop
strings and the interrupt end rows; the backend's two paths agree."""

import threading

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, xLSTMConfig, xLSTMForCausalLM

from rlnb.algorithms.logprobs import token_logprobs
from rlnb.engine.models.backend import left_pad
from rlnb.engine.models.generation import GenerationConfig
from rlnb.engine.models.hf_backend import HFGenerationBackend
from rlnb.engine.models.sampler import _repeat_groups, output_cache, sample_tokens, warp_logits
from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama

PAD = 0


def llama():
    return build_tiny_llama(len(build_char_tokenizer()), hidden_size=32, seed=1).eval()


def gpt2():
    torch.manual_seed(2)
    return GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=2,
                                      n_positions=64)).eval()


def prompts(vocab, groups=4, repeat=3, seed=0):
    """Left-padded prompts of 2-6 tokens; each distinct prompt ``repeat`` times in a row."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, vocab, (int(torch.randint(2, 7, (1,), generator=g)),),
                          generator=g).tolist() for _ in range(groups)]
    return left_pad([r for r in rows for _ in range(repeat)], PAD)


def frequent_token(model, ids, mask):
    """A token the model samples often: used as EOS so rows end at different steps."""
    with torch.no_grad():
        probs = model(input_ids=ids, attention_mask=mask).logits[:, -1].softmax(-1).mean(0)
    probs[PAD] = 0
    return int(probs.argmax())


def by_generate(model, ids, mask, eos, seed, **sampling):
    torch.manual_seed(seed)
    out = model.generate(input_ids=ids, attention_mask=mask, do_sample=True, pad_token_id=PAD,
                         eos_token_id=eos, return_dict_in_generate=True, output_logits=True,
                         max_new_tokens=8, top_k=sampling.get("top_k") or 0,
                         top_p=sampling.get("top_p", 1.0),
                         temperature=sampling.get("temperature", 1.0))
    response = out.sequences[:, ids.shape[1]:]
    lp = token_logprobs(torch.stack(out.logits, 1), response, sampling.get("temperature", 1.0))
    return response, lp


@pytest.mark.smoke
@pytest.mark.parametrize("build", [llama, gpt2], ids=["llama", "gpt2"])
@pytest.mark.parametrize("sampling", [{}, {"temperature": 0.7, "top_k": 6, "top_p": 0.9}],
                         ids=["plain", "warped"])
@pytest.mark.parametrize("repeat", [1, 4], ids=["distinct", "groups"])
def test_same_tokens_and_logprobs_as_generate(build, sampling, repeat):
    model = build()
    ids, mask = prompts(model.config.vocab_size, groups=6, repeat=repeat)
    eos = frequent_token(model, ids, mask)
    ended = []
    for seed in (0, 1, 2):
        want, want_lp = by_generate(model, ids, mask, eos, seed, **sampling)
        torch.manual_seed(seed)
        got, got_lp = sample_tokens(model, ids, mask, max_new_tokens=8, eos_token_id=eos,
                                    pad_token_id=PAD, **sampling)
        ended.append((want == eos).any(1))
        assert torch.equal(got, want)
        steps = torch.arange(want.shape[1])
        first_eos = torch.where(want == eos, steps, want.shape[1]).amin(1, keepdim=True)
        live = steps <= first_eos  # through EOS
        torch.testing.assert_close(got_lp[live], want_lp[live], rtol=0, atol=1e-5)
        assert (got_lp[~live] == 0).all()
    ended = torch.cat(ended)
    assert ended.any() and not ended.all()  # rows end at different steps: rows get dropped


def xlstm():
    """A recurrent model whose own cache type (``xLSTMCache``: per-layer states, no keys or
    values) has no ``batch_repeat_interleave``."""
    torch.manual_seed(3)
    # qk_dim_factor=1: the config rounds the query/key width up to a multiple of 64 while the
    # layers use hidden_size * qk_dim_factor, so at this width the default 0.5 mismatches;
    # float32 kernels so log-probs compare at 1e-5
    return xLSTMForCausalLM(xLSTMConfig(
        vocab_size=40, hidden_size=64, num_hidden_layers=2, num_heads=2, qk_dim_factor=1.0,
        chunk_size=8, autocast_kernel_dtype="float32", pad_token_id=PAD, bos_token_id=None,
        eos_token_id=None)).eval()


def test_a_cache_that_cannot_be_repeated_is_prefilled_for_every_row():
    model = xlstm()
    sampling = {"temperature": 0.7, "top_k": 6, "top_p": 0.9}
    ids, mask = prompts(model.config.vocab_size, groups=4, repeat=3)
    # the premise: groups of 3 that the sampler would prefill once, and a cache it cannot repeat
    assert _repeat_groups(ids, mask) == 3
    out = model(input_ids=ids[:1], attention_mask=mask[:1], use_cache=True)
    cache = output_cache(out)  # ``cache`` from transformers 5.24 on, ``cache_params`` before
    assert cache is not None and not hasattr(cache, "batch_repeat_interleave")
    eos = frequent_token(model, ids, mask)
    ended = []
    for seed in (0, 1, 2):
        want, want_lp = by_generate(model, ids, mask, eos, seed, **sampling)
        torch.manual_seed(seed)
        got, got_lp = sample_tokens(model, ids, mask, max_new_tokens=8, eos_token_id=eos,
                                    pad_token_id=PAD, **sampling)
        assert torch.equal(got, want)
        steps = torch.arange(want.shape[1])
        first_eos = torch.where(want == eos, steps, want.shape[1]).amin(1, keepdim=True)
        live = steps <= first_eos
        torch.testing.assert_close(got_lp[live], want_lp[live], rtol=0, atol=1e-5)
        assert (got_lp[~live] == 0).all()
        ended.append((want == eos).any(1))
    ended = torch.cat(ended)
    assert ended.any() and not ended.all()  # rows end at different steps


def test_warp_logits_keeps_the_top_k_and_the_nucleus():
    z = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(warp_logits(z, 2, 1.0)).tolist() == [[False, False, True, True]]
    # ascending cumulative: 0.05, 0.20, 0.50, 1.0; top-p 0.75 drops those <= 0.25
    assert torch.isinf(warp_logits(z, None, 0.75)).tolist() == [[False, False, True, True]]
    assert torch.isinf(warp_logits(z, None, 0.01)).tolist() == [[False, True, True, True]]


def backend(**cfg):
    tok = build_char_tokenizer()
    model = build_tiny_llama(len(tok), hidden_size=32, seed=1)
    return HFGenerationBackend(model, tok, GenerationConfig(**cfg))


def test_backend_paths_agree_and_stop_strings_end_rows():
    texts = ["12+3=", "7+40="] * 3
    cfg = {"max_new_tokens": 6, "stop_strings": ["1", "2"], "temperature": 0.9}
    torch.manual_seed(5)
    plain = backend(sampler="generate", **cfg).generate(texts)
    torch.manual_seed(5)
    lean = backend(**cfg).generate(texts)
    for text in lean.texts:  # a row ends right after its first stop string
        hit = [text.find(s) for s in ("1", "2") if s in text]
        assert not hit or min(hit) == len(text) - 1
    assert lean.texts == plain.texts
    assert torch.equal(lean.response_mask, plain.response_mask)
    torch.testing.assert_close(lean.generation_logprobs, plain.generation_logprobs, rtol=0,
                               atol=1e-5)


def test_interrupt_ends_every_row_after_one_token():
    b = backend(max_new_tokens=6)
    b.interrupt = threading.Event()
    b.interrupt.set()
    gens = b.generate(["12+3=", "7+40="])
    assert gens.response_ids.shape[1] == 1


def test_sampler_option_is_checked():
    with pytest.raises(ValueError, match="sampler"):
        GenerationConfig(sampler="beam")
