"""rlnb.nemo mirrors NeMo-RL's algorithm modules: every name with NeMo-RL's signature (a table
written from NeMo-RL's source), and the adapters' numbers and return shapes on hand-made tensors."""

import importlib
import inspect
import math
import re

import pytest
import torch
from paths import ROOT, TESTS

from rlnb.nemo.batched_data_dict import BatchedDataDict

DOCS = (ROOT / "docs" / "nemo_rl_names.md").read_text()

# NeMo-RL's signatures (nemo_rl.algorithms.*, snapshot of 2026-08), parameters only: an adapter
# must take them in this order, with these kinds and defaults; it may add optional ones after.
SIGNATURES = {
    "advantage_estimator": {
        **{f"{c}.__init__": "self, estimator_config, loss_config" for c in (
            "GRPOAdvantageEstimator", "GDPOAdvantageEstimator",
            "ReinforcePlusPlusAdvantageEstimator", "RawRewardAdvantageEstimator",
            "GeneralizedAdvantageEstimator", "OPDAdvantageEstimator")},
        "GRPOAdvantageEstimator.compute_advantage": "self, prompt_ids, rewards, mask, **kwargs",
        "GDPOAdvantageEstimator.compute_advantage":
            "self, prompt_ids, rewards, mask, repeated_batch, **kwargs",
        "ReinforcePlusPlusAdvantageEstimator.compute_advantage":
            "self, prompt_ids, rewards, mask, logprobs_policy=None, logprobs_reference=None, **kwargs",
        "RawRewardAdvantageEstimator.compute_advantage": "self, prompt_ids, rewards, mask, **kwargs",
        "GeneralizedAdvantageEstimator.compute_advantage":
            "self, prompt_ids, rewards, mask, values, reference_logprobs=None, logprobs=None, **kwargs",
        "OPDAdvantageEstimator.compute_advantage":
            "self, prompt_ids, rewards, mask, teacher_logprobs=None, prev_logprobs=None, **kwargs",
    },
    "utils": {
        "get_gdpo_reward_component_keys": "batch",
        "calculate_kl": "logprobs, logprobs_reference, kl_type='k3', input_clamp_value=20.0, "
                        "output_clamp_value=10.0, importance_sampling_weights=None",
        "calculate_baseline_and_std_per_prompt":
            "prompts, rewards, valid_mask, leave_one_out_baseline=True, std_rewards=None",
        "masked_mean": "values, mask, dim=None, global_normalization_factor=None",
        "masked_var": "values, mask, mean=None, unbiased=True",
        "mask_out_neg_inf_logprobs": "logprobs, mask, logprobs_name",
        "set_seed": "seed",
    },
    "reward_functions": {"apply_reward_shaping": "batch, cfg"},
    "loss": {
        "ClippedPGLossFn.__init__": "self, cfg, use_fused_linear_logprobs=False",
        "ClippedPGLossFn.__call__":
            "self, next_token_logprobs, data, global_valid_seqs, global_valid_toks",
        "NLLLossFn.__init__": "self, use_fused_linear_logprobs=False",
        "NLLLossFn.__call__": "self, next_token_logprobs, data, global_valid_seqs, "
                              "global_valid_toks, dpo_loss=False, dpo_average_log_probs=False",
        "PreferenceLossFn.__call__": "self, logits, data, global_valid_seqs, global_valid_toks",
        "PreferenceLossFn.split_output_tensor": "self, tensor",
        "DPOLossFn.__init__": "self, cfg, use_fused_linear_logprobs=False",
        "DPOLossFn.__call__":
            "self, next_token_logprobs, data, global_valid_seqs, global_valid_toks",
        "MseValueLossFn.__init__": "self, cfg",
        "MseValueLossFn.__call__": "self, logits, data, global_valid_seqs, global_valid_toks",
        "prepare_loss_input": "logits, data, loss_fn, vocab_parallel_rank=None, "
                              "vocab_parallel_group=None, context_parallel_group=None, "
                              "sampling_params=None, d2t=None, chunk_size=None",
        "prepare_packed_loss_input": "logits, data, loss_fn, cu_seqlens_q, cu_seqlens_q_padded, "
                                     "vocab_parallel_rank=None, vocab_parallel_group=None, "
                                     "context_parallel_group=None, sampling_params=None, "
                                     "chunk_size=None",
        **{f"{w}.__init__": "self, loss_fn, prepare_fn, cu_seqlens_q, cu_seqlens_q_padded=None, "
                            "vocab_parallel_rank=None, vocab_parallel_group=None, "
                            "context_parallel_group=None"
           for w in ("SequencePackingLossWrapper", "SequencePackingFusionLossWrapper")},
        **{f"{w}.__call__": "self, next_token_logits, data, global_valid_seqs, global_valid_toks"
           for w in ("SequencePackingLossWrapper", "SequencePackingFusionLossWrapper")},
        "wrap_loss_fn_with_input_preparation":
            "next_token_logits, data, global_valid_seqs, global_valid_toks, loss_fn, prepare_fn, "
            "vocab_parallel_rank=None, vocab_parallel_group=None, context_parallel_group=None",
    },
    "grpo": {
        "dynamic_sampling": "repeated_batch, std, baseline, dynamic_sampling_num_gen_batches, "
                            "master_config, timer, batch_cache=None",
        "scale_rewards": "repeated_batch, reward_scaling_cfg",
        "compute_and_apply_seq_logprob_error_masking":
            "train_data, rewards, seq_logprob_error_threshold",
        "_clip_grpo_advantages": "advantages, grpo_config",
        "_create_advantage_estimator": "master_config",
        "_apply_mask_sample_filter": "repeated_batch",
        "refit_policy_generation": "policy, policy_generation, colocated_inference, "
                                   "_refit_buffer_size_gb=None, timer=None, kv_scales=None",
    },
    "ppo": {
        "dynamic_sampling": "repeated_batch, std, baseline, dynamic_sampling_num_gen_batches, "
                            "master_config, timer, batch_cache=None",
        "_create_advantage_estimator": "master_config",
        "_apply_ppo_seq_logprob_error_masking": "train_data, rewards, seq_logprob_error_threshold",
        "_compute_critic_metrics": "value_results",
    },
    "async_utils.replay_buffer": {
        "ReplayBufferImpl.__init__": "self, max_size, drop_incomplete_targets_on_restore",
        "ReplayBufferImpl.add": "self, trajectory, weight_version, target_weight_version",
        "ReplayBufferImpl.sample": "self, num_prompt_groups, current_weight_version, max_age_steps",
        "ReplayBufferImpl.load_state_dict": "self, state, num_prompts_per_step=None, "
                                            "current_training_step=None, max_age_steps=None",
        "ReplayBufferImpl.load_from_path": "self, path, num_prompts_per_step=None, "
                                           "current_training_step=None, max_age_steps=None",
        "ReplayBufferImpl.get_trajectories_needed":
            "self, target_step, num_prompts_per_step, max_age_steps=None",
        "ReplayBufferImpl.has_complete_batch":
            "self, target_step, num_prompts_per_step, max_age_steps=None",
        "ReplayBufferImpl.save_to_path": "self, path",
        **{f"ReplayBufferImpl.{m}": "self" for m in (
            "get_debug_info", "get_last_target_weight_already_generated",
            "get_existing_target_weights", "size", "clear", "state_dict")},
    },
}

