"""Reward scaling and DAPO / stop-properly reward shaping: loop references and hand numbers."""

import warnings

import pytest
import torch

from rlnb.algorithms.rewards import (
    RewardScalingConfig,
    RewardShapingConfig,
    dapo_overlong_penalty,
    scale_batch_rewards,
    scale_rewards,
    shape_rewards,
)
from rlnb.config import parse_config

DAPO = {"overlong_buffer_length": 4, "overlong_buffer_penalty": 1.0, "max_response_length": 16}


# --- slow references, written straight from the formulas


def ref_scale(rewards, s_min, s_max, t_min, t_max):
    out = []
    for r in rewards.tolist():
        c = min(max(r, s_min), s_max)
        out.append(t_min + (c - s_min) / (s_max - s_min) * (t_max - t_min))
    return torch.tensor(out, dtype=torch.float32)


def ref_dapo(rewards, lengths, buf, pen, max_len):
    # As NeMo-RL: a Python-float penalty added to each float32 reward element.
    out = torch.zeros_like(rewards)
    for i, length in enumerate(lengths.tolist()):
        exceed = length - (max_len - buf)
        out[i] = rewards[i] + min(-exceed / buf * pen, 0)
    return out


# --- scaling


def test_scale_rewards_maps_source_range_onto_target_range():
    r = torch.tensor([0.0, 0.5, 1.0])
    out = scale_rewards(r, source_min=0.0, source_max=1.0, target_min=-1.0, target_max=1.0)
    torch.testing.assert_close(out, torch.tensor([-1.0, 0.0, 1.0]))


def test_scale_rewards_clamps_and_warns_out_of_range():
    r = torch.tensor([-0.5, 0.25, 2.0])
    with pytest.warns(UserWarning, match="2 of 3 rewards"):
        out = scale_rewards(r, source_min=0.0, source_max=1.0, target_min=0.0, target_max=10.0)
    torch.testing.assert_close(out, torch.tensor([0.0, 2.5, 10.0]))


