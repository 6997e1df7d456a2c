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
        r.neutral_tree(f"{loop}.{key}", (None,), "NeMo-Gym's message-level penalties: NeMo-RL "
                       "refuses them without NeMo-Gym (env.should_use_nemo_gym), as rlnb does")
    for key in ("penalize_invalid_tool_call", "penalize_malformed_thinking",
                "invalid_tool_call_strategy", "zero_variance_prompt_filtering",
                "num_val_generations_per_prompt"):
        r.ignore(f"{loop}.{key}", note="NeMo-RL reads no such key (its config lets it through "
                 "unread)")
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


def single_controller(r: Report, out: dict, loop: str) -> None:
    """NeMo-RL's single-controller loop (``async_rl``, run_grpo_single_controller.py) as rlnb's
    async GRPO (docs/nemo_rl_names.md#the-single-controller-loop). Its ``in_order`` sampler (the
    default) stamps the batch of step t with t and lets generation run ``max_lookahead_versions``
    = k steps ahead: step t trains on groups sampled by weights t − k … t, meant for t; that is
    rlnb's ``sampler: in_order`` with ``max_trajectory_age_steps`` k, and at k = 0 the
    synchronous loop. ``windowed`` is rlnb's ``sampler: windowed`` (with its buffer size and
    ``sample_freshest_first``). ``ready_first`` and ``weight_fifo`` gate generation as in_order
    does and differ only in which ready groups a step takes when they complete out of order:
    rlnb's collector completes whole steps in order, so they take in_order's groups. Streaming
    (a step's gradient accumulated over chunks of groups, normalised over the whole step),
    pump sizes and fault tolerance do not change the numbers."""
    s = "async_rl.sampler"
    name = r.take(f"{s}.name", "in_order")
    if loop != "grpo":
        r.refuse("async_rl", f"NeMo-RL's single-controller loop runs GRPO, not {loop}")
        r.used("async_rl")
        return
    lead_key = "max_lookahead_versions" if name == "in_order" else "max_staleness_versions"
    lead = r.take(f"{s}.{lead_key}", 1)
    cfg: dict[str, Any] = {}
    if name == "windowed":
        cfg["sampler"] = "windowed"
        cfg["sample_freshest_first"] = bool(r.take(f"{s}.sample_freshest_first", False))
        cfg["max_buffered_rollouts"] = r.take("async_rl.max_buffered_rollouts", 64)
        if lead == 0:
            r.refuse(f"{s}.{lead_key}", "0 with the windowed sampler: groups run ahead and only "
                     "the current weights' are kept (rlnb's windowed sampler needs >= 1)")
    elif name in ("ready_first", "weight_fifo"):
        r.ignore(f"{s}.name", force=True, note=f"{name}: which ready groups a step takes when "
                 "they complete out of order; rlnb's collector completes whole steps in order, "
                 "so it takes in_order's (the same gate: max_staleness_versions steps ahead)")
    elif name != "in_order":
        r.refuse(f"{s}.name", f"{name!r}: rlnb's samplers are in_order and windowed (and "
                 "ready_first / weight_fifo, read as in_order)")
    if not is_count(lead) or lead < 0:
        r.refuse(f"{s}.{lead_key}", f"{lead!r}: a count of steps >= 0")
    elif lead > 0 and not r.get("loss_fn.use_importance_sampling_correction"):
        r.refuse(f"{s}.{lead_key}", f"{lead} without loss_fn.use_importance_sampling_correction: "
                 "NeMo-RL's single controller trains on older weights' groups without "
                 "reweighting them; rlnb's async GRPO requires the correction (as NeMo-RL's "
                 "grpo.async_grpo does)")
    elif lead > 0:
        out[loop]["async_grpo"] = {**(out[loop].get("async_grpo") or {}), "enabled": True,
                                   "max_trajectory_age_steps": lead, **cfg}
    r.used(s)
    r.ignore("async_rl", note="the single-controller loop's pumps, streaming chunks, fault "
             "tolerance and watchdogs (speed and robustness, not the numbers)")


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
    r.ignore(f"{owner}.tokenizer.video", note="video preprocessing (vision-language data): "
             "no effect on text rows")
    r.neutral(f"{owner}.tokenizer.chat_template", (None, "default"),
              "rlnb applies the tokenizer's own chat template")
    r.neutral(f"{owner}.tokenizer.chat_template_kwargs", (None, {}),
              "rlnb applies the tokenizer's chat template without extra arguments")
    r.neutral(f"{owner}.hf_config_overrides", ({}, None), "rlnb loads the model's own config")
    if policy is None:
        lora = _lora(r, owner)
        if lora:
            cfg["lora"] = lora
    else:
        r.neutral(f"{owner}.dtensor_cfg.lora_cfg.enabled", (False,), "LoRA on the critic: "
                  "rlnb's adapters are the policy's")
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


