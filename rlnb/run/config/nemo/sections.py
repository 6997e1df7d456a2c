"""The section-by-section translation of a NeMo-RL config (``translate.py``): which
NeMo-RL keys land in which rlnb keys, with NeMo-RL's meaning, and which are listed or refused.

Each function reads its NeMo-RL section through a ``Report`` (which marks every leaf key used,
ignored with a note, or refused with a reason) and returns the rlnb section. The rules are in
``translate.py``'s docstring and docs/nemo_rl_names.md#loading-a-nemo-rl-yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb.run.config.nemo.report import Report

# NeMo-RL's loop defaults, for keys the file leaves out (nemo_rl.algorithms.grpo / ppo)
NEMO_LOOP_DEFAULTS = {
    "grpo": {"num_prompts_per_step": 32, "num_generations_per_prompt": 16,
             "max_num_steps": 1000000, "max_rollout_turns": 1, "val_period": 10,
             "val_at_start": False, "val_at_end": False, "max_val_samples": 256,
             "val_num_generations_per_prompt": 1, "seed": 42,
             "skip_reference_policy_logprobs_calculation": False},
    "ppo": {"num_prompts_per_step": 32, "num_generations_per_prompt": 16,
            "max_num_steps": 100000, "max_rollout_turns": 1, "val_period": 20,
            "val_at_start": True, "val_at_end": False, "max_val_samples": 256, "seed": 42,
            "skip_reference_policy_logprobs_calculation": True, "ppo_epochs": 4,
            "policy_training_start_step": 0},
}
LOOP_KEYS = ("num_prompts_per_step", "num_generations_per_prompt", "max_num_steps",
             "max_rollout_turns", "val_period", "val_at_start", "val_at_end", "max_val_samples",
             "val_num_generations_per_prompt", "seed", "overlong_filtering",
             "use_dynamic_sampling", "dynamic_sampling_max_gen_batches", "batch_multiplier",
             "seq_logprob_error_threshold", "skip_reference_policy_logprobs_calculation",
             "normalize_rewards", "use_leave_one_out_baseline", "advantage_clip_low",
             "advantage_clip_high", "ppo_epochs", "policy_training_start_step")
SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": None}
DATASETS = {  # NeMo-RL data set names rlnb's math task can read: hub id, columns, split
    "OpenMathInstruct-2": ("nvidia/OpenMathInstruct-2", "problem", "expected_answer", "train_1M"),
}


def loop_section(r: Report, loop: str) -> dict:
    cfg = dict(NEMO_LOOP_DEFAULTS[loop])
    cfg.update(r.copy(loop, LOOP_KEYS))
    est = r.take_section(f"{loop}.adv_estimator")
    if est:
        cfg["adv_estimator"] = est
    for switch in ("reward_scaling", "reward_shaping", "async_grpo"):
        if r.has(f"{loop}.{switch}"):
            cfg[switch] = r.switched(f"{loop}.{switch}")
    r.neutral_tree(f"{loop}.async_ppo.enabled", (False,), "rlnb has no asynchronous PPO loop")
    r.used(f"{loop}.async_ppo")  # inert while disabled
    for key in ("invalid_tool_call_advantage", "malformed_thinking_advantage"):
        r.neutral_tree(f"{loop}.{key}", (None,), "NeMo-Gym's message-level penalties: rlnb has "
                       "no tool calls or thinking tags to penalise")
    r.ignore(f"{loop}.max_num_epochs", note="rlnb's tasks stream rows in epochs with no end: "
             f"training stops at {loop}.max_num_steps")
    for key in ("val_batch_size", "val_start_at", "stop_at_validation_metric",
                "stop_at_validation_threshold"):
        r.ignore(f"{loop}.{key}", note="validation runs in one batch at every val_period, and "
                 "never stops training early")
    for key in ("calculate_advantages_on_gpu", "deduplicate_multimodal_data",
                "debug_payload_metrics"):
        r.ignore(f"{loop}.{key}", "speed")
    return cfg


def model_section(r: Report, owner: str, policy: dict | None = None) -> dict:
    """``policy`` or (with ``policy`` given) PPO's ``value`` section."""
    cfg: dict[str, Any] = {}
    name = r.take(f"{owner}.model_name")
    if policy is None:
        if name is None:
            r.refuse(f"{owner}.model_name", "missing: NeMo-RL needs the model to train")
        cfg["model_name"] = name
        tokenizer = r.take(f"{owner}.tokenizer.name")
        if tokenizer not in (None, name):
            cfg["tokenizer_name"] = tokenizer
    else:
        if name not in (None, policy.get("model_name")):
            r.refuse(f"{owner}.model_name", "rlnb builds the critic from the policy's model")
        r.neutral(f"{owner}.tokenizer.name", (None, name, policy.get("model_name")),
                  "the critic reads the policy's tokens")
        for key in ("max_total_sequence_length", "precision"):
            r.neutral(f"{owner}.{key}", (policy.get(key),), f"the critic runs with policy.{key}")
        r.neutral(f"{owner}.reward_model_cfg.enabled", (True,), "rlnb's critic is a scalar head")
        r.neutral(f"{owner}.reward_model_cfg.reward_model_type", ("regression",),
                  "rlnb's critic is a scalar regression head")
    for key in ("train_global_batch_size", "train_micro_batch_size", "logprob_batch_size",
                "max_grad_norm") + (("max_total_sequence_length", "precision")
                                    if policy is None else ()):
        if r.has(f"{owner}.{key}"):
            cfg[key] = r.take(f"{owner}.{key}")
    r.neutral(f"{owner}.tokenizer.chat_template_kwargs", (None, {}),
              "rlnb applies the tokenizer's chat template without extra arguments")
    r.neutral(f"{owner}.hf_config_overrides", ({}, None), "rlnb loads the model's own config")
    r.neutral(f"{owner}.dtensor_cfg.lora_cfg.enabled", (False,), "LoRA: rlnb trains every weight")
    r.used(f"{owner}.dtensor_cfg.lora_cfg")  # inert while disabled
    r.neutral(f"{owner}.megatron_cfg.enabled", (False,), "the Megatron back end trains with its "
              "own optimizer and scheduler (megatron_cfg.optimizer); rlnb trains with "
              f"{owner}.optimizer: use the DTensor settings")
    r.neutral(f"{owner}.draft.enabled", (False,), "rlnb trains no draft model")
    r.used(f"{owner}.draft")
    optimizer = _optimizer(r, owner)
    if optimizer is not None:
        cfg["optimizer"] = optimizer
    if policy is None:
        cfg["generation"] = _generation(r, cfg)
    for section in ("dtensor_cfg", "megatron_cfg", "dynamic_batching", "sequence_packing"):
        r.ignore(f"{owner}.{section}", section)
    for key in ("generation_batch_size", "logprob_chunk_size", "offload_optimizer_for_logprob",
                "make_sequence_length_divisible_by", "tokenizer.use_fastokens"):
        r.ignore(f"{owner}.{key}", "speed")
    return cfg


