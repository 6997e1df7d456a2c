"""The tasks by name, the ``data`` config section, and how a task row becomes a prompt.

    task = build_task({"name": "addition", "max_operand": 50})    # data: {name: addition, ...}

A task is a source of ``{"prompt", "answer"}`` rows plus the environment that scores responses
(``base.Task``). Built in: ``addition`` (``"12+7="`` -> ``"19"``, the embedded tiny model's
default, ``generated.py``), ``reverse`` (``"rev abc="`` -> ``"cba"``, ``reverse.py``),
``addition_think`` (addition whose answer may follow any number of ``"."`` filler characters,
for Dr. GRPO's length-bias study, ``addition_think.py``), ``math`` (GSM8K-style rows from a hub
data set or a local file, scored with ``math_verify``, ``math_task.py``) and ``dataset`` (a user's
rows in TRL's format, scored by the run's ``reward_funcs``, ``user_data.py``). ``register_task``
adds one of a user's; each task reads the ``data`` fields its constructor takes, and a field set
for a task that does not read it is refused. A prompt is text, or chat messages that go through
the tokenizer's own chat template.
"""

from __future__ import annotations

import inspect

from pydantic import Field, field_validator, model_validator

from rlnb.algorithms.checks import choose
from rlnb.config import Config, parse_config
from rlnb.engine.environments.addition_think import AdditionThinkTask
from rlnb.engine.environments.base import Task
from rlnb.engine.environments.generated import AdditionTask
from rlnb.engine.environments.math_task import MathTask
from rlnb.engine.environments.prompts import format_prompt  # noqa: F401 (its old home)
from rlnb.engine.environments.reverse import ReverseTask
from rlnb.engine.environments.user_data import DatasetTask

# --------------------------------------------------------------------------------------------
# prompts, the registry and the config


# the registry (name -> Task class): ``data.name`` picks one; each reads the ``data`` fields its
# constructor takes
TASKS: dict[str, type[Task]] = {
    "addition": AdditionTask,
    "reverse": ReverseTask,
    "addition_think": AdditionThinkTask,
    "math": MathTask,
    "dataset": DatasetTask,
}
# data fields of the run's reward functions (reward_task.py), read whatever task gives the rows
REWARD_FIELDS = ("correct_reward", "correct_threshold")


def register_task(name: str, cls: type[Task]) -> None:
    """Make ``data.name: <name>`` build ``cls``: a ``Task`` subclass whose constructor takes
    keyword arguments named like ``data`` fields (``num_val``, ``seed``, ...)."""
    if not (isinstance(cls, type) and issubclass(cls, Task)):
        raise TypeError(f"task {name!r}: a task is a Task subclass, got {cls!r}")
    unknown = [k for k in inspect.signature(cls).parameters if k not in TaskConfig.model_fields]
    if unknown:
        raise TypeError(f"task {name!r}: {cls.__name__}'s constructor takes {unknown}, which are "
                        f"not data fields (the data section has {sorted(TaskConfig.model_fields)})")
    TASKS[name] = cls


def make_task(name: str, **kwargs) -> Task:
    """Build the task called ``name`` from ``TASKS`` with its constructor's keyword arguments."""
    cls = choose(TASKS, name, "task")
    params = list(inspect.signature(cls).parameters)
    unknown = [k for k in kwargs if k not in params]
    if unknown:
        raise ValueError(f"task {name!r} takes no argument {unknown[0]!r}; valid: {params}")
    return cls(**kwargs)


class TaskConfig(Config):
    """Which task to train on; each task reads only the fields its constructor takes."""

    name: str = Field("addition", description=f"task, one of {list(TASKS)} or a registered one "
                      "(register_task)")
    max_operand: int = Field(50, ge=1, description="addition: operands are 0..max_operand")
    max_filler: int = Field(
        4, ge=0, description="addition_think: longest filler ('.' run) in the warm start's "
        "demonstrations (the reward accepts any length)")
    min_len: int = Field(3, ge=1, description="reverse: shortest word")
    max_len: int = Field(6, ge=1, description="reverse: longest word")
    dataset_name: str | None = Field(
        None, description="math: hub name ('openai/gsm8k') or local .json/.jsonl/.parquet file"
    )
    dataset_config: str | None = Field(None, description="math: hub config ('main' for GSM8K)")
    path: str | None = Field(
        None, description="dataset: a .jsonl/.json/.parquet/.csv file or a save_to_disk folder "
        "with a 'prompt' column (text or chat messages); the other columns reach the reward "
        "functions")
    split: str = Field("train", description="math: hub split to train on; dataset: the split "
                       "of a DatasetDict to train on")
    val_split: str | None = Field(
        None, description="math, dataset: validation split or file; None holds out num_val "
        "train rows")
    prompt_key: str | None = Field(
        None, description="math, dataset: the column with the prompt (default: math 'question', "
        "dataset 'prompt')")
    answer_key: str = Field("answer", description="math: column with the reference answer; "
                            "dataset: column with the demonstration the warm start trains on")
    num_val: int = Field(200, ge=1, description="number of held-out validation rows")
    val_fraction: float | None = Field(
        None, gt=0, lt=1, description="dataset: hold out this share of the rows instead of "
        "num_val")
    seed: int = Field(0, description="chooses the held-out validation problems")
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
        if (isinstance(data, dict) and data.get("prompt_key") == "question"
                and data.get("name", "addition") in TASKS
                and "prompt_key" not in inspect.signature(TASKS[data.get("name", "addition")])
                .parameters):
            data = {k: v for k, v in data.items() if k != "prompt_key"}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> TaskConfig:
        takes = set(inspect.signature(TASKS[self.name]).parameters) | set(REWARD_FIELDS)
        # set to something else than its default (a dumped config sets every key, to defaults)
        ignored = sorted(k for k in self.model_fields_set if k != "name" and k not in takes
                         and getattr(self, k) != type(self).model_fields[k].default)
        if ignored:
            raise ValueError(f"task {self.name!r} does not read {', '.join(ignored)} "
                             f"(it takes {', '.join(sorted(takes))})")
        if self.name == "math" and self.dataset_name is None:
            raise ValueError("the math task needs dataset_name (a hub name or a local file)")
        if self.min_len > self.max_len:
            raise ValueError(f"min_len ({self.min_len}) > max_len ({self.max_len})")
        return self


def build_task(config: TaskConfig | dict | None = None) -> Task:
    """The task a ``TaskConfig`` (or a plain dict, or ``None`` for the default) describes."""
    cfg = parse_config(TaskConfig, config, "task")
    return make_task(cfg.name, **task_arguments(cfg))


def task_arguments(cfg: TaskConfig) -> dict:
    """The ``data`` fields the task ``cfg.name`` takes; a field left ``None`` is left to the
    task's own default (``prompt_key``: math's 'question', dataset's 'prompt')."""
    params = inspect.signature(TASKS[cfg.name]).parameters
    return {k: getattr(cfg, k) for k in params
            if k in TaskConfig.model_fields and getattr(cfg, k) is not None}
