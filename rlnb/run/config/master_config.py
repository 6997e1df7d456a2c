"""The whole run's config (NeMo-RL's ``MasterConfig``): its sections, loaded from YAML with dotted
overrides.

    rlnb train configs/tiny.yaml grpo.num_prompts_per_step=8 loss_fn.ratio_clip_max=0.28
    load_config(None, ["grpo.seed=1"], preset="fast")     # the default, shrunk for tests
    load_config(packaged_config("ppo_tiny"))              # algorithm: ppo (PPO with a critic)
    load_config(packaged_config("dpo_tiny"))              # algorithm: dpo (DPO on sampled pairs)

Implementation choices:
1) One typed section per concern, each defined next to the code it configures (``policy`` in
   engine/models/policy_config.py, ``loss_fn`` in algorithms/policy_loss.py, ``grpo`` in
   engine/trainers/grpo_config.py, ...), assembled here. Unknown keys and bad values fail at
   load time with the dotted path and the closest valid key.
2) Overrides are ``dotted.key=value`` with the value parsed as YAML (``0.2``, ``true``,
   ``null``, ``[1, 2]``), applied to the YAML before validation, so they are checked the same way.
3) With no file, ``configs/tiny.yaml`` (the embedded default, shipped in the package) is used;
   a section's own defaults are NeMo-RL's, sized down where the CPU default needs it.
4) A preset (``configs/presets/<name>.yaml``, e.g. ``fast``: a tiny model and a few rows for
   tests and notebooks' ``fast`` mode) is a partial config laid over the base before the
   overrides. Its ``grpo`` section shrinks whichever loop the config names (``ppo`` under
   ``algorithm: ppo``).
5) ``algorithm`` names the training loop (``engine/trainers/loops.py``; the field's description
   lists the registered ones). Each loop's own sections (``grpo``; ``ppo``, ``value``,
   ``value_loss_fn``; ``dpo``) exist only under that loop (and a loop registered on them, as a
   plug-in's GRPO variant reads ``grpo``): another loop's section is refused at load time (it
   would be silently ignored), and the written config leaves out the absent sections and the
   default ``algorithm: grpo``, so a GRPO run's config.yaml is what it was before PPO existed.
6) ``imports`` names modules imported before the rest is checked (before the preset too, which
   looks up the loop's section), so a plug-in registered from a module (an estimator, a task, a
   generation backend, a loop: each one file and one registry entry) is as valid in a config
   file or a ``rlnb train`` override as a built-in one.
7) ``MasterConfig(**config)`` (NeMo-RL's ``run_grpo.py`` idiom) reads a NeMo-RL config's dict
   (``is_nemo_config``) as ``load_config(config)`` does: translated, and refused unless rlnb uses
   every key. A real NeMo-RL config has keys rlnb ignores (``cluster``, parallelism, vLLM), and a
   constructor has no place for ``ignore_unsupported``, so such a dict is refused in one line
   naming the first keys and ``rlnb.load_config(config, overrides, ignore_unsupported=True)``,
   which lists each with its reason and trains without the ignored ones.
8) A config file (a preset, a run's ``config.yaml``) is read strictly (``rlnb.user_files``): a
   key given twice (PyYAML would keep the last, OmegaConf refuses it), a syntax error, a folder
   given as the file, each one line naming the file (and the key's dotted path and both lines).
"""

from __future__ import annotations

import copy
import importlib
import sys
from collections.abc import Mapping, Sequence
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, ValidationInfo, field_validator, model_serializer

from rlnb.algorithms.checks import choose
from rlnb.algorithms.policy_loss import ClippedPGLossConfig
from rlnb.algorithms.value_loss import ValueLossConfig
from rlnb.config import (
    Config,
    apply_overrides,
    cross_field_rule,
    format_validation_error,
    parse_config,
    parse_override,
)
from rlnb.engine.environments.multiturn import EnvConfig
from rlnb.engine.environments.reward_funcs import RewardFuncConfig
from rlnb.engine.environments.run_task import check_reward_rules
from rlnb.engine.environments.tasks import TaskConfig
from rlnb.engine.models.policy_config import PolicyConfig
from rlnb.engine.models.value import ValueConfig
from rlnb.engine.trainers.dpo_config import DPOConfig
from rlnb.engine.trainers.grpo_config import GRPOConfig
from rlnb.engine.trainers.loop_config import OVERRIDE_ALIASES, check_loop_rules
from rlnb.engine.trainers.loops import LOOPS, describe_loops, loop_sections
from rlnb.engine.trainers.ppo import PPOConfig
from rlnb.engine.trainers.warm_start import SFTConfig
from rlnb.run.config.nemo.reader import resolve_interpolations
from rlnb.run.config.nemo.translate import is_nemo_config, load_nemo_config, translate
from rlnb.run.store.checkpoint import CheckpointingConfig
from rlnb.run.store.loggers import LoggerConfig
from rlnb.user_files import load_yaml, read_text


