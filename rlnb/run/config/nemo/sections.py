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
    period = cfg.get("val_period")
    if is_count(period) and period < 0:
        cfg["val_period"] = 0  # NeMo-RL: validation off (rlnb's 0)
    est = r.take_section(f"{loop}.adv_estimator")
    if est:
        cfg["adv_estimator"] = est
    for switch in ("reward_scaling", "reward_shaping", "async_grpo"):
        if r.has(f"{loop}.{switch}"):
            cfg[switch] = r.switched(f"{loop}.{switch}")
    shaping = cfg.get("reward_shaping") or {}
    if shaping.get("enabled") and shaping.get("stop_properly_penalty_coef") is not None:
        for key in ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length"):
            if shaping.pop(key, None) is not None:  # NeMo-RL warns, then ignores them
                r.ignore(f"{loop}.reward_shaping.{key}", force=True, note="DAPO's overlong "
                         "penalty beside stop_properly_penalty_coef: NeMo-RL applies the "
                         "stop-properly penalty and ignores these (with a warning)")
    for key in ("in_flight_weight_updates", "recompute_kv_cache_after_weight_updates"):
        if cfg.get("async_grpo", {}).pop(key, None):  # (inert while off)
            r.ignore(f"{loop}.async_grpo.{key}", force=True, note="vLLM loads new weights into "
                     "generations in progress (and may recompute their KV cache); rlnb's "
                     "collector loads them between generation calls, so each response is "
                     "sampled by one policy version, no older than max_trajectory_age_steps")
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
        if name == "tiny":
            r.ignore(f"{owner}.tokenizer.name", note="the embedded tiny model has its own "
                     "character tokenizer")
        tokenizer = r.take(f"{owner}.tokenizer.name")
        if tokenizer not in (None, name) and name != "tiny":
            cfg["tokenizer_name"] = tokenizer
    else:
        if name not in (None, policy.get("model_name")):
            r.refuse(f"{owner}.model_name", "rlnb builds the critic from the policy's model")
        if policy.get("model_name") == "tiny":
            r.ignore(f"{owner}.tokenizer.name", note="the embedded tiny model has its own "
                     "character tokenizer")
        r.neutral(f"{owner}.tokenizer.name", (None, name, policy.get("model_name")),
                  "the critic reads the policy's tokens")
        for key in ("max_total_sequence_length", "precision"):
            r.neutral(f"{owner}.{key}", (policy.get(key),), f"the critic runs with policy.{key}")
        if r.get(f"{owner}.megatron_cfg.enabled") is not True:  # (the DTensor worker's switch)
            r.neutral(f"{owner}.reward_model_cfg.enabled", (True,),
                      "rlnb's critic is a scalar head")
            r.neutral(f"{owner}.reward_model_cfg.reward_model_type", ("regression",),
                      "rlnb's critic is a scalar regression head")
    for key in ("train_global_batch_size", "train_micro_batch_size", "logprob_batch_size",
                "max_grad_norm") + (("max_total_sequence_length", "precision")
                                    if policy is None else ()):
        if r.has(f"{owner}.{key}"):
            cfg[key] = r.take(f"{owner}.{key}")
    model = name if policy is None else policy.get("model_name")
    r.neutral(f"{owner}.is_vlm", (False, None), "a vision-language policy: rlnb trains causal "
              "language models on text")
    if model == "tiny":  # what the named model's config or chat template would have taken
        for key in ("hf_config_overrides", "tokenizer.chat_template_kwargs",
                    "tokenizer.chat_template"):
            r.ignore(f"{owner}.{key}", note="settings of the named model's config and chat "
                     "template: the embedded tiny model has its own and no template")
    r.neutral(f"{owner}.tokenizer.chat_template", (None, "default"),
              "rlnb applies the tokenizer's own chat template")
    r.neutral(f"{owner}.tokenizer.chat_template_kwargs", (None, {}),
              "rlnb applies the tokenizer's chat template without extra arguments")
    r.neutral(f"{owner}.hf_config_overrides", ({}, None), "rlnb loads the model's own config")
    r.neutral(f"{owner}.dtensor_cfg.lora_cfg.enabled", (False,), "LoRA: rlnb trains every weight")
    r.used(f"{owner}.dtensor_cfg.lora_cfg")  # inert while disabled
    if r.get(f"{owner}.megatron_cfg.enabled") is True:
        optimizer = _megatron_optimizer(r, owner, cfg)
    else:
        optimizer = _optimizer(r, owner)
    if optimizer is not None:
        cfg["optimizer"] = optimizer
    if policy is None:
        cfg["generation"] = _generation(r, cfg)
    for section in ("dtensor_cfg", "megatron_cfg", "dynamic_batching", "sequence_packing"):
        r.ignore(f"{owner}.{section}", section)
    r.ignore(f"{owner}.router_replay", note="mixture-of-experts routing replay (a dense model "
             "has no router)")
    for key in ("quant_cfg", "quant_calib_data", "quant_calib_size", "quant_batch_size",
                "quant_sequence_length", "disable_modelopt_layer_spec", "refit_buffer_size_gb",
                "generation.quant_cfg", "generation.real_quant", "generation.real_quant_ignore"):
        r.ignore(f"{owner}.{key}", note="quantisation-aware training and quantised generation "
                 "(ModelOpt): rlnb trains and samples in policy.precision")
    r.ignore(f"{owner}.draft", force=True, note="the EAGLE draft model of speculative decoding "
             "(it speeds up sampling without changing what is sampled): rlnb trains none")
    r.ignore(f"{owner}.activation_checkpointing_enabled", "speed")
    for key in ("generation_batch_size", "logprob_chunk_size", "offload_optimizer_for_logprob",
                "make_sequence_length_divisible_by", "tokenizer.use_fastokens"):
        r.ignore(f"{owner}.{key}", "speed")
    return cfg


