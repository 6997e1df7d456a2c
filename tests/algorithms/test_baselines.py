"""Per-prompt baselines and std: NeMo-RL's examples, an exact loop reference, NeMo's matmul."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlnb.algorithms.advantages import grpo_advantages
from rlnb.algorithms.baselines import (
    calculate_baseline_and_std_per_prompt,
    comparison_sums,
    group_ids,
)

F32_MAX = torch.finfo(torch.float32).max


def nemo_reference(prompt_ids, rewards, valid, loo):
    """NeMo-RL's per-group formulation, literally: ``torch.matmul(M, v)`` one group at a time."""
    B = rewards.shape[0]
    baseline, std = torch.zeros(B), torch.zeros(B)
    rows = [tuple(r) for r in prompt_ids.tolist()]
    for key in dict.fromkeys(rows):
        idx = torch.tensor([i for i, r in enumerate(rows) if r == key])
        r, v = rewards[idx], valid[idx]
        if v.sum() <= 1:
            baseline[idx] = r
            continue
        k = len(idx)
        n = v.sum() - (1 if loo else 0)
        M = 1 - torch.eye(k) if loo else torch.ones(k, k)
        b = torch.matmul(M, r * v) / n
        sq = torch.matmul(M, torch.pow(r, 2) * v) / n
        baseline[idx] = b
        std[idx] = ((sq - b.square()) * (n / (n - 1))).sqrt().nan_to_num(0.0)
    return baseline, std


def ordered_reference(prompt_ids, rewards, valid, loo):
    """The same formula with M @ v summed term by term in member order, in numpy float32 scalars
    (each operation rounded once): the order rlnb documents, so rlnb must match it bit for bit."""
    f32 = np.float32
    B = rewards.shape[0]
    r_all, v_all = rewards.numpy().astype(f32), valid.numpy().astype(f32)
    baseline, std = np.zeros(B, f32), np.zeros(B, f32)
    rows = [tuple(r) for r in prompt_ids.tolist()]
    for key in dict.fromkeys(rows):
        idx = [i for i, r in enumerate(rows) if r == key]
        if sum(v_all[i] for i in idx) <= 1:
            baseline[idx] = r_all[idx]
            continue
        n = f32(sum(v_all[i] for i in idx) - (1 if loo else 0))
        for i in idx:
            s = sq = f32(0)
            for j in idx:
                m = f32(0 if (loo and j == i) else 1)
                s = f32(s + m * f32(r_all[j] * v_all[j]))
                sq = f32(sq + m * f32(f32(r_all[j] * r_all[j]) * v_all[j]))
            b = f32(s / n)
            baseline[i] = b
            if n > 1:
                var = f32(f32(f32(sq / n) - f32(b * b)) * f32(n / f32(n - 1)))
                # torch's float32 sqrt, as NeMo-RL and rlnb use (it is not numpy's: on CPU it
                # can differ from the correctly rounded root in the last bit)
                std[i] = torch.tensor(var).sqrt().item() if var >= 0 else f32(0)
    return torch.from_numpy(baseline), torch.from_numpy(std)


def random_batch(g, sizes, dist, partial):
    group = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    group = group[torch.randperm(len(group), generator=g)]
    prompt_ids = torch.stack([group, group * 7 % 3], dim=1)  # [B, L]
    B = len(group)
    if dist == "binary":
        rewards = torch.randint(0, 2, (B,), generator=g).float()
    elif dist == "tenths":
        rewards = torch.randint(0, 11, (B,), generator=g).float() / 10
    else:
        rewards = torch.randn(B, generator=g)
    valid = (torch.rand(B, generator=g) > 0.3).float() if partial else torch.ones(B)
    return prompt_ids, rewards, valid


# --- NeMo-RL's examples


def test_loo_group_of_three():
    p = torch.zeros(3, 1, dtype=torch.long)
    b, s = calculate_baseline_and_std_per_prompt(p, torch.tensor([1.0, 0.0, 0.0]), None, True)
    torch.testing.assert_close(b, torch.tensor([0.0, 0.5, 0.5]))
    torch.testing.assert_close(s, torch.tensor([0.0, 0.70711, 0.70711]), atol=1e-5, rtol=0)


def test_group_of_one_gets_its_own_reward_and_zero_std():
    p = torch.tensor([[1], [2], [2]])
    b, s = calculate_baseline_and_std_per_prompt(p, torch.tensor([0.7, 1.0, 0.0]), None, False)
    assert b[0].item() == torch.tensor(0.7).item() and s[0].item() == 0.0