def _optimizer(r: Report, owner: str) -> dict | None:
    if not r.has(f"{owner}.optimizer"):
        return None
    name = r.take(f"{owner}.optimizer.name")
    if name not in ("torch.optim.AdamW", "AdamW"):
        r.refuse(f"{owner}.optimizer.name", "rlnb trains with torch.optim.AdamW")
    opt = r.copy(f"{owner}.optimizer.kwargs", ("lr", "weight_decay", "betas", "eps"))
    for key in ("foreach", "fused"):
        r.ignore(f"{owner}.optimizer.kwargs.{key}", "speed")
    schedule = r.take(f"{owner}.scheduler")
    if schedule is not None:
        warmup = _warmup(schedule, f"{owner}.scheduler")
        if warmup is None:
            r.refuse(f"{owner}.scheduler", "rlnb's schedule is a linear warm-up to a constant "
                     "rate (LinearLR(end_factor=1) then ConstantLR(factor=1), or constant)")
        elif warmup[0]:
            opt["warmup_steps"], opt["warmup_start_factor"] = warmup
    return opt


def _warmup(schedule: Any, where: str) -> tuple[int, float] | None:
    """``(steps, start_factor)`` of a NeMo-RL scheduler list rlnb can run ((0, 1.0): constant),
    or None. A factor or step count that is not a number is named by its key (``where``)."""
    if not isinstance(schedule, list):
        return None
    steps = [(i, e) for i, e in enumerate(schedule) if isinstance(e, Mapping) and "name" in e]
    milestones = [e["milestones"] for e in schedule if isinstance(e, Mapping) and "milestones" in e]
    names = [str(e["name"]).rsplit(".", 1)[-1] for _, e in steps]
    kwargs = [dict(e.get("kwargs") or {}) for _, e in steps]

    def number(j: int, key: str, default: float, kind=float):
        value = kwargs[j].get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                kind is int and value != int(value)):
            raise ValueError(f"{where}[{steps[j][0]}].kwargs.{key}: {value!r} is not "
                             f"{'an integer' if kind is int else 'a number'}")
        return kind(value)

    constant = [n == "ConstantLR" and number(j, "factor", 1 / 3) == 1.0
                for j, n in enumerate(names)]
    if all(constant):
        return 0, 1.0
    if names[0] != "LinearLR" or not all(constant[1:]):
        return None
    total = number(0, "total_iters", 5, int)
    if number(0, "end_factor", 1.0) != 1.0 or milestones not in ([], [[total]]):
        return None
    return total, number(0, "start_factor", 1 / 3)


