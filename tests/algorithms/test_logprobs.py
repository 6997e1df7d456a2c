"""Logits -> token log-probs and entropies: hand numbers, temperature, dtype, NeMo-RL's layout."""

import math

import pytest
import torch

from rlnb.algorithms.logprobs import next_token_logprobs, token_entropy, token_logprobs


def test_token_logprobs_hand_numbers_and_temperature():
    logits = torch.tensor([[[0.0, math.log(3.0)], [2.0, 2.0]]])  # [B=1, T=2, V=2]
    targets = torch.tensor([[1, 0]])
    got = token_logprobs(logits, targets)
    torch.testing.assert_close(got, torch.tensor([[math.log(0.75), math.log(0.5)]]))
    # τ = 2 halves the logits first: softmax(0, log 3 / 2) puts √3 / (1 + √3) on token 1
    hot = token_logprobs(logits, targets, temperature=2.0)
    torch.testing.assert_close(hot[0, 0], torch.tensor(math.log(math.sqrt(3) / (1 + math.sqrt(3)))))
    assert got.dtype == torch.float32


def test_token_logprobs_match_log_softmax_gather_and_carry_gradients():
    torch.manual_seed(0)
    logits = torch.randn(3, 4, 11, requires_grad=True)
    targets = torch.randint(0, 11, (3, 4))
    got = token_logprobs(logits, targets, temperature=0.7)
    want = torch.log_softmax(logits / 0.7, -1).gather(-1, targets[..., None]).squeeze(-1)
    torch.testing.assert_close(got, want)
    got.sum().backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0


def test_bf16_logits_are_computed_in_float32():
    torch.manual_seed(1)
    logits = (torch.randn(2, 3, 50) * 5).bfloat16()
    targets = torch.randint(0, 50, (2, 3))
    got = token_logprobs(logits, targets)
    want = torch.log_softmax(logits.float(), -1).gather(-1, targets[..., None]).squeeze(-1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want)


def test_token_entropy_hand_numbers():
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]]])
    h = token_entropy(logits)
    torch.testing.assert_close(h, torch.tensor([[math.log(4.0), 0.0]]), atol=1e-6, rtol=0)
    p = torch.tensor([0.5, 0.25, 0.25])
    h = token_entropy(torch.log(p)[None, None], temperature=1.0)
    assert h.item() == pytest.approx(-(p * p.log()).sum().item(), rel=1e-6)
    # a high temperature flattens the distribution towards log V
    assert token_entropy(torch.log(p)[None, None], temperature=100.0).item() > h.item()


def test_next_token_logprobs_is_the_seed_layout():
    torch.manual_seed(2)
    logits = torch.randn(2, 5, 7)
    ids = torch.randint(0, 7, (2, 5))
    got = next_token_logprobs(logits, ids)
    assert got.shape == (2, 4)
    # index t is the log-prob of token t+1 under the logits at position t
    torch.testing.assert_close(got, token_logprobs(logits[:, :-1], ids[:, 1:]))
    assert got[1, 2].item() == pytest.approx(torch.log_softmax(logits[1, 2], -1)[ids[1, 3]].item(), rel=1e-6)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="logits must be 3-D"):
        token_logprobs(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"targets must have shape \[2, 3\]"):
        token_logprobs(torch.zeros(2, 3, 4), torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="targets must be integer token ids"):
        token_logprobs(torch.zeros(2, 3, 4), torch.zeros(2, 3))
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_entropy(torch.zeros(2, 3, 4), temperature=0.0)
    with pytest.raises(ValueError, match="input_ids must be integer token ids"):
        next_token_logprobs(torch.zeros(2, 3, 4), torch.zeros(2, 3))
