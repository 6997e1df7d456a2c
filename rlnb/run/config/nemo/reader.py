"""Read a NeMo-RL YAML config as NeMo-RL does: ``defaults:`` inheritance, then ``${...}``
interpolations, giving one plain nested dict.

    data = read_nemo_yaml("examples/configs/grpo_math_8B.yaml")   # grpo_math_1B.yaml under it
    data = resolve_interpolations(apply_overrides(data, ["policy.model_name=/models/tiny"]))

Implementation choices (NeMo-RL's ``nemo_rl.utils.config`` and OmegaConf semantics):
1) ``defaults:`` is a file name or a list of them, relative to the file that names it; each
   parent is read with its own defaults first (depth first), later parents override earlier
   ones, and the file itself overrides all of them. Mappings merge key by key; lists and
   scalars are replaced. A section holding ``_override_: true`` replaces the parent's section
   instead of merging into it. A cycle of defaults is an error naming the files.
2) Numbers are read as YAML 1.2 reads them: ``1e-8`` is a float (plain PyYAML would read a
   string), as OmegaConf does.
3) Interpolations are resolved after the overrides, so ``policy.model_name=...`` also changes
   ``${policy.model_name}`` elsewhere. ``${a.b}`` is absolute, ``${.x}`` a sibling of the key that
   holds it, each further dot one level up. A string that is one interpolation takes the
   referenced value's type; inside a longer string it is formatted. NeMo-RL's resolvers are
   ``mul``, ``add``, ``div`` and ``max`` (two arguments each), and OmegaConf's ``oc.env:NAME``
   or ``oc.env:NAME,default`` (the environment variable, as a string); any other is refused,
   naming it. An unset variable without a default resolves lazily, as OmegaConf's keys do: the
   value is kept as its text (an ``UnsetEnv`` string), so a key rlnb ignores may hold it, and a
   key rlnb uses is refused naming the variable (``unset_env_keys``).
   A missing key, a cycle, or a ``???`` (mandatory, unset) value is refused with the dotted
   path of the key that needs it.
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

RESOLVERS: dict[str, Callable[[Any, Any], Any]] = {
    "mul": operator.mul, "add": operator.add, "div": operator.truediv, "max": max,
}
MISSING = "???"


class UnsetEnv(str):
    """The text of a value that needs an unset environment variable (choice 3)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e-8`` (no dot) as a float (choice 2)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
                   |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
                   |\.[0-9_]+(?:[eE][-+][0-9]+)?
                   |[-+]?\.(?:inf|Inf|INF)
                   |\.(?:nan|NaN|NAN))$""", re.X),
    list("-+0123456789."),
)


def load_yaml_text(text: str, where: str) -> Any:
    """One YAML document with choice 2's number rule; a syntax error names ``where``."""
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ValueError(f"config file {where} is not valid YAML{at}: {what}") from None


def merge(base: dict, over: Mapping) -> dict:
    """``over`` laid over ``base`` (choice 1: mappings merge, ``_override_`` replaces)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and value.get("_override_") is True:
            out[key] = {k: v for k, v in value.items() if k != "_override_"}
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def read_nemo_yaml(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict:
    """The file's mapping with its ``defaults:`` merged in (choice 1); no interpolation yet."""
    path = Path(path)
    if not path.is_file():
        named_by = f" (named in defaults: of {_chain[-1]})" if _chain else ""
        raise ValueError(f"config file not found: {path}{named_by}")
    if path.resolve() in _chain:
        loop = " -> ".join(str(p) for p in (*_chain, path.resolve()))
        raise ValueError(f"defaults: form a cycle: {loop}")
    data = load_yaml_text(path.read_text(encoding="utf-8"), str(path)) or {}
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of sections, got "
                         f"{type(data).__name__}")
    parents = data.pop("defaults", None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ValueError(f"{path}: defaults: must be a file name or a list of file names, got "
                         f"{parents!r}")
    merged: dict = {}
    for parent in parents:
        merged = merge(merged, read_nemo_yaml(path.parent / parent, (*_chain, path.resolve())))
    return merge(merged, data)


# --------------------------------------------------------------------------- interpolation


def _interpolations(text: str) -> list[tuple[int, int]]:
    """``(start, end)`` of each top-level ``${...}`` in ``text`` (nested ones stay inside)."""
    spans, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text.startswith("${", i):
            if depth == 0:
                start = i
            depth += 1
            i += 2
            continue
        if text[i] == "}" and depth:
            depth -= 1
            if depth == 0:
                spans.append((start, i + 1))
        i += 1
    if depth:
        raise ValueError(f"unclosed interpolation in {text!r}")
    return spans


def _split_arguments(text: str) -> list[str]:
    """Resolver arguments: commas at the top level (not inside a nested ``${...}``)."""
    parts, depth, current = [], 0, ""
    for i, ch in enumerate(text):
        if text.startswith("${", i):
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts]