# NeMo-RL's config classes: their fields (name -> default) that rlnb's config of the same name
# has with the same default; FIELDS_ELSEWHERE lists the others and where they went.
FIELDS = {
    ("advantage_estimator", "AdvEstimatorConfig"): {
        "name": "grpo", "normalize_rewards": True, "use_leave_one_out_baseline": True,
        "reward_weights": None, "minus_baseline": True},
    ("loss", "ClippedPGLossConfig"): {
        "disable_ppo_ratio": False, "token_level_loss": True,
        "sequence_level_importance_ratios": False, "ratio_clip_min": 0.2, "ratio_clip_max": 0.2,
        "ratio_clip_c": None, "reference_policy_kl_penalty": 0.01,
        "reference_policy_kl_type": "k3", "kl_input_clamp_value": 20.0,
        "kl_output_clamp_value": 10.0, "use_kl_in_reward": False,
        "use_importance_sampling_correction": False, "truncated_importance_sampling_type": None,
        "truncated_importance_sampling_ratio": None,
        "truncated_importance_sampling_ratio_min": None, "use_on_policy_kl_approximation": False,
        "force_on_policy_ratio": False, "use_cispo": False, "positive_example_nll_weight": 0.0},
    ("loss", "DPOLossConfig"): {
        "reference_policy_kl_penalty": 0.05, "preference_loss_weight": 1.0,
        "sft_loss_weight": 0.0, "preference_average_log_probs": False,
        "sft_average_log_probs": False},
    ("loss", "MseValueLossConfig"): {"scale": 1.0, "cliprange": None},
    ("reward_functions", "RewardShapingConfig"): {
        "enabled": False, "overlong_buffer_length": None, "overlong_buffer_penalty": None,
        "max_response_length": None, "stop_properly_penalty_coef": None},
    ("grpo", "RewardScalingConfig"): {"enabled": False, "source_min": 0.0, "source_max": 1.0,
                                      "target_min": 0.0, "target_max": 1.0},
    ("grpo", "AsyncGRPOConfig"): {"enabled": False, "max_trajectory_age_steps": 1,
                                  "max_generation_failures": 0,
                                  "in_flight_weight_updates": False,
                                  "recompute_kv_cache_after_weight_updates": False},
    ("ppo", "AdvEstimatorConfig"): {"name": "gae", "gae_lambda": 0.95, "gae_gamma": 1.0,
                                    "normalize_advantages": True, "gae_lambda_value": None,
                                    "gae_lambda_policy": None, "length_adaptive_alpha": 0.0},
}
# GRPOConfig / PPOConfig: NeMo-RL's fields rlnb's loop configs have (their CPU-sized defaults
# differ; a NeMo-RL YAML gets NeMo-RL's) and the ones the YAML reader lists or refuses instead.
LOOP_FIELDS = {
    "grpo": ("num_prompts_per_step num_generations_per_prompt max_num_steps max_rollout_turns "
             "advantage_clip_low advantage_clip_high val_period val_at_start val_at_end "
             "max_val_samples val_num_generations_per_prompt "
             "skip_reference_policy_logprobs_calculation seed async_grpo overlong_filtering "
             "use_dynamic_sampling dynamic_sampling_max_gen_batches batch_multiplier "
             "reward_shaping reward_scaling seq_logprob_error_threshold adv_estimator "
             "use_leave_one_out_baseline"),
    "ppo": ("num_prompts_per_step num_generations_per_prompt max_num_epochs max_num_steps "
            "max_rollout_turns val_period val_batch_size val_at_start val_at_end max_val_samples "
            "skip_reference_policy_logprobs_calculation seed overlong_filtering "
            "use_dynamic_sampling dynamic_sampling_max_gen_batches batch_multiplier ppo_epochs "
            "reward_shaping reward_scaling adv_estimator policy_training_start_step "
            "seq_logprob_error_threshold"),
}
FIELDS_ELSEWHERE = {
    "grpo": ("max_num_epochs normalize_rewards val_start_at "
             "val_batch_size stop_at_validation_metric stop_at_validation_threshold "
             "calculate_advantages_on_gpu invalid_tool_call_advantage "
             "malformed_thinking_advantage deduplicate_multimodal_data debug_payload_metrics"),
    "ppo": "async_ppo",
}
# NeMo-RL's loop functions take its Ray workers and loaders; rlnb's take the bundled setup
BUNDLED = {"grpo": ("setup", "grpo_train", "validate", "async_grpo_train", "MasterConfig",
                    "GRPOSaveState", "GRPOLoggerConfig", "GRPOConfig"),
           "ppo": ("setup", "ppo_train", "validate", "MasterConfig", "PPOSaveState",
                   "PPOLoggerConfig", "PPOConfig")}
