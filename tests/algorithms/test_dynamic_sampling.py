"""DAPO dynamic sampling: std≠0 filter, cache across generation batches, slicing."""

import pytest
import torch

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.dynamic_sampling import (
    DynamicSamplingState,
    dynamic_sampling,
    select_nonzero_std,
)


def make_batch(rewards_per_group, first_prompt=0, T=3):
    """A generation batch: one group per inner list; rows carry their prompt id and row id."""
    rewards = torch.tensor([r for grp in rewards_per_group for r in grp], dtype=torch.float32)
    prompt = torch.tensor(
        [first_prompt + p for p, grp in enumerate(rewards_per_group) for _ in grp]
    )
    B = rewards.shape[0]
    return {
        "prompt_ids": prompt.unsqueeze(-1),  # [B, 1]
        "input_ids": torch.arange(B * T).reshape(B, T) + 1000 * first_prompt,  # [B, T]
        "total_reward": rewards,
    }


def stats(batch, loo):
    baseline, std = calculate_baseline_and_std_per_prompt(
        batch["prompt_ids"], batch["total_reward"], leave_one_out=loo
    )
    return {"std": std, "baseline": baseline}


# --- slow reference, written straight from the formulas (Python lists, one row at a time)


def ref_dynamic_sampling(batches, loo, train_size, max_gen_batches):
    cache = None
    for k, batch in enumerate(batches, start=1):
        st = stats(batch, loo)
        B = batch["total_reward"].shape[0]
        keep = [i for i in range(B) if st["std"][i].item() != 0.0]
        filtered = {key: [v[i] for i in keep] for key, v in batch.items() if key != "total_reward"}
        filtered["std"] = [st["std"][i] for i in keep]
        filtered["baseline"] = [st["baseline"][i] for i in keep]
        filtered["filtered_reward"] = [batch["total_reward"][i] for i in keep]
        filtered["total_reward"] = list(batch["total_reward"])
        if keep:
            cache = (
                filtered if cache is None else {key: cache[key] + filtered[key] for key in cache}
            )
        size = 0 if cache is None else len(cache["std"])
        if size < train_size:
            if k <= max_gen_batches:
                continue
            return ("error", k, None, None)
        train = {key: torch.stack(v[:train_size]) for key, v in cache.items()}
        return ("done", k, train, size - train_size)
    return ("incomplete", len(batches), None, None)


def run(batches, loo, train_size, max_gen_batches):
    state = DynamicSamplingState()
    for batch in batches:
        try:
            res = dynamic_sampling(
                batch,
                **stats(batch, loo),
                state=state,
                train_size=train_size,
                max_gen_batches=max_gen_batches,
            )
        except ValueError:
            return ("error", state.num_gen_batches + 1, None, None)
        if res.is_complete:
            m = res.metrics
            return (
                "done",
                m["dynamic_sampling_num_gen_batches"],
                res.batch,
                m["dynamic_sampling_num_discarded_valid_samples"],
            )
        state = res.state
    return ("incomplete", state.num_gen_batches, None, None)


@pytest.mark.parametrize("seed", range(25))
def test_matches_reference_on_random_generation_batches(seed):
    g = torch.Generator().manual_seed(seed)
    loo = bool(seed % 2)
    G = int(torch.randint(2, 6, (1,), generator=g))
    batches = []
    for n in range(6):
        P = int(torch.randint(1, 5, (1,), generator=g))
        # Mostly-solved prompts (many all-equal groups), rewards in {0, 0.5, 1}.
        groups = [
            (torch.randint(0, 3, (G,), generator=g) / 2).tolist()
            if torch.rand(1, generator=g) < 0.5
            else [1.0] * G
            for _ in range(P)
        ]
        batches.append(make_batch(groups, first_prompt=10 * n))
    train_size = int(torch.randint(1, 3 * G, (1,), generator=g))
    want = ref_dynamic_sampling(batches, loo, train_size, max_gen_batches=4)
    got = run(batches, loo, train_size, max_gen_batches=4)
    assert got[0] == want[0] and got[1] == want[1]
    if want[0] == "done":
        assert got[3] == want[3]
        assert set(got[2]) == set(want[2])
        for key in want[2]:
            assert torch.equal(got[2][key], want[2][key]), key


