"""NeMo-RL's formulas as plain loops (per-group matmul, per-token GAE) against rlnb's vectorised code."""

import math

import pytest
import torch

from rlnb.algorithms.advantages import grpo_advantages
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.dynamic_sampling import select_nonzero_std
from rlnb.algorithms.gae import gae_advantages, raw_reward_advantages
from rlnb.algorithms.gdpo import gdpo_advantages
from rlnb.algorithms.kl import kl_in_reward
from rlnb.algorithms.reinforce_plus_plus import reinforce_plus_plus_advantages

# --------------------------------------------------------------------------- the references


def groups_of(prompt_ids):
    """{row tuple: [member rows in ascending order]}, as NeMo-RL's unique-row loop finds them."""
    groups = {}
    for i, row in enumerate(prompt_ids.tolist()):
        groups.setdefault(tuple(row), []).append(i)
    return groups.values()


def ref_baseline_std(prompt_ids, rewards, loo, valid=None):
    """NeMo-RL: per group, baseline = (M @ (r·valid)) / n, sq = (M @ (r²·valid)) / n."""
    valid = torch.ones_like(rewards) if valid is None else valid
    baseline, std = torch.zeros_like(rewards), torch.zeros_like(rewards)
    for idx in groups_of(prompt_ids):
        idx = torch.tensor(idx)
        if valid[idx].sum() <= 1:
            baseline[idx] = rewards[idx]
            continue
        k, n = len(idx), valid[idx].sum() - int(loo)
        M = 1 - torch.eye(k) if loo else torch.ones(k, k)
        b = torch.matmul(M, rewards[idx] * valid[idx]) / n
        sq = torch.matmul(M, torch.pow(rewards[idx], 2) * valid[idx]) / n
        baseline[idx] = b
        std[idx] = ((sq - b.square()) * (n / (n - 1))).sqrt().nan_to_num(0)
    return baseline, std


def ref_grpo(prompt_ids, rewards, loo, normalize):
    baseline, std = ref_baseline_std(prompt_ids, rewards, loo)
    adv = (rewards - baseline).unsqueeze(-1)
    if normalize:
        nz = std > 0
        adv[nz] = adv[nz] / (std.unsqueeze(-1)[nz] + 1e-6)
    return adv.squeeze(-1)


def ref_gdpo(prompt_ids, components, weights, loo, normalize):
    names = sorted(components)
    total = sum(w * ref_grpo(prompt_ids, components[k], loo, normalize) for k, w in zip(names, weights))
    s = total.std() if total.numel() > 1 else torch.tensor(math.nan)  # B = 1: NaN, not > 0
    return (total - total.mean()) / s if s > 0 else total - total.mean()


def ref_k3(logp, ref):
    """k3 with NeMo-RL's default clamps: the log-ratio to ±20, the estimate to ±10."""
    out = torch.empty_like(logp)
    for b in range(logp.shape[0]):
        for t in range(logp.shape[1]):
            ell = max(-20.0, min(20.0, float(ref[b, t] - logp[b, t])))
            out[b, t] = max(-10.0, min(10.0, math.exp(ell) - 1 - ell))
    return out


def ref_reinforce_plus_plus(prompt_ids, rewards, mask, minus_baseline, beta, prev, ref):
    if minus_baseline:
        mean, _ = ref_baseline_std(prompt_ids, rewards, loo=False)
        adv = rewards - mean
    else:
        adv = rewards
    adv = adv.unsqueeze(-1).expand(mask.shape)
    if beta is not None:
        adv = adv - beta * ref_k3(prev, ref)
    mu = (adv * mask).sum() / mask.sum()
    var = ((adv - mu).pow(2) * mask).sum() / mask.sum()
    return (adv - mu) * var.clamp(min=1e-8).rsqrt()