class ClusterConfig(Config):
    """``cluster``: processes (the launcher decides; recorded for the run directory)."""

    num_processes: int | None = Field(
        None, ge=1, description="Ranks the run expects (accelerate launch --num_processes); None: "
        "whatever the launcher started. A different number of ranks is refused at start.")


def _loop_section(**kwargs):
    # None unless the config's algorithm owns the section (choice 5): the validator turns the
    # default (an absent section, {}) into the section's defaults or None
    return Field(default_factory=dict, validate_default=True, **kwargs)


class MasterConfig(Config):
    """A whole run (NeMo-RL's ``MasterConfig``; here it drives rlnb's trainers)."""

    def __init__(self, /, **data: Any) -> None:
        """rlnb's sections, or a NeMo-RL config's dict, read as ``load_config`` reads it
        (choice 7)."""
        if not is_nemo_config(data):
            super().__init__(**data)
            return
        try:  # the translation's values are checked as load_config checks them
            super().__init__(**nemo_sections(data))
        except ValidationError as err:
            raise ValueError(format_validation_error(err, MasterConfig, "")) from None

    imports: list[str] = Field(
        default_factory=list,
        description="Python modules imported before the rest of the config is checked: a "
        "plug-in's registrations (register_estimator, register_task, "
        "register_generation_backend, register_loop), so their names are valid here (choice 6).")
    algorithm: str = Field(
        "grpo", description=f"The training loop: {describe_loops()}; or a loop registered with "
        "register_loop (engine/trainers/loops.py).")
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    loss_fn: ClippedPGLossConfig = Field(default_factory=ClippedPGLossConfig)
    grpo: GRPOConfig | None = _loop_section(description="GRPO's loop (algorithm: grpo).")
    ppo: PPOConfig | None = _loop_section(description="PPO's loop (algorithm: ppo).")
    value: ValueConfig | None = _loop_section(description="PPO's value model (algorithm: ppo).")
    value_loss_fn: ValueLossConfig | None = _loop_section(
        description="PPO's critic loss, NeMo-RL's MseValueLossConfig (algorithm: ppo).")
    dpo: DPOConfig | None = _loop_section(
        description="DPO's loop and loss, NeMo-RL's dpo section (algorithm: dpo).")
    sft: SFTConfig = Field(default_factory=SFTConfig)
    data: TaskConfig = Field(default_factory=TaskConfig)
    reward_funcs: list[RewardFuncConfig] = Field(
        default_factory=list,
        description="TRL-style reward functions ('module:function', or {func, weight, name}) "
        "scoring the data's rows; the reward is their weighted sum, each one a component "
        "(engine/environments/reward_funcs.py). Empty: the task's own reward.")
    env: EnvConfig = Field(default_factory=EnvConfig)
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    checkpointing: CheckpointingConfig = Field(default_factory=CheckpointingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)

    @field_validator("algorithm")
    @classmethod
    def _known_loop(cls, name: str) -> str:
        spec = choose(LOOPS, name, "training loop (algorithm)")
        missing = [s for s in spec.sections if s not in cls.model_fields]
        if missing:  # a plug-in's loop reads an existing loop's sections (register_loop)
            raise ValueError(f"loop {name!r} reads the sections {missing}, which the config "
                             f"does not have (a loop of its own section adds a MasterConfig "
                             f"field; a plug-in reads an existing loop's)")
        return name

    @field_validator(*(s for sections in loop_sections().values() for s in sections),
                     mode="before")
    @classmethod
    def _only_the_loops_own_sections(cls, data, info: ValidationInfo):
        algorithm = info.data.get("algorithm")
        owners = [a for a, sections in loop_sections().items() if info.field_name in sections]
        if algorithm in owners:
            return {} if data is None else data
        if data and algorithm is not None:  # (an empty section is as good as none)
            raise ValueError(f"a section of algorithm '{owners[0]}', but algorithm is "
                             f"'{algorithm}' (it would be ignored): remove it, or set "
                             f"algorithm: {owners[0]}")
        return None

    @property
    def loop_config(self):
        """The loop's own section (``grpo``, ``ppo``, ``dpo``): the first of the sections its
        algorithm reads (``loops.py``; a loop registered on GRPO's section reads ``grpo``)."""
        return getattr(self, LOOPS[self.algorithm].sections[0])

    @cross_field_rule
    def _sections_agree(self) -> MasterConfig:
        # the loop's rules with the other sections (trainers/loop_config.py); also decides
        # reuse_generation_logprobs, before a trainer builds an engine, into the resolved config
        check_loop_rules(self)
        check_reward_rules(self)
        return self

    @field_validator("value")
    @classmethod
    def _value_from_the_policy(cls, value: ValueConfig | None, info: ValidationInfo):
        policy = info.data.get("policy")
        if value is not None and policy is not None and value.model_name not in (
                None, policy.model_name):
            raise ValueError(f"value.model_name={value.model_name!r}: rlnb builds the critic "
                             f"from the policy ({policy.model_name!r}); set it null")
        return value

    @model_serializer(mode="wrap")
    def _leave_out_other_loops(self, handler):
        data = handler(self)  # choice 5: absent sections and the default algorithm stay out
        for sections in loop_sections().values():
            for section in sections:
                if data.get(section, 0) is None:
                    del data[section]
        if data.get("algorithm") == "grpo":
            del data["algorithm"]
        for key in ("imports", "reward_funcs"):
            if not data.get(key):
                data.pop(key, None)
        return data


