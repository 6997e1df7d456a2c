"""Built-in verifiable tasks: a source of ``{"prompt", "answer"}`` rows plus the environment
that scores responses against the answer.

    reward = 1[response is correct]        components: {"correct": 0/1, "format": 0/1}

Tasks:
- ``addition``: ``"12+7="`` -> ``"19"``, operands ``0..max_operand``; the default task of the
  embedded tiny model (arithmetic a 0.3 M-parameter character-level Llama learns in minutes).
- ``reverse``: ``"rev abc="`` -> ``"cba"``, lowercase words of ``min_len..max_len`` letters; a
  second tiny-model task that needs a different skill (copying by position, not carrying).
- ``addition_think``: addition whose answer may follow any number of ``"."`` filler ("thinking")
  characters, ``"12+7="`` -> ``"...19"``, with the same reward as ``"19"``: response length is
  free, as Dr. GRPO's length-bias study needs (https://arxiv.org/abs/2503.20783).
- ``math``: GSM8K-style rows from a hub data set or a local ``.json``/``.jsonl``/``.parquet``
  file, scored with ``math_verify``, for real models (``math_task.py``).

Implementation choices:
1) Validation problems are held out, not just drawn from another seed: the validation set is a
   fixed list of problems (chosen by the task's ``seed``) and ``train_rows`` never emits one of
   them, so held-out accuracy measures generalisation, not memorisation.
2) Rows come from ``random.Random`` seeded with a string (hashed with SHA-512, so the same seed
   gives the same rows in every process, whatever ``PYTHONHASHSEED``).
3) The generated tasks match exactly: the response with trailing whitespace stripped must equal
   the answer (leading spaces are wrong: the tiny model should learn the format). ``format`` is
   partial credit for a well-formed answer (digits / letters of a plausible length), so GDPO has
   a second component; the total reward is ``correct`` only.
4) ``addition_think`` rows carry an ``sft_target`` (filler of a random length ``0..max_filler``,
   then the answer): the warm start imitates it, so the policy GRPO starts from already writes
   responses of several lengths and the loss alone decides whether they grow or shrink.
"""

from __future__ import annotations

import inspect
import random
import re
import string
from abc import abstractmethod

import torch
from pydantic import Field, field_validator, model_validator

from rlnb.algorithms.checks import choose
from rlnb.config import Config, parse_config
from rlnb.engine.environments.base import Rewards, Task, _check_batch, _take
from rlnb.engine.environments.math_task import MathTask

# --------------------------------------------------------------------------------------------
# generated tasks (the tiny model's)


class GeneratedTask(Task):
    """A task whose problems are drawn at random; subclasses define ``num_problems``, ``draw``
    and ``answer_pattern`` (the regex a well-formed answer matches in full).

    Args:
        num_val: how many distinct problems are held out for validation.
        seed: chooses the held-out problems (fixed for a task; ``train_rows`` has its own seed).
    """

    answer_pattern: re.Pattern

    def __init__(self, num_val: int = 200, seed: int = 0):
        if not 1 <= num_val < self.num_problems:
            raise ValueError(
                f"task {self.name!r}: num_val must be in [1, {self.num_problems}) (the number "
                f"of distinct problems), got {num_val}; lower num_val"
            )
        self.num_val, self.seed = num_val, seed
        rng = random.Random(f"rlnb/{self.name}/val/{seed}")
        val: dict[str, dict] = {}
        while len(val) < num_val:  # distinct problems, in the order first drawn
            row = self.draw(rng)
            val.setdefault(row["prompt"], row)
        self._val = list(val.values())
        self._val_prompts = set(val)

    @property
    @abstractmethod
    def num_problems(self) -> int:
        """How many distinct problems there are."""

    @abstractmethod
    def draw(self, rng: random.Random) -> dict:
        """One random row ``{"prompt", "answer"}``."""

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        rng = random.Random(f"rlnb/{self.name}/train/{seed}")  # a stream apart from val's
        rows: list[dict] = []
        while len(rows) < n:
            row = self.draw(rng)
            if row["prompt"] not in self._val_prompts:
                rows.append(row)
        return rows

    def val_rows(self, n: int | None = None) -> list[dict]:
        return _take(self._val, n, f"task {self.name!r}")

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """Exact match after stripping trailing whitespace; ``[B]`` rewards."""
        _check_batch(self.name, prompts, responses, rows)
        texts = [r.rstrip() for r in responses]
        correct = torch.tensor([t == str(row["answer"]) for t, row in zip(texts, rows)])
        fmt = torch.tensor([self.answer_pattern.fullmatch(t) is not None for t in texts])
        total = correct.float()  # [B]
        return Rewards(total, {"correct": total, "format": fmt.float()}, correct)