def ref_gae(rewards, values, mask, gamma, lam, normalize):
    """Per row, per token: reward at the last valid token, carry-forward recursion, whitening."""
    B, S = values.shape
    R = torch.zeros(B, S, dtype=torch.float64)
    for b in range(B):
        valid = [t for t in range(S) if mask[b, t] > 0]
        if valid:
            R[b, valid[-1]] = float(rewards[b])
    adv = torch.zeros(B, S, dtype=torch.float64)
    for b in range(B):
        nv = g = 0.0
        for t in reversed(range(S)):
            m = float(mask[b, t])
            delta = R[b, t] + gamma * nv - float(values[b, t])
            cand = delta + gamma * lam * g
            nv = m * float(values[b, t]) + (1 - m) * nv
            g = m * cand + (1 - m) * g
            adv[b, t] = g
    returns = adv + values.double()
    if normalize:
        vals = [float(adv[b, t]) for b in range(B) for t in range(S) if mask[b, t] > 0]
        n = len(vals)
        mu = sum(vals) / (n + 1e-8)
        # Bessel's n/(n-1) without an epsilon: one valid token gives 0·inf = NaN, as NeMo-RL
        var = sum((v - mu) ** 2 for v in vals) / (n + 1e-8) * n / (n - 1) if n > 1 else math.nan
        adv = (adv - mu) / math.sqrt(var + 1e-8)
    return adv * (mask > 0), returns


# --------------------------------------------------------------------------- random batches


def random_groups(g, dist, max_size=8, max_groups=5):
    sizes = torch.randint(1, max_size + 1, (int(torch.randint(1, max_groups + 1, (1,), generator=g)),),
                          generator=g)
    group = torch.cat([torch.full((int(k),), i) for i, k in enumerate(sizes)])
    group = group[torch.randperm(len(group), generator=g)]
    B = len(group)
    if dist == "binary":
        rewards = torch.randint(0, 2, (B,), generator=g).float()
    elif dist == "tenths":
        rewards = torch.randint(0, 11, (B,), generator=g).float() / 10
    else:
        rewards = torch.randn(B, generator=g)
    return torch.stack([group, 3 * group + 1], dim=1), rewards


def order_free(prompt_ids, dist, loo):
    """Rows whose sums cannot depend on the summation order: the std == 0 decisions must agree
    with NeMo-RL's BLAS matmul exactly there (0/1 rewards: integer sums; Gaussians: the others
    are never equal; at most two terms in any distribution)."""
    sizes = torch.zeros(len(prompt_ids))
    for idx in groups_of(prompt_ids):
        sizes[idx] = len(idx)
    terms = sizes - int(loo)
    return (terms <= 2) | torch.full_like(terms, dist in ("binary", "gauss"), dtype=torch.bool)


DISTS = ["binary", "tenths", "gauss"]


# --------------------------------------------------------------------------- the comparisons


