"""Typed configs: the base class and the one place that turns validation errors into messages.

Every config section (``loss_fn``, ``grpo.adv_estimator``, ...) is a small pydantic model kept
next to the code it configures. They share this base so that:

1) unknown keys fail at load time (NeMo-RL lets extra keys through; a typo such as
   ``ratio_clip_mx`` would then silently train with the default, so rlnb refuses it), and the
   message names the key's dotted path and the closest valid name;
2) bad values fail at load time with the same dotted path;
3) a section can be given as a model, a plain dict (NeMo-RL style) or ``None`` (defaults).
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

C = TypeVar("C", bound="Config")


class Config(BaseModel):
    """Base of every rlnb config section: strict keys, validated on assignment too."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def _field_names(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Valid field names of the (sub)model that ``loc`` points into."""
    current: Any = model
    for part in loc[:-1]:
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            return []
        current = fields[part].annotation
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
        else:
            got = e.get("input")
            shown = "" if isinstance(got, Mapping) else f" (got {got!r})"
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