class AdditionTask(GeneratedTask):
    """``"a+b="`` -> ``"a+b"`` with ``a, b`` in ``0..max_operand``: ``(max_operand+1)**2``
    problems (2601 at the default), ``num_val`` of them held out."""

    name = "addition"

    def __init__(self, max_operand: int = 50, num_val: int = 200, seed: int = 0):
        if max_operand < 1:
            raise ValueError(f"task 'addition': max_operand must be >= 1, got {max_operand}")
        self.max_operand = max_operand
        self.answer_pattern = re.compile(rf"\d{{1,{len(str(2 * max_operand))}}}")
        super().__init__(num_val=num_val, seed=seed)

    @property
    def num_problems(self) -> int:
        return (self.max_operand + 1) ** 2

    def draw(self, rng: random.Random) -> dict:
        a, b = rng.randint(0, self.max_operand), rng.randint(0, self.max_operand)
        return {"prompt": f"{a}+{b}=", "answer": str(a + b)}


class ReverseTask(GeneratedTask):
    """``"rev abc="`` -> ``"cba"``: lowercase words of ``min_len..max_len`` letters (the length
    is uniform, then the letters), ``num_val`` distinct words held out."""

    name = "reverse"

    def __init__(self, min_len: int = 3, max_len: int = 6, num_val: int = 200, seed: int = 0):
        if not 1 <= min_len <= max_len:
            raise ValueError(
                f"task 'reverse': need 1 <= min_len <= max_len, got min_len={min_len}, "
                f"max_len={max_len}"
            )
        self.min_len, self.max_len = min_len, max_len
        self.answer_pattern = re.compile(rf"[a-z]{{{min_len},{max_len}}}")
        super().__init__(num_val=num_val, seed=seed)

    @property
    def num_problems(self) -> int:
        return sum(26**k for k in range(self.min_len, self.max_len + 1))

    def draw(self, rng: random.Random) -> dict:
        k = rng.randint(self.min_len, self.max_len)
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(k))
        return {"prompt": f"rev {word}=", "answer": word[::-1]}


class AdditionThinkTask(AdditionTask):
    """``"a+b="`` -> ``FILLER * k + "a+b"`` for any ``k >= 0``: the reward ignores the filler, so
    only the loss can make responses longer or shorter (choice 4). ``max_filler`` bounds the
    filler of the warm start's demonstrations, not what the reward accepts."""

    name = "addition_think"
    FILLER = "."

    def __init__(self, max_operand: int = 50, max_filler: int = 4, num_val: int = 200,
                 seed: int = 0):
        if max_filler < 0:
            raise ValueError(f"task 'addition_think': max_filler must be >= 0, got {max_filler}")
        self.max_filler = max_filler
        super().__init__(max_operand=max_operand, num_val=num_val, seed=seed)

    def draw(self, rng: random.Random) -> dict:
        row = super().draw(rng)
        row["sft_target"] = self.FILLER * rng.randint(0, self.max_filler) + row["answer"]
        return row

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """``addition``'s exact match on the response with its leading filler removed."""
        return super().score(prompts, [r.lstrip(self.FILLER) for r in responses], rows)


# --------------------------------------------------------------------------------------------
# prompts, the registry and the config


def format_prompt(row: dict, tokenizer=None, chat_template: bool = False) -> str:
    """The text to generate from: the row's prompt as is (tiny model), or wrapped in the
    tokenizer's chat template as one user turn with the assistant's turn opened."""
    if "prompt" not in row:
        raise ValueError(f"row has no 'prompt' key (keys: {list(row)})")
    if not chat_template:
        return row["prompt"]
    if tokenizer is None:
        raise ValueError("chat_template=True needs a tokenizer")
    if getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(
            f"{type(tokenizer).__name__} has no chat template; use chat_template=False"
        )
    messages = [{"role": "user", "content": row["prompt"]}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)


TASKS: dict[str, type[Task]] = {
    "addition": AdditionTask,
    "reverse": ReverseTask,
    "addition_think": AdditionThinkTask,
    "math": MathTask,
}


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

    name: str = Field("addition", description=f"task, one of {list(TASKS)}")
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
    split: str = Field("train", description="math: hub split to train on")
    val_split: str | None = Field(
        None, description="math: validation split or file; None holds out num_val train rows"
    )
    prompt_key: str = Field("question", description="math: column with the question")
    answer_key: str = Field("answer", description="math: column with the reference answer")
    num_val: int = Field(200, ge=1, description="number of held-out validation rows")
    seed: int = Field(0, description="chooses the held-out validation problems")

    @field_validator("name")
    @classmethod
    def _known_task(cls, v: str) -> str:
        choose(TASKS, v, "task")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> TaskConfig:
        takes = set(inspect.signature(TASKS[self.name]).parameters)
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
    params = inspect.signature(TASKS[cfg.name]).parameters
    return make_task(
        cfg.name, **{k: getattr(cfg, k) for k in params if k in TaskConfig.model_fields}
    )
