"""PPO critic loss (clipped ½·MSE over global N_tok) and explained variance, checked by hand."""

import pytest
import torch

from rlnb.algorithms.value_loss import (
    MseValueLossFn,
    ValueLossConfig,
    clipped_value_loss,
    explained_variance,
)

KEYS = [
    "loss",
    "vf_clipfrac",
    "returns_mean",
    "values_mean",
    "returns_sq_mean",
    "residual_sq_mean",
    "values_min",
    "values_max",
    "num_valid_samples",
]

# Valid positions (tm·sm): (0,1) (0,2) (1,1) (1,2) (1,3) -> N_tok = 5. (0,3) holds a masked 3.0.
V = torch.tensor([[0.0, 1.0, 2.0, 3.0], [1.0, 1.0, -1.0, 0.0]])
R = torch.tensor([[0.0, 2.0, 2.5, 0.0], [0.0, 1.5, 1.0, 0.0]])
V_OLD = torch.tensor([[0.0, 1.5, 1.0, 3.0], [1.0, 0.0, 0.0, 0.0]])
TM = torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]])
SM = torch.ones(2)


def test_unclipped_hand_checked():
    loss, m = clipped_value_loss(V, R, V_OLD, TM, SM, global_valid_toks=5)
    assert list(m) == KEYS
    # (V - R)² on valid tokens: 1, 0.25, 0.25, 4, 0 -> Σ = 5.5
    assert loss.item() == pytest.approx(0.5 * 5.5 / 5)
    assert m["vf_clipfrac"] == 0.0
    assert m["returns_mean"] == pytest.approx(7.0 / 5)
    assert m["values_mean"] == pytest.approx(3.0 / 5)
    assert m["returns_sq_mean"] == pytest.approx(13.5 / 5)
    assert m["residual_sq_mean"] == pytest.approx(5.5 / 5)
    assert m["values_min"] == -1.0 and m["values_max"] == 2.0  # the masked 3.0 is ignored
    assert m["num_valid_samples"] == 2


def test_clipped_takes_the_larger_branch_and_counts_it():
    loss, m = clipped_value_loss(V, R, V_OLD, TM, SM, global_valid_toks=5, scale=2.0, cliprange=0.2)
    # clip(V, V_old ± 0.2): 1.3, 1.2, 0.2, -0.2, 0.0; (V_c - R)²: 0.49, 1.69, 1.69, 1.44, 0
    # max with (V - R)² = 1, 0.25, 0.25, 4, 0 -> 1, 1.69, 1.69, 4, 0 (clipped wins twice, tie once)
    assert loss.item() == pytest.approx(0.5 * 2.0 * 8.38 / 5, rel=1e-6)
    assert m["vf_clipfrac"] == pytest.approx(2 / 5)
    assert m["residual_sq_mean"] == pytest.approx(5.5 / 5)  # metrics use the unclipped values


def test_clipped_gradient_is_zero_where_the_clipped_branch_wins():
    v = V.clone().requires_grad_(True)
    loss, _ = clipped_value_loss(v, R, V_OLD, TM, SM, global_valid_toks=5, cliprange=0.2)
    loss.backward()
    expected = torch.zeros(2, 4)
    # unclipped branch: ∂/∂v ½(v-R)²/N = (v - R)/5 ; clipped branch: clamp saturated -> 0
    expected[0, 1] = (1.0 - 2.0) / 5
    expected[1, 2] = (-1.0 - 1.0) / 5
    expected[1, 3] = 0.0  # v = R
    torch.testing.assert_close(v.grad, expected)


@pytest.mark.parametrize("cliprange", [None, 0.0])
def test_no_clipping_when_cliprange_is_none_or_zero(cliprange):
    loss, m = clipped_value_loss(V, R, V_OLD, TM, SM, global_valid_toks=5, cliprange=cliprange)
    assert loss.item() == pytest.approx(0.55) and m["vf_clipfrac"] == 0.0


def test_mask_is_not_sliced_and_sample_mask_applies():
    tm = TM.clone()
    tm[1, 0] = 1  # index 0 counts in the numerator: (1 - 0)² = 1
    loss, _ = clipped_value_loss(V, R, V_OLD, tm, SM, global_valid_toks=5)
    assert loss.item() == pytest.approx(0.5 * 6.5 / 5)
    loss, m = clipped_value_loss(V, R, V_OLD, TM, torch.tensor([1.0, 0.0]), global_valid_toks=2)
    assert loss.item() == pytest.approx(0.5 * 1.25 / 2)
    assert m["values_max"] == 2.0 and m["values_min"] == 1.0
    assert m["num_valid_samples"] == 2  # NeMo-RL reports B, not Σ sample_mask


