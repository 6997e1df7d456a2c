"""NeMo-RL's loop sections in rlnb's keys: the loop (``grpo``, ``ppo``), its single-controller
settings, the scheduler's cadence, ``dpo`` and ``logger`` (one family of ``translate.py``'s
section-by-section translation).

Each function reads its NeMo-RL section through a ``Report`` (which marks every leaf key used,
ignored with a note, or refused with a reason) and returns the rlnb section. The rules are in
``translate.py``'s docstring and docs/nemo_rl_names.md#loading-a-nemo-rl-yaml.
"""

from __future__ import annotations

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
DPO_LOSS_KEYS = ("reference_policy_kl_penalty", "preference_loss_weight", "sft_loss_weight",
                 "preference_average_log_probs", "sft_average_log_probs")
PAIR_COLUMNS = {"prompt_key": "prompt", "chosen_key": "chosen", "rejected_key": "rejected"}


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
