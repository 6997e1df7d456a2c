"""The whole run's config: NeMo-RL's sections, loaded from YAML with dotted overrides.

    rlnb train configs/tiny.yaml grpo.num_prompts_per_step=8 loss_fn.ratio_clip_max=0.28

Implementation choices:
1) One typed section per concern, each defined next to the code it configures (``policy`` in
   engine/policy.py, ``loss_fn`` in algorithms/policy_loss.py, ``grpo`` in engine/grpo.py, ...),
   assembled here. Unknown keys and bad values fail at load time with the dotted path and the
   closest valid key.
2) Overrides are ``dotted.key=value`` with the value parsed as YAML (``0.2``, ``true``,
   ``null``, ``[1, 2]``), applied to the YAML before validation, so they are checked the same way.
3) With no file, ``configs/tiny.yaml`` (the embedded default, shipped in the package) is used;
   a section's own defaults are NeMo-RL's, sized down where the CPU default needs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from difflib import get_close_matches
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from rlnb.algorithms.policy_loss import ClippedPGLossConfig
from rlnb.config import Config, parse_config
from rlnb.engine.grpo import GRPOConfig
from rlnb.engine.multiturn import EnvConfig
from rlnb.engine.policy import PolicyConfig
from rlnb.engine.sft import SFTConfig
from rlnb.engine.tasks import TaskConfig
from rlnb.run.checkpoint import CheckpointingConfig
from rlnb.run.loggers import LoggerConfig


class ClusterConfig(Config):
    """``cluster``: processes (the launcher decides; recorded for the run directory)."""

    num_processes: int = Field(1, ge=1, description="Ranks (accelerate launch --num_processes).")


class RLNBConfig(Config):
    """A whole GRPO run."""

    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    loss_fn: ClippedPGLossConfig = Field(default_factory=ClippedPGLossConfig)
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    sft: SFTConfig = Field(default_factory=SFTConfig)
    data: TaskConfig = Field(default_factory=TaskConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    logger: LoggerConfig = Field(default_factory=LoggerConfig)
    checkpointing: CheckpointingConfig = Field(default_factory=CheckpointingConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=0.2"`` -> ``(["a", "b"], 0.2)`` (value parsed as YAML)."""
    if "=" not in item:
        raise ValueError(f"override {item!r} must look like dotted.key=value")
    key, _, raw = item.partition("=")
    if not key or any(not part for part in key.split(".")):
        raise ValueError(f"override {item!r}: empty key part")
    return key.split("."), yaml.safe_load(raw) if raw.strip() else None


def apply_overrides(data: dict, overrides: Sequence[str]) -> dict:
    """Set each ``dotted.key=value`` in a nested dict (a typo fails later, with a suggestion)."""
    for item in overrides:
        path, value = parse_override(item)
        node = data
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ValueError(f"override {item!r}: {part!r} is a value, not a section")
            node = child
        node[path[-1]] = value
    return data


def load_config(
    source: str | Path | Mapping | RLNBConfig | None = None, overrides: Sequence[str] = ()
) -> RLNBConfig:
    """An ``RLNBConfig`` from a YAML path, a dict or a config, plus dotted overrides."""
    if isinstance(source, RLNBConfig) and not overrides:
        return source
    if isinstance(source, RLNBConfig):
        data = source.model_dump()
    elif source is None:
        data = yaml.safe_load(default_config_path().read_text())
    elif isinstance(source, Mapping):
        data = dict(source)
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"config file not found: {path}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"config file {path} is not valid YAML: {err}") from None
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a mapping of sections")
    data = apply_overrides(_deep_copy(data), overrides)
    unknown = [k for k in data if k not in RLNBConfig.model_fields]
    if unknown:
        close = get_close_matches(unknown[0], list(RLNBConfig.model_fields), n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"invalid config:\n  {unknown[0]}: unknown section{hint}")
    return parse_config(RLNBConfig, data, "")


def default_config_path() -> Path:
    """The embedded default, ``configs/tiny.yaml`` (installed as ``rlnb.configs``)."""
    from importlib.resources import files

    return Path(str(files("rlnb.configs") / "tiny.yaml"))


def dump_config(config: RLNBConfig) -> str:
    """The resolved config as YAML."""
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def _deep_copy(data):
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data
