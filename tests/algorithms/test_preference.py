"""DPO, Bradley-Terry reward-model and NLL losses: hand-checked numbers, micro-batches, gradients"""

import math

import pytest
import torch

from rlnb.algorithms.preference import (
    DPOLossConfig,
    DPOLossFn,
    NLLLoss,
    PreferenceLoss,
    dpo_loss,
    nll_loss,
    preference_loss,
)

DPO_KEYS = [
    "loss",
    "sft_loss",
    "preference_loss",
    "accuracy",
    "rewards_chosen_mean",
    "rewards_rejected_mean",
    "num_valid_samples",
]
PREF_KEYS = [
    "loss",
    "accuracy",
    "rewards_chosen_mean",
    "rewards_rejected_mean",
    "num_valid_samples",
]


def softplus(x: float) -> float:
    """-log σ(-x) = log(1 + e^x), the reference for -log σ(Δ) = softplus(-Δ)."""
    return math.log1p(math.exp(x))


# --- NLL -----------------------------------------------------------------------------------------


def test_nll_hand_checked():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.5, -2.5]])
    tm = torch.tensor([[1, 1, 0], [0, 1, 1]])
    loss, m = nll_loss(logprobs, tm, torch.ones(2), global_valid_toks=4)
    assert loss.item() == pytest.approx((1 + 2 + 1.5 + 2.5) / 4)
    assert list(m) == ["loss", "num_unmasked_tokens", "num_valid_samples"]
    assert m["num_unmasked_tokens"] == 4 and m["num_valid_samples"] == 2

    # sample_mask removes row 1 from the numerator; the caller's global count is what divides
    loss, m = nll_loss(logprobs, tm, torch.tensor([1, 0]), global_valid_toks=2)
    assert loss.item() == pytest.approx(3 / 2)
    assert m["num_unmasked_tokens"] == 2 and m["num_valid_samples"] == 1


def test_nll_loss_class_shifts_mask_and_matches_loop_reference():
    torch.manual_seed(0)
    B, S, V = 3, 5, 7
    logits = torch.randn(B, S, V)
    ids = torch.randint(0, V, (B, S))
    tm = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0], [1, 1, 1, 1, 0]])
    sm = torch.tensor([1.0, 1.0, 0.0])
    n_tok = float((tm[:, 1:] * sm[:, None]).sum())
    # loop reference: token t (t >= 1) is predicted by the logits at t-1
    ref = 0.0
    for b in range(B):
        for t in range(1, S):
            if tm[b, t] and sm[b]:
                ref -= torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]].item()
    data = {"input_ids": ids, "token_mask": tm, "sample_mask": sm}
    loss, m = NLLLoss()(logits, data, sm.sum(), n_tok)
    assert loss.item() == pytest.approx(ref / n_tok, rel=1e-6)
    assert m["num_unmasked_tokens"] == n_tok  # index 0 of row 2 is not counted


# --- reward-model preference loss ----------------------------------------------------------------


def test_preference_loss_hand_checked():
    scores = torch.tensor([2.0, 1.0, 0.0, 3.0])  # pairs (2 vs 1), (0 vs 3)
    loss, m = preference_loss(scores, torch.ones(4), global_valid_seqs=4)
    assert list(m) == PREF_KEYS
    assert loss.item() == pytest.approx((softplus(-1.0) + softplus(3.0)) / 2, rel=1e-6)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["rewards_chosen_mean"] == pytest.approx(1.0)
    assert m["rewards_rejected_mean"] == pytest.approx(2.0)
    assert m["num_valid_samples"] == 2


def test_preference_loss_masked_rejected_row_still_counts_in_its_pair():
    """Pair loss and accuracy use the chosen row's mask; the rejected mean its own."""
    scores = torch.tensor([2.0, 1.0, 0.0, 3.0])
    sm = torch.tensor([1.0, 0.0, 1.0, 1.0])  # N_seq = 3 -> N_seq/2 = 1.5
    loss, m = preference_loss(scores, sm, global_valid_seqs=3)
    assert loss.item() == pytest.approx((softplus(-1.0) + softplus(3.0)) / 1.5, rel=1e-6)
    assert m["rewards_chosen_mean"] == pytest.approx((2.0 + 0.0) / 1.5)
    assert m["rewards_rejected_mean"] == pytest.approx(3.0 / 1.5)
    assert m["num_valid_samples"] == 1.5


def test_preference_loss_class_accepts_column_scores():
    scores = torch.tensor([[2.0], [1.0], [0.0], [3.0]])
    loss, m = PreferenceLoss()(scores, {"sample_mask": torch.ones(4)}, 4, None)
    assert loss.item() == pytest.approx((softplus(-1.0) + softplus(3.0)) / 2, rel=1e-6)
    assert m["accuracy"] == pytest.approx(0.5)