# --- NeMo-RL's examples


def test_loo_keeps_partial_group():
    # NeMo-RL: with loo, group [1, 0, 0] drops the 1 (its two others are equal).
    batch = make_batch([[1.0, 0.0, 0.0]])
    kept = select_nonzero_std(batch, **stats(batch, loo=True))
    assert kept["filtered_reward"].tolist() == [0.0, 0.0]
    assert kept["input_ids"].tolist() == batch["input_ids"][1:].tolist()
    torch.testing.assert_close(kept["baseline"], torch.tensor([0.5, 0.5]))
    torch.testing.assert_close(kept["std"], torch.tensor([0.70711, 0.70711]), rtol=0, atol=1e-5)
    # Without loo the std is the group's: the whole group stays.
    kept = select_nonzero_std(batch, **stats(batch, loo=False))
    assert kept["filtered_reward"].tolist() == [1.0, 0.0, 0.0]


def test_loo_group_of_two_is_always_dropped():
    # NeMo-RL: loo with 2 members gives n = 1, NaN → std 0, so dynamic sampling
    # drops every such group even when the rewards differ.
    batch = make_batch([[0.0, 1.0], [1.0, 1.0]])
    kept = select_nonzero_std(batch, **stats(batch, loo=True))
    assert kept["filtered_reward"].numel() == 0
    kept = select_nonzero_std(batch, **stats(batch, loo=False))
    assert kept["filtered_reward"].tolist() == [0.0, 1.0]


def test_non_integer_pairs_and_equal_others_are_dropped_like_nemo_rl():
    # Sums of "the others" are NeMo-RL's mask products, not "group total minus own reward":
    # a loo pair of non-integer rewards and a member whose two others are equal get std exactly
    # 0, so they are dropped (the subtraction left a residue of ~1e-7 and kept them).
    batch = make_batch([[1.48885, 1.297439], [0.7, 0.1, 0.1], [1 / 3] * 3])
    kept = select_nonzero_std(batch, **stats(batch, loo=True))
    torch.testing.assert_close(kept["filtered_reward"], torch.tensor([0.1, 0.1]))


def test_equal_non_dyadic_rewards_are_kept_by_exact_inequality():
    # NeMo-RL quirk: 3 × (1/3) has one-pass std ≈ 1.06e-4, and `std != 0` is exact.
    batch = make_batch([[1 / 3] * 3, [1.0] * 3])
    kept = select_nonzero_std(batch, **stats(batch, loo=False))
    assert kept["filtered_reward"].shape == (3,)
    assert kept["total_reward"].shape == (6,)  # full unfiltered rewards


def test_filter_reads_the_given_std_exactly():
    batch = make_batch([[0.0, 1.0, 1.0]])
    std = torch.tensor([0.0, 1e-30, -0.0])
    kept = select_nonzero_std(batch, std=std, baseline=torch.zeros(3))
    assert kept["input_ids"].tolist() == batch["input_ids"][1:2].tolist()


# --- the cache across generation batches


def test_accumulates_then_slices_and_splits_a_group():
    b1 = make_batch([[1.0, 1.0, 1.0], [1.0, 0.0, 1.0]], first_prompt=0)  # keeps group 2
    b2 = make_batch([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]], first_prompt=10)  # keeps group 1
    r1 = dynamic_sampling(b1, **stats(b1, False), state=DynamicSamplingState(), train_size=5)
    assert not r1.is_complete and r1.batch is None
    assert r1.state.num_gen_batches == 1 and r1.state.num_cached == 3
    assert r1.metrics == {"dynamic_sampling_num_gen_batches": 1}
    r2 = dynamic_sampling(b2, **stats(b2, False), state=r1.state, train_size=5)
    assert r2.is_complete
    out = r2.batch
    assert {k: v.shape[0] for k, v in out.items()} == dict.fromkeys(out, 5)
    assert out["prompt_ids"].squeeze(-1).tolist() == [1, 1, 1, 10, 10]  # group 10 split
    assert out["filtered_reward"].tolist() == [1.0, 0.0, 1.0, 0.0, 1.0]
    # total_reward is the *unfiltered* rewards of both batches, concatenated, then sliced.
    assert out["total_reward"].tolist() == [1.0, 1.0, 1.0, 1.0, 0.0]
    assert r2.metrics["dynamic_sampling_num_gen_batches"] == 2
    assert r2.metrics["dynamic_sampling_num_discarded_valid_samples"] == 1
    assert r2.metrics["filtered_reward"] == pytest.approx(0.6)
    assert r2.metrics["reward"] == pytest.approx(0.8)  # NeMo quirk: mean of unfiltered rewards
    assert r2.state == DynamicSamplingState()  # next step starts empty