def schedule_cadence(r: Report, out: dict, loop: str) -> None:
    """NeMo-RL steps the LR schedule once per training step, rlnb once per optimizer step: the
    same only with one optimizer step per training step."""
    prompts, group = (out[loop].get(k) for k in ("num_prompts_per_step",
                                                  "num_generations_per_prompt"))
    if not (is_count(prompts) and is_count(group)):
        return  # not numbers: the config's own check names the key and its type
    rows = prompts * group
    for owner in ("policy", "value"):
        opt = (out.get(owner) or {}).get("optimizer") or {}
        gbs = out[owner].get("train_global_batch_size") if owner in out else None
        if opt.get("warmup_steps") and gbs is not None and gbs != rows:
            r.refuse(f"{owner}.scheduler", f"a warm-up with {owner}.train_global_batch_size={gbs}"
                     f" != {rows} rows per step: NeMo-RL advances it once per step, rlnb once "
                     "per optimizer step")


def _generation(r: Report, policy: dict) -> dict:
    g = r.copy("policy.generation", ("backend", "temperature", "top_p", "top_k", "stop_strings"))
    if g.get("backend", "vllm") not in ("vllm", "hf"):
        r.refuse("policy.generation.backend", "rlnb generates with hf or vllm")
    for key in ("temperature", "top_p", "top_k"):
        r.neutral(f"policy.generation.val_{key}", (g.get(key, SAMPLING_DEFAULTS[key]),),
                  "rlnb validates with the training sampling settings")
    r.neutral("policy.generation.stop_token_ids", (None, []),
              "rlnb stops at the tokenizer's end-of-sequence token and stop_strings")
    total, budget = policy.get("max_total_sequence_length"), r.take("policy.generation."
                                                                     "max_new_tokens")
    if is_count(budget) and is_count(total) and budget >= total:  # else: checked at load, by key
        prompt = r.take("data.max_input_seq_length")
        if is_count(prompt) and prompt < total:
            budget = total - prompt
            r.ignore("policy.generation.max_new_tokens", note="NeMo-RL lets each response fill "
                     f"the context its prompt leaves; rlnb gives every response {budget} tokens "
                     "(max_total_sequence_length - data.max_input_seq_length)", force=True)
        else:
            r.refuse("policy.generation.max_new_tokens", f"{budget} >= max_total_sequence_length"
                     f" ({total}): NeMo-RL lets each response fill what its prompt leaves, rlnb "
                     "gives every response one budget: set it below, or set "
                     "data.max_input_seq_length below max_total_sequence_length")
    if budget is not None:
        g["max_new_tokens"] = budget
    for key in ("vllm_cfg", "vllm_kwargs", "colocated", "mcore_generation_config",
                "port_range_low", "port_range_high", "refit_transport", "refit_cfg",
                "real_quant_export_cpu_offload"):
        r.ignore(f"policy.generation.{key}", "engine")
    return g