# NeMo-RL names rlnb deliberately lacks: importing one raises ImportError with the reason
ABSENT = {
    "grpo": ("RewardPenaltyConfig", "RewardPenaltyTokenIdsConfig", "shutdown_environments",
             "extract_initial_prompt_messages", "add_grpo_token_loss_masks_and_generation_logprobs",
             "aggregate_rollout_metrics"),
    "ppo": ("AsyncPPOConfig", "async_ppo_train"),
    "loss": ("DistillationLossConfig", "DistillationLossFn", "DistillationLossDataDict",
             "CrossTokenizerDistillationLossFn", "DraftCrossEntropyLossFn", "DraftLossWrapper"),
    "loss_functions": ("DistillationLossFn", "CrossTokenizerDistillationLossFn"),
    "utils": ("get_tokenizer", "maybe_pad_last_batch", "print_performance_metrics",
              "log_generation_metrics", "print_efficiency_summary", "surpress_user_warnings"),
    "async_utils": ("AsyncTrajectoryCollector",),
}


def resolve(module: str, dotted: str):
    obj = importlib.import_module(f"rlnb.nemo.{module}")
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def assert_takes(fn, expected: str, where: str):
    """``fn`` takes NeMo-RL's parameters in order (names, kinds, defaults); any it adds are
    optional and come after them."""
    want = list(inspect.signature(eval(f"lambda {expected}: None")).parameters.values())
    have = list(inspect.signature(fn).parameters.values())
    assert len(have) >= len(want), f"{where}: {inspect.signature(fn)} lacks parameters of ({expected})"
    for w, h in zip(want, have):
        assert (h.name, h.kind) == (w.name, w.kind), f"{where}: {h} where NeMo-RL has {w}"
        if w.default is not inspect.Parameter.empty:
            assert h.default == w.default, f"{where}: {h.name}={h.default!r}, NeMo-RL {w.default!r}"
    for h in have[len(want):]:
        assert h.default is not inspect.Parameter.empty or h.kind is h.VAR_KEYWORD, \
            f"{where}: extra parameter {h} must be optional"


@pytest.mark.parametrize("module", sorted(SIGNATURES))
def test_every_nemo_rl_function_has_its_signature(module):
    for dotted, expected in SIGNATURES[module].items():
        assert_takes(resolve(module, dotted), expected, f"rlnb.nemo.{module}.{dotted}")


def test_loss_functions_is_the_same_surface_as_loss():
    import rlnb.nemo.loss as loss
    import rlnb.nemo.loss_functions as old

    for name in loss.__all__:
        assert getattr(old, name) is getattr(loss, name)
    assert [m.value for m in old.LossType] == ["token_level", "sequence_level"]
    assert [m.value for m in old.MetricNormalizer] == ["tokens", "sequences", "none"]
    assert [m.value for m in old.LossInputType] == [
        "logit", "logprob", "distillation", "distillation_cross_tokenizer", "draft"]


@pytest.mark.parametrize("where, name", sorted(FIELDS))
def test_config_classes_have_nemo_rl_fields_and_defaults(where, name):
    fields = resolve(where, name).model_fields
    for key, default in FIELDS[(where, name)].items():
        assert key in fields, f"{name}.{key}"
        assert fields[key].default == default, f"{name}.{key}: {fields[key].default!r}"