class _Resolver:
    """Resolves every interpolation of one config (choice 3)."""

    def __init__(self, root: dict):
        self.root = root
        self.active: list[str] = []  # the keys being resolved, to name a cycle

    def lookup(self, dotted: str, where: str) -> Any:
        node: Any = self.root
        for part in dotted.split("."):
            if isinstance(node, Mapping) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise ValueError(f"{where}: the interpolation refers to {dotted!r}, which the "
                                 "config does not have")
        return self.value(node, dotted)

    def value(self, node: Any, path: str) -> Any:
        """``node`` (at dotted ``path``) with every interpolation inside it resolved."""
        if isinstance(node, Mapping):
            return {k: self.value(v, f"{path}.{k}" if path else str(k)) for k, v in node.items()}
        if isinstance(node, list):
            return [self.value(v, f"{path}.{i}") for i, v in enumerate(node)]
        if isinstance(node, str) and node == MISSING:
            raise ValueError(f"{path}: mandatory value '???' is not set (give it as an "
                             "override)")
        if not isinstance(node, str) or "${" not in node:
            return node
        if path in self.active:
            raise ValueError(f"interpolation cycle: {' -> '.join([*self.active, path])}")
        self.active.append(path)
        try:
            return self.string(node, path)
        finally:
            self.active.pop()

    def string(self, text: str, path: str) -> Any:
        spans = _interpolations(text)
        if len(spans) == 1 and spans[0] == (0, len(text)):
            return self.expression(text[2:-1].strip(), path)
        out, last, unset = "", 0, False
        for start, end in spans:
            part = self.expression(text[start + 2:end - 1].strip(), path)
            unset = unset or isinstance(part, UnsetEnv)
            out += text[last:start] + str(part)
            last = end
        out += text[last:]
        return UnsetEnv(out) if unset else out

    def expression(self, expr: str, path: str) -> Any:
        name = re.match(r"^([A-Za-z_][\w.]*):", expr)
        if name and not expr.startswith("."):
            resolver = name.group(1)
            if resolver == "oc.env":
                return self.environment(expr[name.end():], path)
            if resolver not in RESOLVERS:
                raise ValueError(f"{path}: unknown resolver '{resolver}' in '${{{expr}}}' "
                                 f"(NeMo-RL's are {sorted(RESOLVERS)} and oc.env)")
            args = [self.argument(a, path) for a in _split_arguments(expr[name.end():])]
            if len(args) != 2:
                raise ValueError(f"{path}: resolver '{resolver}' takes 2 arguments, got "
                                 f"{len(args)} in '${{{expr}}}'")
            return RESOLVERS[resolver](*args)
        if expr.startswith("."):
            dots = len(expr) - len(expr.lstrip("."))
            parent = path.split(".")[:-dots]  # one dot: the key's own section
            expr = ".".join([*parent, expr[dots:]])
        return self.lookup(expr, path)

    def environment(self, args: str, path: str) -> Any:
        """``oc.env:NAME[,default]``: the variable's value (a string), else the default."""
        name, *default = _split_arguments(args)
        if name in os.environ:
            return os.environ[name]
        if default:
            return self.argument(default[0], path)
        return UnsetEnv(f"${{oc.env:{name}}}")

    def argument(self, text: str, path: str) -> Any:
        if "${" in text:
            return self.string(text, path)
        return load_yaml_text(text, path) if text else None


def resolve_interpolations(data: dict) -> dict:
    """A copy of ``data`` with every ``${...}`` replaced by its value (choice 3)."""
    return _Resolver(data).value(data, "")


def unset_env_keys(data: Any, path: str = "") -> dict[str, str]:
    """``{dotted key: value}`` of every value in ``data`` that needs an unset variable."""
    if isinstance(data, Mapping):
        found: dict[str, str] = {}
        for k, v in data.items():
            found.update(unset_env_keys(v, f"{path}.{k}" if path else str(k)))
        return found
    if isinstance(data, list):
        found = {}
        for i, v in enumerate(data):
            found.update(unset_env_keys(v, f"{path}.{i}"))
        return found
    return {path: str(data)} if isinstance(data, UnsetEnv) else {}
