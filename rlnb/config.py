"""Typed configs: the base class and the one place that turns validation errors into messages.

Every config section (``loss_fn``, ``grpo.adv_estimator``, ...) is a small pydantic model kept
next to the code it configures. They share this base so that:

1) unknown keys fail at load time (NeMo-RL lets extra keys through; a typo such as
   ``ratio_clip_mx`` would then silently train with the default, so rlnb refuses it), and the
   message names the key's dotted path and the closest valid name;
2) bad values fail at load time with the same dotted path;
3) a section can be given as a model, a plain dict (NeMo-RL style) or ``None`` (defaults);
4) dotted overrides (``loss_fn.ratio_clip_max=0.28``, the value read as YAML, strictly: a key
   given twice is refused, ``rlnb.user_files``) are applied to the plain data before
   validation, so they are checked like a file. They live here, below every
   layer, because both the run layer (config files) and the engine (``reconfigure`` between
   steps) apply them;
5) a rule across fields (``@cross_field_rule``) is checked where a config is built and again
   where it is used (``Config.check``, called by ``parse_config`` and the trainers), not on each
   attribute assignment: NeMo-RL's code sets two related fields one after the other, and the
   config is inconsistent between the two. Each single field is still type-checked on
   assignment.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from difflib import get_close_matches
from typing import Any, TypeVar, get_args

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from rlnb.user_files import load_yaml

C = TypeVar("C", bound="Config")


# the config whose attribute is being assigned: its cross-field rules wait for ``check``
_ASSIGNING: ContextVar[object | None] = ContextVar("rlnb_config_assigning", default=None)


def cross_field_rule(func):
    """A rule across a config's fields (``model_validator(mode="after")``), run when the config
    is built and by ``Config.check``, but not when one of its fields is assigned (choice 5).

    A config built from a dict (a file, ``parse_config``, a section's default) is checked at
    once. A config edited field by field may be inconsistent in between; it is checked again
    before use: ``parse_config`` (which the losses, estimators and loggers call on their config)
    and the trainers call ``check`` on a config they are given, so a half-built config still
    fails, naming the rule, before anything runs with it.
    """

    @functools.wraps(func)
    def rule(self):
        if _ASSIGNING.get() is self:  # a nested config built by the assignment is still checked
            return self
        return func(self)

    return model_validator(mode="after")(rule)


class Config(BaseModel):
    """Base of every rlnb config section: strict keys; each field validated on assignment too,
    the rules across fields (``cross_field_rule``) when built and by ``check`` before use."""

    # protected_namespaces=(): pydantic < 2.10 reserves the whole ``model_`` prefix and warns at
    # import about ``policy.model_name``; a field that shadows a BaseModel method still warns
    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    def __setattr__(self, name: str, value: Any) -> None:
        token = _ASSIGNING.set(self)
        try:
            super().__setattr__(name, value)
        finally:
            _ASSIGNING.reset(token)

    def check(self, where: str = "") -> None:
        """Run every rule again, its sub-configs' first (fields may have been assigned one by
        one since it was built); raises ``ValueError`` naming the broken rule's dotted path."""
        for name in type(self).model_fields:
            value = getattr(self, name)
            for i, item in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(item, Config):
                    sub = f"{where}.{name}" if where else name
                    item.check(f"{sub}[{i}]" if isinstance(value, list) else sub)
        fields_set = set(self.model_fields_set)
        try:  # validates the current values in place, as __init__ does
            values = {**self.__dict__, **(self.__pydantic_extra__ or {})}
            type(self).__pydantic_validator__.validate_python(values, self_instance=self)
        except ValidationError as err:
            raise ValueError(format_validation_error(err, type(self), where)) from None
        finally:
            object.__setattr__(self, "__pydantic_fields_set__", fields_set)


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
        data.check(where)  # it may have been edited field by field since it was built
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
    try:  # strictly: a mapping's key given twice is refused too (rlnb.user_files)
        value = load_yaml(raw, "the value") if raw.strip() else None
    except ValueError as err:
        raise ValueError(f"override {item!r}: {err}") from None
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
            if isinstance(child, list):
                raise ValueError(f"override {item!r}: {part!r} is a list of {len(child)} "
                                 f"here, not a section: give the whole list ({part}=[...])")
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
