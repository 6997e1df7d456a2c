"""NeMo-RL's Python idioms on rlnb.nemo: ``MasterConfig(**config)`` from a
NeMo-RL config's dict, ``RewardShapingConfig(**cfg["grpo"]["reward_shaping"])`` with NeMo-RL's
shipped section, fields assigned one after the other, GDPO/OPD with ``rewards=None``,
``GeneralizedAdvantageEstimator._resolve_lambda_policy`` and a replay buffer whose file loads
back what it saved."""

import collections
import copy
import warnings

import numpy as np
import pytest
import torch
from nemo_shaped_configs import grpo_shaped

import rlnb
from rlnb.algorithms import rewards as rlnb_rewards
from rlnb.nemo.advantage_estimator import (
    GDPOAdvantageEstimator,
    GeneralizedAdvantageEstimator,
    GRPOAdvantageEstimator,
    OPDAdvantageEstimator,
)
from rlnb.nemo.async_utils.replay_buffer import ReplayBufferImpl
from rlnb.nemo.batched_data_dict import BatchedDataDict
from rlnb.nemo.grpo import MasterConfig
from rlnb.nemo.loss import ClippedPGLossConfig, ClippedPGLossFn
from rlnb.nemo.reward_functions import RewardShapingConfig, apply_reward_shaping
from rlnb.run.config.nemo.reader import resolve_interpolations
from rlnb.run.config.nemo.translate import is_nemo_config, translate

# --------------------------------------------------------------------------------------------
# MasterConfig(**config)


def nemo_dict():
    """A resolved NeMo-RL GRPO config's dict, as run_grpo.py hands it to MasterConfig (the
    paths are not opened by the translation)."""
    return resolve_interpolations(grpo_shaped("/models/tiny", "/data/math.jsonl"))


def _drop(tree, dotted):
    *parents, leaf = dotted.split(".")
    for part in parents:
        tree = tree[part]
    del tree[leaf]


def _prune(tree):
    for key in list(tree):
        if isinstance(tree[key], dict):
            _prune(tree[key])
            if not tree[key]:
                del tree[key]


def test_master_config_from_a_nemo_dict_with_ignored_keys_is_one_line_naming_load_config():
    data = nemo_dict()
    assert is_nemo_config(data)
    with pytest.raises(ValueError) as info:
        MasterConfig(**data)
    msg = str(info.value)
    assert "\n" not in msg
    assert "rlnb.load_config(config, overrides, ignore_unsupported=True)" in msg
    ignored = translate(copy.deepcopy(data)).ignored
    assert f"ignores {len(ignored)} key(s) ({', '.join(list(ignored)[:3])}, ...)" in msg
    # load_config's flag is the way through: the same dict, translated without them
    config = rlnb.load_config(data, ignore_unsupported=True)
    assert (config.algorithm, config.grpo.num_prompts_per_step) == ("grpo", 2)


def test_master_config_from_a_nemo_dict_rlnb_fully_uses_translates_it():
    data = nemo_dict()
    while ignored := translate(copy.deepcopy(data)).ignored:  # (one ignored key can free another)
        for key in ignored:
            _drop(data, key)
        _prune(data)
    assert is_nemo_config(data)
    config = MasterConfig(**data)
    assert config.model_dump() == rlnb.load_config(data).model_dump()
    # NeMo-RL's meaning: its loop and loss numbers, no warm start, its model
    assert config.algorithm == "grpo"
    assert (config.grpo.num_prompts_per_step, config.grpo.num_generations_per_prompt) == (2, 4)
    assert config.loss_fn.reference_policy_kl_penalty == 0.01
    assert config.policy.model_name == "/models/tiny"
    assert config.sft.enabled is False
    data["loss_fn"]["ratio_clip_max"] = "wide"  # a bad value: load_config's one line for it
    with pytest.raises(ValueError) as info:
        MasterConfig(**data)
    assert str(info.value).splitlines()[1].startswith("  loss_fn.ratio_clip_max: ")
    assert "'wide'" in str(info.value) and type(info.value) is ValueError


def test_master_config_refuses_a_key_rlnb_cannot_run_in_one_line():
    data = nemo_dict()
    data["on_policy_distillation"] = {"enabled": True}  # no teacher models in rlnb's GRPO
    with pytest.raises(ValueError) as info:
        MasterConfig(**data)
    msg = str(info.value)
    assert "\n" not in msg and "rlnb.load_config(" in msg
    assert "refuses 1 key(s) (on_policy_distillation" in msg


def test_master_config_of_rlnb_sections_is_unchanged():
    config = MasterConfig(grpo={"num_prompts_per_step": 3})
    assert config.grpo.num_prompts_per_step == 3 and config.algorithm == "grpo"


# --------------------------------------------------------------------------------------------
# RewardShapingConfig(**cfg["grpo"]["reward_shaping"])