@pytest.mark.parametrize("loop", ["grpo", "ppo"])
def test_loop_config_fields_are_there_or_handled_elsewhere(loop):
    fields = resolve(loop, f"{loop.upper()}Config").model_fields
    for key in LOOP_FIELDS[loop].split():
        assert key in fields, f"{loop}.{key}"
    for key in FIELDS_ELSEWHERE[loop].split():  # the YAML reader maps, lists or refuses them
        assert key not in fields or key == "max_num_epochs", f"{loop}.{key}"
        assert f"`{loop}.{key}`" in DOCS or f"`{key}`" in DOCS, f"docs: {loop}.{key}"


@pytest.mark.parametrize("loop", sorted(BUNDLED))
def test_loop_functions_are_importable_and_documented(loop):
    for name in BUNDLED[loop]:
        assert callable(resolve(loop, name)) or inspect.isclass(resolve(loop, name)), name
        assert f"`{name}" in DOCS, f"docs/nemo_rl_names.md: {name}"


@pytest.mark.parametrize("module", sorted(ABSENT))
def test_absent_names_say_why(module):
    for name in ABSENT[module]:
        with pytest.raises(ImportError, match=rf"has no {name}: .*docs/nemo_rl_names\.md"):
            exec(f"from rlnb.nemo.{module} import {name}", {})
        assert f"`{name}`" in DOCS, f"docs/nemo_rl_names.md: {name}"


def test_every_name_in_the_table_is_documented():
    for names in SIGNATURES.values():
        for dotted in names:
            assert f"`{dotted.split('.')[0]}" in DOCS, f"docs/nemo_rl_names.md: {dotted}"


# --------------------------------------------------------------------------- utils


def test_utils_take_nemo_rl_keyword_names_and_give_its_numbers():
    from rlnb.nemo.utils import calculate_kl

    lp, ref = torch.tensor([[0.0, 0.0]]), torch.tensor([[math.log(2), 30.0]])
    k1 = calculate_kl(logprobs=lp, logprobs_reference=ref, kl_type="k1")
    # ℓ = ref - lp = ln 2 -> k1 = -ln 2; ℓ = 30 is clamped to 20 -> -20, then to -10 (out clamp)
    assert k1[0].tolist() == pytest.approx([-math.log(2), -10.0])
    k3 = calculate_kl(lp, ref, "k3", importance_sampling_weights=torch.full((1, 2), 2.0))
    # k3(ln 2) = 2 - 1 - ln 2 = 0.30685, times the weight 2
    assert k3[0, 0].item() == pytest.approx(2 * (1 - math.log(2)), rel=1e-6)


def test_baseline_std_masked_stats_and_reward_keys():
    from rlnb.nemo import utils

    prompts = torch.tensor([[7, 7], [7, 7], [7, 7]])
    b, s = utils.calculate_baseline_and_std_per_prompt(prompts, torch.tensor([1.0, 0.0, 0.0]),
                                                       torch.ones(3), leave_one_out_baseline=True)
    # leave-one-out: the others' mean, and the Bessel std of the other two rewards
    assert b.tolist() == pytest.approx([0.0, 0.5, 0.5])
    assert s.tolist() == pytest.approx([0.0, math.sqrt(0.5), math.sqrt(0.5)])
    x, m = torch.tensor([1.0, 2.0, 3.0, 9.0]), torch.tensor([1.0, 1.0, 1.0, 0.0])
    assert utils.masked_mean(values=x, mask=m).item() == pytest.approx(2.0)
    assert utils.masked_mean(x, m, global_normalization_factor=6).item() == pytest.approx(1.0)
    assert utils.masked_var(values=x, mask=m).item() == pytest.approx(1.0)  # (1+0+1)/(3-1)
    batch = {"reward/b": 1, "total_reward": 0, "reward/a": 2, "reward1": 3}
    assert utils.get_gdpo_reward_component_keys(batch) == ["reward/a", "reward/b"]
    with pytest.warns(UserWarning, match="1 valid token"):
        out = utils.mask_out_neg_inf_logprobs(torch.tensor([-1.0, -math.inf, -2.0]),
                                              torch.tensor([1.0, 1.0, 0.0]), "curr_logprobs")
    assert out.tolist() == [-1.0, 0.0, 0.0]


# --------------------------------------------------------------------------- rewards