def test_batch_without_survivors_adds_nothing_not_even_total_reward():
    b1 = make_batch([[1.0, 0.0, 1.0]])
    b2 = make_batch([[0.0, 0.0, 0.0]], first_prompt=5)
    r1 = dynamic_sampling(b1, **stats(b1, False), state=DynamicSamplingState(), train_size=6)
    r2 = dynamic_sampling(b2, **stats(b2, False), state=r1.state, train_size=6)
    assert not r2.is_complete and r2.state.num_gen_batches == 2
    assert r2.state.cache["total_reward"].tolist() == [1.0, 0.0, 1.0]
    assert r2.state.num_cached == 3


def test_raises_after_max_gen_batches():
    b = make_batch([[1.0, 1.0]])
    state = DynamicSamplingState()
    for k in (1, 2):
        res = dynamic_sampling(b, **stats(b, False), state=state, train_size=2, max_gen_batches=2)
        assert not res.is_complete and res.state.num_gen_batches == k
        state = res.state
    with pytest.raises(ValueError, match="max_gen_batches=2"):
        dynamic_sampling(b, **stats(b, False), state=state, train_size=2, max_gen_batches=2)


def test_exact_fill_discards_nothing_and_inputs_untouched():
    b = make_batch([[1.0, 0.0], [0.0, 1.0]])
    before = {k: v.clone() for k, v in b.items()}
    res = dynamic_sampling(b, **stats(b, False), state=DynamicSamplingState(), train_size=4)
    assert res.metrics["dynamic_sampling_num_discarded_valid_samples"] == 0
    res.batch["total_reward"][0] = 42.0
    res.batch["input_ids"][0, 0] = -1
    for k in b:
        assert torch.equal(b[k], before[k]), k


def test_caller_std_key_is_replaced():
    b = make_batch([[1.0, 0.0]])
    b["std"] = torch.full((2,), 7.0)
    kept = select_nonzero_std(b, std=torch.tensor([0.5, 0.0]), baseline=torch.zeros(2))
    assert kept["std"].tolist() == [0.5]


# --- bad input


def test_bad_input_names_the_argument():
    b = make_batch([[1.0, 0.0]])
    st = stats(b, False)
    with pytest.raises(ValueError, match="total_reward"):
        select_nonzero_std({"input_ids": b["input_ids"]}, **st)
    with pytest.raises(ValueError, match="batch sizes disagree: std has 3"):
        select_nonzero_std(b, std=torch.ones(3), baseline=torch.ones(2))
    with pytest.raises(ValueError, match="baseline must be 1-D"):
        select_nonzero_std(b, std=torch.ones(2), baseline=torch.ones(2, 1))
    with pytest.raises(ValueError, match="train_size must be >= 1"):
        dynamic_sampling(b, **st, state=DynamicSamplingState(), train_size=0)
    with pytest.raises(ValueError, match="max_gen_batches must be >= 1"):
        dynamic_sampling(b, **st, state=DynamicSamplingState(), train_size=2, max_gen_batches=0)
    r1 = dynamic_sampling(b, **st, state=DynamicSamplingState(), train_size=8)
    longer = make_batch([[1.0, 0.0]], T=5)
    with pytest.raises(ValueError, match=r"batch\['input_ids'\] has shape \(2, 5\)"):
        dynamic_sampling(longer, **st, state=r1.state, train_size=8)
    fewer = {k: v for k, v in b.items() if k != "input_ids"}
    with pytest.raises(ValueError, match="same keys"):
        dynamic_sampling(fewer, **st, state=r1.state, train_size=8)