def test_scale_rewards_in_range_does_not_warn():
    # The range is closed: its two ends map onto the target ends without a warning, and one
    # float32 step past either end warns (so a scale_rewards that never warns fails here too).
    kw = dict(source_min=-0.5, source_max=1.0, target_min=0.0, target_max=3.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = scale_rewards(torch.tensor([-0.5, 0.25, 1.0]), **kw)
    assert caught == []
    assert out.tolist() == [0.0, 1.5, 3.0]
    for past in (torch.nextafter(torch.tensor(1.0), torch.tensor(2.0)),
                 torch.nextafter(torch.tensor(-0.5), torch.tensor(-1.0))):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            scale_rewards(past.reshape(1), **kw)
        assert len(caught) == 1 and "1 of 1 rewards" in str(caught[0].message)


@pytest.mark.parametrize("seed", range(5))
def test_scale_rewards_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(37, generator=g) * 2
    s_min, s_max, t_min, t_max = -1.0, 1.5, 3.0, -2.0  # inverted target range is allowed
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = scale_rewards(
            r, source_min=s_min, source_max=s_max, target_min=t_min, target_max=t_max
        )
    torch.testing.assert_close(out, ref_scale(r, s_min, s_max, t_min, t_max))


def test_scale_rewards_returns_new_tensor():
    r = torch.tensor([0.2, 0.8])
    before = r.clone()
    out = scale_rewards(r, target_min=0.0, target_max=2.0)
    out[0] = 99.0
    assert torch.equal(r, before)


def test_scale_batch_rewards_touches_total_and_components_only():
    batch = {
        "total_reward": torch.tensor([0.0, 1.0]),
        "reward/correct": torch.tensor([1.0, 0.0]),
        "response_lengths": torch.tensor([3.0, 4.0]),
    }
    out = scale_batch_rewards(batch, target_min=-1.0, target_max=1.0)
    torch.testing.assert_close(out["total_reward"], torch.tensor([-1.0, 1.0]))
    torch.testing.assert_close(out["reward/correct"], torch.tensor([1.0, -1.0]))
    assert out["response_lengths"] is batch["response_lengths"]
    torch.testing.assert_close(batch["total_reward"], torch.tensor([0.0, 1.0]))


def test_scale_rewards_bad_input():
    with pytest.raises(ValueError, match="source_max"):
        scale_rewards(torch.tensor([0.5]), source_min=1.0, source_max=1.0)
    with pytest.raises(ValueError, match="rewards"):
        scale_rewards(torch.zeros(2, 2))
    with pytest.raises(ValueError, match="rewards must be a floating-point"):
        scale_rewards(torch.tensor([0, 1]))


# --- shaping: DAPO


def test_dapo_penalty_is_unbounded_verified_example():
    # NeMo-RL: ℓ=20, max=16, buf=4, pen=1 → −2 (DAPO's paper would cap it at −1).
    out = shape_rewards(torch.tensor([0.0]), response_lengths=torch.tensor([20]), **DAPO)
    torch.testing.assert_close(out, torch.tensor([-2.0]))


def test_dapo_penalty_ramp():
    lengths = torch.tensor([5, 12, 13, 14, 16, 24])  # L_exp = 12
    out = shape_rewards(torch.ones(6), response_lengths=lengths, **DAPO)
    torch.testing.assert_close(out, torch.tensor([1.0, 1.0, 0.75, 0.5, 0.0, -2.0]))
    pen = dapo_overlong_penalty(lengths, **DAPO)
    assert pen.dtype == torch.float64 and bool((pen <= 0).all())


@pytest.mark.parametrize("seed", range(5))
def test_dapo_matches_loop(seed):
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(41, generator=g)
    lengths = torch.randint(0, 60, (41,), generator=g)
    buf, pen, max_len = 7, 0.3, 40
    out = shape_rewards(
        r,
        response_lengths=lengths,
        overlong_buffer_length=buf,
        overlong_buffer_penalty=pen,
        max_response_length=max_len,
    )
    assert torch.equal(out, ref_dapo(r, lengths, buf, pen, max_len))


def test_dapo_zero_penalty_is_identity():
    r = torch.tensor([0.3, 0.7])
    out = shape_rewards(
        r,
        response_lengths=torch.tensor([100, 1]),
        overlong_buffer_length=4,
        overlong_buffer_penalty=0.0,
        max_response_length=16,
    )
    assert torch.equal(out, r)


def test_shape_rewards_does_not_edit_inputs():
    r = torch.tensor([1.0, 1.0])
    out = shape_rewards(r, response_lengths=torch.tensor([20, 1]), **DAPO)
    assert torch.equal(r, torch.tensor([1.0, 1.0])) and out[0].item() == -1.0
    tr = torch.tensor([True, False])
    out = shape_rewards(r, truncated=tr, stop_properly_penalty_coef=0.0)
    assert torch.equal(r, torch.tensor([1.0, 1.0])) and out.tolist() == [0.0, 1.0]


def test_dapo_missing_parameters_named():
    with pytest.raises(ValueError, match="missing: overlong_buffer_penalty, max_response_length"):
        shape_rewards(torch.ones(1), response_lengths=torch.ones(1), overlong_buffer_length=4)
    with pytest.raises(ValueError, match="missing: overlong_buffer_length"):
        shape_rewards(
            torch.ones(1),
            response_lengths=torch.ones(1),
            overlong_buffer_penalty=1.0,
            max_response_length=8,
        )


def test_dapo_bad_values():
    with pytest.raises(ValueError, match="overlong_buffer_penalty must be >= 0"):
        shape_rewards(
            torch.ones(1),
            response_lengths=torch.ones(1),
            overlong_buffer_length=4,
            overlong_buffer_penalty=-1.0,
            max_response_length=16,
        )
    with pytest.raises(ValueError, match="overlong_buffer_length must be > 0"):
        shape_rewards(
            torch.ones(1),
            response_lengths=torch.ones(1),
            overlong_buffer_length=0,
            overlong_buffer_penalty=1.0,
            max_response_length=16,
        )
    with pytest.raises(ValueError, match="response_lengths"):
        shape_rewards(torch.ones(2), **DAPO)
    with pytest.raises(ValueError, match="batch sizes disagree"):
        shape_rewards(torch.ones(2), response_lengths=torch.ones(3), **DAPO)
    with pytest.raises(ValueError, match="response_lengths must be 1-D"):
        shape_rewards(torch.ones(2), response_lengths=torch.ones(2, 1), **DAPO)


# --- shaping: stop-properly multiplier


def test_stop_properly_scales_truncated_rows():
    r = torch.tensor([1.0, 1.0, 0.4, -0.6])
    tr = torch.tensor([1, 0, 1, 1])
    out = shape_rewards(r, truncated=tr, stop_properly_penalty_coef=0.5)
    torch.testing.assert_close(out, torch.tensor([0.5, 1.0, 0.2, -0.3]))
    assert torch.equal(shape_rewards(r, truncated=tr, stop_properly_penalty_coef=1.0), r)


def test_stop_properly_ignores_dapo_with_warning():
    r = torch.tensor([1.0, 1.0])
    with pytest.warns(UserWarning, match="overlong_buffer_length, overlong_buffer_penalty"):
        out = shape_rewards(
            r,
            truncated=torch.tensor([False, True]),
            response_lengths=torch.tensor([100, 100]),
            stop_properly_penalty_coef=0.25,
            **DAPO,
        )
    torch.testing.assert_close(out, torch.tensor([1.0, 0.25]))


@pytest.mark.parametrize("coef", [-0.1, 1.5])
def test_stop_properly_coef_out_of_range(coef):
    with pytest.raises(ValueError, match="stop_properly_penalty_coef must be in"):
        shape_rewards(torch.ones(1), truncated=torch.ones(1), stop_properly_penalty_coef=coef)


def test_stop_properly_bad_truncated():
    with pytest.raises(ValueError, match="truncated"):
        shape_rewards(torch.ones(2), stop_properly_penalty_coef=0.5)
    with pytest.raises(ValueError, match="truncated must contain only 0 and 1"):
        shape_rewards(torch.ones(2), truncated=torch.tensor([0, 2]), stop_properly_penalty_coef=0.5)
    with pytest.raises(ValueError, match="batch sizes disagree"):
        shape_rewards(torch.ones(2), truncated=torch.ones(3), stop_properly_penalty_coef=0.5)


# --- configs


def test_config_defaults_match_nemo_rl():
    s = RewardScalingConfig()
    assert (s.enabled, s.source_min, s.source_max, s.target_min, s.target_max) == (
        False,
        0.0,
        1.0,
        0.0,
        1.0,
    )
    sh = RewardShapingConfig()
    assert not sh.enabled
    assert sh.overlong_buffer_length is None and sh.overlong_buffer_penalty is None
    assert sh.max_response_length is None and sh.stop_properly_penalty_coef is None


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match=r"grpo\.reward_scaling\.sourc_max: unknown key"):
        parse_config(RewardScalingConfig, {"sourc_max": 2.0}, "grpo.reward_scaling")
    with pytest.raises(ValueError, match="source_max"):
        parse_config(RewardScalingConfig, {"source_min": 1.0, "source_max": 0.0}, "r")
    with pytest.raises(ValueError, match=r"reward_shaping\.stop_properly_penalty_coef"):
        parse_config(RewardShapingConfig, {"stop_properly_penalty_coef": 1.5}, "reward_shaping")
    with pytest.raises(ValueError, match=r"reward_shaping\.overlong_buffer_penalty"):
        parse_config(RewardShapingConfig, {"overlong_buffer_penalty": -1}, "reward_shaping")
    with pytest.raises(ValueError, match="missing: max_response_length"):
        parse_config(
            RewardShapingConfig,
            {"enabled": True, "overlong_buffer_length": 4, "overlong_buffer_penalty": 1.0},
            "reward_shaping",
        )
    # κ alone is a complete enabled config; a disabled config takes no parameter (it would be
    # ignored), and κ beside the DAPO parameters would ignore them
    parse_config(RewardShapingConfig, {"enabled": True, "stop_properly_penalty_coef": 0.0})
    with pytest.raises(ValueError, match="overlong_buffer_length set but enabled is false"):
        parse_config(RewardShapingConfig, {"enabled": False, "overlong_buffer_length": 4})
    with pytest.raises(ValueError, match="overlong_buffer_length would be ignored"):
        parse_config(RewardShapingConfig, {"enabled": True, "stop_properly_penalty_coef": 0.5,
                                           "overlong_buffer_length": 4})
    with pytest.raises(ValueError, match="target_max set but enabled is false"):
        parse_config(RewardScalingConfig, {"target_max": 2.0})
