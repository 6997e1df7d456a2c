"""A task's settings, written once: its ``Settings`` model (the ``data`` keys it reads, with their
defaults, ranges and help) and a constructor that takes each of them by name, without defaults.

    class WordsTask(Task):
        class Settings(TaskSettings):
            width: int = Field(2, ge=2, description="letters per word")

        def __init__(self, width, num_val, seed): ...

    WordsTask()              # width=2, num_val=200, seed=0: the Settings' defaults
    WordsTask(width=3)       # the others still the Settings'

Implementation choices:
1) ``Task.__init_subclass__`` wraps a task's own ``__init__`` (``take_defaults``): a setting left
   out of the call gets its ``Settings`` default, so ``AdditionTask()`` in a notebook and
   ``data.name: addition`` in a config build the same task. The wrapped constructor's signature
   shows those defaults (``help(AdditionTask)``).
2) A constructor that writes a setting's default itself, different from its ``Settings``', is
   refused when the class is defined, naming the key and both values: the same task would
   differ between the two ways of building it. One that writes the same value is accepted
   (plug-ins written before this rule) but says it twice; rlnb's own tasks write none.
"""

from __future__ import annotations

import functools
import inspect

from pydantic import Field

from rlnb.config import Config


class TaskSettings(Config):
    """The ``data`` settings of a task: these two, how many rows are held out and which, are
    every built-in task's; a task with keys of its own subclasses this."""

    num_val: int = Field(200, ge=1, description="number of held-out validation rows")
    seed: int = Field(0, description="chooses the held-out validation problems")


def setting_defaults(settings: type[Config]) -> dict:
    """Each field of ``settings`` and its default (a factory's value, built anew)."""
    return {k: f.get_default(call_default_factory=True) for k, f in settings.model_fields.items()
            if not f.is_required()}


def take_defaults(cls: type) -> None:
    """Give ``cls``'s own ``__init__`` its ``Settings``' defaults for the settings left out of a
    call (choice 1); refuse a default written differently there (choice 2)."""
    init = cls.__dict__.get("__init__")
    settings = getattr(cls, "Settings", None)
    if init is None or settings is None or getattr(init, "takes_settings_defaults", False):
        return
    defaults = setting_defaults(settings)
    sig = inspect.signature(init)
    named = [p for p in sig.parameters.values() if p.name in defaults]
    for p in named:
        if p.default is not p.empty and p.default != defaults[p.name]:
            raise TypeError(
                f"{cls.__name__}.__init__: {p.name}={p.default!r} by default, but "
                f"{cls.__name__}.Settings says {defaults[p.name]!r}: write a setting's default "
                f"once, in Settings (drop it from __init__)")
    missing = [p.name for p in named if p.default is p.empty]
    if not missing:
        return

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        given = sig.bind_partial(self, *args, **kwargs).arguments
        for name in missing:
            if name not in given:
                kwargs[name] = setting_defaults(settings)[name]
        init(self, *args, **kwargs)

    __init__.takes_settings_defaults = True
    __init__.__signature__ = sig.replace(parameters=[
        p.replace(default=defaults[p.name]) if p.name in missing else p
        for p in sig.parameters.values()])
    cls.__init__ = __init__