# --- DPO -----------------------------------------------------------------------------------------

# rows interleaved chosen, rejected; ρ = Σ (c - ref)·tm = [0.5, -2, 0.5, 0.5]
C = torch.tensor([[-1.0, -2.0, -1.0], [-2.0, -2.0, -3.0], [-1.0, -1.0, -1.0], [-0.5, -1.0, -2.0]])
REF = torch.tensor([[-1.5, -2.0, -1.0], [-1.0, -2.0, -2.0], [-1.0, -1.5, -1.0], [-1.0, -1.0, -1.0]])
TM = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 1, 1], [1, 1, 0]])


def test_dpo_hand_checked_defaults():
    loss, m = dpo_loss(C, REF, TM, torch.ones(4), global_valid_seqs=4)
    assert list(m) == DPO_KEYS
    # Δ = [0.5 - (-2), 0.5 - 0.5] = [2.5, 0]; β = 0.05
    expected = (softplus(-0.05 * 2.5) + math.log(2.0)) / 2
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    assert m["preference_loss"] == pytest.approx(expected, rel=1e-6)
    assert m["sft_loss"] == 0.0
    assert m["accuracy"] == pytest.approx(0.5)  # the tie Δ = 0 counts as wrong (strict)
    assert m["rewards_chosen_mean"] == pytest.approx(0.5)  # no β
    assert m["rewards_rejected_mean"] == pytest.approx(-0.75)
    assert m["num_valid_samples"] == 2


def test_dpo_average_log_probs_and_sft_term():
    loss, m = dpo_loss(
        C,
        REF,
        TM,
        torch.ones(4),
        global_valid_seqs=4,
        reference_policy_kl_penalty=0.1,
        preference_loss_weight=2.0,
        sft_loss_weight=0.5,
        preference_average_log_probs=True,
        sft_average_log_probs=True,
    )
    # ρ / token count: [0.5/2, -2/3, 0.5/2, 0.5/2] -> Δ = [0.25 + 2/3, 0]
    pref = (softplus(-0.1 * (0.25 + 2 / 3)) + math.log(2.0)) / 2
    # SFT on chosen rows 0 and 2: per-row mean NLL 3/2 and 2/2
    sft = (1.5 + 1.0) / 2
    assert m["preference_loss"] == pytest.approx(pref, rel=1e-6)
    assert m["sft_loss"] == pytest.approx(sft, rel=1e-6)
    assert loss.item() == pytest.approx(0.5 * sft + 2.0 * pref, rel=1e-6)

    _, m = dpo_loss(C, REF, TM, torch.ones(4), global_valid_seqs=4, sft_loss_weight=1.0)
    assert m["sft_loss"] == pytest.approx((3.0 + 2.0) / 2)  # summed, not averaged


def test_dpo_gradient_matches_hand_derivation():
    """∂L/∂c_{chosen,t} = -β(1-σ(βΔ))·tm / (N/2), and the negative of it on the rejected row."""
    c = C[:2].clone().requires_grad_(True)
    loss, _ = dpo_loss(c, REF[:2], TM[:2], torch.ones(2), global_valid_seqs=2)
    loss.backward()
    beta, delta = 0.05, 2.5
    g = -beta * (1 - 1 / (1 + math.exp(-beta * delta)))
    expected = torch.stack([g * TM[0].float(), -g * TM[1].float()])
    torch.testing.assert_close(c.grad, expected)


def test_dpo_gradcheck_float64():
    torch.manual_seed(1)
    c = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    ref = torch.randn(4, 5, dtype=torch.float64)
    tm = (torch.rand(4, 5) > 0.3).float()
    sm = torch.tensor([1.0, 1.0, 1.0, 0.0])

    def f(x):
        return dpo_loss(
            x,
            ref,
            tm,
            sm,
            global_valid_seqs=3,
            reference_policy_kl_penalty=0.5,
            sft_loss_weight=0.7,
            preference_average_log_probs=True,
        )[0]

    assert torch.autograd.gradcheck(f, (c,))


def test_dpo_microbatch_sums_equal_full_batch():
    torch.manual_seed(2)
    B, T = 6, 4
    c, ref = torch.randn(B, T), torch.randn(B, T)
    tm = (torch.rand(B, T) > 0.3).float()
    sm = torch.tensor([1.0, 1.0, 0.0, 1.0, 1.0, 1.0])
    kw = {"global_valid_seqs": sm.sum(), "sft_loss_weight": 0.3, "sft_average_log_probs": True}
    full, full_m = dpo_loss(c, ref, tm, sm, **kw)
    parts = [dpo_loss(c[a:b], ref[a:b], tm[a:b], sm[a:b], **kw) for a, b in [(0, 2), (2, 6)]]
    assert sum(p[0] for p in parts).item() == pytest.approx(full.item(), rel=1e-6)
    for k in DPO_KEYS:
        assert sum(p[1][k] for p in parts) == pytest.approx(full_m[k], rel=1e-5, abs=1e-7)


