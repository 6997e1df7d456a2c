"""Small NeMo-RL-shaped configs for offline tests: the sections and kinds of keys a NeMo-RL user's
grpo_math_1B.yaml / ppo_math_1B.yaml have (written here, sized for 2 CPU cores), a tiny local
model with a chat template, and a local math jsonl."""

import json

import pytest
import yaml


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """No hub, and a warm-start cache of the test's own (imported by the NeMo-RL test files)."""
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

# a chat template the character tokenizer can apply: the user's text, then the answer
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}="


def tiny_model(path):
    """A 1-layer character-level Llama saved with a chat template (NeMo-RL's math processor
    applies the tokenizer's template)."""
    from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama, save_tiny

    tok = build_char_tokenizer()
    tok.chat_template = CHAT_TEMPLATE
    model = build_tiny_llama(len(tok), hidden_size=32, num_hidden_layers=1,
                             num_attention_heads=2, max_position_embeddings=64)
    save_tiny(model, tok, path)
    return str(path)


def math_jsonl(path, n=24):
    rows = [{"problem": f"{a}+{a % 5}", "expected_answer": str(a + a % 5)} for a in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _common(model, data):
    """Sections both loops' configs share (cluster, policy infrastructure, data, logger, ...)."""
    return {
        "loss_fn": {"reference_policy_kl_penalty": 0.01, "reference_policy_kl_type": "k3",
                    "kl_input_clamp_value": 20.0, "kl_output_clamp_value": 10.0,
                    "ratio_clip_min": 0.2, "ratio_clip_max": 0.2, "ratio_clip_c": None,
                    "use_on_policy_kl_approximation": False,
                    "use_importance_sampling_correction": False,
                    "truncated_importance_sampling_type": None, "token_level_loss": True,
                    "force_on_policy_ratio": False, "use_kl_in_reward": False,
                    "disable_ppo_ratio": False},
        "checkpointing": {"enabled": True, "checkpoint_dir": "results/grpo",
                          "metric_name": "val:accuracy", "higher_is_better": True,
                          "keep_top_k": 3, "save_period": 10, "model_save_format": "safetensors",
                          "save_consolidated": False, "save_optimizer": True},
        "policy": {
            "model_name": model,
            "tokenizer": {"name": "${policy.model_name}", "chat_template_kwargs": None},
            "hf_config_overrides": {},
            "train_global_batch_size": 8, "train_micro_batch_size": 4,
            "generation_batch_size": 8,
            "logprob_batch_size": "${policy.train_micro_batch_size}",
            "max_total_sequence_length": 24, "precision": "float32",
            "logprob_chunk_size": None,
            "dtensor_cfg": {"_v2": True, "enabled": True, "cpu_offload": False,
                            "tensor_parallel_size": 1, "context_parallel_size": 1,
                            "lora_cfg": {"enabled": False, "dim": 8, "alpha": 32}},
            "megatron_cfg": {"enabled": False, "tensor_model_parallel_size": 1,
                             "pipeline_dtype": "${policy.precision}",
                             "optimizer": {"lr": 5.0e-6, "clip_grad": "${policy.max_grad_norm}"}},
            "dynamic_batching": {"enabled": False, "train_mb_tokens": "${mul:${policy.max_total_"
                                 "sequence_length}, ${policy.train_micro_batch_size}}"},
            "sequence_packing": {"enabled": True, "algorithm": "modified_first_fit_decreasing"},
            "make_sequence_length_divisible_by": "${policy.dtensor_cfg.tensor_parallel_size}",
            "max_grad_norm": 1.0,
            "optimizer": {"name": "torch.optim.AdamW",
                          "kwargs": {"lr": 5.0e-4, "weight_decay": 0.01, "betas": [0.9, 0.999],
                                     "eps": 1e-8, "foreach": False}},
            "scheduler": [
                {"name": "torch.optim.lr_scheduler.LinearLR",
                 "kwargs": {"start_factor": 0.1, "end_factor": 1.0, "total_iters": 2}},
                {"name": "torch.optim.lr_scheduler.ConstantLR",
                 "kwargs": {"factor": 1.0, "total_iters": 10000000000}},
                {"milestones": [2]},
            ],
            "generation": {
                "backend": "hf", "max_new_tokens": "${policy.max_total_sequence_length}",
                "temperature": 1.0, "top_p": 1.0, "top_k": None,
                "val_temperature": "${.temperature}", "val_top_p": "${.top_p}",
                "val_top_k": "${.top_k}", "stop_token_ids": None, "stop_strings": None,
                "vllm_cfg": {"tensor_parallel_size": 1, "gpu_memory_utilization": 0.6,
                             "max_model_len": "${policy.max_total_sequence_length}"},
                "colocated": {"enabled": True, "resources": {"gpus_per_node": None}},
            },
        },
        "data": {
            "max_input_seq_length": 20, "shuffle": True, "num_workers": 1,
            "use_multiple_dataloader": False,
            "train": {"data_path": data, "input_key": "problem", "output_key": "expected_answer",
                      "split_validation_size": 0.05, "seed": "${grpo.seed}"},
            "validation": None,
            "default": {"dataset_name": "ResponseDataset", "prompt_file": None,
                        "system_prompt_file": None, "processor": "math_hf_data_processor",
                        "env_name": "math"},
        },
        "env": {"math": {"num_workers": 8, "math_verify_impl": "hf_math_verify"}},
        "logger": {"log_dir": "logs", "wandb_enabled": False, "tensorboard_enabled": False,
                   "mlflow_enabled": False, "monitor_gpus": True,
                   "wandb": {"project": "grpo-dev", "name": "grpo-dev-logger"}},
        "cluster": {"gpus_per_node": 1, "num_nodes": 1},
    }


def grpo_shaped(model, data):
    """The shape of NeMo-RL's grpo_math_1B.yaml, sized for two CPU cores."""
    cfg = _common(model, data)
    cfg["grpo"] = {
        "num_prompts_per_step": 2, "num_generations_per_prompt": 4, "max_rollout_turns": 1,
        "max_num_epochs": 1, "max_num_steps": 3, "normalize_rewards": True,
        "use_leave_one_out_baseline": True, "val_period": 10, "val_at_start": False,
        "val_at_end": False, "overlong_filtering": False, "max_val_samples": 4,
        "val_batch_size": 4, "seed": 42, "use_dynamic_sampling": False,
        "dynamic_sampling_max_gen_batches": 10, "batch_multiplier": 1,
        "reward_shaping": {"enabled": False, "overlong_buffer_length": 128,
                           "overlong_buffer_penalty": 1,
                           "max_response_length": "${policy.max_total_sequence_length}",
                           "stop_properly_penalty_coef": None},
        "adv_estimator": {"name": "grpo", "normalize_rewards": "${grpo.normalize_rewards}",
                          "use_leave_one_out_baseline": "${grpo.use_leave_one_out_baseline}",
                          "minus_baseline": True},
        "reward_scaling": {"enabled": False, "source_min": 0.0, "source_max": 1.0,
                           "target_min": 0.0, "target_max": 1.0},
        "seq_logprob_error_threshold": None, "invalid_tool_call_advantage": None,
        "async_grpo": {"enabled": False, "max_trajectory_age_steps": 1},
    }
    cfg["reward_penalties"] = {"penalize_duplicated_reasoning": False, "token_ids": None}
    cfg["data_plane"] = {"enabled": False, "impl": "transfer_queue"}
    cfg["on_policy_distillation"] = None
    return cfg


def ppo_shaped(model, data):
    """The shape of NeMo-RL's ppo_math_1B.yaml (DAPO-style PPO), sized for two CPU cores."""
    cfg = _common(model, data)
    cfg["policy"]["scheduler"] = [{"name": "torch.optim.lr_scheduler.ConstantLR",
                                   "kwargs": {"factor": 1.0, "total_iters": 10000000000}},
                                  {"milestones": []}]
    cfg["data"]["train"]["seed"] = "${ppo.seed}"
    cfg["loss_fn"].update(reference_policy_kl_penalty=0.0, ratio_clip_max=0.28, ratio_clip_c=10,
                          positive_example_nll_weight=0.0)
    cfg["ppo"] = {
        "num_prompts_per_step": 2, "num_generations_per_prompt": 4, "max_rollout_turns": 1,
        "max_num_epochs": 100000, "max_num_steps": 3, "ppo_epochs": 2,
        "policy_training_start_step": 0, "val_period": 20, "val_at_start": False,
        "val_at_end": False, "overlong_filtering": False, "max_val_samples": 4,
        "val_batch_size": 4, "seed": 42, "use_dynamic_sampling": False,
        "dynamic_sampling_max_gen_batches": 10, "batch_multiplier": 1,
        "skip_reference_policy_logprobs_calculation": True,
        "async_ppo": {"enabled": False, "max_trajectory_age_steps": 1},
        "reward_shaping": {"enabled": True, "overlong_buffer_length": 2,
                           "overlong_buffer_penalty": 1, "max_response_length": 4,
                           "stop_properly_penalty_coef": None},
        "adv_estimator": {"name": "gae", "gae_lambda": 0.95, "gae_gamma": 1,
                          "normalize_advantages": True, "gae_lambda_value": None,
                          "gae_lambda_policy": None, "length_adaptive_alpha": 0.0},
        "reward_scaling": {"enabled": True, "source_min": 0.0, "source_max": 1.0,
                           "target_min": -1.0, "target_max": 1.0},
        "seq_logprob_error_threshold": None,
    }
    cfg["value_loss_fn"] = {"scale": 0.4, "cliprange": 0.2}
    cfg["value"] = {
        "model_name": "${policy.model_name}",
        "tokenizer": {"name": "${value.model_name}", "chat_template_kwargs": None},
        "hf_config_overrides": {},
        "train_global_batch_size": "${policy.train_global_batch_size}",
        "train_micro_batch_size": "${policy.train_micro_batch_size}",
        "max_total_sequence_length": "${policy.max_total_sequence_length}",
        "make_sequence_length_divisible_by": "${value.dtensor_cfg.tensor_parallel_size}",
        "precision": "float32",
        "reward_model_cfg": {"enabled": True, "reward_model_type": "regression"},
        "dtensor_cfg": {"enabled": True, "tensor_parallel_size": 1,
                        "lora_cfg": {"enabled": False}},
        "megatron_cfg": {"enabled": False, "pipeline_dtype": "${value.precision}"},
        "max_grad_norm": 1.0,
        "optimizer": {"name": "torch.optim.AdamW",
                      "kwargs": {"lr": 3.0e-4, "weight_decay": 0.01, "betas": [0.9, 0.999],
                                 "eps": 1.0e-08, "foreach": False, "fused": False}},
        "scheduler": [{"name": "torch.optim.lr_scheduler.ConstantLR",
                       "kwargs": {"factor": 1.0, "total_iters": 10000000000}},
                      {"milestones": []}],
    }
    return cfg


def write_yaml(path, cfg):
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return str(path)


def megatron(cfg, *, lr=1e-3, clip=0.5):
    """``cfg`` on NeMo-RL's Megatron back end: its optimizer and scheduler under megatron_cfg,
    ``policy.optimizer`` null (as NeMo-RL's *_megatron.yaml files set it)."""
    cfg["policy"]["optimizer"] = None
    cfg["policy"]["scheduler"] = None
    cfg["policy"]["megatron_cfg"] = {
        "enabled": True, "tensor_model_parallel_size": 1, "pipeline_dtype": "${policy.precision}",
        "optimizer": {"optimizer": "adam", "lr": lr, "min_lr": lr / 10, "weight_decay": 0.1,
                      "bf16": False, "fp16": False, "params_dtype": "float32",
                      "adam_beta1": 0.9, "adam_beta2": 0.98, "adam_eps": 1e-5,
                      "sgd_momentum": 0.9, "use_distributed_optimizer": True, "clip_grad": clip},
        "scheduler": {"start_weight_decay": "${policy.megatron_cfg.optimizer.weight_decay}",
                      "end_weight_decay": "${policy.megatron_cfg.optimizer.weight_decay}",
                      "weight_decay_incr_style": "constant", "lr_decay_style": "constant",
                      "lr_decay_iters": 1000, "lr_warmup_iters": 2, "lr_warmup_init": lr / 10},
    }
    return cfg


def prorl_shaped(model, data):
    """The shape of NeMo-RL's prorlv2.v2.yaml over grpo_math_1B: DAPO's dynamic sampling,
    REINFORCE++ with the estimator's leave-one-out off while the loop's stays on (NeMo-RL's two
    flags), the stop-properly penalty, k2 and clip-higher."""
    cfg = grpo_shaped(model, data)
    cfg["grpo"].update(use_dynamic_sampling=True, dynamic_sampling_max_gen_batches=10,
                       batch_multiplier=1.5)
    cfg["grpo"]["adv_estimator"] = {"name": "reinforce_plus_plus", "normalize_rewards": True,
                                    "use_leave_one_out_baseline": False, "minus_baseline": True}
    cfg["grpo"]["reward_shaping"] = {"enabled": True, "overlong_buffer_length": 128,
                                     "overlong_buffer_penalty": 1,
                                     "max_response_length": "${policy.max_total_sequence_length}",
                                     "stop_properly_penalty_coef": 0.0}
    cfg["loss_fn"].update(reference_policy_kl_penalty=0.0001, reference_policy_kl_type="k2",
                          ratio_clip_max=0.27)
    return cfg


def gdpo_shaped(model, data):
    """The shape of NeMo-RL's gdpo_math_1B.yaml: GDPO over the reward's components."""
    cfg = grpo_shaped(model, data)
    cfg["grpo"]["adv_estimator"] = {"name": "gdpo", "normalize_rewards": True,
                                    "use_leave_one_out_baseline": False}
    return cfg


def pairs_jsonl(path, n=16):
    """Preference pairs in NeMo-RL's BinaryPreferenceDataset columns (prompt/chosen/rejected)."""
    rows = [{"prompt": f"{a}+{a % 5}", "chosen": str(a + a % 5), "rejected": str(a + a % 5 + 1)}
            for a in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def dpo_shaped(model, pairs):
    """The shape of NeMo-RL's dpo.yaml (batch sizes in pairs), sized for two CPU cores."""
    common = _common(model, pairs)
    policy = common["policy"]
    del policy["generation"]
    policy.update(train_global_batch_size=4, train_micro_batch_size=2)
    return {
        "dpo": {"max_num_epochs": 1, "max_num_steps": 2, "val_period": 25, "val_batches": 8,
                "val_global_batch_size": 8, "val_micro_batch_size": 1, "val_at_start": True,
                "val_at_end": False, "seed": 42, "reference_policy_kl_penalty": 0.05,
                "preference_average_log_probs": False,
                "sft_average_log_probs": "${.preference_average_log_probs}",
                "preference_loss_weight": 1, "sft_loss_weight": 0},
        "checkpointing": {**common["checkpointing"], "checkpoint_dir": "results/dpo"},
        "policy": policy,
        "data": {"max_input_seq_length": "${policy.max_total_sequence_length}", "shuffle": True,
                 "num_workers": 1,
                 "train": {"data_path": pairs, "dataset_name": "BinaryPreferenceDataset",
                           "split": "train"},
                 "validation": {"dataset_name": "HelpSteer3", "split": "validation"}},
        "logger": common["logger"],
        "cluster": common["cluster"],
    }


def nemo_assets(root):
    """The tiny model, a math jsonl and a pairs jsonl under ``root`` (a module's fixture)."""
    return {"model": tiny_model(root / "model"), "data": math_jsonl(root / "math.jsonl"),
            "pairs": pairs_jsonl(root / "pairs.jsonl"), "root": root}


def load_written(assets, cfg, name="c.yaml", overrides=()):
    """``rlnb.load_config`` of ``cfg`` written as a NeMo-RL YAML, with --ignore-unsupported."""
    import rlnb

    return rlnb.load_config(write_yaml(assets["root"] / name, cfg), list(overrides),
                            ignore_unsupported=True)
