"""Async GRPO replay buffer (NeMo-RL's async GRPO): capacity, targets, sampling with stalls/eviction, restore."""

import random

import pytest
import torch

from rlnb.algorithms.replay_buffer import (
    AsyncGRPOConfig,
    ReplayBuffer,
    candidate_targets,
    concatenate_groups,
    is_valid_for,
    replay_buffer_capacity,
)
from rlnb.config import parse_config


def fill(buf, items):
    """items: (name, v, t) triples."""
    for name, v, t in items:
        assert buf.add(name, weight_version=v, target_weight_version=t) == "success"


# --- slow reference, written straight from the description (parallel lists, like the description)


class RefBuffer:
    def __init__(self, max_size):
        self.max_size, self.g, self.v, self.t, self.wm = max_size, [], [], [], -1

    def add(self, g, v, t):
        if len(self.g) >= self.max_size:
            return "full"
        self.g.append(g), self.v.append(v), self.t.append(t)
        return "success"

    def sample(self, n, c, a):
        v_min = max(0, c - a)
        i = 0
        while i < len(self.g):  # evict v < v_min
            if self.v[i] < v_min:
                del self.g[i], self.v[i], self.t[i]
            else:
                i += 1
        valid = [i for i in range(len(self.g)) if v_min <= self.v[i] <= c]
        if len(valid) == 0 or len(valid) < n:
            return None
        intended = [i for i in valid if self.t[i] == c]
        if len(intended) < n:
            return None
        take = intended[:n]
        out = ([self.g[i] for i in take], c - sum(self.v[i] for i in take) / n)
        for i in reversed(take):
            del self.g[i], self.v[i], self.t[i]
        self.wm = max(self.wm, c)
        return out

    def needed(self, t, P, a):
        have = 0
        for v, tt in zip(self.v, self.t, strict=True):
            if tt == t and max(0, t - a) <= v <= t:
                have += 1
        return max(0, P - have)

    def next_target(self, v, v0, a, P, busy):
        targets = list(range(v0, v0 + a + 1)) if v == v0 else list(range(v + 1, v + a + 1))
        for t in targets:
            if t > self.wm and t not in busy and self.needed(t, P, a) > 0:
                return t
        return None


@pytest.mark.parametrize("seed", range(20))
def test_matches_reference_on_random_operations(seed):
    rng = random.Random(seed)
    P, a = rng.randint(1, 3), rng.randint(1, 3)
    size = replay_buffer_capacity(num_prompts_per_step=P, max_trajectory_age_steps=a)
    buf, ref = ReplayBuffer(size), RefBuffer(size)
    step, counter = 0, 0
    for _ in range(200):
        op = rng.random()
        if op < 0.6:
            v = max(0, step - rng.randint(0, a + 1))
            t = v + rng.randint(0, a)
            counter += 1
            got = buf.add(counter, weight_version=v, target_weight_version=t)
            assert got == ref.add(counter, v, t)
        elif op < 0.8:
            v = rng.randint(0, step + 1)
            busy = set(rng.sample(range(step + a + 2), 2))
            got = buf.next_target(
                v,
                initial_weight_version=0,
                max_trajectory_age_steps=a,
                num_prompts_per_step=P,
                generating=busy,
            )
            assert got == ref.next_target(v, 0, a, P, busy)
        else:
            got = buf.sample(P, current_weight_version=step, max_age_steps=a)
            want = ref.sample(P, step, a)
            assert (got is None) == (want is None)
            if got is not None:
                assert got.groups == want[0]
                assert got.avg_trajectory_age == pytest.approx(want[1])
                step += 1
        assert [e.group for e in buf.entries] == ref.g
        assert buf.last_target_weight_already_generated == ref.wm
        assert len(buf) <= size


# --- capacity and add


def test_capacity_and_full():
    assert replay_buffer_capacity(num_prompts_per_step=4, max_trajectory_age_steps=3) == 24
    buf = ReplayBuffer(2)
    fill(buf, [("a", 0, 0), ("b", 0, 1)])
    assert buf.add("c", weight_version=0, target_weight_version=1) == "full"
    assert [e.group for e in buf.entries] == ["a", "b"]
    assert buf.last_target_weight_already_generated == -1  # add never moves the watermark
    with pytest.raises(ValueError, match="max_size must be > 0"):
        ReplayBuffer(0)


# --- targets


def test_candidate_targets_v0_rule():
    assert candidate_targets(0, initial_weight_version=0, max_trajectory_age_steps=2) == [0, 1, 2]
    assert candidate_targets(3, initial_weight_version=0, max_trajectory_age_steps=2) == [4, 5]
    assert candidate_targets(7, initial_weight_version=7, max_trajectory_age_steps=1) == [7, 8]


