"""Read a NeMo-RL YAML config with OmegaConf, as NeMo-RL does: ``defaults:`` inheritance, then
``${...}`` interpolations, giving one plain nested dict.

    data = read_nemo_yaml("examples/configs/grpo_math_8B.yaml")   # grpo_math_1B.yaml under it
    data = resolve_interpolations(apply_overrides(data, ["policy.model_name=/models/tiny"]))

Implementation choices (NeMo-RL's ``nemo_rl.utils.config``, run on OmegaConf itself):
1) Each file is read by ``OmegaConf.load``, as NeMo-RL reads it, after one check of rlnb's
   (``rlnb.user_files``): a syntax error, or a key repeated in one mapping (OmegaConf refuses it
   too, naming the second line only), is one line naming the file, the key's dotted path and
   both lines. OmegaConf types the values: ``1e-8`` is a float, a date stays a string.
2) ``defaults:`` is a file name or a list of them, relative to the file that names it; each
   parent is read with its own defaults first (depth first), later parents override earlier
   ones, and the file itself overrides all of them, merged by ``OmegaConf.merge`` (mappings key
   by key, lists and scalars replaced; a mapping merged into a list is refused, naming the
   files). A top-level section holding ``_override_: true`` replaces the parent's section
   instead of merging into it; deeper down the marker is an ordinary key, as in NeMo-RL
   (``merge_with_override`` looks at the top-level sections only). A cycle of defaults is an
   error naming the files (NeMo-RL recurses until Python's limit).
3) Interpolations are resolved by OmegaConf after the overrides, so ``policy.model_name=...``
   also changes ``${policy.model_name}`` elsewhere: absolute ``${a.b}``, relative ``${.x}`` /
   ``${..x}``, typed when a string is one interpolation and formatted inside a longer one;
   NeMo-RL's resolvers ``add``, ``sub``, ``mul``, ``div`` and ``max`` (registered as NeMo-RL's
   ``register_omegaconf_resolvers`` does: only where the name is free) and OmegaConf's own
   (``oc.env``, ``oc.select``, ``oc.decode``, ...). ``${oc.env:NAME,default}`` is a string, or
   None for ``null``, as OmegaConf makes it.
4) Each leaf is resolved on its own (OmegaConf resolves a key when it is read). A leaf that needs
   an unset environment variable without a default keeps its text (an ``UnsetEnv`` string), so a
   key rlnb ignores may hold one, and a key rlnb uses is refused naming the variable
   (``unset_env_keys``); NeMo-RL's ``to_container(resolve=True)`` reads every key and stops at
   the first. Any other failure (a missing key, a cycle, an unknown resolver, a ``???``
   mandatory value left unset) is refused with the dotted path of the key that needs it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import omegaconf
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from rlnb.user_files import compose_yaml, read_text

MISSING = "???"


def add(a, b):
    return a + b


def sub(a, b):
    return a - b


def mul(a, b):
    return a * b


def div(a, b):
    return a / b


def max_(a, b):  # NeMo-RL registers it as 'max'
    return max(a, b)


RESOLVERS = {"add": add, "sub": sub, "mul": mul, "div": div, "max": max_}


def register_resolvers() -> None:
    """NeMo-RL's resolvers, each where its name is free (``register_omegaconf_resolvers``)."""
    # 2.4 renamed register_new_resolver (2.3's only one) to register_resolver, and warns on
    # the old name; 2.3's register_resolver is an older API with other semantics
    newer = tuple(int(x) for x in omegaconf.__version__.split(".")[:2]) >= (2, 4)
    register = OmegaConf.register_resolver if newer else OmegaConf.register_new_resolver
    for name, func in RESOLVERS.items():
        if not OmegaConf.has_resolver(name):
            register(name, func)


class UnsetEnv(str):
    """The text of a value that needs an unset environment variable (choice 4)."""

    variable: str = ""


def merge(base: dict, over: Mapping) -> dict:
    """``over`` laid over ``base`` as plain dicts (mappings merge, ``_override_`` replaces): the
    ``rlnb:`` section over the translated config (``translate.py``)."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and value.get("_override_") is True:
            out[key] = {k: v for k, v in value.items() if k != "_override_"}
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _merge_with_override(base: DictConfig, over: DictConfig, where: str) -> DictConfig:
    """NeMo-RL's ``merge_with_override``: a top-level section marked ``_override_: true``
    replaces the base's (choice 2)."""
    for key in list(over.keys()):
        if OmegaConf.is_interpolation(over, key) or OmegaConf.is_missing(over, key):
            continue  # (not a section: read without resolving it)
        section = over[key]
        if isinstance(section, DictConfig) and section.get("_override_", False):
            section.pop("_override_")
            if key in base:
                base.pop(key)
    try:
        return OmegaConf.merge(base, over)
    except (OmegaConfBaseException, TypeError) as err:
        raise ValueError(f"{where}: cannot be merged over its defaults: "
                         f"{str(err).splitlines()[0]}") from None


def _load(path: Path, chain: tuple[Path, ...]) -> DictConfig:
    named_by = f" (named in defaults: of {chain[-1]})" if chain else ""
    try:
        text = read_text(path, "config file")
    except ValueError as err:
        raise ValueError(f"{err}{named_by}") from None
    node = compose_yaml(text, f"config file {path}")  # choice 1: one line, both lines named
    if node is not None and node.tag != "tag:yaml.org,2002:map":
        kind = "list" if node.tag.endswith(":seq") else node.tag.rsplit(":", 1)[-1]
        raise ValueError(f"config file {path} must hold a mapping of sections, got {kind}")
    try:
        config = OmegaConf.load(path)
    except (OmegaConfBaseException, OSError) as err:
        raise ValueError(f"config file {path}: {str(err).splitlines()[0]}") from None
    return config


