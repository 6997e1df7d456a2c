"""Masked mean/variance and the k1/k2/k3 KL estimators: NeMo-RL's examples and gradients."""

import math

import pytest
import torch

from rlnb.algorithms.kl import calculate_kl
from rlnb.algorithms.masked import masked_mean, masked_var


def test_masked_mean_all_zero_mask_is_exactly_zero():
    x = torch.tensor([[3.0, -1.0], [2.0, 5.0]])
    assert masked_mean(x, torch.zeros(2, 2)).item() == 0.0


def test_masked_mean_per_row_and_global_count():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(masked_mean(x, m, dim=-1), torch.tensor([1.5, 6.0]))
    # A global count replaces Σ m (global normalisation): 9 / (10 + 1e-8).
    assert masked_mean(x, m, global_normalization_factor=10.0).item() == pytest.approx(0.9)


def test_masked_var_bessel_and_degenerate_counts():
    x = torch.tensor([1.0, 2.0, 4.0, 100.0])
    m = torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert masked_var(x, m).item() == pytest.approx(torch.tensor([1.0, 2.0, 4.0]).var().item())
    assert masked_var(x, m, unbiased=False).item() == pytest.approx(14 / 9, rel=1e-6)
    assert math.isnan(masked_var(x, torch.tensor([0.0, 1.0, 0.0, 0.0])).item())  # n = 1
    assert masked_var(x, torch.zeros(4)).item() == 0.0  # n = 0


@pytest.mark.parametrize(
    "kl_type, expected",
    [("k1", lambda x: -x), ("k2", lambda x: x * x / 2), ("k3", lambda x: math.exp(x) - 1 - x)],
)
def test_kl_estimators_match_their_formulas(kl_type, expected):
    logp = torch.tensor([-1.0, -2.0, -0.5])
    ref = torch.tensor([-1.5, -1.0, -0.5])
    got = calculate_kl(logp, ref, kl_type, None, None)
    want = [expected(r - p) for p, r in zip(logp.tolist(), ref.tolist())]
    torch.testing.assert_close(got, torch.tensor(want))


def test_k1_is_input_then_output_clamped():
    # NeMo-RL: k1(logp=-30, ref=0) = -10 with clamps 20 / 10.
    got = calculate_kl(torch.tensor([-30.0]), torch.tensor([0.0]), "k1")
    assert got.item() == -10.0
    # The output clamp comes after the importance weight: w·k = 0.3·(e^20...) -> clamp to 10.
    w = torch.tensor([0.3])
    assert calculate_kl(torch.tensor([-30.0]), torch.tensor([0.0]), "k3", importance_weights=w) == 10


def test_input_clamp_detaches_the_weight_and_kills_the_gradient():
    logp = torch.tensor([-30.0, -1.0], requires_grad=True)
    w_src = torch.tensor([0.0, 0.0], requires_grad=True)
    w = torch.exp(w_src)
    kl = calculate_kl(logp, torch.tensor([0.0, -1.2]), "k2", 20.0, None, importance_weights=w)
    kl.sum().backward()
    assert logp.grad[0].item() == 0.0 and w_src.grad[0].item() == 0.0  # clamped token
    assert logp.grad[1].item() != 0.0 and w_src.grad[1].item() != 0.0


def test_kl_gradient_matches_finite_differences():
    torch.manual_seed(0)
    logp = (torch.randn(3, 4, dtype=torch.float64) - 1).requires_grad_()
    ref = torch.randn(3, 4, dtype=torch.float64) - 1

    for kl_type in ("k1", "k2", "k3"):
        def f(lp, kl_type=kl_type):
            return calculate_kl(lp, ref, kl_type, None, None)

        assert torch.autograd.gradcheck(f, (logp,))


def test_score_function_weight_adds_k_to_the_gradient():
    # With w = exp(logp - sg(logp)) (value 1), d(w·k)/d logp = k + dk/d logp.
    logp = torch.tensor([-1.0, -0.3, -2.0], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([-1.4, -0.2, -1.0], dtype=torch.float64)
    w = torch.exp(logp - logp.detach())
    calculate_kl(logp, ref, "k3", None, None, importance_weights=w).sum().backward()
    ell = ref - logp.detach()
    k3 = torch.exp(ell) - 1 - ell
    dk3 = 1 - torch.exp(ell)  # d/dlogp of e^(ref-logp) - 1 - (ref-logp)
    torch.testing.assert_close(logp.grad, k3 + dk3)


@pytest.mark.parametrize("bad", ["k4", "K3", None])
def test_unknown_kl_type_lists_valid_ones(bad):
    with pytest.raises(ValueError, match="k1.*k2.*k3"):
        calculate_kl(torch.zeros(2), torch.zeros(2), bad)


def test_kl_shape_mismatch_names_both_arguments():
    with pytest.raises(ValueError, match="logprobs.*reference_logprobs"):
        calculate_kl(torch.zeros(2, 3), torch.zeros(2, 4))
