"""The ``-p KEY VALUE`` parameters of ``rlnb run``, ``sweep`` and ``launch``: read, then checked
against the notebook before a kernel starts.

    check_parameters("notebooks/01_grpo_step_by_step.ipynb",
                     {"seed": 1, "loss_fn.ratio_clip_max": 0.28})
    # -> {"seed": 1, "overrides": ["loss_fn.ratio_clip_max=0.28"]}

Implementation choices:
1) A parameter whose name has a dot is a config key, appended to the notebook's ``overrides`` as
   ``"dotted.key=value"``; any other name must be declared by the cell tagged ``parameters``
   (papermill only warns, and a typo would sweep nothing).
2) Values are read as YAML, as the config's own overrides are (``0.28``, ``true``, ``null``,
   ``[1, 2]``; ``1e-3`` is a float).
3) A value must fit the type of its literal default (an int stays an int, a bool is not one, a
   float takes an int; a ``None`` or non-literal default takes anything), and a config override
   goes through ``load_config`` alone, refused only for what it says about that key: the
   notebook picks the base config and the loop, so cross-field checks are left to it.
"""

from __future__ import annotations

import ast
import functools
import json
import keyword
import math
import re
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from rlnb.user_files import load_yaml

_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")  # 1e-3: a string to YAML 1.1
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def one_line(text: str | None, limit: int = 400) -> str:
    """A multi-line message on one line (``invalid config:\n  grpo.seed: ...`` keeps the key)."""
    joined = " ".join(part.strip() for part in (text or "").strip().splitlines() if part.strip())
    return joined[:limit] + ("…" if len(joined) > limit else "")



def parse_value(text: str) -> Any:
    """A command-line value as YAML reads it: ``0.28`` float, ``3`` int, ``true`` bool, ``null``
    None, ``[1, 2]`` list, else the string itself; ``1e-3`` is a float too."""
    if not text.strip():
        return text
    try:  # strictly: a mapping's key given twice is refused (rlnb.user_files)
        value = load_yaml(text, "it")
    except ValueError as err:  # "it is not valid YAML at ...", "it: key 'a' appears twice ..."
        detail = str(err).removeprefix("it").removeprefix(":").strip()
        raise ValueError(f"cannot read the value {text!r}: {detail}") from None
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    return value if _plain(value) else text  # YAML dates and the like stay text


def _plain(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    return value is None or isinstance(value, (bool, int, float, str))


def format_value(value: Any) -> str:
    """``value`` as override text that ``parse_value`` (and the config) reads back unchanged."""
    if isinstance(value, str) and value.strip() and parse_value(value) == value:
        return value
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return json.dumps(value)  # JSON is YAML: quotes a string that would read as a number


def split_parameters(params: Mapping[str, Any]) -> dict[str, Any]:
    """papermill parameters from ``{name: value}``: a dotted name is a config key, appended to
    ``overrides`` as ``"dotted.key=value"``; any other name must be a Python name.

    >>> split_parameters({"seed": 1, "loss_fn.ratio_clip_max": 0.28})
    {'seed': 1, 'overrides': ['loss_fn.ratio_clip_max=0.28']}
    """
    out: dict[str, Any] = {}
    dotted: list[str] = []
    for key, value in params.items():
        if "." in key:
            if not all(_NAME.fullmatch(part) for part in key.split(".")):
                raise ValueError(f"parameter {key!r} is neither a Python name nor a dotted config "
                                 "key (names joined by dots, like loss_fn.ratio_clip_max)")
            dotted.append(f"{key}={format_value(value)}")
        elif key.isidentifier() and not keyword.iskeyword(key):
            out[key] = value
        else:
            raise ValueError(f"parameter {key!r} is not a Python name")
    if dotted:
        given = out.get("overrides") or []
        if not isinstance(given, list):
            raise ValueError(f"overrides must be a list of 'dotted.key=value', got {given!r}")
        out["overrides"] = [*given, *dotted]
    return out


def parse_pairs(pairs: Sequence[Sequence[str]]) -> dict[str, Any]:
    """``-p KEY VALUE`` pairs as ``{key: parse_value(value)}``; a key given twice is an error."""
    out: dict[str, Any] = {}
    for key, text in pairs:
        if key in out:
            raise ValueError(f"parameter {key!r} is given twice")
        out[key] = parse_value(text)
    return out


def notebook_parameters(notebook: str | Path) -> set[str] | None:
    """The names the cell tagged ``parameters`` assigns; None if the notebook has no such cell."""
    defaults = parameter_defaults(notebook)
    return None if defaults is None else set(defaults)


_NOT_LITERAL = object()  # a default such as ``2 ** 10`` or ``Path("x")``: its type is not checked


def parameter_defaults(notebook: str | Path) -> dict[str, Any] | None:
    """``{name: default}`` of the cell tagged ``parameters`` (the last assignment wins; a default
    that is not a literal maps to ``_NOT_LITERAL``); None if the notebook has no such cell."""
    nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    for cell in nb.get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
            defaults: dict[str, Any] = {}
            for node in ast.parse(source).body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) else [])
                for target in targets:
                    if isinstance(target, ast.Name):
                        defaults[target.id] = _literal(node.value)
            return defaults
    return None


def _literal(node: ast.expr | None) -> Any:
    try:
        return ast.literal_eval(node) if node is not None else _NOT_LITERAL
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _kind_problem(value: Any, default: Any) -> str | None:
    """What ``value`` is not, to stand where ``default`` does (``"an int"``); None if it fits."""
    if default is None or default is _NOT_LITERAL:
        return None
    if isinstance(default, bool):  # before int: a bool is an int to isinstance
        return None if isinstance(value, bool) else "a bool (true or false)"
    # numbers.Integral and Real: numpy's scalars from the Python API fit too
    if isinstance(default, int):
        return None if isinstance(value, Integral) and not isinstance(value, bool) else "an int"
    if isinstance(default, float):  # 1 where 0.5 was: what the notebook does with it is the same
        return None if isinstance(value, Real) and not isinstance(value, bool) else "a number"
    if isinstance(default, str):
        return None if isinstance(value, str) else "a str"
    if isinstance(default, (list, tuple)):
        return None if isinstance(value, (list, tuple)) else "a list"
    if isinstance(default, dict):
        return None if isinstance(value, dict) else "a dict"
    return None  # a set, bytes, complex: rare in a parameters cell, left to the notebook


def _check_types(notebook: Path, params: Mapping[str, Any]) -> None:
    defaults = parameter_defaults(notebook) or {}
    for name, value in params.items():
        if "." in name or name not in defaults:
            continue
        kind = _kind_problem(value, defaults[name])
        if kind is not None:
            hint = (f"; quote it to pass it as text: -p {name} '\"{format_value(value)}\"'"
                    if kind == "a str" and isinstance(value, (bool, int, float)) else "")
            raise ValueError(f"-p {name}: {value!r} is not {kind} (the default in "
                             f"{notebook.name}'s parameters cell is {defaults[name]!r}){hint}")


@functools.cache
def config_override_problem(item: str) -> str | None:
    """What ``load_config`` says against the override ``item`` (``"dotted.key=value"``) itself, as
    one line (``loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?``); None if it
    says nothing (choice 3).

    The override is laid over the default config alone, with the algorithm that owns its section
    (``ppo.*`` under ``algorithm: ppo``); a line of the error about another key or a whole
    section (a cross-field check) is dropped, as the notebook's own config may settle it.
    """
    from rlnb.config import parse_override
    from rlnb.engine.trainers.loop_config import OVERRIDE_ALIASES
    from rlnb.engine.trainers.loops import loop_sections
    from rlnb.run.config.master_config import load_config

    try:
        path, _ = parse_override(item)
        key = ".".join(path)
        target = OVERRIDE_ALIASES.get(key, key)  # grpo.normalize_rewards is checked where it goes
        owner = next((a for a, sections in loop_sections().items() if path[0] in sections),
                     None)
        load_config({"algorithm": owner} if owner else {}, [item])
    except ValueError as err:
        head, *lines = str(err).splitlines()
        if head != "invalid config:" or not lines:
            return one_line(str(err))  # about the override as written (not valid YAML, ...)
        own = []
        for line in lines:  # "  loss_fn.ratio_clip_mx: unknown key; did you mean ...?"
            where, _, what = line.strip().partition(": ")
            inside = where == target or where.startswith(target + ".")
            on_the_way = what.startswith("unknown ") and target.startswith(where + ".")
            if inside or on_the_way:
                own.append(f"{where}: {what}")
        return "; ".join(own) or None
    return None


def _check_overrides(params: Mapping[str, Any]) -> None:
    """Each config override given (dotted keys, ``overrides`` items) through ``load_config``."""
    given = [(name, f"{name}={format_value(value)}") for name, value in params.items()
             if "." in name]
    given += [("overrides", item) for item in params.get("overrides") or []
              if isinstance(item, str)]
    for name, item in given:
        problem = config_override_problem(item)
        if problem is not None:  # -p loss_fn.x: unknown key (the key said once)
            raise ValueError(f"-p {name}: {problem.removeprefix(f'{name}: ')}")


def _check_declared(notebook: Path, params: Mapping[str, Any]) -> None:
    if "run_dir" in params:
        raise ValueError("run_dir is set by the command: pass --run-dir (run_dir= in Python)")
    declared = notebook_parameters(notebook)
    unknown = sorted(set(params) - (declared or set()))
    if unknown and declared is None:
        raise ValueError(f"{notebook.name} has no cell tagged 'parameters', so it takes none "
                         f"(given: {', '.join(unknown)})")
    if unknown:
        raise ValueError(f"{notebook.name} has no parameter {', '.join(unknown)}; its parameters "
                         f"cell declares: {', '.join(sorted(declared))} (a config key has a dot)")


def check_parameters(notebook: str | Path, parameters: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` (``{name: value}``, dotted names config keys) checked against ``notebook``
    before anything runs (choices 1 and 3), returned as papermill parameters (``split_parameters``).
    A ValueError names the parameter: an undeclared name, a value that does not fit its default,
    a config key or value that ``load_config`` refuses."""
    notebook = Path(notebook)
    params = split_parameters(parameters)
    if "overrides" in params and not (isinstance(params["overrides"], list)
                                      and all(isinstance(x, str) for x in params["overrides"])):
        raise ValueError(
            f"parameter overrides must be a list of 'dotted.key=value' strings, got "
            f"{params['overrides']!r}; give a config key directly: -p grpo.seed 1")
    _check_declared(notebook, params)
    _check_types(notebook, parameters)
    _check_overrides(parameters)  # last: it loads the config schema (transformers, torch)
    return params
