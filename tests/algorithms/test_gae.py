"""GAE and raw-reward advantages for PPO: a per-token loop reference and hand numbers."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlnb import GeneralizedAdvantageEstimator, RawRewardAdvantageEstimator
from rlnb.algorithms.gae import gae_advantages, shift_values, token_level_rewards


def gae_reference(rewards, values, mask, gamma, lam_rows):
    """Per-row, per-token Python loop of the carry-forward recursion."""
    B, S = values.shape
    adv = torch.zeros(B, S, dtype=torch.float64)
    for b in range(B):
        valid = [t for t in range(S) if mask[b, t] > 0]
        R = [0.0] * S
        if valid:
            R[valid[-1]] = float(rewards[b])
        nv = g = 0.0
        for t in reversed(range(S)):
            m = float(mask[b, t])
            delta = R[t] * m + gamma * nv - float(values[b, t])
            cand = delta + gamma * float(lam_rows[b]) * g
            nv = m * float(values[b, t]) + (1 - m) * nv
            g = m * cand + (1 - m) * g
            adv[b, t] = g
    return adv


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 4), S=st.integers(1, 7), seed=st.integers(0, 10_000),
       gamma=st.sampled_from([1.0, 0.9]), lam=st.sampled_from([0.95, 1.0, 0.0]))
def test_raw_gae_matches_loop_reference(B, S, seed, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(B, S, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, S, generator=g) > 0.3).double()
    rewards = torch.randn(B, generator=g, dtype=torch.float64)
    adv, ret = gae_advantages(rewards, values, mask, gae_gamma=gamma, gae_lambda=lam, normalize_advantages=False)
    want = gae_reference(rewards, values, mask, gamma, [lam] * B)
    torch.testing.assert_close(adv, want * mask)
    torch.testing.assert_close(ret, want + values)  # returns = raw A + V, not masked


def test_reward_lands_on_last_valid_token_even_with_env_tokens_after():
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0]])
    r = token_level_rewards(torch.tensor([2.0]), mask)
    assert r.tolist() == [[0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0]]


def test_whitening_and_zero_fill():
    torch.manual_seed(0)
    values, mask, r = torch.randn(3, 5), (torch.rand(3, 5) > 0.3).float(), torch.randn(3)
    raw, _ = gae_advantages(r, values, mask, normalize_advantages=False)
    adv, _ = gae_advantages(r, values, mask)
    valid = raw[mask.bool()]
    torch.testing.assert_close(adv[mask.bool()], (valid - valid.mean()) / (valid.var() + 1e-8).sqrt())
    assert (adv[~mask.bool()] == 0).all()


def test_single_valid_token_whitening_is_nan():
    mask = torch.zeros(2, 3)
    mask[0, 1] = 1
    adv, _ = gae_advantages(torch.tensor([1.0, 0.0]), torch.zeros(2, 3), mask)
    assert torch.isnan(adv[0, 1])


def test_decoupled_lambdas_run_two_passes():
    torch.manual_seed(1)
    values, mask, r = torch.randn(2, 6), torch.ones(2, 6), torch.randn(2)
    adv, ret = gae_advantages(r, values, mask, gae_lambda_value=1.0, gae_lambda_policy=0.5, normalize_advantages=False)
    a_pol, _ = gae_advantages(r, values, mask, gae_lambda=0.5, normalize_advantages=False)
    _, r_val = gae_advantages(r, values, mask, gae_lambda=1.0, normalize_advantages=False)
    torch.testing.assert_close(adv, a_pol)
    torch.testing.assert_close(ret, r_val)


def test_length_adaptive_lambda_per_row():
    torch.manual_seed(2)
    values = torch.randn(3, 8, dtype=torch.float64)
    mask = torch.zeros(3, 8, dtype=torch.float64)
    mask[0, :8] = 1
    mask[1, :2] = 1  # row 2 fully masked -> λ = 0 and advantages 0
    r = torch.tensor([1.0, -1.0, 3.0], dtype=torch.float64)
    alpha = 0.25
    adv, _ = gae_advantages(r, values, mask, length_adaptive_alpha=alpha, normalize_advantages=False)
    lam_rows = [min(max(1 - 1 / max(alpha * L, 1), 0), 1) for L in mask.sum(1).tolist()]
    assert lam_rows == [0.5, 0.0, 0.0]
    torch.testing.assert_close(adv, gae_reference(r, values, mask, 1.0, lam_rows) * mask)


def test_shift_values_and_estimators():
    out = torch.tensor([[1.0, 2.0, 3.0]]).unsqueeze(-1)
    assert shift_values(out).tolist() == [[0.0, 1.0, 2.0]]
    est = GeneralizedAdvantageEstimator({"name": "gae", "normalize_advantages": False, "gae_lambda": 1.0})
    adv, ret = est.compute_advantage(None, torch.tensor([1.0]), torch.ones(1, 3), values=torch.zeros(1, 3))
    assert adv.tolist() == [[1.0, 1.0, 1.0]] and ret.tolist() == [[1.0, 1.0, 1.0]]
    with pytest.raises(ValueError, match="values"):
        est.compute_advantage(None, torch.tensor([1.0]), torch.ones(1, 3))


@pytest.mark.parametrize("names", ["nemo", "rlnb"])
def test_gae_kl_in_reward_only_when_beta_positive(names):
    # By hand: ℓ = ref - prev = -1, k3 = e^-1 - 1 + 1 = 0.36788, β = 0.5 -> token reward
    # -0.18394 on each of the 3 tokens (reward 0, values 0); γ = λ = 1 sums them right to left.
    prev, ref = torch.full((1, 3), -1.0), torch.full((1, 3), -2.0)
    logps = ({"logprobs": prev, "reference_logprobs": ref} if names == "nemo"
             else {"logprobs_policy": prev, "logprobs_reference": ref})
    est_cfg = {"normalize_advantages": False, "gae_lambda": 1.0, "gae_gamma": 1.0}
    loss_cfg = {"use_kl_in_reward": True, "reference_policy_kl_penalty": 0.5}
    est = GeneralizedAdvantageEstimator(est_cfg, loss_cfg)
    adv, ret = est.compute_advantage(None, torch.tensor([0.0]), torch.ones(1, 3), torch.zeros(1, 3), **logps)
    torch.testing.assert_close(adv, torch.tensor([[-0.55182, -0.36788, -0.18394]]), atol=1e-5, rtol=0)
    torch.testing.assert_close(ret, adv)  # values are 0
    # β = 0: no KL at all, even with use_kl_in_reward on and the log-probs given
    est0 = GeneralizedAdvantageEstimator(est_cfg, {**loss_cfg, "reference_policy_kl_penalty": 0.0})
    adv0, _ = est0.compute_advantage(None, torch.tensor([0.0]), torch.ones(1, 3), torch.zeros(1, 3), **logps)
    assert adv0.tolist() == [[0.0, 0.0, 0.0]]
    # use_kl_in_reward off: the KL stays in the loss, the advantages ignore the log-probs
    est_off = GeneralizedAdvantageEstimator(est_cfg, {"reference_policy_kl_penalty": 0.5})
    adv_off, _ = est_off.compute_advantage(None, torch.tensor([0.0]), torch.ones(1, 3), torch.zeros(1, 3), **logps)
    assert adv_off.tolist() == [[0.0, 0.0, 0.0]]


def test_gae_kl_in_reward_refuses_missing_logprobs():
    est = GeneralizedAdvantageEstimator({}, {"use_kl_in_reward": True, "reference_policy_kl_penalty": 0.5})
    with pytest.raises(ValueError, match="needs logprobs and reference_logprobs"):
        est.compute_advantage(None, torch.tensor([0.0]), torch.ones(1, 3), torch.zeros(1, 3),
                              logprobs=torch.full((1, 3), -1.0))


def test_gae_rejects_non_finite_rewards():
    est = GeneralizedAdvantageEstimator()
    with pytest.raises(ValueError, match="rewards must be finite"):
        est.compute_advantage(None, torch.tensor([float("nan")]), torch.ones(1, 3), torch.zeros(1, 3))
    with pytest.raises(ValueError, match="rewards must be finite"):
        RawRewardAdvantageEstimator().compute_advantage(None, torch.tensor([float("inf")]), torch.ones(1, 3))


def test_raw_reward_all_zero_mask_gives_r_times_1e4():
    a, ret = RawRewardAdvantageEstimator({"name": "raw_reward"}).compute_advantage(None, torch.tensor([1.0, 2.0]), torch.zeros(2, 2))
    assert ret is None
    torch.testing.assert_close(a, torch.tensor([[1e4, 1e4], [2e4, 2e4]]))