def nemo_sections(data: Mapping) -> dict:
    """rlnb's sections for ``MasterConfig(**data)`` from a NeMo-RL config's (resolved) dict, as
    ``load_config(data)`` translates it; anything refused or ignored is one ``ValueError`` line
    naming the first such keys and ``rlnb.load_config(..., ignore_unsupported=True)``."""
    try:
        return load_nemo_config(data)
    except ValueError as err:
        first = str(err).splitlines()[0].rstrip(":")
    how = ("build it with rlnb.load_config(config, overrides, ignore_unsupported=True), which "
           "names each key with its reason and trains without the ones that have no effect")
    if "defaults" in data:
        raise ValueError(f"MasterConfig(**config): {first}: load it with "
                         "rlnb.load_config(path, overrides, ignore_unsupported=True)")
    result = translate(resolve_interpolations(copy.deepcopy(dict(data))))
    parts = [f"{what} {len(keys)} key(s) ({_first_keys(keys)})" for what, keys in
             (("refuses", result.refused), ("ignores", result.ignored)) if keys]
    found = " and ".join(parts) if parts else first
    raise ValueError(f"MasterConfig(**config) got a NeMo-RL config whose keys rlnb does not all "
                     f"use: it {found}; {how}")


def _first_keys(keys, n: int = 3) -> str:
    names = list(keys)
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def read_yaml(path: str | Path, what: str = "config file") -> dict:
    """A config file's mapping; a missing, unreadable or non-mapping file, a folder, a syntax
    error or a key given twice is a ValueError naming the file (``rlnb.user_files``)."""
    path = Path(path)
    where = f"{what} {path}"
    data = load_yaml(read_text(path, what), where) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{where} must hold a mapping of sections, got {type(data).__name__}")
    return data


