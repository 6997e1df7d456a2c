"""Per-prompt baselines and std (spec §1.4): verified examples, a loop reference, properties."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt, group_ids


def reference(prompt_ids, rewards, valid, loo):
    """The spec's per-group matrix formulation, literally, one group at a time."""
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
        b = (M @ (r * v)) / n
        sq = (M @ (r * r * v)) / n
        baseline[idx] = b
        std[idx] = ((sq - b * b) * (n / (n - 1))).sqrt().nan_to_num(0.0)
    return baseline, std


def test_loo_group_of_three():
    p = torch.zeros(3, 1, dtype=torch.long)
    b, s = calculate_baseline_and_std_per_prompt(p, torch.tensor([1.0, 0.0, 0.0]), None, True)
    torch.testing.assert_close(b, torch.tensor([0.0, 0.5, 0.5]))
    torch.testing.assert_close(s, torch.tensor([0.0, 0.70711, 0.70711]), atol=1e-5, rtol=0)


def test_group_of_one_gets_its_own_reward_and_zero_std():
    p = torch.tensor([[1], [2], [2]])
    b, s = calculate_baseline_and_std_per_prompt(p, torch.tensor([0.7, 1.0, 0.0]), None, False)
    assert b[0].item() == torch.tensor(0.7).item() and s[0].item() == 0.0


def test_partial_validity_with_loo_gives_float32_max():
    # spec §1.4 [verified]: loo, rewards [1,5,-3], valid [1,0,1]: the invalid member's std.
    p = torch.zeros(3, 1, dtype=torch.long)
    b, s = calculate_baseline_and_std_per_prompt(
        p, torch.tensor([1.0, 5.0, -3.0]), torch.tensor([1, 0, 1]), True
    )
    torch.testing.assert_close(b, torch.tensor([-3.0, -2.0, 1.0]))
    assert s[1].item() == torch.finfo(torch.float32).max
    assert s[0].item() == 0.0 and s[2].item() == 0.0


def test_one_pass_formula_leaves_float_residue_for_equal_non_dyadic_rewards():
    # spec §1.4 [verified]: 3 x 1/3 -> std ≈ 1.06e-4 (torch.std would say 0).
    p = torch.zeros(3, 1, dtype=torch.long)
    _, s = calculate_baseline_and_std_per_prompt(p, torch.full((3,), 1 / 3), None, False)
    assert torch.allclose(s, torch.full((3,), 1.06e-4), rtol=0.01)
    # 8 x 0.3 with loo: 9.3e-5 where a residue appears (which members is summation-order luck).
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(8, 1), torch.full((8,), 0.3))
    nonzero = s[s != 0]
    assert nonzero.numel() > 0 and torch.allclose(nonzero, torch.full_like(nonzero, 9.3e-5), rtol=0.01)
    # 0/1 rewards are exact.
    _, s = calculate_baseline_and_std_per_prompt(torch.zeros(4, 1), torch.ones(4), None, False)
    assert (s == 0).all()


def test_identical_prompt_rows_merge_into_one_group():
    p = torch.tensor([[5, 6, 0], [5, 6, 0], [5, 7, 0], [5, 6, 0]])
    assert group_ids(p).tolist() == [0, 0, 1, 0]


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=5),
    loo=st.booleans(),
    seed=st.integers(0, 10_000),
    partial=st.booleans(),
)
def test_vectorised_matches_loop_reference(sizes, loo, seed, partial):
    g = torch.Generator().manual_seed(seed)
    group = torch.cat([torch.full((n,), i) for i, n in enumerate(sizes)])
    perm = torch.randperm(len(group), generator=g)
    prompt_ids = torch.stack([group[perm], group[perm] * 7 % 3], dim=1)
    rewards = torch.randint(0, 4, (len(group),), generator=g).float() / 2
    valid = (torch.rand(len(group), generator=g) > 0.3).float() if partial else torch.ones(len(group))
    b, s = calculate_baseline_and_std_per_prompt(prompt_ids, rewards, valid, loo)
    rb, rs = reference(prompt_ids, rewards, valid, loo)
    torch.testing.assert_close(b, rb, atol=1e-5, rtol=1e-5)
    # inf (partial validity, loo) must agree exactly; finite values to 1e-5.
    torch.testing.assert_close(s, rs, atol=1e-5, rtol=1e-5)


def test_rewards_for_std_changes_only_the_std():
    p = torch.zeros(4, 1, dtype=torch.long)
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    b1, s1 = calculate_baseline_and_std_per_prompt(p, r, None, False)
    b2, s2 = calculate_baseline_and_std_per_prompt(p, r, None, False, rewards_for_std=2 * r)
    torch.testing.assert_close(b1, b2)
    torch.testing.assert_close(s2, 2 * s1)


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
