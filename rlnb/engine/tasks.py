"""Built-in verifiable tasks: a source of ``{"prompt", "answer"}`` rows plus the environment
that scores responses against the answer.

    reward = 1[response is correct]        components: {"correct": 0/1, "format": 0/1}

Tasks:
- ``addition``: ``"12+7="`` -> ``"19"``, operands ``0..max_operand``; the default task of the
  embedded tiny model (arithmetic a 0.3 M-parameter character-level Llama learns in minutes).
- ``reverse``: ``"rev abc="`` -> ``"cba"``, lowercase words of ``min_len..max_len`` letters; a
  second tiny-model task that needs a different skill (copying by position, not carrying).
- ``math``: GSM8K-style rows from a hub data set or a local ``.json``/``.jsonl``/``.parquet``
  file, scored with ``math_verify``, for real models.

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
4) ``math`` checks every row for its prompt and answer keys at load time, takes the reference
   after ``####`` (GSM8K's convention), and scores with ``math_verify.parse`` + ``verify``.
   ``math_verify`` times out with ``SIGALRM``, which works on the main thread only, so off the
   main thread (a notebook's background training loop) the timeout is disabled.
"""

from __future__ import annotations

import inspect
import os
import random
import re
import string
import threading
from abc import abstractmethod
from pathlib import Path
from typing import Any

import torch
from pydantic import Field, field_validator, model_validator

from rlnb.algorithms.checks import choose
from rlnb.config import Config, parse_config
from rlnb.engine.environments import Environment, Rewards

LOCAL_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


class Task(Environment):
    """An environment that also provides its rows: ``train_rows`` and held-out ``val_rows``."""

    name = "task"

    @abstractmethod
    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        """``n`` training rows, the same for the same ``seed``; never a validation problem."""

    @abstractmethod
    def val_rows(self, n: int | None = None) -> list[dict]:
        """The first ``n`` held-out rows (all of them for ``None``), always the same."""


def _check_batch(name: str, prompts: list[str], responses: list[str], rows: list[dict]):
    if not len(prompts) == len(responses) == len(rows):
        raise ValueError(
            f"task {name!r}: {len(prompts)} prompts, {len(responses)} responses and "
            f"{len(rows)} rows; expected one of each per response"
        )


def _take(rows: list[dict], n: int | None, what: str) -> list[dict]:
    if n is None:
        n = len(rows)
    if not 0 <= n <= len(rows):
        raise ValueError(f"{what} has {len(rows)} validation rows, asked for {n}")
    return [dict(r) for r in rows[:n]]  # copies: a caller editing a row must not change ours


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


# --------------------------------------------------------------------------------------------
# math (GSM8K-style data sets, for real models)


def extract_reference(answer: Any) -> str:
    """The reference answer: the text after GSM8K's ``####`` when present, else all of it."""
    text = str(answer)
    return text.split("####")[-1].strip() if "####" in text else text.strip()


def _local_file(source: str) -> Path | None:
    """``source`` as a local data file, ``None`` if it names a hub data set (or a folder)."""
    path = Path(source).expanduser()
    if path.suffix.lower() in LOCAL_SUFFIXES:
        if not path.is_file():
            raise FileNotFoundError(f"data file {str(path)!r} does not exist")
        return path
    if path.is_file():
        valid = ", ".join(LOCAL_SUFFIXES)
        raise ValueError(f"data file {str(path)!r}: unsupported suffix; valid: {valid}")
    return None


