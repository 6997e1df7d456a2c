"""Generated tasks: problems drawn at random, held out by value, scored by exact match.

    reward = 1[response is correct]        components: {"correct": 0/1, "format": 0/1}

``addition``: ``"12+7="`` -> ``"19"``, operands ``0..max_operand``; the default task of the
embedded tiny model (arithmetic a 0.3 M-parameter character-level Llama learns in minutes).
``reverse.py`` and ``addition_think.py`` are generated tasks too.

Implementation choices:
1) Validation problems are held out, not just drawn from another seed: the validation set is a
   fixed list of problems (chosen by the task's ``seed``) and ``train_rows`` never emits one of
   them, so held-out accuracy measures generalisation, not memorisation.
2) Rows come from ``random.Random`` seeded with a string (hashed with SHA-512, so the same seed
   gives the same rows in every process, whatever ``PYTHONHASHSEED``).
3) Exact match: the response with trailing whitespace stripped must equal the answer (leading
   spaces are wrong: the tiny model should learn the format). ``format`` is partial credit for a
   well-formed answer (digits / letters of a plausible length), so GDPO has a second component;
   the total reward is ``correct`` only.
"""

from __future__ import annotations

import random
import re
from abc import abstractmethod

import torch
from pydantic import Field

from rlnb.engine.environments.base import Rewards, Task, TaskSettings, check_batch, take_rows


class GeneratedTask(Task):
    """A task whose problems are drawn at random; subclasses define ``num_problems``, ``draw``
    and ``answer_pattern`` (the regex a well-formed answer matches in full).

    Args:
        num_val: how many distinct problems are held out for validation.
        seed: chooses the held-out problems (fixed for a task; ``train_rows`` has its own seed).
    """

    answer_pattern: re.Pattern

    def __init__(self, num_val: int, seed: int):
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
            val.setdefault(self.key(row), row)
        self._val = list(val.values())
        self._val_prompts = set(val)

    @property
    @abstractmethod
    def num_problems(self) -> int:
        """How many distinct problems there are."""

    @abstractmethod
    def draw(self, rng: random.Random) -> dict:
        """One random row ``{"prompt", "answer"}``."""

    def key(self, row: dict) -> str:
        """What makes two rows the same problem (its prompt; a task with chat-message prompts
        names a text)."""
        return row["prompt"]

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        rng = random.Random(f"rlnb/{self.name}/train/{seed}")  # a stream apart from val's
        rows: list[dict] = []
        while len(rows) < n:
            row = self.draw(rng)
            if self.key(row) not in self._val_prompts:
                rows.append(row)
        return rows

    def val_rows(self, n: int | None = None) -> list[dict]:
        return take_rows(self._val, n, f"task {self.name!r}")

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """Exact match after stripping trailing whitespace; ``[B]`` rewards."""
        check_batch(self.name, prompts, responses, rows)
        texts = [r.rstrip() for r in responses]
        correct = torch.tensor([t == str(row["answer"]) for t, row in zip(texts, rows)])
        fmt = torch.tensor([self.answer_pattern.fullmatch(t) is not None for t in texts])
        total = correct.float()  # [B]
        return Rewards(total, {"correct": total, "format": fmt.float()}, correct)


class AdditionTask(GeneratedTask):
    """``"a+b="`` -> ``"a+b"`` with ``a, b`` in ``0..max_operand``: ``(max_operand+1)**2``
    problems (2601 at the default), ``num_val`` of them held out."""

    name = "addition"

    class Settings(TaskSettings):
        """``data.name: addition``'s settings."""

        max_operand: int = Field(50, ge=1, description="operands are 0..max_operand")

    def __init__(self, max_operand: int, num_val: int, seed: int):
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