def test_trailing_singleton_is_squeezed():
    a, _ = clipped_value_loss(V, R, V_OLD, TM, SM, global_valid_toks=5, cliprange=0.2)
    b, _ = clipped_value_loss(
        V[..., None], R[..., None], V_OLD, TM, SM, global_valid_toks=5, cliprange=0.2
    )
    assert a.item() == b.item()


def test_no_valid_token_gives_zero_loss_and_zero_min_max():
    loss, m = clipped_value_loss(V, R, V_OLD, torch.zeros(2, 4), SM, global_valid_toks=0)
    assert loss.item() == 0.0
    assert m["values_min"] == 0.0 and m["values_max"] == 0.0 and m["vf_clipfrac"] == 0.0


def test_microbatch_sums_equal_full_batch():
    torch.manual_seed(0)
    B, S = 5, 6
    v, r, old = torch.randn(B, S), torch.randn(B, S), torch.randn(B, S)
    tm = (torch.rand(B, S) > 0.4).float()
    sm = torch.tensor([1.0, 0.0, 1.0, 1.0, 1.0])
    n_tok = (tm * sm[:, None]).sum()
    kw = {"global_valid_toks": n_tok, "scale": 0.7, "cliprange": 0.1}
    full, fm = clipped_value_loss(v, r, old, tm, sm, **kw)
    parts = [
        clipped_value_loss(v[a:b], r[a:b], old[a:b], tm[a:b], sm[a:b], **kw)
        for a, b in [(0, 2), (2, 3), (3, 5)]
    ]
    assert sum(p[0] for p in parts).item() == pytest.approx(full.item(), rel=1e-6)
    for k in ["vf_clipfrac", "returns_mean", "values_mean", "returns_sq_mean", "residual_sq_mean"]:
        assert sum(p[1][k] for p in parts) == pytest.approx(fm[k], rel=1e-5)
    assert min(p[1]["values_min"] for p in parts) == fm["values_min"]


def test_explained_variance_hand_checked():
    _, m = clipped_value_loss(V, R, V_OLD, TM, SM, global_valid_toks=5)
    # 1 - (1.1 - (1.4 - 0.6)²) / (2.7 - 1.4²) = 1 - 0.46 / 0.74
    assert explained_variance(m) == pytest.approx(1 - 0.46 / 0.74, rel=1e-5)
    # perfect critic -> 1; a constant-returns batch is floored at 1e-8 instead of dividing by 0
    _, m = clipped_value_loss(R, R, R, TM, SM, global_valid_toks=5)
    assert explained_variance(m) == pytest.approx(1.0)
    flat = {
        "returns_mean": 1.0,
        "values_mean": 0.0,
        "returns_sq_mean": 1.0,
        "residual_sq_mean": 1.5,
    }
    assert explained_variance(flat) == pytest.approx(1 - 0.5 / 1e-8)
    prefixed = {f"critic/{k}": v for k, v in m.items()}
    assert explained_variance(prefixed, prefix="critic/") == pytest.approx(1.0)
    with pytest.raises(ValueError, match="returns_sq_mean"):
        explained_variance({"returns_mean": 1.0, "values_mean": 0.0, "residual_sq_mean": 1.0})


def test_mse_value_loss_fn_and_config():
    data = {"returns": R, "values": V_OLD, "token_mask": TM, "sample_mask": SM}
    loss, m = MseValueLossFn({"scale": 2.0, "cliprange": 0.2})(V, data, 2, 5)
    assert loss.item() == pytest.approx(8.38 / 5, rel=1e-6)
    assert m["vf_clipfrac"] == pytest.approx(0.4)
    assert ValueLossConfig().scale == 1.0 and ValueLossConfig().cliprange is None
    with pytest.raises(ValueError, match=r"value_loss_fn\.clip_range.*cliprange"):
        MseValueLossFn({"clip_range": 0.2})
    with pytest.raises(ValueError, match=r"value_loss_fn\.cliprange"):
        MseValueLossFn({"cliprange": -0.1})
    del data["returns"]
    with pytest.raises(ValueError, match="returns"):
        MseValueLossFn()(V, data, 2, 5)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"values": V[:, :3]}, "returns"),
        ({"returns": R.long()}, "returns"),
        ({"old_values": V_OLD[:1]}, "old_values"),
        ({"token_mask": TM[:, :2]}, "token_mask"),
        ({"sample_mask": torch.tensor([1.0, 0.5])}, "sample_mask"),
        ({"values": V[..., None].expand(2, 4, 2)}, "values"),
    ],
)
def test_bad_inputs_name_the_argument(kwargs, name):
    args = {"values": V, "returns": R, "old_values": V_OLD, "token_mask": TM, "sample_mask": SM}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        clipped_value_loss(**args, global_valid_toks=5)