def _read(path: Path, chain: tuple[Path, ...] = ()) -> DictConfig:
    """NeMo-RL's ``load_config_with_inheritance`` (choice 2), with a cycle named."""
    if path.resolve() in chain:
        loop = " -> ".join(str(p) for p in (*chain, path.resolve()))
        raise ValueError(f"defaults: form a cycle: {loop}")
    config = _load(path, chain)
    if "defaults" not in config:
        return config
    parents = config.pop("defaults")
    if isinstance(parents, ListConfig):
        parents = OmegaConf.to_container(parents)
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise ValueError(f"{path}: defaults: must be a file name or a list of file names, got "
                         f"{parents!r}")
    merged = OmegaConf.create({})
    for parent in parents:
        merged = _merge_with_override(merged, _read(path.parent / parent, (*chain, path.resolve())),
                                      f"{path.parent / parent}")
    return _merge_with_override(merged, config, str(path))


def read_nemo_yaml(path: str | Path) -> dict:
    """The file's mapping with its ``defaults:`` merged in (choices 1-2); no interpolation yet."""
    data = OmegaConf.to_container(_read(Path(path)), resolve=False)
    return data if isinstance(data, dict) else {}


# --------------------------------------------------------------------------- interpolation


def _message(err: Exception, path: str, raw: Any) -> str:
    """An OmegaConf resolution error as one line naming the key (choice 4)."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    key = re.search(r"Interpolation key '(.+)' not found", text)
    if key:
        return (f"{path}: the interpolation {raw!r} refers to {key.group(1)!r}, which the "
                "config does not have")
    key = re.search(r"access (\S+): node `(\S+)` is not a container", text)
    if key:  # a path through a value (data.validation: null)
        return (f"{path}: the interpolation {raw!r} refers to {key.group(1)!r}, which the "
                f"config does not have ({key.group(2)} is not a section)")
    kind = re.search(r"Unsupported interpolation type (\S+)", text)
    if kind:
        return (f"{path}: unknown resolver '{kind.group(1)}' in {raw!r} (NeMo-RL's are "
                f"{', '.join(sorted(RESOLVERS))}; OmegaConf's oc.env, oc.select, oc.decode, ...)")
    if "Recursive interpolation" in text:
        return f"{path}: interpolation cycle: {raw!r} leads back to {path}"
    if "Missing mandatory value" in text:
        return f"{path}: {raw!r} needs a mandatory value '???' that is not set (give it as an " \
               "override)"
    return f"{path}: cannot resolve {raw!r}: {text}"


def _unset_variable(err: Exception) -> str | None:
    found = re.search(r"Environment variable '([^']+)' not found", str(err))
    return found.group(1) if found else None


def _leaf(parent: DictConfig | ListConfig, key: Any, raw: Any, path: str) -> Any:
    """One leaf's value, resolved by OmegaConf (choices 3 and 4)."""
    if raw == MISSING:
        raise ValueError(f"{path}: mandatory value '???' is not set (give it as an override)")
    try:
        value = parent[key]
        if isinstance(value, (DictConfig, ListConfig)):  # an interpolation naming a section
            value = OmegaConf.to_container(value, resolve=True)
    except OmegaConfBaseException as err:
        variable = _unset_variable(err)
        if variable is None:
            raise ValueError(_message(err, path, raw)) from None
        value = UnsetEnv(raw)
        value.variable = variable
    return value


def _resolve(config: DictConfig | ListConfig, raw: Any, path: str) -> Any:
    if isinstance(raw, dict):
        items = raw.items()
    else:
        items = enumerate(raw)
    out = {} if isinstance(raw, dict) else []
    for key, value in items:
        where = f"{path}.{key}" if path else str(key)
        if isinstance(value, (dict, list)):
            got = _resolve(config[key], value, where)
        else:
            got = _leaf(config, key, value, where)
        if isinstance(out, dict):
            out[key] = got
        else:
            out.append(got)
    return out


def resolve_interpolations(data: Mapping) -> dict:
    """A copy of ``data`` with every ``${...}`` replaced by its value (choices 3 and 4)."""
    register_resolvers()
    try:
        config = OmegaConf.create(dict(data))
    except OmegaConfBaseException as err:  # a value OmegaConf cannot parse or hold
        where = getattr(err, "full_key", None) or "(config)"
        raise ValueError(f"{where}: not a value OmegaConf reads (a ${{...}} interpolation that "
                         f"does not parse?): {str(err).splitlines()[0]}") from None
    return _resolve(config, OmegaConf.to_container(config, resolve=False), "")


def unset_env_keys(data: Any, path: str = "", *, with_variable: bool = False) -> dict:
    """``{dotted key: value}`` of every value in ``data`` that needs an unset variable
    (``with_variable``: ``{dotted key: (value, variable)}``)."""
    if isinstance(data, (Mapping, list)):
        items = data.items() if isinstance(data, Mapping) else enumerate(data)
        found: dict = {}
        for k, v in items:
            found.update(unset_env_keys(v, f"{path}.{k}" if path else str(k),
                                        with_variable=with_variable))
        return found
    if not isinstance(data, UnsetEnv):
        return {}
    return {path: (str(data), data.variable) if with_variable else str(data)}
