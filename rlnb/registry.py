"""One rule for every registry of named parts (advantage estimators, tasks, generation backends,
training loops): a name is held by one part, and taking it from another is said out loud.

    claim(TASKS, "task", "words", WordsTask)        # a new name: registered
    claim(TASKS, "task", "addition", MyAddition)    # ValueError: rlnb's AdditionTask holds it
    claim(TASKS, "task", "addition", MyAddition, replace=True)  # on purpose: replaced

Implementation choices:
1) A taken name is refused, naming the part that holds it and the module it came from (so two
   plug-ins choosing one name say which came first), unless the caller passes ``replace=True``.
   A silent replacement would train with another class while the run's config still names the
   old one.
2) The same definition again is not a clash: the same object, or a class of the same module and
   qualified name (a notebook cell run twice, a module re-imported) replaces its own entry.
3) ``origin(part)`` (``module.QualName``) is what a run records for each name it used
   (``rlnb.run.training.session``: ``parts.json``), so a run says which class ran, whoever
   registered it.

This module sits below every layer (as ``rlnb.config`` does): each layer's registry uses it.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any


def origin(part: Any) -> str:
    """``module.QualName`` of a class or function (``repr`` of anything else)."""
    module, name = getattr(part, "__module__", None), getattr(part, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(part)


def claim(registry: MutableMapping[str, Any], kind: str, name: str, entry: Any, *,
          replace: bool = False, part: Callable[[Any], Any] = lambda entry: entry) -> None:
    """Register ``entry`` under ``name`` in ``registry`` (``kind`` names the registry in
    messages: ``"task"``). ``part(entry)`` is the class an entry stands for (a loop's entry holds
    its trainer). A name held by another part is refused (``ValueError``) unless ``replace``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"a {kind}'s name is a non-empty string, got {name!r}")
    if name in registry and not replace:
        held, new = part(registry[name]), part(entry)
        if held is not new and origin(held) != origin(new):  # choice 2: not the same definition
            raise ValueError(
                f"{kind} {name!r} is taken by {origin(held)}; register {origin(new)} under "
                "another name, or pass replace=True to replace it on purpose")
    registry[name] = entry