def test_reward_shaping_config_takes_nemo_rl_shipped_section():
    # grpo_math_1B.yaml: enabled false beside DAPO's parameters (max_response_length resolved)
    shipped = {"enabled": False, "overlong_buffer_length": 128, "overlong_buffer_penalty": 1,
               "max_response_length": 512, "stop_properly_penalty_coef": None}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = RewardShapingConfig(**shipped)
        RewardShapingConfig(**nemo_dict()["grpo"]["reward_shaping"])
    assert (cfg.overlong_buffer_length, cfg.max_response_length) == (128, 512)
    with pytest.raises(ValueError, match="set but enabled is false"):  # rlnb's own section
        rlnb_rewards.RewardShapingConfig(**shipped)
    rewards = torch.tensor([1.0, 0.5])
    batch = {"total_reward": rewards, "response_token_lengths": torch.tensor([600, 10])}
    assert apply_reward_shaping(batch, cfg)["total_reward"] is rewards  # disabled: untouched
    # turned on, the kept parameters act: 600 tokens, expected 512-128=384 -> -(216/128)·1
    cfg.enabled = True
    out = apply_reward_shaping(dict(batch), cfg)["total_reward"]
    assert out.tolist() == pytest.approx([1.0 - 216 / 128, 0.5])


def test_stop_properly_coefficient_beside_dapo_parameters_warns_and_wins():
    with pytest.warns(UserWarning, match="overlong_buffer_length, overlong_buffer_penalty, "
                                         "max_response_length are ignored"):
        cfg = RewardShapingConfig(enabled=True, stop_properly_penalty_coef=0.25,
                                  overlong_buffer_length=4, overlong_buffer_penalty=1.0,
                                  max_response_length=8)
    batch = {"total_reward": torch.tensor([1.0, 1.0]), "truncated": torch.tensor([True, False]),
             "response_token_lengths": torch.tensor([100, 100])}
    with pytest.warns(UserWarning):
        out = apply_reward_shaping(batch, cfg)["total_reward"]
    assert out.tolist() == [0.25, 1.0]  # κ·r for the truncated row, no overlong penalty
    with pytest.raises(ValueError, match="missing: max_response_length"):
        RewardShapingConfig(enabled=True, overlong_buffer_length=4, overlong_buffer_penalty=1.0)


# --------------------------------------------------------------------------------------------
# fields assigned one after the other


def test_two_assignments_consistent_only_together_succeed():
    cfg = RewardShapingConfig()
    cfg.enabled = True  # alone: enabled without parameters
    cfg.stop_properly_penalty_coef = 0.5
    cfg.check()
    loss = ClippedPGLossConfig()  # NeMo-RL's tests turn on TIS this way, one key at a time
    loss.truncated_importance_sampling_ratio = 2.0  # alone: a ratio without a type
    loss.truncated_importance_sampling_type = "tis"  # still without the IS correction
    loss.use_importance_sampling_correction = True
    assert ClippedPGLossFn(loss).config.truncated_importance_sampling_ratio == 2.0


def test_an_inconsistent_config_is_refused_when_used():
    loss = ClippedPGLossConfig()
    loss.truncated_importance_sampling_ratio = 2.0  # assignment: type-checked only
    with pytest.raises(ValueError, match="truncated_importance_sampling"):
        ClippedPGLossFn(loss)
    with pytest.raises(ValueError, match="ratio_clip_max"):
        loss.ratio_clip_max = "wide"  # a single field's type: refused at the assignment
    shaping = RewardShapingConfig()
    shaping.enabled = True
    with pytest.raises(ValueError, match=r"^invalid config:\n  grpo\.reward_shaping: enabled "
                                         "reward shaping needs"):
        shaping.check("grpo.reward_shaping")
    config = rlnb.load_config(None)
    config.grpo.reward_shaping.enabled = True  # nested and half-built: caught at use
    with pytest.raises(ValueError, match=r"grpo\.reward_shaping: enabled reward shaping needs"):
        rlnb.load_config(config)


# --------------------------------------------------------------------------------------------
# GDPO / OPD without rewards