def test_is_valid_for_age_window():
    assert is_valid_for(3, 5, max_age_steps=2) and is_valid_for(5, 5, max_age_steps=2)
    assert not is_valid_for(2, 5, max_age_steps=2)
    assert not is_valid_for(6, 5, max_age_steps=2)  # made by newer weights than the target
    assert is_valid_for(0, 1, max_age_steps=5)  # v_min floors at 0


def test_next_target_skips_watermark_busy_and_complete_targets():
    buf = ReplayBuffer(100)
    kw = {"initial_weight_version": 0, "max_trajectory_age_steps": 2, "num_prompts_per_step": 2}
    assert buf.next_target(0, **kw) == 0
    assert buf.next_target(0, generating={0}, **kw) == 1
    fill(buf, [("a", 0, 1), ("b", 0, 1)])  # target 1 complete
    assert buf.next_target(0, generating={0}, **kw) == 2
    assert buf.trajectories_needed(1, num_prompts_per_step=2, max_age_steps=2) == 0
    buf.last_target_weight_already_generated = 2
    assert buf.next_target(0, **kw) is None
    assert buf.next_target(2, **kw) == 3


def test_needed_counts_only_entries_valid_for_the_target():
    buf = ReplayBuffer(100)
    fill(buf, [("old", 0, 3), ("ok", 2, 3)])  # v=0 is too old for t=3 with a=1
    assert buf.trajectories_needed(3, num_prompts_per_step=2, max_age_steps=1) == 1
    assert buf.trajectories_needed(3, num_prompts_per_step=2, max_age_steps=3) == 0


# --- sample


def test_sample_fifo_age_and_watermark():
    buf = ReplayBuffer(100)
    fill(buf, [("x", 1, 2), ("a", 1, 2), ("b", 2, 2), ("c", 2, 3), ("d", 2, 2)])
    out = buf.sample(2, current_weight_version=2, max_age_steps=1)
    assert out.groups == ["x", "a"] and out.weight_versions == [1, 1]
    assert out.avg_trajectory_age == 1.0
    assert [e.group for e in buf.entries] == ["b", "c", "d"]
    assert buf.last_target_weight_already_generated == 2
    out = buf.sample(2, current_weight_version=2, max_age_steps=1)
    assert out.groups == ["b", "d"] and out.avg_trajectory_age == 0.0
    buf.last_target_weight_already_generated = 9
    fill(buf, [("e", 3, 3)])
    assert buf.sample(2, current_weight_version=3, max_age_steps=1).groups == ["c", "e"]
    assert buf.last_target_weight_already_generated == 9  # max(old, c)


def test_sample_stalls_instead_of_borrowing_other_targets():
    buf = ReplayBuffer(100)
    fill(buf, [("a", 2, 2), ("b", 2, 3), ("c", 1, 3)])
    # 3 entries valid for c=2 (v ∈ [1, 2]) but only one is meant for step 2 -> stall.
    assert buf.sample(2, current_weight_version=2, max_age_steps=1) is None
    assert len(buf) == 3 and buf.last_target_weight_already_generated == -1


def test_sample_stalls_with_too_few_valid_and_evicts_anyway():
    buf = ReplayBuffer(100)
    fill(buf, [("stale", 0, 1), ("future", 4, 4), ("a", 2, 3)])
    assert buf.sample(2, current_weight_version=3, max_age_steps=1) is None
    # v=0 < v_min=2 evicted even though the call stalled; v=4 > c is kept (not valid yet).
    assert [e.group for e in buf.entries] == ["future", "a"]
    assert ReplayBuffer(3).sample(1, current_weight_version=0, max_age_steps=1) is None
    with pytest.raises(ValueError, match="num_prompt_groups must be >= 1"):
        buf.sample(0, current_weight_version=3, max_age_steps=1)


def test_sample_window_takes_any_target_in_the_weight_window():
    """NeMo-RL's windowed sampler: step c takes the first n groups made by weights c − a … c,
    whatever step they were generated for; older ones are evicted, newer ones wait."""
    buf = ReplayBuffer(100)
    fill(buf, [("old", 0, 0), ("a", 1, 1), ("b", 2, 5), ("c", 1, 2), ("d", 2, 2), ("e", 3, 3)])
    out = buf.sample_window(2, current_weight_version=2, max_age_steps=1)
    assert out.groups == ["a", "b"] and out.weight_versions == [1, 2]  # b's target is 5
    assert out.avg_trajectory_age == 0.5
    assert [e.group for e in buf.entries] == ["c", "d", "e"]  # "old" (v 0 < 2 − 1) evicted
    assert buf.last_target_weight_already_generated == -1  # the watermark is in_order's
    # freshest first: the smallest lag c − v, ties in insertion order
    out = buf.sample_window(2, current_weight_version=2, max_age_steps=1, freshest_first=True)
    assert out.groups == ["d", "c"] and out.avg_trajectory_age == 0.5
    assert buf.sample_window(2, current_weight_version=3, max_age_steps=1) is None  # only "e"
    assert [e.group for e in buf.entries] == ["e"]
    with pytest.raises(ValueError, match="num_prompt_groups must be >= 1"):
        buf.sample_window(0, current_weight_version=3, max_age_steps=1)