def _lora(r: Report, owner: str) -> dict:
    """NeMo-RL's ``dtensor_cfg.lora_cfg`` (Automodel's LoRA) as rlnb's ``policy.lora``: the
    same key names, and Automodel's choice of modules (the output layer never): every linear
    layer under ``match_all_linear: true`` (the lists have no effect), else ``target_modules``,
    else every linear layer but ``exclude_modules``, else ``'*_proj'``; wildcards match full
    module names in both. ``lora_A_init`` other than ``xavier`` is Kaiming-uniform; peft's
    dropout acts before ``A`` (``dropout_position: pre``), so ``post`` with dropout is refused."""
    s = f"{owner}.dtensor_cfg.lora_cfg"
    if r.get(f"{s}.enabled") is not True:
        return {}
    cfg = r.copy(s, ("enabled", "dim", "alpha", "dropout"))
    every = r.take(f"{s}.match_all_linear", True)
    targets, excluded = r.take(f"{s}.target_modules") or [], r.take(f"{s}.exclude_modules") or []
    if every:
        cfg["match_all_linear"] = True
        for key, names in (("target_modules", targets), ("exclude_modules", excluded)):
            if names:  # Automodel matches every linear layer first: the list has no effect
                r.ignore(f"{s}.{key}", force=True, note="match_all_linear: true adapts every "
                         "linear layer whatever the module lists say (Automodel's order)")
    elif targets:
        cfg.update(match_all_linear=False, target_modules=list(targets))
        if excluded:
            r.refuse(f"{s}.exclude_modules", "with target_modules: Automodel refuses both")
    elif excluded:
        cfg.update(match_all_linear=True, exclude_modules=list(excluded))
    else:
        cfg.update(match_all_linear=False, target_modules=["*_proj"])
    init = r.take(f"{s}.lora_A_init", "xavier")  # Automodel's default
    cfg["lora_A_init"] = "xavier" if init == "xavier" else "kaiming"
    position = r.take(f"{s}.dropout_position", "post")
    if cfg.get("dropout") and position != "pre":
        r.refuse(f"{s}.dropout_position", f"{position!r} with dropout {cfg['dropout']}: rlnb's "
                 "(peft's) LoRA dropout acts on the adapters' input (pre)")
    r.ignore(f"{s}.use_triton", "speed")
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
        steps = _schedule(schedule, f"{owner}.scheduler")
        if steps is None:
            r.refuse(f"{owner}.scheduler", "rlnb's schedule is a linear warm-up, then a constant "
                     "rate or a linear decay (LinearLR(end_factor=1), then ConstantLR(factor=1) "
                     "or LinearLR(start_factor=1) from a milestone at the warm-up's end)")
        else:
            opt.update(steps)
    return opt


def _schedule(schedule: Any, where: str) -> dict | None:
    """rlnb's ``warmup_*`` / ``decay_*`` keys for a NeMo-RL scheduler list (``{}``: constant),
    or None when rlnb cannot run it: a LinearLR warm-up to 1 and/or, from a milestone at its
    end, a LinearLR decay from 1 (ConstantLR(factor=1) anywhere is the constant rate)."""
    if not isinstance(schedule, list):
        return None
    entries = [e for e in schedule if isinstance(e, Mapping) and "name" in e]
    milestones = [e["milestones"] for e in schedule if isinstance(e, Mapping) and "milestones" in e]
    decay = None
    if len(entries) == 2 and str(entries[1]["name"]).endswith("LinearLR"):
        kwargs = dict(entries[1].get("kwargs") or {})
        decay_where = f"{where}[{schedule.index(entries[1])}]"
        start = _number(kwargs, "start_factor", 1 / 3, decay_where)
        if start != 1.0:
            return None
        decay = {"decay_steps": _number(kwargs, "total_iters", 5, decay_where, int),
                 "decay_end_factor": _number(kwargs, "end_factor", 1.0, decay_where)}
        schedule = [e for e in schedule if e is not entries[1] and "milestones" not in e]
        warmup = _warmup(schedule, where)
        if warmup is None or milestones != [[warmup[0]]] or not warmup[0]:
            return None
    elif len(entries) == 1 and str(entries[0]["name"]).endswith("LinearLR") and not milestones:
        kwargs = dict(entries[0].get("kwargs") or {})
        if _number(kwargs, "start_factor", 1 / 3, f"{where}[0]") == 1.0 and _number(
                kwargs, "end_factor", 1.0, f"{where}[0]") != 1.0:  # a decay from the start
            return {"decay_steps": _number(kwargs, "total_iters", 5, f"{where}[0]", int),
                    "decay_end_factor": _number(kwargs, "end_factor", 1.0, f"{where}[0]")}
        warmup = _warmup(schedule, where)
    else:
        warmup = _warmup(schedule, where)
    if warmup is None:
        return None
    out = {"warmup_steps": warmup[0], "warmup_start_factor": warmup[1]} if warmup[0] else {}
    return {**out, **(decay or {})}