def _megatron_optimizer(r: Report, owner: str, cfg: dict) -> dict:
    """The Megatron back end's optimizer, as NeMo-RL builds it there: Megatron's ``adam`` is
    AdamW (decoupled weight decay); its scheduler warms up linearly from ``lr_warmup_init`` to
    ``lr`` over ``lr_warmup_iters`` ticks (rlnb's ``warmup_start_factor = lr_warmup_init / lr``),
    then holds (``lr_decay_style: constant``); ``clip_grad`` is the gradient clip."""
    m = f"{owner}.megatron_cfg"
    r.used(f"{owner}.megatron_cfg.enabled")
    for key in ("optimizer", "scheduler"):  # NeMo-RL's Megatron worker reads neither
        r.ignore(f"{owner}.{key}", note="the Megatron back end trains with megatron_cfg's "
                 "optimizer and scheduler; NeMo-RL does not read these beside it")
        r.used(f"{owner}.{key}")  # (a null)
    r.used(f"{owner}.reward_model_cfg")  # the DTensor value worker's switch
    name = r.take(f"{m}.optimizer.optimizer")
    if name != "adam":
        r.refuse(f"{m}.optimizer.optimizer", f"{name!r}: rlnb trains with AdamW (Megatron's "
                 "adam)")
    opt = {key: r.take(f"{m}.optimizer.{src}") for key, src in (
        ("lr", "lr"), ("weight_decay", "weight_decay"), ("eps", "adam_eps"))
        if r.has(f"{m}.optimizer.{src}")}
    if r.has(f"{m}.optimizer.adam_beta1") or r.has(f"{m}.optimizer.adam_beta2"):
        opt["betas"] = [r.take(f"{m}.optimizer.adam_beta1", 0.9),
                        r.take(f"{m}.optimizer.adam_beta2", 0.999)]
    if r.has(f"{m}.optimizer.clip_grad"):
        cfg["max_grad_norm"] = r.take(f"{m}.optimizer.clip_grad")
    for key in ("sgd_momentum", "min_lr"):  # read by SGD / a decaying schedule only
        r.used(f"{m}.optimizer.{key}")
    s = f"{m}.scheduler"
    style = r.take(f"{s}.lr_decay_style", "constant")
    if style != "constant":
        r.refuse(f"{s}.lr_decay_style", f"{style!r}: rlnb's schedule is a linear warm-up to a "
                 "constant rate (lr_decay_style: constant)")
    # Megatron's constant weight-decay style applies end_weight_decay (start must equal it)
    incr = r.take(f"{s}.weight_decay_incr_style", "constant")
    start, end = r.take(f"{s}.start_weight_decay"), r.take(f"{s}.end_weight_decay")
    if incr != "constant" or start != end:
        r.refuse(f"{s}.weight_decay_incr_style", f"{incr!r} from {start} to {end}: rlnb keeps "
                 "weight_decay constant")
    elif end is not None:
        opt["weight_decay"] = end
    r.used(f"{s}.lr_decay_iters")  # no decay
    warmup, init = r.take(f"{s}.lr_warmup_iters", 0), r.take(f"{s}.lr_warmup_init", 0.0)
    if is_count(warmup) and warmup > 0 and isinstance(init, (int, float)) and opt.get("lr"):
        opt["warmup_steps"] = warmup
        opt["warmup_start_factor"] = float(init) / float(opt["lr"])
    r.ignore(m, "megatron_cfg")
    return opt


