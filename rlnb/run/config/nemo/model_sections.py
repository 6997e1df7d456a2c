"""NeMo-RL's model sections in rlnb's keys: the policy's and the critic's sizes, LoRA, the
optimizer NeMo-RL builds (DTensor's, or Megatron's) with its schedule, and generation (one family
of ``translate.py``'s section-by-section translation).

Each function reads its NeMo-RL section through a ``Report`` (which marks every leaf key used,
ignored with a note, or refused with a reason) and returns the rlnb section. The rules are in
``translate.py``'s docstring and docs/nemo_rl_names.md#loading-a-nemo-rl-yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb.run.config.nemo.loop_sections import is_count
from rlnb.run.config.nemo.report import Report

SAMPLING_DEFAULTS = {"temperature": 1.0, "top_p": 1.0, "top_k": None}


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