def test_apply_reward_shaping_edits_the_batch_like_nemo_rl():
    from rlnb.nemo.reward_functions import RewardShapingConfig, apply_reward_shaping

    cfg = RewardShapingConfig(enabled=True, overlong_buffer_length=4, overlong_buffer_penalty=1.0,
                              max_response_length=16)
    batch = BatchedDataDict(total_reward=torch.tensor([1.0, 1.0, 1.0]),
                            response_token_lengths=torch.tensor([10, 14, 20]))
    assert apply_reward_shaping(batch, cfg) is batch
    # L_exp = 16 - 4 = 12: penalties 0, -(14-12)/4, -(20-12)/4 (unbounded past the max)
    assert batch["total_reward"].tolist() == [1.0, 0.5, -1.0]
    assert batch["unshaped_total_reward"].tolist() == [1.0, 1.0, 1.0]
    logs = [[{"role": "user", "token_ids": torch.ones(3)},
             {"role": "assistant", "token_ids": torch.ones(n)}] for n in (12, 13)]
    by_log = apply_reward_shaping({"total_reward": torch.zeros(2), "message_log": logs}, cfg)
    assert by_log["total_reward"].tolist() == [0.0, -0.25]  # first assistant message lengths
    kappa = RewardShapingConfig(enabled=True, stop_properly_penalty_coef=0.5)
    cut = apply_reward_shaping({"total_reward": torch.tensor([1.0, 1.0]),
                                "truncated": [True, False]}, kappa)
    assert cut["total_reward"].tolist() == [0.5, 1.0]
    off = {"total_reward": torch.tensor([1.0])}
    assert apply_reward_shaping(off, RewardShapingConfig()) == {"total_reward": torch.tensor([1.0])}
    # deliberate: a contradictory config fails when it is built (NeMo-RL: at the first call)
    with pytest.raises(ValueError, match="missing: overlong_buffer_penalty"):
        RewardShapingConfig(enabled=True, overlong_buffer_length=4, max_response_length=16)
    # deliberate: NeMo-RL's asserts on bad input are ValueErrors naming what is wrong
    with pytest.raises(ValueError, match=r"needs batch\['truncated'\]"):
        apply_reward_shaping({"total_reward": torch.ones(2)}, kappa)
    with pytest.raises(ValueError, match=r"stop_properly_penalty_coef must be in \[0, 1\]"):
        apply_reward_shaping({"total_reward": torch.ones(2), "truncated": [True, False]},
                             {"enabled": True, "stop_properly_penalty_coef": 1.5})
    with pytest.raises(ValueError, match="2 response lengths for 3 rewards"):
        apply_reward_shaping({"total_reward": torch.ones(3), "response_token_lengths": [1, 2]},
                             cfg)


def test_scale_rewards_clamps_maps_and_edits_in_place():
    from rlnb.nemo.grpo import RewardScalingConfig, scale_rewards

    batch = BatchedDataDict(total_reward=torch.tensor([0.0, 0.5, 1.0, 2.0]),
                            **{"reward/correct": torch.tensor([1.0, 0.0, 0.0, 1.0])})
    cfg = RewardScalingConfig(enabled=True, target_min=-1.0, target_max=1.0)
    with pytest.warns(UserWarning, match="1 of 4 rewards"):
        assert scale_rewards(batch, cfg) is batch
    assert batch["total_reward"].tolist() == [-1.0, 0.0, 1.0, 1.0]  # 2.0 clamped to 1 first
    assert batch["reward/correct"].tolist() == [1.0, -1.0, -1.0, 1.0]
    same = {"total_reward": torch.tensor([5.0])}
    assert scale_rewards(same, {"enabled": False})["total_reward"].tolist() == [5.0]


# --------------------------------------------------------------------------- dynamic sampling


def ds_config(loop="grpo", prompts=2, gens=3, max_batches=5, on=True):
    return {loop: {"use_dynamic_sampling": on, "num_prompts_per_step": prompts,
                   "num_generations_per_prompt": gens,
                   "dynamic_sampling_max_gen_batches": max_batches}}


def gen_batch(first, rewards, width=3):
    n = len(rewards)
    return BatchedDataDict(
        message_log=[[{"role": "user", "content": f"p{(first + i) // 3}"}] for i in range(n)],
        input_ids=torch.arange(first, first + n).unsqueeze(-1).repeat(1, width),
        total_reward=torch.tensor(rewards))


class Timer:
    def __init__(self):
        self.names = []

    def time(self, name):
        import contextlib

        self.names.append(name)
        return contextlib.nullcontext()


def test_dynamic_sampling_keeps_rows_with_signal_across_generation_batches():
    from rlnb.nemo.grpo import dynamic_sampling

    cfg, timer = ds_config(), Timer()
    first = gen_batch(0, [1.0, 1.0, 1.0, 0.5, 0.5, 0.0])
    std = torch.tensor([0.0, 0.0, 0.0, 0.25, 0.25, 0.25])
    out, done, cache, metrics = dynamic_sampling(first, std, torch.ones(6), 1, cfg, timer)
    assert not done and metrics == {} and timer.names == ["dynamic_sampling"]
    assert out is cache and out.size == 3
    assert [m[0]["content"] for m in out["message_log"]] == ["p1", "p1", "p1"]
    assert out["total_reward"].tolist() == [1.0, 1.0, 1.0, 0.5, 0.5, 0.0]  # every reward so far
    assert first["std"] is std  # written into the generation batch, as NeMo-RL does
    second = gen_batch(6, [1.0, 0.0, 1.0, 0.0, 0.0, 0.0], width=4)  # wider rows: padded with 0
    std2 = torch.tensor([0.5, 0.5, 0.5, 0.0, 0.0, 0.0])
    out, done, cache, metrics = dynamic_sampling(second, std2, torch.zeros(6), 2, cfg, timer,
                                                 cache)
    assert done and out.size == 6 and metrics == {"dynamic_sampling_num_discarded_valid_samples": 0}
    assert [m[0]["content"] for m in out["message_log"]] == ["p1"] * 3 + ["p2"] * 3
    assert out["input_ids"].tolist() == [[3, 3, 3, 0], [4, 4, 4, 0], [5, 5, 5, 0],
                                         [6, 6, 6, 6], [7, 7, 7, 7], [8, 8, 8, 8]]
    assert out["std"].tolist() == [0.25] * 3 + [0.5] * 3
    assert out["filtered_reward"].tolist() == [0.5, 0.5, 0.0, 1.0, 0.0, 1.0]
    # total_reward: the first train_size of every generated reward (NeMo-RL quirk, kept)
    assert out["total_reward"].tolist() == [1.0, 1.0, 1.0, 0.5, 0.5, 0.0]
    assert cache.size == 6