def test_loo_pair_has_zero_std_and_keeps_the_raw_difference():
    # "Group total minus own reward" gave std 1e-40 -> x n/(n-1) = inf -> advantages 5.6e-40.
    r = torch.tensor([1.48885, 1.297439])
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(2, 1), r)
    assert s.tolist() == [0.0, 0.0]
    a = grpo_advantages(torch.zeros(2, 1), r)
    assert a.tolist() == [(r[0] - r[1]).item(), (r[1] - r[0]).item()]  # exactly ±0.191411
    assert a[0].item() == pytest.approx(0.191411, abs=1e-6)


def test_member_whose_others_share_one_value_gets_zero_std():
    # The first member's two others are equal: NeMo-RL gives it std 0 and advantage 0.6.
    a = grpo_advantages(torch.zeros(3, 1), torch.tensor([0.7, 0.1, 0.1]))
    torch.testing.assert_close(a, torch.tensor([0.6, -0.70711, -0.70711]), atol=1e-5, rtol=0)
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(3, 1), torch.tensor([0.7, 0.1, 0.1]))
    assert s[0].item() == 0.0
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(3, 1), torch.full((3,), 1 / 3))
    assert s.tolist() == [0.0, 0.0, 0.0]


def test_one_pass_formula_leaves_nemo_rl_residue_for_equal_non_integer_rewards():
    # NeMo-RL quirk kept: E[r²] - E[r]² in float32 does not cancel for 3 x 1/3 without loo ...
    p3 = torch.zeros(3, 1, dtype=torch.long)
    r3 = torch.full((3,), 1 / 3)
    _, s = calculate_baseline_and_std_per_prompt(p3, r3, None, False)
    _, nemo = nemo_reference(p3, r3, torch.ones(3), False)
    assert torch.equal(s, nemo) and s[0].item() == pytest.approx(1.0572e-4, rel=1e-3)
    # ... nor for 8 x 0.3 with loo (which members NeMo-RL's BLAS gives it depends on the CPU).
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(8, 1), torch.full((8,), 0.3))
    torch.testing.assert_close(s, torch.full((8,), 9.3233e-5), rtol=1e-3, atol=0)
    _, nemo = nemo_reference(torch.zeros(8, 1), torch.full((8,), 0.3), torch.ones(8), True)
    torch.testing.assert_close(nemo[nemo != 0], torch.full_like(nemo[nemo != 0], 9.3233e-5),
                               rtol=1e-3, atol=0)
    # 0/1 rewards are exact.
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(4, 1), torch.ones(4), None, False)
    assert (s == 0).all()


def test_partial_validity_with_loo_gives_zero_where_nemo_gives_float32_max():
    # Deliberate difference: loo, rewards [1, 5, -3], valid [1, 0, 1]: NeMo-RL's (sq - b²)·1/0
    # = +inf -> nan_to_num -> 3.4e38 for the invalid member; rlnb returns std 0 there.
    p, r, v = torch.zeros(3, 1, dtype=torch.long), torch.tensor([1.0, 5.0, -3.0]), torch.tensor([1, 0, 1])
    b, s = calculate_baseline_and_std_per_prompt(p, r, v, True)
    nb, ns = nemo_reference(p, r, v.float(), True)
    torch.testing.assert_close(b, torch.tensor([-3.0, -2.0, 1.0]))
    assert torch.equal(b, nb)
    assert ns[1].item() == F32_MAX
    assert s.tolist() == [0.0, 0.0, 0.0]


def test_identical_prompt_rows_merge_into_one_group():
    p = torch.tensor([[5, 6, 0], [5, 6, 0], [5, 7, 0], [5, 6, 0]])
    assert group_ids(p).tolist() == [0, 0, 1, 0]


def test_rewards_for_std_changes_only_the_std():
    p = torch.zeros(4, 1, dtype=torch.long)
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    b1, s1 = calculate_baseline_and_std_per_prompt(p, r, None, False)
    b2, s2 = calculate_baseline_and_std_per_prompt(p, r, None, False, rewards_for_std=2 * r)
    torch.testing.assert_close(b1, b2)
    torch.testing.assert_close(s2, 2 * s1)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rewards_raise_naming_the_tensor(bad):
    r = torch.tensor([1.0, bad, 0.0])
    with pytest.raises(ValueError, match=r"rewards must be finite.*at index \(1,\)"):
        calculate_baseline_and_std_per_prompt(torch.zeros(3, 1), r)
    with pytest.raises(ValueError, match="rewards_for_std must be finite"):
        calculate_baseline_and_std_per_prompt(torch.zeros(3, 1), torch.zeros(3), rewards_for_std=r)


# --- the summation order


