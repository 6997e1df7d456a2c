"""NeMo-RL's YAML configs (``grpo_math_1B.yaml``, ``ppo_math_1B.yaml``, ...) as rlnb configs.

    rlnb train grpo_math_1B.yaml policy.model_name=/models/qwen --ignore-unsupported
    config = rlnb.load_config("grpo_math_1B.yaml", ["data.train.data_path=gsm8k.jsonl"],
                              ignore_unsupported=True)

Every leaf key of the NeMo-RL config lands in exactly one of three groups:
- used with NeMo-RL's meaning: the loop (``grpo``, ``ppo`` or ``dpo``), ``loss_fn``,
  ``value_loss_fn``, the policy's and critic's sizes, the optimizer NeMo-RL builds (the DTensor
  one, or Megatron's under ``megatron_cfg.enabled``), its warm-up ticked once per step, the
  response budget (what the prompt leaves: ``fill_context``), sampling, the math data set and
  verifier, DPO's pairs, checkpointing and loggers. Keys that are off
  (``lora_cfg.enabled: false``, a disabled ``reward_shaping`` with its parameters,
  ``invalid_tool_call_advantage: null``, ...) count here:
  rlnb does the same;
- ignored, listed: what does not change the numbers (cluster, parallelism, DTensor/Megatron and
  vLLM settings, packing, ports, logging back ends, checkpoint formats) and a few settings rlnb
  handles its own way (prompt templates, held-out validation rows, epochs), each with a note.
  ``load_config`` refuses to run with any unless ``ignore_unsupported=True``
  (``rlnb train --ignore-unsupported``), so nothing is dropped without the user seeing it;
- refused, named with a reason: keys that would change the algorithm and rlnb does not
  implement (LoRA, NeMo-Gym penalties, another verifier, a scheduler rlnb cannot reproduce,
  ...), NeMo-RL's other loops (SFT, distillation, reward models) and keys this reader does not
  map; all of a file's refusals in one message.

NeMo-RL's meaning also where rlnb's defaults differ: the loop's keys absent from the file take
NeMo-RL's defaults (``val_at_start`` false, ``seed`` 42, ...), and there is no warm start
(``sft.enabled`` false: NeMo-RL starts RL from ``policy.model_name``). A top-level ``rlnb:``
section (or ``rlnb.<key>=...`` overrides) is laid over the translated config for rlnb's own
options (``rlnb.sft.enabled=true``, ``rlnb.logger.print_metrics=true``). Overrides use NeMo-RL's
key paths and are applied before the interpolations, as NeMo-RL does.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlnb.config import apply_overrides, flatten
from rlnb.run.config.nemo.data_sections import data_section
from rlnb.run.config.nemo.loop_sections import (
    dpo_section,
    logger_section,
    loop_section,
    schedule_cadence,
    single_controller,
)
from rlnb.run.config.nemo.model_sections import model_section
from rlnb.run.config.nemo.reader import (
    merge,
    read_nemo_yaml,
    resolve_interpolations,
    unset_env_keys,
)
from rlnb.run.config.nemo.report import Report, group_lines

OTHER_LOOPS = {"sft": "SFT", "distillation": "distillation", "rm": "reward-model"}
NEMO_MARKERS = ("defaults", "data_plane", "reward_penalties")
INFRA = {  # notes of the keys rlnb ignores, by kind
    "cluster": "GPUs and nodes: rlnb runs in the processes its launcher starts",
    "data_plane": "NeMo-RL's TransferQueue data plane",
    "dtensor_cfg": "DTensor/FSDP sharding, offload and activation checkpointing",
    "megatron_cfg": "the Megatron back end's parallelism, precision and engine settings (rlnb "
                    "trains the same model with torch; an enabled back end's optimizer and "
                    "scheduler are read)",
    "dynamic_batching": "micro-batch packing: the loss is normalised globally, same numbers",
    "sequence_packing": "micro-batch packing: the loss is normalised globally, same numbers",
    "speed": "memory and speed only",
    "engine": "generation-engine plumbing (vLLM/Megatron engine, ports, weight transfer)",
    "logging": "logging back ends and where logs go (rlnb logs into the run directory)",
    "checkpoint": "checkpoint format and location (rlnb keeps the last keep_top_k by step in "
                  "the run directory)",
    "workers": "worker processes",
}


@dataclass
class Translation:
    """A translated config and what happened to each NeMo-RL key."""

    config: dict
    ignored: dict[str, str] = field(default_factory=dict)  # dotted key -> why it has no effect
    roots: dict[str, str] = field(default_factory=dict)  # ignored key -> its listed section
    refused: dict[str, str] = field(default_factory=dict)  # dotted key -> why rlnb cannot run it


def is_nemo_config(data: Mapping) -> bool:
    """A NeMo-RL config: it inherits (``defaults:``), has a section rlnb's configs never have,
    or a NeMo-RL-shaped ``cluster`` / ``policy`` / ``data`` section."""
    if any(k in data for k in NEMO_MARKERS):
        return True
    cluster, policy, data_cfg = data.get("cluster"), data.get("policy"), data.get("data")
    if isinstance(cluster, Mapping) and any(k in cluster for k in ("gpus_per_node", "num_nodes")):
        return True
    if isinstance(policy, Mapping) and any(
            k in policy for k in ("dtensor_cfg", "megatron_cfg", "tokenizer", "scheduler")):
        return True
    return isinstance(data_cfg, Mapping) and any(k in data_cfg for k in ("train", "default"))


def load_nemo_config(source: str | Path | Mapping, overrides=(), *,
                     ignore_unsupported: bool = False, check=None) -> dict:
    """rlnb's config data (for ``MasterConfig``) from a NeMo-RL YAML path or dict, with NeMo-RL
    overrides. Raises ``ValueError`` naming every refused key, with what ``check`` (rlnb's own
    validation of config data, raising ``ValueError``) says of the rest, or (unless
    ``ignore_unsupported``) listing the ignored ones."""
    name = Path(source).name if isinstance(source, (str, Path)) else "(dict)"
    result = translate(resolved(source, overrides))
    if result.refused:  # with what rlnb's own checks say of the rest: one round of refusals
        raise ValueError(refusal_message(name, result.refused) + config_check(result, check))
    if result.ignored and not ignore_unsupported:
        raise ValueError(ignored_message(name, result))
    return result.config


def resolved(source: str | Path | Mapping, overrides=()) -> dict:
    """The NeMo-RL config as NeMo-RL resolves it: ``defaults:``, the overrides (NeMo-RL's key
    paths), the interpolations; then the ``rlnb.``-prefixed overrides."""
    if isinstance(source, Mapping):
        if "defaults" in source:
            raise ValueError("a NeMo-RL config with defaults: must be loaded from its file (the "
                             "parents are found next to it)")
        data = copy.deepcopy(dict(source))
    else:
        data = read_nemo_yaml(source)
    ours = [o for o in overrides if o.lstrip("+").startswith("rlnb.")]
    theirs = [o.lstrip("+") for o in overrides if o not in ours]
    data = resolve_interpolations(apply_overrides(data, theirs))
    for item in ours:
        apply_overrides(data, [item.lstrip("+")])
    return data


def translate_file(path: str | Path, overrides=()) -> tuple[dict, dict, dict]:
    """``(ignored, refused, roots)`` of one NeMo-RL YAML, without raising for a refusal (a file
    the reader cannot resolve is one refusal, ``(reader)``): for tools/nemo_configs.py."""
    try:
        result = translate(resolved(path, overrides))
    except ValueError as err:
        return {}, {"(reader)": str(err).splitlines()[0]}, {}
    return result.ignored, result.refused, result.roots


def translate(nemo: dict) -> Translation:
    """Map a resolved NeMo-RL config onto rlnb's sections (the module docstring)."""
    data = nemo.get("data")
    if isinstance(data, Mapping):  # a list of one data set is that data set (NeMo-RL's too)
        nemo = {**nemo, "data": {k: v[0] if k in ("train", "validation") and isinstance(v, list)
                                 and len(v) == 1 else v for k, v in data.items()}}
    r = Report(flatten({k: v for k, v in nemo.items() if k != "rlnb"}), INFRA)
    loops = [k for k in ("grpo", "ppo") if isinstance(nemo.get(k), Mapping)]
    for key, what in OTHER_LOOPS.items():
        if key in nemo:
            r.refuse(key, f"NeMo-RL's {what} loop: rlnb reads NeMo-RL YAML for GRPO, PPO and DPO "
                     "(the SFT loss is in rlnb.nemo.loss)")
    if isinstance(nemo.get("dpo"), Mapping) and not r.refused:
        return _translate_dpo(r, nemo)
    if len(loops) != 1:
        if not r.refused:
            r.refuse("grpo" if loops else "(top level)", "a NeMo-RL GRPO or PPO config has "
                     "exactly one of the grpo: and ppo: sections")
        return Translation({}, refused=r.refused)
    loop = loops[0]
    out: dict[str, Any] = {"algorithm": loop, "sft": {"enabled": False}}
    out["policy"] = model_section(r, "policy")
    out["loss_fn"] = r.take_section("loss_fn")
    out[loop] = loop_section(r, loop)
    if loop == "ppo":
        out["value"] = model_section(r, "value", policy=out["policy"])
        out["value_loss_fn"] = r.take_section("value_loss_fn")
    schedule_cadence(r, out, loop)
    extras = nemo.get("rlnb") or {}
    task = (extras.get("data") or {}).get("name") if isinstance(extras, Mapping) else None
    if task not in (None, "math"):  # another task in rlnb: NeMo-RL's data keys are not its keys
        note = (f"replaced by the rlnb: section's data (task {task!r}), which reads none of "
                "NeMo-RL's math data keys")
        r.ignore("data", note=note, force=True)
        r.ignore("env", note=note, force=True)
        out["data"] = {}
    else:
        out["data"] = data_section(r, out, loop)
    out["checkpointing"] = r.copy("checkpointing", ("enabled", "save_period", "keep_top_k"))
    r.ignore("checkpointing", "checkpoint")
    out["logger"] = logger_section(r)
    r.neutral_tree("reward_penalties", (False, None), "NeMo-Gym's reward penalties: rlnb has "
                   "none")
    if r.get("on_policy_distillation.enabled"):
        r.refuse("on_policy_distillation", "on-policy distillation from teacher models: rlnb's "
                 "GRPO has none")
    r.used("on_policy_distillation")  # (off)
    if r.has("async_rl"):
        single_controller(r, out, loop)
    r.ignore("cluster", "cluster")
    r.ignore("data_plane", "data_plane")
    r.refuse_rest("not a key rlnb's NeMo-RL reader maps (a newer NeMo-RL key?): remove it, or "
                  "ask for it to be mapped")
    if not isinstance(extras, Mapping):
        r.refuse("rlnb", "the rlnb: section must be a mapping of rlnb config sections")
        extras = {}
    config = merge(out, extras)
    refuse_unset_env(r, config)
    return Translation(config, ignored=r.ignored, roots=r.roots, refused=r.refused)