def test_restore_window_keeps_what_a_later_step_may_take():
    src = ReplayBuffer(100)
    fill(src, [("too old", 2, 3), ("a", 3, 1), ("b", 4, 9), ("c", 5, 6)])
    buf = ReplayBuffer(100)
    buf.restore(src.state_dict(), resume_step=5, num_prompts_per_step=2, max_age_steps=2,
                window=True)
    assert [e.group for e in buf.entries] == ["a", "b", "c"]  # v >= 5 − 2; targets ignored
    buf = ReplayBuffer(2)  # over capacity: the newest stay
    buf.restore(src.state_dict(), resume_step=5, num_prompts_per_step=2, max_age_steps=2,
                window=True)
    assert [e.group for e in buf.entries] == ["b", "c"]


# --- restore


def test_restore_rules_in_order():
    src = ReplayBuffer(100)
    fill(
        src,
        [
            ("past", 3, 4),  # target < resume step 5 -> dropped
            ("stale", 2, 5),  # too old for its target 5 (a = 2) -> dropped
            ("t5a", 4, 5),
            ("t5b", 5, 5),
            ("t6a", 5, 6),  # target 6 incomplete (1 < P = 2)
            ("t7a", 5, 7),
            ("t7b", 6, 7),
        ],
    )
    src.last_target_weight_already_generated = 4
    state = src.state_dict()
    kw = {"resume_step": 5, "num_prompts_per_step": 2, "max_age_steps": 2}

    buf = ReplayBuffer(100)
    buf.restore(state, **kw)
    assert [e.group for e in buf.entries] == ["t5a", "t5b", "t6a", "t7a", "t7b"]
    assert buf.last_target_weight_already_generated == 4  # = resume step - 1

    buf = ReplayBuffer(100)
    buf.restore(state, drop_incomplete_targets=True, **kw)
    assert [e.group for e in buf.entries] == ["t5a", "t5b", "t7a", "t7b"]

    buf = ReplayBuffer(3)  # truncation keeps the lowest targets, in their order
    buf.restore(state, **kw)
    assert [e.group for e in buf.entries] == ["t5a", "t5b", "t6a"]
    # The collector is then asked to gap-fill target 6 only.
    nxt = {"initial_weight_version": 0, "max_trajectory_age_steps": 2, "num_prompts_per_step": 2}
    assert buf.next_target(4, **nxt) == 6


def test_restore_age_rule_runs_before_completeness():
    src = ReplayBuffer(10)
    fill(src, [("stale", 1, 5), ("ok", 4, 5)])  # complete before the age rule, not after
    buf = ReplayBuffer(10)
    buf.restore(
        src.state_dict(),
        resume_step=5,
        num_prompts_per_step=2,
        max_age_steps=1,
        drop_incomplete_targets=True,
    )
    assert len(buf) == 0 and buf.last_target_weight_already_generated == 4


def test_restore_bad_state():
    buf = ReplayBuffer(10)
    kw = {"resume_step": 0, "num_prompts_per_step": 1, "max_age_steps": 1}
    with pytest.raises(ValueError, match="missing target_weight_versions"):
        buf.restore({"groups": [], "weight_versions": []}, **kw)
    with pytest.raises(ValueError, match="different lengths"):
        buf.restore({"groups": [1], "weight_versions": [], "target_weight_versions": [0]}, **kw)


# --- concatenation and config


def test_concatenate_groups():
    g = [{"x": torch.full((2, 3), float(i)), "r": torch.tensor([i, i])} for i in range(3)]
    out = concatenate_groups(g, expected_rows=6)
    assert out["x"].shape == (6, 3) and out["r"].tolist() == [0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="expected 8"):
        concatenate_groups(g, expected_rows=8)
    with pytest.raises(ValueError, match=r"groups\[1\] has keys"):
        concatenate_groups([g[0], {"x": g[1]["x"]}], expected_rows=4)
    with pytest.raises(ValueError, match="must not be empty"):
        concatenate_groups([], expected_rows=0)


def test_async_grpo_config():
    c = AsyncGRPOConfig()
    assert (c.enabled, c.max_trajectory_age_steps, c.max_generation_failures) == (False, 1, 0)
    assert not c.in_flight_weight_updates and not c.recompute_kv_cache_after_weight_updates
    with pytest.raises(ValueError, match=r"grpo\.async_grpo\.max_trajectory_age_steps"):
        parse_config(AsyncGRPOConfig, {"max_trajectory_age_steps": 0}, "grpo.async_grpo")
    with pytest.raises(ValueError, match=r"grpo\.async_grpo\.max_age: unknown key"):
        parse_config(AsyncGRPOConfig, {"max_age": 2}, "grpo.async_grpo")
