"""The tasks by name, the ``data`` config section, and how a task row becomes a prompt.

    task = build_task({"name": "addition", "max_operand": 50})    # data: {name: addition, ...}

A task is a source of ``{"prompt", "answer"}`` rows plus the environment that scores responses
(``base.Task``). Built in: ``addition`` (``"12+7="`` -> ``"19"``, the embedded tiny model's
default, ``generated.py``), ``reverse`` (``"rev abc="`` -> ``"cba"``, ``reverse.py``),
``addition_think`` (addition whose answer may follow any number of ``"."`` filler characters,
for Dr. GRPO's length-bias study, ``addition_think.py``), ``math`` (GSM8K-style rows from a hub
data set or a local file, scored with ``math_verify``, ``math_task.py``) and ``dataset`` (a user's
rows in TRL's format, scored by the run's ``reward_funcs``, ``user_data.py``), ``reasoning_gym``
(reasoning-gym's procedural data sets, ``reasoning_gym_task.py``) and ``verifiers`` (a verifiers
environment, ``verifiers_task.py``); the last two need the ``envs`` extra; ``calculator`` (a
tool-using agent episode: ``"37*48"``, the ``calc`` tool, ``"1776"``, ``calculator.py``).
``register_task`` adds one of a user's. A prompt is text, or chat messages that go through the
tokenizer's own chat template.

Implementation choices:
1) A task owns its settings: its ``Settings`` model (``base.TaskSettings``: ``num_val``, ``seed``;
   a task with keys of its own subclasses it, next to the task). ``data`` holds ``name``, what
   the run's reward functions count as correct (``correct_reward``, ``correct_threshold``: they
   score any task's rows) and, flat beside them, the chosen task's settings: users write
   ``data: {name: reverse, min_len: 2}`` and ``data.min_len=2``. A setting is checked with its
   type and rules (``data.min_len: ...``), and handed to the task's constructor by name.
2) A key the chosen task does not own is refused in one line naming ``data.<key>``, the task and
   the keys it takes, except another task's setting at that task's default: a config dumped
   when ``data`` held every task's keys (run directories of older versions), or one whose
   ``data.name`` is overridden, sets those; they are dropped.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic_core import PydanticCustomError

from rlnb.algorithms.checks import choose
from rlnb.config import Config, cross_field_rule, parse_config
from rlnb.engine.environments.addition_think import AdditionThinkTask
from rlnb.engine.environments.base import Task
from rlnb.engine.environments.calculator import CalculatorTask
from rlnb.engine.environments.generated import AdditionTask
from rlnb.engine.environments.math_task import MathTask
from rlnb.engine.environments.prompts import format_prompt  # noqa: F401 (its old home)
from rlnb.engine.environments.reasoning_gym_task import ReasoningGymTask
from rlnb.engine.environments.reverse import ReverseTask
from rlnb.engine.environments.user_data import DatasetTask
from rlnb.engine.environments.verifiers_task import VerifiersTask
from rlnb.registry import claim

# the registry (name -> Task class): ``data.name`` picks one; its ``Settings`` are the ``data``
# keys it reads (choice 1)
TASKS: dict[str, type[Task]] = {
    "addition": AdditionTask,
    "reverse": ReverseTask,
    "addition_think": AdditionThinkTask,
    "math": MathTask,
    "dataset": DatasetTask,
    "reasoning_gym": ReasoningGymTask,
    "verifiers": VerifiersTask,
    "calculator": CalculatorTask,
}


def register_task(name: str, cls: type[Task], *, replace: bool = False) -> None:
    """Make ``data.name: <name>`` build ``cls``: a ``Task`` subclass whose ``Settings`` (a pydantic
    model; ``base.TaskSettings`` unless it declares its own) are the ``data`` keys it reads, each
    taken by its constructor by name. A name another task holds is refused unless ``replace``
    (``rlnb.registry.claim``)."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"task {name!r}: a task is a Task subclass, got {cls!r}")
    settings = getattr(cls, "Settings", None)
    if not (isinstance(settings, type) and issubclass(settings, BaseModel)):
        raise TypeError(f"task {name!r}: {cls.__name__}.Settings must be a pydantic model (a "
                        f"subclass of TaskSettings), got {settings!r}")
    fields = settings.model_fields
    clash = [k for k in fields if k in TaskConfig.model_fields]
    if clash:
        raise TypeError(f"task {name!r}: {cls.__name__}.Settings declares {clash}, which the "
                        f"data section holds for every task")
    params = inspect.signature(cls).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        missing = [k for k in fields if k not in params]
        if missing:
            raise TypeError(f"task {name!r}: {cls.__name__}'s constructor takes no {missing}, "
                            f"which its Settings declare; take them by name, or declare "
                            f"Settings without them")
    required = [k for k, p in params.items() if p.default is p.empty and k not in fields
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if required:
        raise TypeError(f"task {name!r}: {cls.__name__}'s constructor requires {required}, which "
                        f"its Settings do not declare")
    claim(TASKS, "task", name, cls, replace=replace)


def make_task(name: str, **kwargs) -> Task:
    """Build the task called ``name`` from ``TASKS`` with its constructor's keyword arguments."""
    cls = choose(TASKS, name, "task")
    params = list(inspect.signature(cls).parameters)
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        raise ValueError(f"task {name!r} takes no argument {unknown[0]!r}; valid: {params}")
    return cls(**kwargs)


class TaskConfig(Config):
    """``data``: the task, what the run's reward functions count as correct, and, flat beside
    them, the task's own settings (its ``Settings``, choice 1)."""

    # the chosen task's settings arrive as extra keys: ``_task_settings`` checks them
    model_config = ConfigDict(extra="allow")

    name: str = Field("addition", description=f"task, one of {list(TASKS)} or a registered one "
                      "(register_task); the other data keys are its settings")
    correct_reward: str | None = Field(
        None, description="with reward_funcs: the reward function whose score defines a "
        "correct response (or 'total', the weighted sum), for accuracy metrics; None: no "
        "accuracy (the task has no notion of correct)")
    correct_threshold: float = Field(
        1.0, description="with correct_reward: correct when that score is >= this")

    @field_validator("name")
    @classmethod
    def _known_task(cls, v: str) -> str:
        choose(TASKS, v, "task")
        return v

    @model_validator(mode="before")
    @classmethod
    def _legacy_prompt_key(cls, data):
        # run directories written while prompt_key was math's alone dump prompt_key: question
        name = data.get("name", "addition") if isinstance(data, dict) else None
        if (isinstance(name, str) and name in TASKS and data.get("prompt_key") == "question"
                and "prompt_key" not in TASKS[name].Settings.model_fields):
            data = {k: v for k, v in data.items() if k != "prompt_key"}
        return data

    @cross_field_rule
    def _task_settings(self) -> TaskConfig:
        settings = check_settings(self.name, self.__pydantic_extra__ or {})
        # the checked values, every one (defaults filled in): what the task is built with
        object.__setattr__(self, "__pydantic_extra__", dict(settings))
        return self

    @model_serializer(mode="wrap")
    def _settings_after_the_name(self, handler):
        data = handler(self)
        common = type(self).model_fields
        return {**{k: data[k] for k in ("name",) if k in data},
                **{k: v for k, v in data.items() if k not in common},
                **{k: data[k] for k in common if k in data and k != "name"}}


def check_settings(name: str, given: Mapping[str, Any]) -> BaseModel:
    """The ``Settings`` of task ``name`` from the ``data`` keys beside ``name`` (choice 2); raises
    pydantic's ``ValidationError``, each problem at its key."""
    model = TASKS[name].Settings
    errors = [{"type": PydanticCustomError("task_setting", "{why}", {"why": _not_owned(name, key)}),
               "loc": (key,), "input": value}
              for key, value in given.items()
              if key not in model.model_fields and not _a_default_elsewhere(key, value)]
    if errors:
        raise ValidationError.from_exception_data(TaskConfig.__name__, errors)
    return model.model_validate({k: v for k, v in given.items() if k in model.model_fields})


def _a_default_elsewhere(key: str, value: Any) -> bool:
    """Whether ``key`` is another task's setting and ``value`` that task's default (choice 2)."""
    return any(key in cls.Settings.model_fields and cls.Settings.model_fields[key].default == value
               for cls in TASKS.values())


def _not_owned(name: str, key: str) -> str:
    """Why ``data.<key>`` is refused under ``data.name: <name>``, with the keys it takes."""
    takes = [*sorted(TASKS[name].Settings.model_fields),
             *(k for k in TaskConfig.model_fields if k != "name")]
    owners = [repr(n) for n, cls in TASKS.items() if key in cls.Settings.model_fields]
    if owners:
        return (f"task {name!r} has no such setting ({' and '.join(owners)} "
                f"{'has' if len(owners) == 1 else 'have'} it); it takes {', '.join(takes)}")
    close = get_close_matches(key, takes, n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ";"
    return f"unknown key{hint} task {name!r} takes {', '.join(takes)}"


def check_rollout_turns(task_cls: type[Task], settings, turns: int, key: str,
                        settable: bool = True) -> None:
    """Refuse ``key`` (``grpo.max_rollout_turns``) = ``turns`` below what the task needs
    (``Task.turns_needed``; ``settings``: its ``data`` section, or the task itself); a loop
    whose turns are fixed (DPO's one) is named as such (``settable`` False)."""
    need, why = task_cls.turns_needed(settings)
    if turns >= need:
        return
    if not settable:
        raise ValueError(f"the {key.split('.')[0]} loop samples {turns} model turn per episode, "
                         f"but task {task_cls.name!r} (data.name) needs {need} ({why}): change "
                         "that setting, or train the task with grpo or ppo")
    raise ValueError(f"{key}={turns}, but task {task_cls.name!r} (data.name) needs {need} model "
                     f"turns per episode ({why}): set {key}={need} or more")


def build_task(config: TaskConfig | dict | None = None) -> Task:
    """The task a ``TaskConfig`` (or a plain dict, or ``None`` for the default) describes."""
    cfg = parse_config(TaskConfig, config, "task")
    return make_task(cfg.name, **task_arguments(cfg))


def task_arguments(cfg: TaskConfig) -> dict[str, Any]:
    """The settings of the task ``cfg.name``, checked and complete: its constructor's keyword
    arguments (choice 1)."""
    return dict(cfg.__pydantic_extra__ or {})
