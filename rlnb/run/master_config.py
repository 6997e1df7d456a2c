"""The whole run's config (NeMo-RL's ``MasterConfig``): its sections, loaded from YAML with dotted
overrides.

    rlnb train configs/tiny.yaml grpo.num_prompts_per_step=8 loss_fn.ratio_clip_max=0.28
    load_config(None, ["grpo.seed=1"], preset="fast")     # the default, shrunk for tests

Implementation choices:
1) One typed section per concern, each defined next to the code it configures (``policy`` in
   engine/models/policy.py, ``loss_fn`` in algorithms/policy_loss.py, ``grpo`` in
   engine/trainers/grpo.py, ...), assembled here. Unknown keys and bad values fail at load time
   with the dotted path and the closest valid key.
2) Overrides are ``dotted.key=value`` with the value parsed as YAML (``0.2``, ``true``,
   ``null``, ``[1, 2]``), applied to the YAML before validation, so they are checked the same way.
3) With no file, ``configs/tiny.yaml`` (the embedded default, shipped in the package) is used;
   a section's own defaults are NeMo-RL's, sized down where the CPU default needs it.
4) A preset (``configs/presets/<name>.yaml``, e.g. ``fast``: a tiny model and a few rows for
   tests and notebooks' ``fast`` mode) is a partial config laid over the base before the
   overrides.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from difflib import get_close_matches
from pathlib import Path

import yaml
from pydantic import Field

from rlnb.algorithms.policy_loss import ClippedPGLossConfig
from rlnb.config import Config, apply_overrides, parse_config
from rlnb.engine.environments.multiturn import EnvConfig
from rlnb.engine.environments.tasks import TaskConfig
from rlnb.engine.models.policy import PolicyConfig
from rlnb.engine.trainers.grpo import OVERRIDE_ALIASES, GRPOConfig
from rlnb.engine.trainers.warm_start import SFTConfig
from rlnb.run.checkpoint import CheckpointingConfig
from rlnb.run.loggers import LoggerConfig


class ClusterConfig(Config):
    """``cluster``: processes (the launcher decides; recorded for the run directory)."""

    num_processes: int = Field(1, ge=1, description="Ranks (accelerate launch --num_processes).")


class MasterConfig(Config):
    """A whole run (NeMo-RL's ``MasterConfig``; here it drives rlnb's trainers)."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    loss_fn: ClippedPGLossConfig = Field(default_factory=ClippedPGLossConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    data: TaskConfig = Field(default_factory=TaskConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    checkpointing: CheckpointingConfig = Field(default_factory=CheckpointingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)


def read_yaml(path: str | Path) -> dict:
    """A config file's mapping; a missing, unreadable or non-mapping file is a ValueError."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"config file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as err:
        raise ValueError(f"config file {path} is not UTF-8 text ({err.reason} at byte "
                         f"{err.start})") from None
    except yaml.YAMLError as err:
        raise ValueError(f"config file {path} is not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of sections, got "
                         f"{type(data).__name__}")
    return data


def load_config(
    source: str | Path | Mapping | MasterConfig | None = None,
    overrides: Sequence[str] = (),
    *,
    preset: str | None = None,
) -> MasterConfig:
    """A ``MasterConfig`` from a YAML path, a dict or a config (None: the embedded default),
    with a preset and dotted overrides laid over it."""
    if isinstance(source, MasterConfig) and not overrides and preset is None:
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
    if preset is not None:
        data = _merge(data, read_yaml(preset_path(preset)))
    data = apply_overrides(data, overrides, OVERRIDE_ALIASES)
    unknown = [k for k in data if k not in MasterConfig.model_fields]
    if unknown:
        close = get_close_matches(unknown[0], list(MasterConfig.model_fields), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"invalid config:\n  {unknown[0]}: unknown section{hint}")
    return parse_config(MasterConfig, data, "")


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
