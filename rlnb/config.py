"""Typed configs: the base class and the one place that turns validation errors into messages.

Every config section (``loss_fn``, ``grpo.adv_estimator``, ...) is a small pydantic model kept
next to the code it configures. They share this base so that:

1) unknown keys fail at load time (NeMo-RL lets extra keys through; a typo such as
   ``ratio_clip_mx`` would then silently train with the default, so rlnb refuses it), and the
   message names the key's dotted path and the closest valid name;
2) bad values fail at load time with the same dotted path;
3) a section can be given as a model, a plain dict (NeMo-RL style) or ``None`` (defaults);
4) dotted overrides (``loss_fn.ratio_clip_max=0.28``, the value read as YAML) are applied to the
   plain data before validation, so they are checked like a file. They live here, below every
   layer, because both the run layer (config files) and the engine (``reconfigure`` between
   steps) apply them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from difflib import get_close_matches
from typing import Any, TypeVar, get_args

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

C = TypeVar("C", bound="Config")


class Config(BaseModel):
    """Base of every rlnb config section: strict keys, validated on assignment too."""

    # protected_namespaces=(): pydantic < 2.10 reserves the whole ``model_`` prefix and warns at
    # import about ``policy.model_name``; a field that shadows a BaseModel method still warns
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())


def _section_model(annotation: Any) -> Any:
    """The config model inside an annotation: ``GRPOConfig | None`` -> ``GRPOConfig``."""
    if getattr(annotation, "model_fields", None):
        return annotation
    return next((a for a in get_args(annotation) if getattr(a, "model_fields", None)), None)


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Valid field names of the (sub)model that ``loc`` points into."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = _section_model(fields[part].annotation)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def format_validation_error(err: ValidationError, model: type[BaseModel], where: str) -> str:
    """One line per problem: ``where.dotted.key: what is wrong``."""
    lines = []
    for e in err.errors():
        loc = tuple(e["loc"])
        path = ".".join([where, *map(str, loc)]) if where else ".".join(map(str, loc))
        if e["type"] == "extra_forbidden":
            close = get_close_matches(str(loc[-1]), _field_names(model, loc), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            lines.append(f"{path}: unknown key{hint}")
        elif not loc:  # a rule across keys (a model validator): its message names them
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{where}: {msg}" if where else msg)
        else:
            got = e.get("input")
            shown = "" if isinstance(got, (Mapping, BaseModel)) else f" (got {got!r})"
            msg = e["msg"].removeprefix("Value error, ")
            lines.append(f"{path}: {msg}{shown}")
    return "invalid config:\n  " + "\n  ".join(lines)


def parse_config(model: type[C], data: C | Mapping[str, Any] | None, where: str = "") -> C:
    """Validate ``data`` into ``model``; raises ``ValueError`` naming each bad key's dotted path."""
    if isinstance(data, model):
        return data
    if isinstance(data, BaseModel):
        data = data.model_dump()
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ValueError(f"{where or model.__name__} must be a mapping, got {type(data).__name__}")
    try:
        return model.model_validate(dict(data))
    except ValidationError as err:
        raise ValueError(format_validation_error(err, model, where)) from None


def parse_override(item: str) -> tuple[list[str], Any]:
    """``"a.b=0.2"`` -> ``(["a", "b"], 0.2)`` (the value read as YAML)."""
    if not isinstance(item, str) or "=" not in item:
        raise ValueError(f"override {item!r} must look like dotted.key=value")
    key, _, raw = item.partition("=")
    if not key or any(not part.strip() for part in key.split(".")):
        raise ValueError(f"override {item!r}: empty key part")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as err:
        first = str(err).splitlines()[0]
        raise ValueError(f"override {item!r}: the value is not valid YAML ({first})") from None
    return key.strip().split("."), value


def apply_overrides(data: dict, overrides: Sequence[str],
                    aliases: Mapping[str, str] | None = None) -> dict:
    """Set each ``dotted.key=value`` in the nested dict ``data`` (in place; returns it). A typo
    fails later, at validation, with the closest valid key. ``aliases`` maps a dotted key to the
    one it stands for (NeMo-RL's top-level names of a setting rlnb keeps in one place)."""
    if isinstance(overrides, str):
        raise ValueError(f"overrides must be a list of 'dotted.key=value' strings, got the string "
                         f"{overrides!r}")
    for item in overrides:
        path, value = parse_override(item)
        path = (aliases or {}).get(".".join(path), ".".join(path)).split(".")
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


def flatten(cfg: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}`` (an empty dict stays a leaf)."""
    flat: dict[str, Any] = {}
    for key, value in cfg.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat
