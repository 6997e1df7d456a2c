"""A user's files, read strictly: a path checked for what it must be (a file, a folder), and YAML
read as OmegaConf reads it, a key repeated in one mapping refused.

    data = load_yaml(path.read_text(), "config file x.yaml")   # ValueError naming key and lines
    path = expect_file("data/", "data file")    # ValueError: data file data/ is a directory, ...

Implementation choices:
1) A key repeated in one mapping is refused, naming the file, the key's dotted path and both
   lines. PyYAML keeps the last value without a word; OmegaConf (and so NeMo-RL, which reads its
   files with it) refuses the file ("found duplicate key"). rlnb's own YAML (configs, presets, a
   run's config.yaml, a ``dotted.key=value`` override's value, a notebook's ``-p`` value) and
   NeMo-RL's are checked the same way (``check_duplicate_keys``, on the composed node tree,
   before anything is built). Keys are compared by their type and text (``1`` and ``'1'`` are
   two keys, as in OmegaConf 2.3); a key merged in by ``<<`` may be overridden (YAML's merge
   rule).
2) A syntax error is one line: where (line, column) and what.
3) A path is checked before it is opened, so a folder where a file belongs (or a file where a
   folder belongs) is said as such, not as "not found" or an ``IsADirectoryError`` traceback.

This module sits below every layer (as ``rlnb.config`` does): the config layer, the run layer's
run directories and the engine's data files all read a user's files through it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MERGE_TAG = "tag:yaml.org,2002:merge"


def yaml_error_line(err: yaml.YAMLError, where: str) -> str:
    """A YAML syntax error as one line naming ``where``, the line and column (choice 2)."""
    mark = getattr(err, "problem_mark", None)
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{where} is not valid YAML{at}: {what}"


def check_duplicate_keys(node: yaml.Node | None, where: str, path: str = "",
                         _seen: set[int] | None = None) -> None:
    """Raise ``ValueError`` for the first key that a mapping under ``node`` holds twice: the
    file (``where``), the key's dotted path and both lines (choice 1)."""
    seen = set() if _seen is None else _seen
    if node is None or id(node) in seen:  # an alias is checked where its anchor is
        return
    seen.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            check_duplicate_keys(item, where, f"{path}[{i}]", seen)
    if not isinstance(node, yaml.MappingNode):
        return
    first: dict[tuple[str, str], yaml.Node] = {}
    for key, value in node.value:
        if key.tag == MERGE_TAG or not isinstance(key, yaml.ScalarNode):
            continue
        dotted = f"{path}.{key.value}" if path else str(key.value)
        if (key.tag, key.value) in first:
            a, b = first[key.tag, key.value].start_mark.line + 1, key.start_mark.line + 1
            lines = f"at lines {a} and {b}" if a != b else f"on line {a}"
            raise ValueError(f"{where}: key '{dotted}' appears twice, {lines} (YAML would keep "
                             "only the last; OmegaConf refuses it): remove one")
        first[key.tag, key.value] = key
        check_duplicate_keys(value, where, dotted, seen)


def compose_yaml(text: str, where: str, loader: type = yaml.SafeLoader) -> yaml.Node | None:
    """The node tree of one YAML document, every mapping checked for a repeated key; a syntax
    error or a repeated key is a ``ValueError`` naming ``where``."""
    try:
        node = yaml.compose(text, Loader=loader)
    except yaml.YAMLError as err:
        raise ValueError(yaml_error_line(err, where)) from None
    check_duplicate_keys(node, where)
    return node


def load_yaml(text: str, where: str, loader: type = yaml.SafeLoader) -> Any:
    """One YAML document read as ``loader`` reads it (``yaml.safe_load`` by default), refusing a
    syntax error or a repeated key in one line naming ``where`` (choices 1 and 2)."""
    node = compose_yaml(text, where, loader)
    if node is None:
        return None
    reader = loader("")
    try:
        return reader.construct_document(node)
    except yaml.YAMLError as err:  # a tag the loader cannot build (!!python/object, ...)
        raise ValueError(yaml_error_line(err, where)) from None
    finally:
        reader.dispose()


def expect_file(path: str | Path, what: str) -> Path:
    """``path`` when it is a file; else a ``ValueError``: ``<what> not found: <path>``, or
    ``<what> <path> is a directory, not a file`` (choice 3)."""
    path = Path(path)
    if path.is_file():
        return path
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not a file")
    if path.exists():
        raise ValueError(f"{what} {path} is not a regular file")
    raise ValueError(f"{what} not found: {path}")


def expect_folder(path: str | Path, what: str) -> Path:
    """``path`` when it is a folder; else a ``ValueError``: ``<what> not found: <path>``, or
    ``<what> <path> is a file, not a directory`` (choice 3)."""
    path = Path(path)
    if path.is_dir():
        return path
    if path.exists():
        raise ValueError(f"{what} {path} is a file, not a directory")
    raise ValueError(f"{what} not found: {path}")


def read_text(path: str | Path, what: str) -> str:
    """A text file's content (``expect_file``); bytes that are not UTF-8 are one line."""
    path = expect_file(path, what)
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{what} {path} is not UTF-8 text ({err.reason} at byte "
                         f"{err.start})") from None