def test_gdpo_and_opd_take_rewards_none_as_nemo_rl():
    prompt_ids = torch.tensor([[1], [1], [2], [2]])
    mask = torch.ones(4, 3)
    batch = {"reward/a": torch.tensor([1.0, 0.0, 1.0, 1.0]),
             "reward/b": torch.tensor([0.0, 0.0, 1.0, 0.0])}
    gdpo = GDPOAdvantageEstimator({"name": "gdpo"}, {})
    with_rewards = gdpo.compute_advantage(prompt_ids, torch.zeros(4), mask, batch)
    without = gdpo.compute_advantage(prompt_ids, None, mask, batch)
    assert torch.equal(with_rewards, without) and without.shape == (4, 3)
    assert without.abs().sum() > 0
    student, teacher = torch.zeros(2, 3), torch.full((2, 3), -0.5)
    opd = OPDAdvantageEstimator({"name": "opd"}, {})
    adv = opd.compute_advantage(torch.tensor([[1], [2]]), None, torch.ones(2, 3),
                                teacher_logprobs=teacher, prev_logprobs=student)
    assert adv.tolist() == [[-0.5] * 3] * 2
    with pytest.raises(ValueError, match="rewards: None, but GRPOAdvantageEstimator reads them"):
        GRPOAdvantageEstimator({}, {}).compute_advantage(prompt_ids, None, mask)


# --------------------------------------------------------------------------------------------
# _resolve_lambda_policy


def test_resolve_lambda_policy_by_hand():
    mask = torch.zeros(3, 12)
    mask[0, :2] = 1   # L=2:  α·L = 1   -> 1 - 1/1   = 0
    mask[1, :5] = 1   # L=5:  α·L = 2.5 -> 1 - 1/2.5 = 0.6
    mask[2, :10] = 1  # L=10: α·L = 5   -> 1 - 1/5   = 0.8
    adaptive = GeneralizedAdvantageEstimator(
        {"name": "gae", "gae_lambda": 0.95, "length_adaptive_alpha": 0.5}, {})
    lam = adaptive._resolve_lambda_policy(mask)
    assert lam.tolist() == pytest.approx([0.0, 0.6, 0.8])
    short = torch.zeros(1, 4)
    short[0, :1] = 1  # α·L = 0.5 is floored at 1: λ = 0, never negative
    assert adaptive._resolve_lambda_policy(short).tolist() == [0.0]
    decoupled = GeneralizedAdvantageEstimator(
        {"name": "gae", "gae_lambda": 0.95, "gae_lambda_policy": 0.7, "gae_lambda_value": 1.0},
        {})
    assert decoupled._resolve_lambda_policy(mask) == 0.7
    assert decoupled._resolve_lambda_value() == 1.0
    plain = GeneralizedAdvantageEstimator({"name": "gae", "gae_lambda": 0.9}, {})
    assert (plain._resolve_lambda_policy(mask), plain._resolve_lambda_value()) == (0.9, 0.9)


# --------------------------------------------------------------------------------------------
# replay buffer files


def test_replay_buffer_file_loads_back_what_it_saved(tmp_path):
    buf = ReplayBufferImpl(max_size=4, drop_incomplete_targets_on_restore=False)
    group = {"batch": BatchedDataDict({"input_ids": torch.arange(6).view(2, 3),
                                       "text": ["1+1=", "2+2="]}),
             "rollout_metrics": collections.OrderedDict(mean_reward=0.5, n=2),
             "shape": torch.Size([2, 3]), "dtype": torch.bfloat16, "pair": (1, "a"),
             "blob": b"\x00\x01", "none": None}
    buf.add(group, 0, 1)
    assert buf.save_to_path(str(tmp_path / "rb.pt")) == 1
    back = ReplayBufferImpl(max_size=4, drop_incomplete_targets_on_restore=False)
    assert back.load_from_path(str(tmp_path / "rb.pt")) == {"num_trajectories": 1}
    got = back.sample(1, 1, 1)["trajectories"][0]
    assert type(got["batch"]) is BatchedDataDict and list(got["batch"]) == ["input_ids", "text"]
    assert torch.equal(got["batch"]["input_ids"], group["batch"]["input_ids"])
    assert got["batch"]["text"] == group["batch"]["text"]
    assert type(got["rollout_metrics"]) is collections.OrderedDict
    rest = {k: v for k, v in group.items() if k != "batch"}
    assert {k: got[k] for k in rest} == rest


@pytest.mark.parametrize("value, kind", [
    (np.float64(0.5), "numpy.float64"),  # a float subclass
    (collections.defaultdict(list), "collections.defaultdict"),  # a dict subclass
    (collections.namedtuple("Pair", "a b")(1, 2), "Pair"),  # a tuple subclass
    ({1, 2}, "builtins.set"),
])
def test_replay_buffer_refuses_to_save_what_it_could_not_load(tmp_path, value, kind):
    buf = ReplayBufferImpl(max_size=4, drop_incomplete_targets_on_restore=False)
    buf.add({"ids": torch.arange(3)}, 0, 1)
    buf.add({"ids": torch.arange(3), "extra": value}, 0, 1)
    with pytest.raises(ValueError) as info:
        buf.save_to_path(str(tmp_path / "rb.pt"))
    msg = str(info.value)
    assert "\n" not in msg
    assert "state['trajectories'][1]['extra'] is a " in msg and kind in msg
    assert not (tmp_path / "rb.pt").exists()