def _translate_dpo(r: Report, nemo: dict) -> Translation:
    out: dict[str, Any] = {"algorithm": "dpo", "sft": {"enabled": False}}
    out["policy"] = model_section(r, "policy")
    out["dpo"] = dpo_section(r, out)
    schedule_cadence(r, out, "dpo")
    out["checkpointing"] = r.copy("checkpointing", ("enabled", "save_period", "keep_top_k"))
    r.ignore("checkpointing", "checkpoint")
    out["logger"] = logger_section(r)
    r.ignore("cluster", "cluster")
    r.refuse_rest("not a key rlnb's NeMo-RL reader maps (a newer NeMo-RL key?): remove it, or "
                  "ask for it to be mapped")
    config = merge(out, nemo.get("rlnb") or {})
    refuse_unset_env(r, config)
    return Translation(config, ignored=r.ignored, roots=r.roots, refused=r.refused)


def refuse_unset_env(r: Report, config: dict) -> None:
    """A value rlnb uses that needs an unset environment variable (the reader keeps it as its
    text: OmegaConf resolves lazily, so an ignored key may hold one)."""
    for key, (text, variable) in unset_env_keys(config, with_variable=True).items():
        r.refuse(f"(rlnb's {key})", f"{text!r} needs an environment variable that is not set "
                 f"({variable}: set it, or override the NeMo-RL key that gives it)")