def test_dynamic_sampling_cuts_to_train_size_gives_up_and_can_be_off():
    from rlnb.nemo.grpo import dynamic_sampling
    from rlnb.nemo.ppo import dynamic_sampling as ppo_dynamic_sampling

    batch = gen_batch(0, [1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    std = torch.full((6,), 0.5)
    out, done, cache, metrics = dynamic_sampling(batch, std, std, 1, ds_config(prompts=1), None)
    assert done and out.size == 3 and cache.size == 6
    assert metrics == {"dynamic_sampling_num_discarded_valid_samples": 3}
    flat = gen_batch(0, [1.0] * 6)
    with pytest.raises(ValueError, match="after 2 generation batches"):
        dynamic_sampling(flat, torch.zeros(6), torch.ones(6), 2, ds_config(max_batches=1), None)
    off = gen_batch(0, [1.0] * 6)
    out, done, cache, metrics = ppo_dynamic_sampling(off, std, std, 1, ds_config("ppo", on=False),
                                                     None, "old cache")
    assert out is off and done and cache == "old cache" and metrics == {}
    assert off["baseline"] is std and off["std"] is std
    with pytest.raises(TypeError, match="timer must be NeMo-RL's Timer"):
        dynamic_sampling(batch, std, std, 1, ds_config(), {"total_reward": std})


# --------------------------------------------------------------------------- masking, clipping


def train_data():
    # stored [B, S] layout: index 0 is the prompt position; row 0's second token has q - p = ln 2
    return BatchedDataDict(
        prev_logprobs=torch.tensor([[0.0, -1.0, -1.0], [0.0, -1.0, -1.0]]),
        generation_logprobs=torch.tensor([[0.0, -1.0, -1.0 + math.log(2)], [0.0, -1.0, -1.0]]),
        token_mask=torch.tensor([[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]),
        sample_mask=torch.tensor([1.0, 1.0]))


def test_seq_logprob_error_masking_edits_the_batch_and_returns_metrics():
    from rlnb.nemo.grpo import compute_and_apply_seq_logprob_error_masking as masking

    data = train_data()
    metrics = masking(data, torch.tensor([1.0, 0.0]), 1.2)
    # per row: mean of exp|q - p| over valid tokens: row 0 (1 + 2)/2 = 1.5, row 1 1.0
    assert data["sample_mask"].tolist() == [0.0, 1.0]
    assert metrics["max_seq_mult_prob_error"] == pytest.approx(1.5)
    assert metrics["mean_seq_mult_prob_error"] == pytest.approx(1.25)
    assert metrics["min_seq_mult_prob_error"] == pytest.approx(1.0)
    assert metrics["num_masked_seqs"] == 1 and metrics["masked_correct_pct"] == 1.0
    assert metrics["max_seq_mult_prob_error_after_mask"] == pytest.approx(1.0)
    kept = train_data()
    before = kept["sample_mask"]
    assert masking(kept, torch.zeros(2), None)["num_masked_seqs"] == 0
    assert kept["sample_mask"] is before  # no threshold: the batch is not touched


def test_ppo_masking_returns_the_advantage_mask_and_refuses_an_empty_batch():
    from rlnb.nemo.ppo import _apply_ppo_seq_logprob_error_masking as ppo_masking

    mask, metrics = ppo_masking(train_data(), torch.tensor([1.0, 0.0]), 1.2)
    assert mask.tolist() == [[0.0, 0.0, 0.0], [0.0, 1.0, 1.0]]
    assert metrics["num_masked_seqs_by_logprob_error"] == 1 and "num_masked_seqs" not in metrics
    empty = train_data()
    empty["sample_mask"] = torch.zeros(2)
    with pytest.raises(RuntimeError, match="no valid response tokens"):
        ppo_masking(empty, torch.zeros(2), None)


def test_clip_mask_sample_filter_and_estimator_factory():
    from rlnb.nemo import advantage_estimator as ae
    from rlnb.nemo.grpo import (
        GRPOConfig,
        _apply_mask_sample_filter,
        _clip_grpo_advantages,
        _create_advantage_estimator,
    )
    from rlnb.nemo.ppo import _create_advantage_estimator as ppo_estimator

    adv = torch.tensor([[-3.0, 0.5, 4.0]])
    cfg = GRPOConfig(advantage_clip_low=-1.0, advantage_clip_high=2.0)
    assert _clip_grpo_advantages(adv, cfg).tolist() == [[-1.0, 0.5, 2.0]]
    assert _clip_grpo_advantages(adv, {"advantage_clip_low": 0.0}).tolist() == [[0.0, 0.5, 4.0]]
    with pytest.raises(ValueError, match=r"low \(3.0\) must be <= high \(1.0\)"):  # deliberate
        _clip_grpo_advantages(adv, {"advantage_clip_low": 3.0, "advantage_clip_high": 1.0})
    batch = {"loss_multiplier": torch.tensor([1.0, 0.5, 1.0]), "mask_sample": [False, True, True]}
    assert _apply_mask_sample_filter(batch) == 2
    assert batch["loss_multiplier"].tolist() == [1.0, 0.0, 0.0]
    assert _apply_mask_sample_filter({"loss_multiplier": torch.ones(2)}) == 0
    est = _create_advantage_estimator({"grpo": {"adv_estimator": {"name": "reinforce_plus_plus"}},
                                       "loss_fn": {}})
    assert type(est) is ae.ReinforcePlusPlusAdvantageEstimator
    with pytest.raises(ValueError, match="unknown advantage estimator"):
        _create_advantage_estimator({"grpo": {"adv_estimator": {"name": "ppo"}}, "loss_fn": {}})
    raw = ppo_estimator({"ppo": {"adv_estimator": {"name": "raw_reward"}}, "loss_fn": {}})
    assert type(raw) is ae.RawRewardAdvantageEstimator


# --------------------------------------------------------------------------- estimators


def test_estimators_take_nemo_rl_calls_and_give_its_numbers():
    from rlnb.nemo.advantage_estimator import (
        AdvEstimatorConfig,
        GDPOAdvantageEstimator,
        GeneralizedAdvantageEstimator,
        GRPOAdvantageEstimator,
        OPDAdvantageEstimator,
        RawRewardAdvantageEstimator,
        ReinforcePlusPlusAdvantageEstimator,
    )
    from rlnb.nemo.loss import ClippedPGLossConfig

    prompts, mask = torch.zeros(4, 1, dtype=torch.long), torch.ones(4, 2)
    grpo = GRPOAdvantageEstimator(AdvEstimatorConfig(), ClippedPGLossConfig())
    a = grpo.compute_advantage(prompts, torch.tensor([1.0, 0.0, 0.0, 1.0]), mask,
                               repeated_batch={}, logprobs_policy=None, sample_mask=None)
    # leave-one-out over a group of 4, normalised: ±(2/3) / sqrt(1/3) = ±1.1547
    assert a[:, 0].tolist() == pytest.approx([1.1547, -1.1547, -1.1547, 1.1547], abs=1e-4)
    gae = GeneralizedAdvantageEstimator(
        {"gae_lambda": 0.0, "gae_gamma": 1.0, "normalize_advantages": False,
         "gae_lambda_value": None, "gae_lambda_policy": None, "length_adaptive_alpha": 0.0},
        ClippedPGLossConfig(reference_policy_kl_penalty=0.0))
    adv, ret = gae.compute_advantage(prompt_ids=torch.tensor([[0]]), rewards=torch.tensor([5.0]),
                                     mask=torch.ones(1, 3), lengths=torch.tensor([3]),
                                     values=torch.tensor([[1.0, 2.0, 3.0]]))
    # λ = 0: A_t = r_t + V_{t+1} - V_t with the reward on the last token: 1, 1, 5 - 3
    assert adv.tolist() == [[1.0, 1.0, 2.0]] and ret.tolist() == [[2.0, 3.0, 5.0]]
    with pytest.raises(TypeError, match="unexpected keyword argument 'lenghts'"):  # deliberate
        gae.compute_advantage(torch.tensor([[0]]), torch.tensor([5.0]), torch.ones(1, 3),
                              torch.ones(1, 3), lenghts=3)
    rpp = ReinforcePlusPlusAdvantageEstimator(
        AdvEstimatorConfig(name="reinforce_plus_plus"),
        ClippedPGLossConfig(use_kl_in_reward=True, reference_policy_kl_penalty=0.5,
                            reference_policy_kl_type="k1"))
    one = torch.zeros(2, 1, dtype=torch.long)
    # 4th positional is logprobs_policy: k1 = policy - ref = 1 per token; with equal rewards
    # A = -0.5·[[1, 1], [1, 0]] before whitening; whitened over the 4 tokens
    out = rpp.compute_advantage(one, torch.tensor([1.0, 1.0]), torch.ones(2, 2),
                                torch.tensor([[0.0, 0.0], [0.0, -1.0]]), torch.full((2, 2), -1.0))
    raw = torch.tensor([[-0.5, -0.5], [-0.5, 0.0]])
    torch.testing.assert_close(out, (raw - raw.mean()) / raw.std(unbiased=False), atol=1e-5,
                               rtol=0)
    gdpo = GDPOAdvantageEstimator(AdvEstimatorConfig(name="gdpo"), ClippedPGLossConfig())
    batch = {"reward/a": torch.tensor([1.0, 0.0]), "reward/b": torch.tensor([1.0, 0.0])}
    g = gdpo.compute_advantage(one, torch.zeros(2), torch.ones(2, 1), batch)  # 4th: repeated_batch
    # per component: loo group of 2 -> ±1 (std 0: un-normalised); sum ±2; batch-whitened ±1/√2
    assert g[:, 0].tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])
    opd = OPDAdvantageEstimator({"name": "opd"}, {})
    assert opd.last_metrics == {}
    d = opd.compute_advantage(one, torch.zeros(2), torch.tensor([[1.0, 0.0], [1.0, 1.0]]),
                              teacher_logprobs=torch.zeros(2, 2),
                              prev_logprobs=torch.full((2, 2), -1.0))
    assert d.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    assert opd.last_metrics["on_policy_distillation/adv_mean"] == pytest.approx(1.0)
    rr = RawRewardAdvantageEstimator({"normalize_advantages": False}, ClippedPGLossConfig())
    a, none = rr.compute_advantage(one, torch.tensor([2.0, -1.0]), torch.ones(2, 2))
    assert none is None and a.tolist() == [[2.0, 2.0], [-1.0, -1.0]]
    # deliberate: KL-in-reward with an estimator that has none is refused at construction
    with pytest.raises(ValueError, match="has no KL-in-reward"):
        GRPOAdvantageEstimator(AdvEstimatorConfig(), ClippedPGLossConfig(use_kl_in_reward=True))


# --------------------------------------------------------------------------- the batch container


def test_batched_data_dict_rows():
    b = BatchedDataDict(ids=torch.tensor([[1, 2], [3, 4], [5, 6]]), log=["a", "b", "c"])
    assert b.size == 3
    picked = b.select_indices([2, 0])
    assert picked["ids"].tolist() == [[5, 6], [1, 2]] and picked["log"] == ["c", "a"]
    assert b.slice(1, 3)["log"] == ["b", "c"]
    joined = BatchedDataDict.from_batches([b.slice(0, 1), BatchedDataDict(
        ids=torch.tensor([[7, 8, 9]]), log=["d"])], pad_value_dict={"ids": -1})
    assert joined["ids"].tolist() == [[1, 2, -1], [7, 8, 9]] and joined["log"] == ["a", "d"]
    assert BatchedDataDict(total_reward=torch.zeros(5), log=["x"]).size == 1


def test_docs_list_every_deliberate_difference_with_its_test():
    section = DOCS.split("## Deliberate differences", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) >= 10
    names = {n for path in TESTS.rglob("test_*.py")
             for n in re.findall(r"def (test_\w+)", path.read_text())}
    for row in rows[1:]:
        cited = re.findall(r"`(test_\w+)`", row)
        assert cited and all(c in names for c in cited), row


def test_input_nemo_rl_accepts_and_rlnb_refuses():
    from rlnb.nemo.advantage_estimator import (
        GRPOAdvantageEstimator,
        ReinforcePlusPlusAdvantageEstimator,
    )
    from rlnb.nemo.grpo import refit_policy_generation

    rpp = ReinforcePlusPlusAdvantageEstimator({"name": "reinforce_plus_plus"},
                                              {"use_kl_in_reward": True})
    one = torch.zeros(2, 1, dtype=torch.long)
    with pytest.raises(ValueError, match="silently train without the KL"):
        rpp.compute_advantage(one, torch.tensor([1.0, 0.0]), torch.ones(2, 2))
    grpo = GRPOAdvantageEstimator({}, {})
    with pytest.raises(ValueError, match="rewards"):
        grpo.compute_advantage(one, torch.tensor([1.0, math.nan]), torch.ones(2, 2))
    with pytest.raises(ValueError, match="mask"):
        grpo.compute_advantage(one, torch.tensor([1.0, 0.0]), torch.full((2, 2), 0.5))
    with pytest.raises(ValueError, match="kv_scales"):
        refit_policy_generation(None, None, kv_scales={"layer0": 1.0})


def test_critic_metrics_are_namespaced_and_explain_the_variance():
    from rlnb.nemo.ppo import _compute_critic_metrics

    m = _compute_critic_metrics({"grad_norm": torch.tensor(1.5), "loss": torch.tensor(0.25),
                                 "all_mb_metrics": {
                                     "lr": [0.1, 0.3], "values_min": [-2.0, -1.0],
                                     "values_max": [1.0, 3.0], "returns_mean": [0.5, 0.5],
                                     "values_mean": [0.25, 0.25], "returns_sq_mean": [2.5, 2.5],
                                     "residual_sq_mean": [0.75, 0.5]}})
    assert (m["critic/grad_norm"], m["critic/loss"], m["critic/lr"]) == (1.5, 0.25, 0.2)
    assert (m["critic/values_min"], m["critic/values_max"]) == (-2.0, 3.0)
    # summed partial means: E[R] = 1, E[V] = 0.5, E[R²] = 5, E[(R-V)²] = 1.25
    # EV = 1 - (1.25 - 0.5²) / (5 - 1²) = 0.75
    assert m["critic/explained_var"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="Unsupported value-model metric: odd"):
        _compute_critic_metrics({"grad_norm": 0.0, "loss": 0.0, "all_mb_metrics": {"odd": 1.0}})