def test_all_zero_sample_mask_gives_zero_not_nan():
    loss, m = dpo_loss(C, REF, TM, torch.zeros(4), global_valid_seqs=0, sft_loss_weight=1.0)
    assert loss.item() == 0.0 and all(v == 0.0 for v in m.values())
    loss, m = preference_loss(torch.randn(4), torch.zeros(4), global_valid_seqs=0)
    assert loss.item() == 0.0 and not any(math.isnan(v) for v in m.values())
    loss, _ = nll_loss(C, TM, torch.zeros(4), global_valid_toks=0)
    assert loss.item() == 0.0


def test_dpo_loss_fn_slices_rolled_reference_and_shifted_mask():
    torch.manual_seed(3)
    B, S, V = 4, 5, 6
    logits = torch.randn(B, S, V)
    ids = torch.randint(0, V, (B, S))
    tm = torch.tensor([[0, 0, 1, 1, 0], [0, 1, 1, 1, 1], [0, 0, 0, 1, 1], [0, 1, 1, 0, 0]])
    ref_per_token = torch.randn(B, S)  # index t = ref log-prob of token t; index 0 unused
    ref_rolled = torch.roll(ref_per_token, -1, dims=1)  # how the DPO loop stores it
    ref_rolled[:, -1] = 0.0
    # loop reference: ρ_b = Σ_{t>=1, tm[b,t]} (log π(token t) - ref(token t))
    rho = []
    for b in range(B):
        r = 0.0
        for t in range(1, S):
            if tm[b, t]:
                r += torch.log_softmax(logits[b, t - 1], -1)[ids[b, t]].item()
                r -= ref_per_token[b, t].item()
        rho.append(r)
    expected = sum(softplus(-0.1 * (rho[2 * k] - rho[2 * k + 1])) for k in range(2)) / 2
    data = {
        "input_ids": ids,
        "token_mask": tm,
        "sample_mask": torch.ones(B),
        "reference_policy_logprobs": ref_rolled,
    }
    loss, m = DPOLossFn({"reference_policy_kl_penalty": 0.1})(logits, data, 4, None)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert m["rewards_chosen_mean"] == pytest.approx((rho[0] + rho[2]) / 2, rel=1e-5)


# --- config and input validation -----------------------------------------------------------------


def test_dpo_config_defaults_and_bad_keys():
    cfg = DPOLossConfig()
    assert cfg.reference_policy_kl_penalty == 0.05 and cfg.preference_loss_weight == 1.0
    assert cfg.sft_loss_weight == 0.0 and not cfg.preference_average_log_probs
    assert not cfg.sft_average_log_probs
    assert DPOLossFn(cfg).cfg is cfg
    with pytest.raises(ValueError, match=r"dpo\.reference_policy_kl_penaltyy.*reference_policy"):
        DPOLossFn({"reference_policy_kl_penaltyy": 0.1})
    with pytest.raises(ValueError, match=r"dpo\.sft_loss_weight"):
        DPOLossFn({"sft_loss_weight": -1.0})


def test_odd_rows_raise():
    with pytest.raises(ValueError, match="logprobs.*even"):
        dpo_loss(C[:3], REF[:3], TM[:3], torch.ones(3), global_valid_seqs=3)
    with pytest.raises(ValueError, match="scores.*even"):
        preference_loss(torch.randn(3), torch.ones(3), global_valid_seqs=3)


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"reference_logprobs": REF[:, :2]}, "reference_logprobs"),
        ({"token_mask": TM * 2}, "token_mask"),
        ({"sample_mask": torch.ones(3)}, "sample_mask"),
        ({"logprobs": C.long()}, "logprobs"),
    ],
)
def test_bad_dpo_inputs_name_the_argument(kwargs, name):
    args = {
        "logprobs": C,
        "reference_logprobs": REF,
        "token_mask": TM,
        "sample_mask": torch.ones(4),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        dpo_loss(**args, global_valid_seqs=4)


def test_missing_data_key_is_named():
    data = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "token_mask": torch.ones(2, 3)}
    with pytest.raises(ValueError, match="sample_mask"):
        NLLLoss()(torch.randn(2, 3, 4), data, 2, 4)
    data["sample_mask"] = torch.ones(2)
    with pytest.raises(ValueError, match="reference_policy_logprobs"):
        DPOLossFn()(torch.randn(2, 3, 4), data, 2, 4)
    with pytest.raises(ValueError, match="sample_mask"):
        PreferenceLoss()(torch.randn(2, 1), {}, 2, None)