def test_comparison_sums_add_in_member_order():
    # 1e8 + 1 rounds to 1e8 in float32, so member order gives (1e8 + 1) - 1e8 = 0, whereas
    # "1 + (1e8 - 1e8)" would give 1: the order is part of the documented contract.
    group = torch.zeros(3, dtype=torch.long)
    x = torch.tensor([[1e8], [1.0], [-1e8]])
    assert comparison_sums(group, x, leave_one_out=False)[:, 0].tolist() == [0.0, 0.0, 0.0]
    loo = comparison_sums(group, x, leave_one_out=True)[:, 0]
    assert loo.tolist() == [-1e8, 0.0, 1e8]  # row 0: (0 + 1) + -1e8 rounds to -1e8


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 16), min_size=1, max_size=5),
    dist=st.sampled_from(["binary", "tenths", "gauss"]),
    loo=st.booleans(),
    partial=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_vectorised_equals_member_order_loop_bit_for_bit(sizes, dist, loo, partial, seed):
    g = torch.Generator().manual_seed(seed)
    prompt_ids, rewards, valid = random_batch(g, sizes, dist, partial)
    b, s = calculate_baseline_and_std_per_prompt(prompt_ids, rewards, valid, loo)
    rb, rs = ordered_reference(prompt_ids, rewards, valid, loo)
    assert torch.equal(b, rb)
    assert torch.equal(s, rs)


@settings(max_examples=120, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 16), min_size=1, max_size=5),
    dist=st.sampled_from(["binary", "tenths", "gauss"]),
    loo=st.booleans(),
    partial=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_matches_nemo_rl_matmul(sizes, dist, loo, partial, seed):
    """Against NeMo-RL's own per-group ``torch.matmul``: exact wherever the summation order
    cannot matter (0/1 rewards; at most two terms per sum), to float rounding elsewhere (the
    BLAS order is the CPU's, see baselines.py choice 4)."""
    g = torch.Generator().manual_seed(seed)
    prompt_ids, rewards, valid = random_batch(g, sizes, dist, partial)
    b, s = calculate_baseline_and_std_per_prompt(prompt_ids, rewards, valid, loo)
    nb, ns = nemo_reference(prompt_ids, rewards, valid, loo)
    nemo_inf = ns == F32_MAX  # choice 6: rlnb says 0 there
    assert (s[nemo_inf] == 0).all()
    group = group_ids(prompt_ids)
    # valid terms in each row's sum (a loo row leaves itself out only if it is valid)
    terms = torch.bincount(group, weights=valid)[group] - (valid if loo else 0)
    order_free = (terms <= 2) | (dist == "binary")
    assert torch.equal(b[order_free], nb[order_free])
    assert torch.equal(s[order_free & ~nemo_inf], ns[order_free & ~nemo_inf])
    torch.testing.assert_close(b, nb, atol=1e-6, rtol=1e-6)
    wide = ns > 1e-3  # a std of a few ulps is rounding noise, relative comparison is meaningless
    torch.testing.assert_close(s[wide & ~nemo_inf], ns[wide & ~nemo_inf], atol=0, rtol=1e-4)


def test_groups_of_different_sizes_in_one_batch():
    p = torch.tensor([0, 1, 1, 2, 2, 2, 1])[:, None]
    r = torch.tensor([5.0, 1.0, 0.0, 2.0, 4.0, 6.0, 2.0])
    b, s = calculate_baseline_and_std_per_prompt(p, r, None, True)
    # group 0 alone: own reward, std 0; group 1 = rows 1, 2, 6; group 2 = rows 3, 4, 5
    torch.testing.assert_close(b, torch.tensor([5.0, 1.0, 1.5, 5.0, 4.0, 3.0, 0.5]))
    torch.testing.assert_close(s, torch.tensor([0.0, 1.41421, 0.70711, 1.41421, 2.82843,
                                                1.41421, 0.70711]), atol=1e-5, rtol=0)


def test_group_ids_stay_exact_when_the_row_hash_collides(monkeypatch):
    import rlnb.algorithms.baselines as baselines

    rows = torch.tensor([[1, 2], [2, 1], [1, 2], [3, 0], [2, 1]])
    # With all-ones weights every row above hashes to 3: only the exact fallback can separate them.
    monkeypatch.setattr(baselines, "_hash_weights", lambda width, device: torch.ones(width, dtype=torch.long))
    got = baselines.group_ids(rows)
    assert got[0] == got[2] and got[1] == got[4]
    assert len({got[0].item(), got[1].item(), got[3].item()}) == 3


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), width=st.integers(2, 6), groups=st.integers(1, 8))
def test_group_ids_partition_equals_torch_unique(seed, width, groups):
    g = torch.Generator().manual_seed(seed)
    distinct = torch.randint(0, 3, (groups, width), generator=g)  # small alphabet: many ties
    rows = distinct[torch.randint(0, groups, (20,), generator=g)]
    got = group_ids(rows)
    want = torch.unique(rows, dim=0, return_inverse=True)[1]
    assert torch.equal(got[:, None] == got[None, :], want[:, None] == want[None, :])