def config_check(result: Translation, check) -> str:
    """rlnb's own verdict (``check``) on the translated keys of a refused file ('' when they
    pass, or when too little was translated to check), so one message holds every refusal."""
    if check is None or not result.config.get("algorithm"):
        return ""
    refused_roots = {key.split(".")[0] for key in result.refused}
    config = {k: v for k, v in result.config.items() if k not in refused_roots or k == "algorithm"}
    try:
        check(config)
    except ValueError as err:
        return "\nand rlnb's own checks of the translated keys: " + str(err)
    except Exception:  # a check that needs a refused section: the refusal above says enough
        return ""
    return ""


def refusal_message(name: str, refused: Mapping[str, str], limit: int = 25) -> str:
    lines = [f"NeMo-RL config {name}: {len(refused)} key(s) rlnb cannot run as NeMo-RL would:"]
    lines += [f"  {key}: {why}" for key, why in list(refused.items())[:limit]]
    if len(refused) > limit:
        lines.append(f"  ... and {len(refused) - limit} more")
    return "\n".join(lines)


def ignored_message(name: str, result: Translation) -> str:
    loop = result.config.get("algorithm", "grpo").upper()
    lines = [f"NeMo-RL config {name}: rlnb runs {loop} with its algorithm keys; these have no "
             "effect here:"]
    lines += group_lines(result.ignored, result.roots)
    lines.append("Nothing was written. Run again with --ignore-unsupported to train without them "
                 "(rlnb.load_config(..., ignore_unsupported=True)).")
    return "\n".join(lines)