def load_config(
    source: str | Path | Mapping | MasterConfig | None = None,
    overrides: Sequence[str] = (),
    *,
    preset: str | None = None,
    ignore_unsupported: bool = False,
) -> MasterConfig:
    """A ``MasterConfig`` from a YAML path, a dict or a config (None: the embedded default),
    with a preset and dotted overrides laid over it. A NeMo-RL config (``grpo_math_1B.yaml``)
    is translated by ``rlnb.run.config.nemo.translate`` (its overrides use NeMo-RL's keys); the keys
    rlnb ignores are refused, listed, unless ``ignore_unsupported``."""
    if isinstance(source, MasterConfig) and not overrides and preset is None:
        source.check()  # it may have been edited field by field since it was built
        return source
    if isinstance(source, MasterConfig):
        data = source.model_dump(mode="json")
    elif source is None:
        data = read_yaml(default_config_path())
    elif isinstance(source, Mapping):
        data = _deep_copy(dict(source))
    elif isinstance(source, (str, Path)):
        data = read_yaml(source)
    else:
        raise ValueError(f"a config is a YAML path, a dict or a MasterConfig, got "
                         f"{type(source).__name__}")
    if not isinstance(source, MasterConfig) and is_nemo_config(data):
        data = load_nemo_config(data if isinstance(source, Mapping) else source, overrides,
                                ignore_unsupported=ignore_unsupported,
                                check=lambda rest: parse_config(MasterConfig, rest, ""))
        overrides = ()
    folder = Path(source).parent if isinstance(source, (str, Path)) else None
    # a plug-in's loop is registered before the preset looks up its section
    import_plugins(_top_level(data, overrides, "imports", None), folder)
    if preset is not None:
        over = read_yaml(preset_path(preset))
        spec = LOOPS.get(_top_level(data, overrides, "algorithm", "grpo"))
        section = spec.sections[0] if spec else "grpo"  # (an unknown loop: refused below)
        if section != "grpo" and "grpo" in over:  # choice 4: a preset shrinks any loop
            over = {**over, section: _merge(over.get(section) or {}, over["grpo"])}
            del over["grpo"]
        data = _merge(data, over)
    data = apply_overrides(data, overrides, OVERRIDE_ALIASES)
    if data.get("reward_funcs"):  # their modules import from here too, when the task is built
        search_paths(folder)
    unknown = [k for k in data if k not in MasterConfig.model_fields]
    if unknown:
        close = get_close_matches(unknown[0], list(MasterConfig.model_fields), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"invalid config:\n  {unknown[0]}: unknown section{hint}")
    return parse_config(MasterConfig, data, "")


def import_plugins(modules, folder: Path | None = None) -> None:
    """Import each module of a config's ``imports`` (choice 6), from the working directory or
    the config file's folder too; one that does not import is a ValueError naming it."""
    if modules is None:
        return
    if not isinstance(modules, list) or not all(isinstance(m, str) for m in modules):
        raise ValueError(f"invalid config:\n  imports: a list of module names, got {modules!r}")
    search_paths(folder)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as err:  # the plug-in's own error, named with its module
            raise ValueError(f"invalid config:\n  imports: cannot import {name!r} "
                             f"({type(err).__name__}: {err})") from None
        module = sys.modules[name]
        if getattr(module, "__file__", None) is None and hasattr(module, "__path__"):
            raise ValueError(f"invalid config:\n  imports: {name!r} is a directory "
                             f"({list(module.__path__)[0]}), not a module: name the module "
                             f"file in it ({name}.<file>)")


def search_paths(folder: Path | None = None) -> None:
    """Let a config's modules (plug-ins, reward functions) import from the working directory
    and the config file's folder."""
    for where in (Path.cwd(), folder):
        if where is not None and str(where) not in sys.path:
            sys.path.append(str(where))


def _top_level(data: dict, overrides: Sequence[str], key: str, default):
    """The value of top-level ``key`` once ``overrides`` are applied (the last override wins):
    the loop a config will name (``algorithm``), the plug-ins it imports (``imports``)."""
    value = data.get(key, default)
    for item in overrides if not isinstance(overrides, str) else ():
        path, parsed = parse_override(item)
        if path == [key]:
            value = parsed
    return value


def packaged_config(name: str) -> Path:
    """``configs/<name>.yaml`` as shipped with rlnb (``tiny``, ``ppo_tiny``, ...), wherever it is
    installed; an unknown name lists the valid ones."""
    folder = default_config_path().parent
    path = folder / f"{name}.yaml"
    if not path.is_file():
        valid = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ValueError(f"unknown packaged config {name!r}; configs: {valid}")
    return path


def default_config_path() -> Path:
    """The embedded default, ``configs/tiny.yaml`` (installed as ``rlnb.configs``)."""
    from importlib.resources import files

    return Path(str(files("rlnb.configs") / "tiny.yaml"))


def preset_path(name: str) -> Path:
    """``configs/presets/<name>.yaml``; an unknown name lists the valid ones."""
    folder = default_config_path().parent / "presets"
    path = folder / f"{name}.yaml"
    if not path.is_file():
        valid = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ValueError(f"unknown config preset {name!r}; presets: {valid}")
    return path


def dump_config(config: MasterConfig) -> str:
    """The resolved config as YAML."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def _merge(base: dict, over: dict) -> dict:
    """``over`` laid over ``base`` section by section (nested dicts merged, values replaced)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _deep_copy(data):
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data
