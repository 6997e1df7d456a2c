"""``reverse``: ``"rev abc="`` -> ``"cba"``, a second tiny-model task that needs another skill
(copying by position, not carrying); held out and scored as every generated task
(``generated.py``)."""

from __future__ import annotations

import random
import re
import string

from pydantic import Field, ValidationInfo, field_validator

from rlnb.engine.environments.base import TaskSettings
from rlnb.engine.environments.generated import GeneratedTask


class ReverseTask(GeneratedTask):
    """``"rev abc="`` -> ``"cba"``: lowercase words of ``min_len..max_len`` letters (the length
    is uniform, then the letters), ``num_val`` distinct words held out."""

    name = "reverse"

    class Settings(TaskSettings):
        """``data.name: reverse``'s settings."""

        min_len: int = Field(3, ge=1, description="shortest word")
        max_len: int = Field(6, ge=1, description="longest word")

        @field_validator("max_len")
        @classmethod
        def _not_below_min_len(cls, v: int, info: ValidationInfo) -> int:
            low = info.data.get("min_len")
            if low is not None and v < low:
                raise ValueError(f"must be >= min_len ({low})")
            return v

    def __init__(self, min_len: int, max_len: int, num_val: int, seed: int):
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