def data_section(r: Report, out: dict, loop: str) -> dict:
    r.neutral("data.use_multiple_dataloader", (False, None), "rlnb trains on one data set")
    if isinstance(r.get("data.train"), list):
        r.refuse("data.train", "several training data sets: rlnb's math task reads one")
        return {}

    def pick(section: str, key: str, default: Any = None) -> Any:
        for where in (f"data.{section}.{key}", f"data.default.{key}"):
            if r.has(where):
                return r.take(where)
        return default

    env = pick("train", "env_name", "math")
    if env != "math":
        r.refuse("data.default.env_name", f"{env!r}: rlnb's NeMo-RL environment is math")
    processor = pick("train", "processor", "math_hf_data_processor")
    if processor != "math_hf_data_processor":
        r.refuse("data.default.processor", f"{processor!r}: rlnb formats prompts as NeMo-RL's "
                 "math_hf_data_processor (the tokenizer's chat template)")
    out["policy"]["chat_template"] = True
    data: dict[str, Any] = {"name": "math"}
    name, path = pick("train", "dataset_name"), pick("train", "data_path")
    prompt_key, answer_key = pick("train", "input_key", "input"), pick("train", "output_key")
    if path is not None:
        if name not in (None, "ResponseDataset"):
            r.refuse("data.train.data_path", f"and data.train.dataset_name={name!r} name two data "
                     "sets: set dataset_name to ResponseDataset (or null) to read data_path")
        data.update(dataset_name=str(path), prompt_key=prompt_key,
                    answer_key=answer_key or "output")
    elif name in DATASETS:
        hub, prompt_key, default_answer, split = DATASETS[name]
        data.update(dataset_name=hub, prompt_key=prompt_key,
                    answer_key=answer_key or default_answer, split=split)
    else:
        r.refuse("data.train.dataset_name", f"{name!r}: rlnb's math task reads flat question/"
                 f"answer columns ({sorted(DATASETS)} or data_path with input_key/output_key); "
                 "export the rows to a .jsonl and give data.train.data_path")
    for key, target in (("split", "split"), ("subset", "dataset_config")):
        if pick("train", key) is not None:
            data[target] = pick("train", key)
    data["num_val"] = out[loop]["max_val_samples"]
    validation = r.get("data.validation")
    if isinstance(validation, Mapping):
        val_path, val_split = r.take("data.validation.data_path"), r.take("data.validation.split")
        if val_path is None and val_split is None:
            r.refuse("data.validation", "give data_path (a local file) or split (of the training "
                     "set): rlnb reads validation rows from one of them")
        data["val_split"] = str(val_path) if val_path is not None else val_split
        for key, want in (("input_key", prompt_key), ("output_key", answer_key)):
            r.neutral(f"data.validation.{key}", (want, None), "rlnb reads one pair of columns")
        r.neutral("data.validation.dataset_name", (None, "ResponseDataset", name),
                  "rlnb validates on rows of the training data set or a local file")
    else:
        r.used("data.validation")
    for key in ("prompt_file", "system_prompt_file"):
        for section in ("train", "default", "validation"):
            if r.get(f"data.{section}.{key}") is None:
                r.used(f"data.{section}.{key}")
            r.ignore(f"data.{section}.{key}", note="prompt templates: rlnb sends the question "
                     "column as the user message, in the tokenizer's chat template")
    for section in ("train", "default", "validation"):
        r.ignore(f"data.{section}.split_validation_size", note="rlnb holds out "
                 f"{loop}.max_val_samples rows of the training data when there is no validation "
                 "set")
        r.ignore(f"data.{section}.seed", note="the held-out rows are chosen by rlnb's data.seed")
    r.ignore("data.max_input_seq_length", note="rlnb refuses a prompt longer than "
             "max_total_sequence_length - max_new_tokens")
    r.ignore("data.shuffle", note="rlnb reshuffles the rows every epoch")
    r.ignore("data.num_workers", "workers")
    r.neutral("env.math.math_verify_impl", ("hf_math_verify", None),
              "rlnb scores math with math_verify (NeMo-RL's hf_math_verify)")
    r.ignore("env.math.num_workers", "workers")
    return data


def logger_section(r: Report) -> dict:
    cfg = r.copy("logger", ("tensorboard_enabled", "wandb_enabled"))
    if cfg.get("wandb_enabled"):
        cfg["wandb"] = r.copy("logger.wandb", ("project", "name"))
    else:
        r.used("logger.wandb.project")
        r.used("logger.wandb.name")
    r.ignore("logger", "logging")
    return cfg


def is_count(value: Any) -> bool:
    """Whether a YAML value is an integer (not a bool): arithmetic on a raw value waits for it,
    so a word where a count belongs is named by its own key when the config is checked."""
    return isinstance(value, int) and not isinstance(value, bool)