@pytest.mark.parametrize("dist", DISTS)
@pytest.mark.parametrize("loo", [True, False])
def test_baseline_std_and_grpo_match_the_loop(dist, loo):
    g = torch.Generator().manual_seed(hash((dist, loo)) % 2**31)
    for _ in range(60):
        prompt_ids, rewards = random_groups(g, dist)
        b, s = calculate_baseline_and_std_per_prompt(prompt_ids, rewards, leave_one_out=loo)
        rb, rs = ref_baseline_std(prompt_ids, rewards, loo)
        torch.testing.assert_close(b, rb, atol=1e-5, rtol=1e-5)
        free = order_free(prompt_ids, dist, loo)
        assert torch.equal(s[free] == 0, rs[free] == 0)  # the decisions dynamic sampling makes
        wide = rs > 1e-3
        torch.testing.assert_close(s[wide], rs[wide], atol=1e-5, rtol=1e-5)
        for normalize in (True, False):
            a = grpo_advantages(prompt_ids, rewards, leave_one_out=loo, normalize_rewards=normalize)
            ra = ref_grpo(prompt_ids, rewards, loo, normalize)
            torch.testing.assert_close(a[free], ra[free], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dist", DISTS)
def test_dynamic_sampling_keeps_the_rows_nemo_rl_keeps(dist):
    g = torch.Generator().manual_seed(7)
    for _ in range(40):
        prompt_ids, rewards = random_groups(g, dist, max_size=6)
        b, s = calculate_baseline_and_std_per_prompt(prompt_ids, rewards)
        _, rs = ref_baseline_std(prompt_ids, rewards, loo=True)
        free = order_free(prompt_ids, dist, True)
        kept = select_nonzero_std({"total_reward": rewards, "row": torch.arange(len(rewards))},
                                  std=s, baseline=b)["row"]
        nemo_kept = torch.nonzero(rs != 0).squeeze(-1)
        assert set(kept[free[kept]].tolist()) == set(nemo_kept[free[nemo_kept]].tolist())


@pytest.mark.parametrize("dist", ["binary", "gauss"])
def test_gdpo_matches_the_loop(dist):
    g = torch.Generator().manual_seed(11)
    for _ in range(30):
        prompt_ids, r1 = random_groups(g, dist)
        r2 = torch.randint(0, 2, r1.shape, generator=g).float() if dist == "binary" else torch.randn(
            r1.shape, generator=g)
        comps = {"reward/b": r2, "reward/a": r1}
        for loo in (True, False):
            got = gdpo_advantages(prompt_ids, comps, reward_weights=[1.0, 0.5], leave_one_out=loo)
            want = ref_gdpo(prompt_ids, comps, [1.0, 0.5], loo, True)
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("minus_baseline", [True, False])
@pytest.mark.parametrize("beta", [None, 0.1])
def test_reinforce_plus_plus_matches_the_loop(minus_baseline, beta):
    g = torch.Generator().manual_seed(13)
    for _ in range(20):
        prompt_ids, rewards = random_groups(g, "gauss")
        B, S = len(rewards), 6
        mask = (torch.rand(B, S, generator=g) > 0.3).float()
        mask[0, 0] = 1
        prev = -torch.rand(B, S, generator=g) * 3
        ref = prev + torch.randn(B, S, generator=g)
        kl = None if beta is None else kl_in_reward(prev, ref, reference_policy_kl_penalty=beta)
        got = reinforce_plus_plus_advantages(prompt_ids, rewards, mask, minus_baseline=minus_baseline,
                                             kl_penalty=kl)
        want = ref_reinforce_plus_plus(prompt_ids, rewards, mask, minus_baseline, beta, prev, ref)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("normalize", [True, False])
def test_gae_and_raw_reward_match_the_loop(normalize):
    g = torch.Generator().manual_seed(17)
    for _ in range(20):
        B, S = int(torch.randint(1, 5, (1,), generator=g)), int(torch.randint(2, 8, (1,), generator=g))
        values = torch.randn(B, S, generator=g)
        mask = (torch.rand(B, S, generator=g) > 0.3).float()
        mask[0, :2] = 1  # at least two valid tokens, so the whitening is defined
        rewards = torch.randn(B, generator=g)
        gamma, lam = [(1.0, 0.95), (0.9, 1.0), (1.0, 0.0)][int(torch.randint(0, 3, (1,), generator=g))]
        adv, ret = gae_advantages(rewards, values, mask, gae_gamma=gamma, gae_lambda=lam,
                                  normalize_advantages=normalize)
        radv, rret = ref_gae(rewards, values, mask, gamma, lam, normalize)
        torch.testing.assert_close(adv.double(), radv, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(ret.double(), rret, atol=1e-5, rtol=1e-5)
        raw = raw_reward_advantages(rewards, mask, normalize_advantages=normalize)
        want = rewards[:, None].expand(B, S)
        if normalize:
            n = mask.sum().clamp(min=1)
            mu = (want * mask).sum() / n
            want = (want - mu) * (((want - mu) ** 2 * mask).sum() / n).clamp(min=1e-8).rsqrt()
        torch.testing.assert_close(raw, want, atol=1e-5, rtol=1e-5)


def test_edge_cases_match_the_loop():
    # groups of one, pairs (loo std 0), all-equal groups, a single row for GDPO, one valid GAE token
    p = torch.tensor([[0], [1], [1], [2], [2], [2]])
    r = torch.tensor([0.3, 1.48885, 1.297439, 0.7, 0.7, 0.7])
    for loo in (True, False):
        b, s = calculate_baseline_and_std_per_prompt(p, r, leave_one_out=loo)
        rb, rs = ref_baseline_std(p, r, loo)
        assert torch.equal(b, rb) and torch.equal(s, rs)
        assert torch.equal(grpo_advantages(p, r, leave_one_out=loo), ref_grpo(p, r, loo, True))
    one = {"reward/a": torch.tensor([1.0]), "reward/b": torch.tensor([0.0])}
    assert gdpo_advantages(torch.zeros(1, 1), one).tolist() == [0.0]
    mask = torch.zeros(2, 3)
    mask[0, 1] = 1
    adv, _ = gae_advantages(torch.tensor([1.0, 0.0]), torch.zeros(2, 3), mask)
    radv, _ = ref_gae(torch.tensor([1.0, 0.0]), torch.zeros(2, 3), mask, 1.0, 0.95, True)
    assert torch.isnan(adv[0, 1]) and torch.isnan(radv[0, 1])
