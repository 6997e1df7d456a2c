"""NeMo-RL's data and environment sections in rlnb's ``data`` keys: the math data set, its
columns and verifier (one family of ``translate.py``'s section-by-section translation).

The function reads its NeMo-RL sections through a ``Report`` (which marks every leaf key used,
ignored with a note, or refused with a reason) and returns the rlnb section. The rules are in
``translate.py``'s docstring and docs/nemo_rl_names.md#loading-a-nemo-rl-yaml.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlnb.run.config.nemo.loop_sections import NEMO_LOOP_DEFAULTS
from rlnb.run.config.nemo.report import Report

DATASETS = {  # NeMo-RL data set names rlnb's math task can read: hub id, columns, split
    "OpenMathInstruct-2": ("nvidia/OpenMathInstruct-2", "problem", "expected_answer", "train_1M"),
}


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
