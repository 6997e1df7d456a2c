"""GRPO, GDPO, Reinforce++ and OPD advantages: NeMo-RL examples, hand numbers, references."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlnb import (
    GDPOAdvantageEstimator,
    GRPOAdvantageEstimator,
    ReinforcePlusPlusAdvantageEstimator,
    make_advantage_estimator,
)
from rlnb.algorithms.advantages import grpo_advantages
from rlnb.algorithms.gdpo import gdpo_advantages, gdpo_reward_components
from rlnb.algorithms.opd import on_policy_distillation_advantages
from rlnb.algorithms.reinforce_plus_plus import reinforce_plus_plus_advantages


def grpo_reference(groups, rewards, loo, normalize):
    """Python loop over groups; std by the one-pass formula on Python floats."""
    out = []
    for i, (g, r) in enumerate(zip(groups, rewards)):
        members = [rewards[j] for j in range(len(groups)) if groups[j] == g]
        others = [rewards[j] for j in range(len(groups)) if groups[j] == g and j != i]
        if len(members) <= 1:
            out.append(0.0)
            continue
        pool = others if loo else members
        n = len(pool)
        mean = sum(pool) / n
        var = (sum(x * x for x in pool) / n - mean * mean) * n / (n - 1) if n > 1 else float("nan")
        std = math.sqrt(var) if var > 0 else 0.0
        a = r - mean
        out.append(a / (std + 1e-6) if normalize and std > 0 else a)
    return out


def test_grpo_verified_examples():
    ones = torch.ones(3, 5)
    a = GRPOAdvantageEstimator().compute_advantage(torch.zeros(3, 1), torch.tensor([1.0, 0, 0]), ones)
    assert a.shape == (3, 5)
    torch.testing.assert_close(a[:, 0], torch.tensor([1.0, -0.70711, -0.70711]), atol=1e-5, rtol=0)
    p4, r4 = torch.zeros(4, 1), torch.tensor([1.0, 0, 0, 1])
    torch.testing.assert_close(grpo_advantages(p4, r4), torch.tensor([1.1547, -1.1547, -1.1547, 1.1547]), atol=1e-4, rtol=0)
    torch.testing.assert_close(grpo_advantages(p4, r4, leave_one_out=False), torch.tensor([0.86602, -0.86602, -0.86602, 0.86602]), atol=1e-5, rtol=0)
    # loo group of 2: std = 0, the raw difference stays [NeMo-RL: [0, 1] -> [-1, 1]].
    torch.testing.assert_close(grpo_advantages(torch.zeros(2, 1), torch.tensor([0.0, 1.0])), torch.tensor([-1.0, 1.0]))


def test_grpo_broadcast_is_nonzero_on_prompt_positions():
    mask = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    a = GRPOAdvantageEstimator().compute_advantage(torch.zeros(2, 1), torch.tensor([0.0, 1.0]), mask)
    assert (a[:, 0] != 0).all()  # masking happens in the loss, as in NeMo-RL


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=4),
    loo=st.booleans(),
    normalize=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_grpo_matches_loop_reference(sizes, loo, normalize, seed):
    g = torch.Generator().manual_seed(seed)
    groups = [i for i, n in enumerate(sizes) for _ in range(n)]
    rewards = (torch.randint(0, 3, (len(groups),), generator=g).float() / 2).tolist()
    got = grpo_advantages(torch.tensor(groups)[:, None], torch.tensor(rewards), leave_one_out=loo, normalize_rewards=normalize)
    torch.testing.assert_close(got, torch.tensor(grpo_reference(groups, rewards, loo, normalize)), atol=1e-5, rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(G=st.integers(2, 6), P=st.integers(1, 4), seed=st.integers(0, 10_000), loo=st.booleans())
def test_grpo_is_permutation_equivariant_and_zero_for_equal_groups(G, P, seed, loo):
    g = torch.Generator().manual_seed(seed)
    prompt_ids = torch.arange(P).repeat_interleave(G)[:, None]  # [B, 1], B = P*G
    # dyadic rewards: every group sum is exact in float32, so any summation order gives the
    # same bits (with continuous rewards the one-pass std of near-equal values is rounding noise)
    rewards = torch.randint(0, 5, (P * G,), generator=g).float() / 4
    perm = torch.randperm(P * G, generator=g)
    a = grpo_advantages(prompt_ids, rewards, leave_one_out=loo)
    assert torch.equal(grpo_advantages(prompt_ids[perm], rewards[perm], leave_one_out=loo), a[perm])
    equal = torch.rand(P, generator=g).round().repeat_interleave(G)  # 0/1, equal within groups
    assert (grpo_advantages(prompt_ids, equal, leave_one_out=False) == 0).all()


def test_gdpo_whitens_the_weighted_sum_over_rows():
    # By hand, no loo, two groups of two. Component a = [0, 1 | 0.5, 0] -> GRPO [-s, s | s, -s]
    # with s = 0.5 / 0.70711 = 0.70711 (and 0.25 / 0.35355 in group 2); component b = [1, 0 | 1, 1]
    # -> [s, -s | 0, 0] (equal group: std 0). Weights follow sorted names: a gets the first.
    p = torch.tensor([[0], [0], [1], [1]])
    comps = {"reward/b": torch.tensor([1.0, 0.0, 1.0, 1.0]), "reward/a": torch.tensor([0.0, 1.0, 0.5, 0.0])}
    # 2a + b = [-s, s, 2s, -2s]: mean 0, unbiased std sqrt(10/3)·s -> [-√0.3, √0.3, √1.2, -√1.2]
    got = gdpo_advantages(p, comps, reward_weights=[2.0, 1.0], leave_one_out=False)
    r3, r12 = math.sqrt(0.3), math.sqrt(1.2)
    torch.testing.assert_close(got, torch.tensor([-r3, r3, r12, -r12]), atol=2e-6, rtol=0)
    # a + 2b = [s, -s, s, -s]: unbiased std sqrt(4/3)·s -> ±√0.75
    got = gdpo_advantages(p, comps, reward_weights=[1.0, 2.0], leave_one_out=False)
    r75 = math.sqrt(0.75)
    torch.testing.assert_close(got, torch.tensor([r75, -r75, r75, -r75]), atol=2e-6, rtol=0)


def test_gdpo_reward_component_key_styles():
    # NeMo-RL's code uses reward/<name>; its docs page says reward1, reward2, ...: both work,
    # numbered keys sort by number, and reward/<name> keys win when both are present.
    named = {"reward/x": torch.tensor([1.0, 0.0]), "reward/y": torch.tensor([1.0, 1.0])}
    numbered = {"reward1": torch.tensor([1.0, 0.0]), "reward2": torch.tensor([1.0, 1.0])}
    assert list(gdpo_reward_components(numbered)) == ["reward1", "reward2"]
    ten = {f"reward{i}": torch.zeros(2) for i in (10, 2, 1)}
    assert list(gdpo_reward_components(ten)) == ["reward1", "reward2", "reward10"]
    both = {**named, "reward1": torch.tensor([0.0, 1.0]), "reward3": torch.zeros(2), "rewards": 0}
    assert list(gdpo_reward_components(both)) == ["reward/x", "reward/y"]
    est = GDPOAdvantageEstimator({"name": "gdpo", "use_leave_one_out_baseline": False})
    p, ones = torch.zeros(2, 1), torch.ones(2, 3)
    for batch in (named, numbered, both):
        a = est.compute_advantage(p, torch.zeros(2), ones, repeated_batch=batch)
        torch.testing.assert_close(a[:, 0], torch.tensor([0.70711, -0.70711]), atol=1e-5, rtol=0)
    # the weights follow the numeric order: reward2 is the constant one
    est = GDPOAdvantageEstimator({"name": "gdpo", "reward_weights": [0.0, 1.0]})
    with_weights = est.compute_advantage(p, torch.zeros(2), ones, repeated_batch=numbered)
    assert (with_weights == 0).all()


def test_gdpo_single_row_and_component_checks():
    one = {"reward/a": torch.tensor([1.0]), "reward/b": torch.tensor([0.0])}
    assert gdpo_advantages(torch.zeros(1, 1), one).tolist() == [0.0]  # NeMo-RL: B = 1 -> 0
    with pytest.raises(ValueError, match="at least 2 reward components"):
        gdpo_advantages(torch.zeros(2, 1), {"reward/a": torch.ones(2)})
    with pytest.raises(ValueError, match="reward_weights has 3 entries"):
        gdpo_advantages(torch.zeros(1, 1), one, reward_weights=[1, 2, 3])


def test_gdpo_estimator_reads_reward_components_from_repeated_batch():
    est = GDPOAdvantageEstimator({"name": "gdpo", "use_leave_one_out_baseline": False})
    batch = {"reward/x": torch.tensor([1.0, 0.0]), "reward/y": torch.tensor([1.0, 1.0]), "other": 3}
    a = est.compute_advantage(torch.zeros(2, 1), torch.zeros(2), torch.ones(2, 3), repeated_batch=batch)
    torch.testing.assert_close(a[:, 0], torch.tensor([0.70711, -0.70711]), atol=1e-5, rtol=0)


# Reinforce++ by hand: groups {0, 1} and {2}, rewards [1, 0, 5], β = 0.1, k3 with
# ℓ = ref - prev = -0.5 on column 0 only: KL = 0.1·(e^-0.5 - 1 + 0.5) = 0.0106531 there.
RPP_PROMPTS = torch.tensor([[0], [0], [1]])
RPP_REWARDS = torch.tensor([1.0, 0.0, 5.0])
RPP_MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
RPP_PREV = torch.tensor([[-1.0, -2.0, -3.0]] * 3)
RPP_REF = torch.tensor([[-1.5, -2.0, -3.0]] * 3)
RPP_KL = {"use_kl_in_reward": True, "reference_policy_kl_penalty": 0.1}


def test_reinforce_plus_plus_whitens_over_masked_tokens_and_subtracts_kl():
    # minus the group mean: [0.5, -0.5, 0] - KL on column 0; the 6 valid tokens have
    # mean 0.0780068 and biased variance 0.1189717; every position is whitened with them.
    est = ReinforcePlusPlusAdvantageEstimator({"name": "reinforce_plus_plus"}, RPP_KL)
    got = est.compute_advantage(RPP_PROMPTS, RPP_REWARDS, RPP_MASK, logprobs_policy=RPP_PREV,
                                logprobs_reference=RPP_REF)
    want = torch.tensor([[1.19256, 1.22344, 1.22344],
                         [-1.70664, -1.67576, -1.67576],
                         [-0.25704, -0.22616, -0.22616]])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    valid = got[RPP_MASK.bool()]
    assert valid.mean().abs().item() < 1e-6 and valid.var(unbiased=False).item() == pytest.approx(1, abs=1e-5)
    assert got[0, 2].item() != 0  # masked positions are whitened, not zeroed


def test_reinforce_plus_plus_without_baseline_whitens_the_raw_rewards():
    # minus_baseline=False: [1, 0, 5] - KL on column 0; mean 2.8280068, variance 4.8144615.
    est = ReinforcePlusPlusAdvantageEstimator(
        {"name": "reinforce_plus_plus", "minus_baseline": False}, RPP_KL
    )
    got = est.compute_advantage(RPP_PROMPTS, RPP_REWARDS, RPP_MASK, logprobs_policy=RPP_PREV,
                                logprobs_reference=RPP_REF)
    want = torch.tensor([[-0.83797, -0.83311, -0.83311],
                         [-1.29372, -1.28886, -1.28886],
                         [0.98503, 0.98988, 0.98988]])
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    # the lone prompt's reward is no longer zeroed by its (own) baseline
    assert got[2, 1] > got[0, 1]


def test_reinforce_plus_plus_kl_in_reward_needs_both_logprobs():
    est = ReinforcePlusPlusAdvantageEstimator({"name": "reinforce_plus_plus"}, RPP_KL)
    with pytest.raises(ValueError, match="needs logprobs_policy and logprobs_reference"):
        est.compute_advantage(RPP_PROMPTS, RPP_REWARDS, RPP_MASK, logprobs_policy=RPP_PREV)
    # β = 0: there is no KL to add, so nothing is needed
    est = ReinforcePlusPlusAdvantageEstimator(
        {"name": "reinforce_plus_plus"}, {**RPP_KL, "reference_policy_kl_penalty": 0.0}
    )
    est.compute_advantage(RPP_PROMPTS, RPP_REWARDS, RPP_MASK)


def test_reinforce_plus_plus_all_zero_mask_is_nan():
    a = reinforce_plus_plus_advantages(torch.zeros(2, 1), torch.tensor([1.0, 0.0]), torch.zeros(2, 3))
    assert torch.isnan(a).all()


def test_opd_advantages_and_metrics():
    teacher = torch.tensor([[-1.0, -0.5], [-2.0, -1.0]])
    prev = torch.tensor([[-1.5, -0.5], [-1.0, -3.0]])
    mask = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    a, m = on_policy_distillation_advantages(teacher, prev, mask)
    torch.testing.assert_close(a, torch.tensor([[0.5, 0.0], [0.0, 2.0]]))
    assert m["on_policy_distillation/teacher_student_logprob_gap_mean"] == pytest.approx(2.5 / 3)
    assert m["on_policy_distillation/adv_std"] == pytest.approx(torch.tensor([0.5, 0.0, 2.0]).std().item())


def test_unknown_estimator_and_config_keys_fail_with_dotted_paths():
    with pytest.raises(ValueError, match=r"grpo\.adv_estimator\.name.*did you mean 'grpo'"):
        make_advantage_estimator({"name": "gpro"})
    with pytest.raises(ValueError, match=r"grpo\.adv_estimator\.normalise_rewards: unknown key; did you mean 'normalize_rewards'"):
        make_advantage_estimator({"normalise_rewards": False})


def test_bad_tensors_name_the_argument():
    est = GRPOAdvantageEstimator()
    with pytest.raises(ValueError, match="batch sizes disagree"):
        est.compute_advantage(torch.zeros(3, 1), torch.zeros(2), torch.ones(2, 4))
    with pytest.raises(ValueError, match="rewards must be a floating-point"):
        est.compute_advantage(torch.zeros(2, 1), torch.tensor([1, 0]), torch.ones(2, 4))
    with pytest.raises(ValueError, match=r"mask must contain only 0 and 1, got 0\.5"):
        est.compute_advantage(torch.zeros(2, 1), torch.zeros(2), torch.full((2, 4), 0.5))


@pytest.mark.parametrize("name", ["grpo", "gdpo", "reinforce_plus_plus", "opd"])
def test_non_finite_rewards_raise_for_every_estimator(name):
    est = make_advantage_estimator({"name": name})
    batch = {"reward/a": torch.ones(2), "reward/b": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"rewards must be finite, got 1 NaN/inf"):
        est.compute_advantage(torch.zeros(2, 1), torch.tensor([1.0, float("nan")]), torch.ones(2, 3),
                              repeated_batch=batch, teacher_logprobs=torch.zeros(2, 3),
                              prev_logprobs=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="rewards must be finite"):
        grpo_advantages(torch.zeros(2, 1), torch.tensor([float("inf"), 0.0]))


def test_gdpo_components_must_be_finite():
    with pytest.raises(ValueError, match=r"reward_components\['reward/b'\] must be finite"):
        gdpo_advantages(torch.zeros(2, 1), {"reward/a": torch.ones(2), "reward/b": torch.tensor([0.0, float("nan")])})
