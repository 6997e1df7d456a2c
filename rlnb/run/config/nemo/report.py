"""The bookkeeping of ``translate.py``'s translation: every leaf key of a NeMo-RL config is marked
used, ignored (with a note) or refused (with a reason), and the ignored ones are summarised in a
screenful, grouped by note.
"""

from __future__ import annotations

import textwrap
from collections import defaultdict
from collections.abc import Mapping
from typing import Any


class Report:
    """Marks on the leaves (``flatten``'s dotted keys) of one NeMo-RL config.

    Args:
        flat: ``{dotted key: value}`` of the resolved config.
        notes: note names (``ignore(path, "speed")``) -> the text shown to the user.
    """

    def __init__(self, flat: Mapping[str, Any], notes: Mapping[str, str]):
        self.flat, self.notes = dict(flat), dict(notes)
        self.marked: set[str] = set()
        self.ignored: dict[str, str] = {}
        self.roots: dict[str, str] = {}  # ignored leaf -> the path ignore() was called with
        self.refused: dict[str, str] = {}

    # --- reading

    def leaves(self, path: str) -> list[str]:
        return [k for k in self.flat if k == path or k.startswith(path + ".")]

    def has(self, path: str) -> bool:
        return bool(self.leaves(path))

    def get(self, path: str) -> Any:
        """The value at ``path`` (a leaf, or the nested dict under it; None when absent)."""
        if path in self.flat:
            return self.flat[path]
        out: dict = {}
        for key in self.leaves(path):
            node = out
            parts = key[len(path) + 1:].split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = self.flat[key]
        return out or None

    # --- marking

    def used(self, path: str) -> None:
        """Mark the leaves under ``path`` as used (also when they are inert, as rlnb is)."""
        self.marked.update(self.leaves(path))

    def take(self, path: str, default: Any = None) -> Any:
        value = self.get(path)
        self.used(path)
        return default if value is None else value

    def take_section(self, path: str) -> dict:
        return self.take(path) or {}

    def copy(self, prefix: str, keys: tuple[str, ...]) -> dict:
        """``{key: value}`` of the ``keys`` present under ``prefix``, marked used."""
        return {k: self.take(f"{prefix}.{k}") for k in keys if self.has(f"{prefix}.{k}")}

    def switched(self, path: str) -> dict:
        """A section with an ``enabled`` switch: all of it when on, ``{"enabled": False}`` when
        off (its other keys are inert, in NeMo-RL as in rlnb)."""
        if self.get(f"{path}.enabled"):
            return self.take_section(path)
        self.used(path)
        return {"enabled": False}

    def refuse(self, path: str, reason: str) -> None:
        self.refused[path] = reason
        self.marked.update(self.leaves(path))

    def neutral(self, path: str, allowed: tuple, reason: str) -> None:
        """Used when the value is one of ``allowed`` (what rlnb does), refused otherwise (a key
        already listed as ignored stays so)."""
        if not self.has(path) or all(k in self.ignored for k in self.leaves(path)):
            return
        value = self.get(path)
        if any(_same(value, a) for a in allowed):
            self.used(path)
        else:
            self.refuse(path, f"{value!r}: {reason}")

    def neutral_tree(self, path: str, allowed: tuple, reason: str) -> None:
        """``neutral`` for every leaf under ``path``."""
        for key in self.leaves(path):
            self.neutral(key, allowed, reason)

    def ignore(self, path: str, kind: str | None = None, *, note: str | None = None,
               force: bool = False) -> None:
        """List the not yet marked leaves under ``path`` as ignored (``force``: also marked
        ones, for a key used only approximately)."""
        text = note if note is not None else self.notes[kind]
        for key in self.leaves(path):
            if force or key not in self.marked:
                self.ignored[key], self.roots[key] = text, path
                self.marked.add(key)

    def refuse_rest(self, reason: str) -> None:
        for key in self.flat:
            if key not in self.marked:
                self.refuse(key, reason)


def _same(value: Any, allowed: Any) -> bool:
    """Equal, with booleans never equal to numbers (``0`` is not ``False`` here)."""
    if isinstance(value, bool) or isinstance(allowed, bool):
        return type(value) is type(allowed) and value == allowed
    return value is allowed or value == allowed


def group_lines(ignored: Mapping[str, str], roots: Mapping[str, str],
                width: int = 100) -> list[str]:
    """One wrapped entry per note: its keys, a whole ignored section shown as ``section.* (n)``
    and siblings gathered as ``parent.{a, b}``."""
    by_note: dict[str, dict[str, int]] = defaultdict(dict)
    for key, note in ignored.items():
        root = roots.get(key, key)
        by_note[note][root] = by_note[note].get(root, 0) + 1
    lines = []
    for note, sections in by_note.items():
        by_parent: dict[str, list[str]] = defaultdict(list)
        for root, n in sections.items():
            parent, _, leaf = root.rpartition(".")
            by_parent[parent].append(leaf if n == 1 and root in ignored else f"{leaf}.* ({n})")
        shown = [(f"{p}.{{{', '.join(leaves)}}}" if len(leaves) > 1 else f"{p}.{leaves[0]}")
                 if p else ", ".join(leaves) for p, leaves in by_parent.items()]
        lines += textwrap.wrap(f"{', '.join(shown)}: {note}", width=width,
                               initial_indent="  - ", subsequent_indent="      ")
    return lines
