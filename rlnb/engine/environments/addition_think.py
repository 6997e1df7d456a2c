"""``addition_think``: addition whose answer may follow any number of ``"."`` filler ("thinking")
characters, ``"12+7="`` -> ``"...19"``, with the same reward as ``"19"``: response length is free,
as Dr. GRPO's length-bias study needs (https://arxiv.org/abs/2503.20783).

Rows carry an ``sft_target`` (filler of a random length ``0..max_filler``, then the answer): the
warm start imitates it, so the policy GRPO starts from already writes responses of several
lengths and the loss alone decides whether they grow or shrink.
"""

from __future__ import annotations

import random

from pydantic import Field

from rlnb.engine.environments.base import Rewards
from rlnb.engine.environments.generated import AdditionTask


class AdditionThinkTask(AdditionTask):
    """``"a+b="`` -> ``FILLER * k + "a+b"`` for any ``k >= 0``: the reward ignores the filler, so
    only the loss can make responses longer or shorter (module docstring). ``max_filler`` bounds the
    filler of the warm start's demonstrations, not what the reward accepts."""

    name = "addition_think"
    FILLER = "."

    class Settings(AdditionTask.Settings):
        """``data.name: addition_think``'s settings: addition's and ``max_filler``."""

        max_filler: int = Field(
            4, ge=0, description="longest filler ('.' run) in the warm start's demonstrations "
            "(the reward accepts any length)")

    def __init__(self, max_operand: int, max_filler: int, num_val: int,
                 seed: int):
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