def load_rows(source: str, config: str | None = None, split: str = "train") -> list[dict]:
    """Raw rows of a local ``.json``/``.jsonl``/``.parquet`` file (one split: ``split`` is not
    used) or of a hub data set's ``split``."""
    from datasets import load_dataset  # here: importing datasets costs about a second

    path = _local_file(source)
    if path is not None:
        ds = load_dataset(LOCAL_SUFFIXES[path.suffix.lower()], data_files=str(path), split="train")
        return list(ds)
    try:
        ds = load_dataset(source, config, split=split)
    except Exception as err:  # datasets raises many types; all mean "could not load it"
        flags = [os.environ.get(k, "") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")]
        offline = any(f.lower() in ("1", "true", "yes", "on") for f in flags)
        hint = " HF_HUB_OFFLINE is set: only cached data sets load." if offline else ""
        raise ValueError(
            f"could not load data set {source!r} (config {config!r}, split {split!r}) from the "
            f"Hugging Face hub.{hint} A local .json/.jsonl/.parquet file also works. "
            f"Cause: {type(err).__name__}: {err}"
        ) from err
    return list(ds)


def _math_verify():
    try:
        import math_verify
    except ImportError as err:
        raise ImportError(
            "the math task scores answers with math_verify, which is not installed: "
            "pip install math-verify"
        ) from err
    return math_verify


class MathTask(Task):
    """GSM8K-style question/answer rows, scored with ``math_verify``.

    Args:
        dataset_name: a hub name (``"openai/gsm8k"``) or a local ``.json``/``.jsonl``/
            ``.parquet`` file.
        dataset_config: the hub config (``"main"`` for GSM8K); unused for local files.
        split: the hub split to train on; unused for local files.
        val_split: validation rows: a hub split name, or a second local file. ``None`` holds out
            ``num_val`` rows of the training data (chosen by ``seed``).
        prompt_key, answer_key: the columns with the question and the reference answer.
        num_val: how many validation rows.
        seed: which rows are held out when ``val_split`` is ``None``.
    """

    name = "math"

    def __init__(
        self,
        dataset_name: str,
        dataset_config: str | None = None,
        split: str = "train",
        val_split: str | None = None,
        prompt_key: str = "question",
        answer_key: str = "answer",
        num_val: int = 200,
        seed: int = 0,
    ):
        if num_val < 1:
            raise ValueError(f"task 'math': num_val must be >= 1, got {num_val}")
        self.prompt_key, self.answer_key = prompt_key, answer_key
        rows = self._rows(load_rows(dataset_name, dataset_config, split), dataset_name)
        if val_split is None:
            if num_val >= len(rows):
                raise ValueError(
                    f"task 'math': num_val={num_val} would hold out all {len(rows)} rows of "
                    f"{dataset_name!r}; lower num_val or give val_split"
                )
            order = list(range(len(rows)))
            random.Random(f"rlnb/math/val/{seed}").shuffle(order)
            held = set(order[:num_val])
            self._val = [rows[i] for i in sorted(held)]
            self._train = [r for i, r in enumerate(rows) if i not in held]
        else:
            if _local_file(dataset_name) is not None and _local_file(val_split) is None:
                raise ValueError(
                    f"task 'math': {dataset_name!r} is a local file with one split, so "
                    f"val_split must be a second local file, got {val_split!r}"
                )
            source = val_split if _local_file(val_split) is not None else dataset_name
            val_raw = load_rows(source, dataset_config, val_split)
            self._val = self._rows(val_raw, f"{source} ({val_split})")[:num_val]
            self._train = rows
        self._gold: dict[str, list] = {}  # parsed references, reused across steps

    def _rows(self, raw: list[dict], source: str) -> list[dict]:
        """``{"prompt", "answer"}`` rows; every row is checked before any is used."""
        bad = []
        for i, r in enumerate(raw):
            for key in (self.prompt_key, self.answer_key):
                value = r.get(key)
                if value is None or not str(value).strip():
                    bad.append(f"row {i} has no {key!r} (or it is empty)")
        if bad:
            more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
            cols = list(raw[0]) if raw else []
            raise ValueError(f"data set {source!r}: {'; '.join(bad[:3])}{more}; columns: {cols}")
        if not raw:
            raise ValueError(f"data set {source!r} has no rows")
        return [
            {"prompt": str(r[self.prompt_key]), "answer": extract_reference(r[self.answer_key])}
            for r in raw
        ]

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        """``n`` rows in epochs: each pass over the data is a fresh shuffle of ``seed``."""
        rng = random.Random(f"rlnb/math/train/{seed}")
        out: list[dict] = []
        while len(out) < n:
            order = list(range(len(self._train)))
            rng.shuffle(order)
            out.extend(dict(self._train[i]) for i in order[: n - len(out)])
        return out

    def val_rows(self, n: int | None = None) -> list[dict]:
        return _take(self._val, n, "task 'math'")

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """``math_verify`` equivalence of each response with its row's answer; ``[B]`` rewards.
        ``format`` is 1 when an answer could be extracted from the response at all."""
        _check_batch(self.name, prompts, responses, rows)
        mv = _math_verify()
        # SIGALRM timeouts only work on the main thread; elsewhere math_verify would raise.
        timeout = 5 if threading.current_thread() is threading.main_thread() else None
        correct, fmt = [], []
        for response, row in zip(responses, rows):
            answer = str(row["answer"])
            if answer not in self._gold:
                self._gold[answer] = mv.parse(answer, parsing_timeout=timeout)
            pred = mv.parse(response, parsing_timeout=timeout)
            fmt.append(float(len(pred) > 0))
            correct.append(
                bool(pred) and mv.verify(self._gold[answer], pred, timeout_seconds=timeout)
            )
        ok = torch.tensor(correct, dtype=torch.bool)
        total = ok.float()  # [B]
        return Rewards(
            total=total,
            components={"correct": total, "format": torch.tensor(fmt, dtype=torch.float32)},
            correct=ok,
        )


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