def _optimizer(r: Report, owner: str) -> dict | None:
    if not r.has(f"{owner}.optimizer"):
        return None
    name = r.take(f"{owner}.optimizer.name")
    fused_adam = str(name).endswith("FusedAdam")  # Transformer Engine's: AdamW by default
    if name not in ("torch.optim.AdamW", "AdamW") and not fused_adam:
        r.refuse(f"{owner}.optimizer.name", "rlnb trains with torch.optim.AdamW")
    if fused_adam:
        r.neutral(f"{owner}.optimizer.kwargs.adam_w_mode", (True,), "rlnb trains with AdamW "
                  "(decoupled weight decay)")
        for key in ("master_weights", "store_param_remainders", "exp_avg_dtype",
                    "exp_avg_sq_dtype", "master_weight_dtype"):
            r.ignore(f"{owner}.optimizer.kwargs.{key}", note="how Transformer Engine's FusedAdam "
                     "stores weights and moments (rlnb keeps them in the policy's precision)")
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
    """NeMo-RL's workers tick the LR schedule once per ``train()`` call (a step's pass over its
    batch, however many global batches it holds): ``warmup_counts: training_steps`` where a step
    holds several global batches (with one, both cadences are the same)."""
    prompts, group = (out[loop].get(k) for k in ("num_prompts_per_step",
                                                  "num_generations_per_prompt"))
    if loop == "dpo":  # pairs of a data set, two rows each
        prompts, group = prompts, 2
    if not (is_count(prompts) and is_count(group)):
        return  # not numbers: the config's own check names the key and its type
    for owner in ("policy", "value"):
        section = out.get(owner) or {}
        opt, gbs = section.get("optimizer") or {}, section.get("train_global_batch_size")
        if opt.get("warmup_steps") and is_count(gbs) and gbs < prompts * group:
            opt["warmup_counts"] = "training_steps"


def _generation(r: Report, policy: dict) -> dict:
    g = r.copy("policy.generation", ("temperature", "top_p", "top_k", "stop_strings"))
    r.ignore("policy.generation.backend", note="the inference engine: rlnb samples with "
             "policy.generation.backend=hf (rlnb.policy.generation.backend=vllm for vLLM)")
    for key in ("temperature", "top_p", "top_k"):
        r.neutral(f"policy.generation.val_{key}", (g.get(key, SAMPLING_DEFAULTS[key]),),
                  "rlnb validates with the training sampling settings")
    if policy.get("model_name") == "tiny":
        r.ignore("policy.generation.stop_token_ids", note="token ids of the named model's "
                 "tokenizer (the embedded tiny model has its own)")
    elif r.get("policy.generation.stop_token_ids"):
        g["stop_token_ids"] = r.take("policy.generation.stop_token_ids")
    r.used("policy.generation.stop_token_ids")  # (null or [])
    # NeMo-RL's budget: vLLM's max_model_len (the total length) stops each sequence, so a
    # response fills what its own prompt leaves, up to max_new_tokens (often the total itself)
    total, budget = policy.get("max_total_sequence_length"), r.take("policy.generation."
                                                                     "max_new_tokens")
    if is_count(budget) and is_count(total):  # else: checked at load, by key
        budget = min(budget, total)
    if budget is not None:
        g["max_new_tokens"] = budget
    g["fill_context"] = True
    r.neutral("policy.generation.bad_words", (None, []), "rlnb samples from the whole "
              "vocabulary (no banned words)")
    for key in ("vllm_cfg", "vllm_kwargs", "trtllm_cfg", "trtllm_kwargs", "sglang_cfg",
                "sglang_kwargs", "dynamo_cfg", "use_async_rollouts", "colocated",
                "mcore_generation_config",
                "port_range_low", "port_range_high", "refit_transport", "refit_cfg",
                "real_quant_export_cpu_offload"):
        r.ignore(f"policy.generation.{key}", "engine")
    return g