def _number(kwargs: Mapping, key: str, default: float, where: str, kind=float):
    """A scheduler's keyword as a number, named by its key when it is not one."""
    value = kwargs.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            kind is int and value != int(value)):
        raise ValueError(f"{where}.kwargs.{key}: {value!r} is not "
                         f"{'an integer' if kind is int else 'a number'}")
    return kind(value)


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
        if (opt.get("warmup_steps") or opt.get("decay_steps")) and is_count(gbs) and (
                gbs < prompts * group):
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
    for key in ("num_prompts_per_dataloader", "custom_dataloader"):
        r.used(f"data.{key}")  # read only with use_multiple_dataloader (refused above)
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
    # max_val_samples: null (NeMo-Gym's): every row of the validation set; without one, rlnb
    # holds out NeMo-RL's default count of training rows
    data["num_val"] = out[loop]["max_val_samples"] or NEMO_LOOP_DEFAULTS[loop]["max_val_samples"]
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
        for key in ("num_frames", "video_sampling_style", "video_target_num_patches",
                    "video_temporal_patch_size", "video_maintain_aspect_ratio"):
            r.ignore(f"data.{section}.{key}", note="video preprocessing (vision-language data): "
                     "no effect on text rows")
        r.ignore(f"data.{section}.allowed_problem_types", note="a filter of NeMo-RL's intent "
                 "data set (a local file is read whole)")
        r.ignore(f"data.{section}.split_validation_size", note="rlnb holds out "
                 f"{loop}.max_val_samples rows of the training data when there is no validation "
                 "set")
        r.ignore(f"data.{section}.seed", note="the held-out rows are chosen by rlnb's data.seed")
        r.ignore(f"data.{section}.download_dir", note="where a hub data set is cached")
    r.ignore("data.max_input_seq_length", note="rlnb refuses a prompt longer than "
             "max_total_sequence_length - 1 (NeMo-RL keeps it, truncated, out of the loss)")
    for key in ("dataset_name", "prompt_file", "system_prompt_file"):
        r.ignore(f"data.{key}", note="NeMo-RL's GRPO reads its data sets from data.train and "
                 "data.default (a top-level data set is its evaluation scripts' layout)")
    r.ignore("data.add_system_prompt", note="read only by NeMo-RL's sliding-puzzle script (its "
             "system prompt); run_grpo.py and rlnb's math task have none")
    r.ignore("data.shuffle", note="rlnb reshuffles the rows every epoch")
    r.ignore("data.num_workers", "workers")
    if r.get("env.should_use_nemo_gym"):
        r.refuse("env.should_use_nemo_gym", "NeMo-Gym's rollouts (agent servers over HTTP): "
                 "rlnb samples the data set's rows itself; set it false to train on your data "
                 "(NeMo-RL's native path)")
    r.used("env.should_use_nemo_gym")
    for key in ("should_log_nemo_gym_responses", "should_mask_flagged_samples"):
        r.used(f"env.{key}")  # NeMo-Gym's switches (the refusal above when it is on)
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
    if not cfg.get("sft_loss_weight") and "sft_average_log_probs" in cfg:  # (rlnb refuses it)
        cfg.pop("sft_average_log_probs")
        r.ignore("dpo.sft_average_log_probs", force=True, note="no SFT term to average "
                 "(sft_loss_weight is 0)")
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