def data_section(r: Report, out: dict, loop: str) -> dict:
    r.neutral("data.use_multiple_dataloader", (False, None), "rlnb trains on one data set")
    if isinstance(r.get("data.train"), list):
        r.refuse("data.train", "several training data sets: rlnb's math task reads one")
        r.used("data")  # the rest describes the refused data sets
        r.used("env")
        return {}

    def pick(section: str, key: str, default: Any = None) -> Any:
        """``data.<section>.<key>``, else ``data.default.<key>`` (which it overrides)."""
        found = [w for w in (f"data.{section}.{key}", f"data.default.{key}") if r.has(w)]
        for where in found:
            r.used(where)
        return r.get(found[0]) if found else default

    env = pick("train", "env_name", "math")
    if env != "math":
        r.refuse("data.default.env_name", f"{env!r}: rlnb's NeMo-RL environment is math")
        r.used(f"env.{env}")  # that environment's settings go with the refusal
    processor = pick("train", "processor", "math_hf_data_processor")
    if processor != "math_hf_data_processor":
        r.refuse("data.default.processor", f"{processor!r}: rlnb formats prompts as NeMo-RL's "
                 "math_hf_data_processor (the tokenizer's chat template)")
    # math_hf_data_processor: the tokenizer's chat template (the embedded tiny model has none)
    out["policy"]["chat_template"] = out["policy"].get("model_name") != "tiny"
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
        r.ignore(f"data.{section}.download_dir", note="where a hub data set is cached")
    r.ignore("data.max_input_seq_length", note="rlnb refuses a prompt longer than "
             "max_total_sequence_length - 1 (NeMo-RL keeps it, truncated, out of the loss)")
    r.ignore("data.shuffle", note="rlnb reshuffles the rows every epoch")
    r.ignore("data.num_workers", "workers")
    for other in r.get("env") or {}:
        if other != env:
            r.used(f"env.{other}")  # an environment no data set names: NeMo-RL builds none
    verify = r.take("env.math.math_verify_impl", "hf_math_verify")
    if verify == "dapo_math_verify":
        data["verifier"] = "dapo"
    elif verify != "hf_math_verify":
        r.refuse("env.math.math_verify_impl", f"{verify!r}: rlnb's math verifiers are NeMo-RL's "
                 "hf_math_verify and dapo_math_verify")
    r.ignore("env.math.num_workers", "workers")
    return data


DPO_LOSS_KEYS = ("reference_policy_kl_penalty", "preference_loss_weight", "sft_loss_weight",
                 "preference_average_log_probs", "sft_average_log_probs")
PAIR_COLUMNS = {"prompt_key": "prompt", "chosen_key": "chosen", "rejected_key": "rejected"}


def dpo_section(r: Report, out: dict) -> dict:
    """NeMo-RL's DPO YAML: the loss keys and steps as they are; NeMo-RL counts
    ``train_global_batch_size`` (and the micro-batch) in pairs, rlnb in rows (twice as many);
    the pairs come from ``data.train.data_path`` (prompt/chosen/rejected rows, NeMo-RL's
    ``BinaryPreferenceDataset``). NeMo-RL validates the preference loss on validation pairs,
    rlnb held-out task accuracy, so validation is off and its keys are listed."""
    cfg = r.copy("dpo", DPO_LOSS_KEYS + ("max_num_steps", "seed"))
    policy = out["policy"]
    pairs = policy.get("train_global_batch_size")
    if is_count(pairs):
        cfg["num_prompts_per_step"] = pairs  # pairs per step (rlnb's name)
    for key in ("train_global_batch_size", "train_micro_batch_size"):
        if is_count(policy.get(key)):
            policy[key] = 2 * policy[key]
    cfg.update(val_period=0, val_at_start=False, val_at_end=False)
    for key in ("val_period", "val_at_start", "val_at_end", "val_batches",
                "val_global_batch_size", "val_micro_batch_size"):
        r.ignore(f"dpo.{key}", note="NeMo-RL's DPO validates the preference loss on validation "
                 "pairs; rlnb's validates held-out task accuracy (off here: rlnb.dpo.val_period "
                 "turns it on)")
    r.ignore("dpo.max_num_epochs", note="rlnb cycles through the pairs for dpo.max_num_steps")
    name, path = r.take("data.train.dataset_name"), r.take("data.train.data_path")
    if path is None:
        r.refuse("data.train.dataset_name", f"{name!r}: rlnb's DPO reads prompt/chosen/rejected "
                 "rows from a file: give data.train.data_path (dataset_name "
                 "BinaryPreferenceDataset)")
    elif name not in (None, "BinaryPreferenceDataset"):
        r.refuse("data.train.dataset_name", f"{name!r}: rlnb's DPO reads data.train.data_path "
                 "as prompt/chosen/rejected rows (BinaryPreferenceDataset)")
    for key, column in PAIR_COLUMNS.items():
        r.neutral(f"data.train.{key}", (column, None), f"rlnb reads the {column} column")
    cfg["pairs"] = {"source": "dataset", "dataset": str(path)}
    r.used("data.validation")  # validation pairs: see the docstring
    r.ignore("data.validation", note="validation pairs (rlnb validates task accuracy)")
    for key in ("split", "subset", "prompt_file", "system_prompt_file"):
        r.used(f"data.train.{key}")  # a local file has one split
        r.used(f"data.default.{key}")
    r.used("data.default.dataset_name")
    r.ignore("data.max_input_seq_length", note="rlnb refuses a pair longer than "
             "policy.max_total_sequence_length")
    r.ignore("data.shuffle", note="rlnb reshuffles the pairs every pass")
    r.ignore("data.num_workers", "workers")
    return cfg


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

