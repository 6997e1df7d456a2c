"""``reasoning_gym``: reasoning-gym's procedural data sets as a task, scored by each data set's own
scorer (the optional ``envs`` extra: ``pip install -e '.[envs]'``).

    data: {name: reasoning_gym, datasets: {spell_backward: {config: {max_word_len: 5}},
                                           chain_sum: {weight: 2}}}
    score = dataset.score_answer(answer(response), entry)   in [0, 1]; correct: score == 1
    reward = score (data.reward: score), or 1[correct] (data.reward: correct)

Implementation choices:
1) ``datasets`` names one or more of reasoning-gym's data sets (a name, a list of names, or
   ``{name: {weight, config}}``); ``config`` is the data set's own config (its difficulty), checked
   against its config class when the config loads: an unknown name lists the closest ones, a key
   the data set does not take lists those it does. ``seed`` and ``size`` are rlnb's to set.
2) Each row comes from one data set drawn by weight, then one of its entries drawn at random
   (of 2**31 where the data set generates entry ``i`` from its index, as most do; of 10,000
   built up front where it holds a list of questions);
   both draws come from a ``random.Random`` seeded with a string naming the row's position, so
   row ``i`` of a stream is the same in every process and reading row ``10**6`` costs one entry
   (``train_rows`` is a lazy sequence). The held-out rows are ``num_val`` distinct questions
   chosen by ``seed``; a training draw that hits one draws another entry of the same data set
   (the mix keeps its weights), so no training row is a held-out question.
3) The answer is read from the response in ``answer_format``: ``answer_tag``, the text of the
   last ``<answer>...</answer>`` (reasoning-gym's convention, with its ``system_prompt``), or
   ``plain``, the whole response stripped (a model trained to answer directly, as the tiny one
   is). The warm start's demonstration is the answer in the same format.
4) The reward is the data set's scorer's value (``reward: score``: its partial credit too, as
   spell_backward's per-letter credit) or whether that value is 1 (``reward: correct``, the binary
   outcome reward of RLVR recipes; the tiny recipe's, which learned faster on it). Components:
   ``score`` (the scorer's value) and ``format`` (an answer was found). With several data
   sets, ``rg/<dataset>/accuracy`` of each, in the batch (``train/...``) and in the held-out
   rows (``validation/...``).
5) ``curriculum.enabled`` raises a data set's difficulty one level of reasoning-gym's own
   curriculum (``create_curriculum(name)``; a data set without one is refused) when its training
   accuracy over ``window`` scored rows at the current level reaches ``raise_at``. The trainer
   reports each training batch (``observe``: every rank's rows, so ranks keep one level); the
   levels are part of the save state
   (``state_dict``), so a resumed run draws what it would have drawn. The held-out rows stay at
   the configured difficulty, so the held-out curve is comparable over the run.
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections.abc import Sequence
from difflib import get_close_matches
from typing import Any, Literal

import torch
from pydantic import Field, field_validator, model_validator

from rlnb.config import Config
from rlnb.engine.environments.base import Rewards, Task, TaskSettings, check_batch, take_rows
from rlnb.engine.environments.extras import require

ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
OWNED = ("seed", "size")  # rlnb sets these (choice 2)
SPACE = 2**31  # entries a generated data set is drawn from
POOL = 10_000  # entries of a data set that holds a list of questions
WHAT = "data.name: reasoning_gym"


def _rg():
    return require("reasoning_gym", WHAT)


class DatasetSpec(Config):
    """One entry of ``data.datasets``: its share of the rows and its own config."""

    weight: float = Field(1.0, gt=0, description="its share of the rows (normalised over the "
                          "data sets)")
    config: dict[str, Any] = Field(default_factory=dict, description="the data set's own config "
                                   "(its difficulty), reasoning-gym's keys")


class CurriculumSettings(Config):
    """``data.curriculum``: raise a data set's difficulty as its training accuracy rises."""

    enabled: bool = Field(False, description="follow reasoning-gym's curriculum of each data set")
    raise_at: float = Field(0.8, gt=0, le=1, description="training accuracy over the window "
                            "that raises the level")
    window: int = Field(64, ge=1, description="scored training rows at a level per decision")
    start_level: int = Field(0, ge=0, description="the level each data set starts at")


NO_CURRICULUM = CurriculumSettings()  # the default: the configured difficulty throughout


def dataset_names() -> list[str]:
    """Every data set reasoning-gym registers."""
    _rg()
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


def check_dataset(name: str, config: dict[str, Any]) -> None:
    """Raise ``ValueError`` naming what is wrong with data set ``name`` and its ``config``."""
    _rg()
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        close = get_close_matches(name, DATASETS, n=3, cutoff=0.5)
        hint = f"did you mean {', '.join(map(repr, close))}?" if close else \
            f"{len(DATASETS)} are registered (rlnb.engine.environments.reasoning_gym_task." \
            "dataset_names())"
        raise ValueError(f"reasoning-gym has no data set {name!r}; {hint}")
    takes = [f.name for f in dataclasses.fields(DATASETS[name][1]) if f.name not in OWNED]
    for key in config:
        if key in OWNED:
            raise ValueError(f"{name}.config.{key}: rlnb sets it (data.seed chooses the held-out "
                             "rows, the loop's seed the training rows)")
        if key not in takes:
            raise ValueError(f"{name}.config.{key}: {name} takes no such key; it takes "
                             f"{', '.join(takes)}")
    try:
        DATASETS[name][1](**config).validate()
    except (AssertionError, ValueError, TypeError) as err:
        raise ValueError(f"{name}.config: {err}") from None
    try:  # a config can pass its checks and still fail to generate (mismatched lengths)
        DATASETS[name][0](DATASETS[name][1](**config, seed=0, size=1))[0]
    except Exception as err:  # reasoning-gym's generator: any error means this config
        raise ValueError(f"{name}.config: reasoning-gym cannot generate a question with it "
                         f"({type(err).__name__}: {err})") from None


class ReasoningGymTask(Task):
    """Rows from reasoning-gym's data sets, scored by their own scorers (module docstring)."""

    name = "reasoning_gym"

    class Settings(TaskSettings):
        """``data.name: reasoning_gym``'s settings."""

        datasets: dict[str, DatasetSpec] = Field(
            "spell_backward", validate_default=True,
            description="reasoning-gym data sets: a name, a list, or {name: {weight, config}}")
        reward: Literal["score", "correct"] = Field(
            "score", description="score: the data set's scorer's value (its partial credit "
            "too); correct: 1 where that value is 1, else 0")
        answer_format: Literal["answer_tag", "plain"] = Field(
            "answer_tag", description="answer_tag: the last <answer>...</answer>; plain: the "
            "whole response, stripped")
        system_prompt: str | None = Field(
            "default", description="a key of reasoning_gym.utils.SYSTEM_PROMPTS, or the text "
            "itself; null: the question alone, as text (no chat template)")
        curriculum: CurriculumSettings = Field(NO_CURRICULUM,
                                               description="reasoning-gym's curricula")

        @field_validator("datasets", mode="before")
        @classmethod
        def _names(cls, v):
            if isinstance(v, str):
                return {v: {}}
            if isinstance(v, (list, tuple)):
                return {str(n): {} for n in v}
            return v

        @field_validator("datasets")
        @classmethod
        def _known(cls, v: dict[str, DatasetSpec]) -> dict[str, DatasetSpec]:
            if not v:
                raise ValueError("name at least one reasoning-gym data set")
            for name, spec in v.items():
                check_dataset(name, spec.config)
            return v

        @model_validator(mode="after")
        def _curricula(self):
            if self.curriculum.enabled:
                from reasoning_gym.factory import has_curriculum

                missing = [n for n in self.datasets if not has_curriculum(n)]
                if missing:
                    raise ValueError(f"curriculum.enabled: reasoning-gym has no curriculum for "
                                     f"{', '.join(missing)}")
            return self

    def __init__(self, datasets: str | list | dict, reward: str,
                 answer_format: str, system_prompt: str | None,
                 curriculum: CurriculumSettings | dict,
                 num_val: int, seed: int):
        settings = self.Settings(datasets=datasets, reward=reward, answer_format=answer_format,
                                 system_prompt=system_prompt, curriculum=curriculum,
                                 num_val=num_val, seed=seed)
        rg = _rg()
        from reasoning_gym.utils import SYSTEM_PROMPTS

        self.specs, self.answer_format = settings.datasets, settings.answer_format
        self.reward = settings.reward
        self.system_prompt = SYSTEM_PROMPTS.get(settings.system_prompt, settings.system_prompt)
        self.chat = self.system_prompt is not None  # prompts as messages (the chat template)
        self.curriculum, self.num_val, self.seed = settings.curriculum, num_val, seed
        self.names = list(self.specs)
        self.weights = [self.specs[n].weight for n in self.names]
        self._rg = rg
        # the data sets at their configured difficulty, and their curricula (choice 5)
        self.base, self.space = {}, {}
        for n in self.names:
            self.base[n], self.space[n] = _indexable(rg, n, self.specs[n].config)
        self.curricula = {}
        self.levels = {n: 0 for n in self.names}
        self._seen = {n: [0, 0] for n in self.names}  # [rows, correct] at the current level
        self._at_level: dict[tuple[str, int], Any] = {}
        if self.curriculum.enabled:
            from reasoning_gym.factory import create_curriculum

            self.curricula = {n: create_curriculum(n) for n in self.names}
            for n in self.names:
                self._set_level(n, self.curriculum.start_level)
        self._val = self._held_out(num_val)
        self._val_questions = {r["question"] for r in self._val}
        # the warm start's cache key: reasoning-gym's version decides the rows a seed draws
        from importlib.metadata import version

        self.fingerprint = ["reasoning-gym", version("reasoning-gym")]

    # ------------------------------------------------------------------ rows (choice 2)
    def _dataset(self, name: str):
        """The data set ``name`` draws from now: its configured one, or its curriculum level's."""
        level = self.levels[name]
        if not self.curriculum.enabled:
            return self.base[name]
        key = (name, level)
        if key not in self._at_level:
            cur = self.curricula[name]
            cur.set_global_level(level)
            config = dataclasses.asdict(cur.generate_configuration(
                {k: v for k, v in self.specs[name].config.items()}))
            config.update(seed=0, size=self.space[name] if self.space[name] < SPACE else 1)
            self._at_level[key] = self._rg.create_dataset(name, **config)
        return self._at_level[key]

    def _draw(self, rng: random.Random, datasets: dict[str, Any]) -> dict[str, Any]:
        name = self._pick(rng)
        return self._row(name, datasets[name][rng.randrange(self.space[name])])

    def _pick(self, rng: random.Random) -> str:
        """A data set drawn by weight."""
        return rng.choices(self.names, self.weights)[0] if len(self.names) > 1 else self.names[0]

    def _row(self, name: str, entry: dict[str, Any]) -> dict[str, Any]:
        q = entry["question"]
        prompt = q if self.system_prompt is None else [
            {"role": "system", "content": self.system_prompt}, {"role": "user", "content": q}]
        return {"prompt": prompt, "answer": str(entry["answer"]), "question": q,
                "dataset": name, "level": self.levels[name], "entry": entry}

    def _held_out(self, n: int) -> list[dict[str, Any]]:
        rng = random.Random(f"rlnb/reasoning_gym/val/{self.seed}")
        rows: dict[str, dict] = {}
        for _ in range(50 * n):  # distinct questions; a small data set runs out
            row = self._draw(rng, self.base)
            rows.setdefault(row["question"], row)
            if len(rows) == n:
                return list(rows.values())
        raise ValueError(f"task 'reasoning_gym': found only {len(rows)} distinct questions in "
                         f"{50 * n} draws from {self.names}, asked for num_val={n}; lower "
                         "num_val or widen the data sets' configs")

    def train_row(self, i: int, seed: int) -> dict[str, Any]:
        """Row ``i`` of the training stream of ``seed``: never a held-out question (a draw that
        hits one draws another entry of the same data set, so the mix keeps its weights)."""
        name = self._pick(random.Random(f"rlnb/reasoning_gym/train/{seed}/{i}"))
        dataset = self._dataset(name)
        for attempt in range(1000):
            rng = random.Random(f"rlnb/reasoning_gym/train/{seed}/{i}/{name}/{attempt}")
            row = self._row(name, dataset[rng.randrange(self.space[name])])
            if row["question"] not in self._val_questions:
                return row
        raise ValueError(f"task 'reasoning_gym': training row {i} drew only held-out questions "
                         f"of {name} in 1000 tries; lower num_val or widen its config")

    def train_rows(self, n: int, seed: int = 0) -> Sequence[dict]:
        return TrainStream(self, n, seed)

    def val_rows(self, n: int | None = None) -> list[dict]:
        return take_rows(self._val, n, "task 'reasoning_gym'")

    def demonstration(self, row: dict) -> str:
        answer = str(row["answer"])
        return f"<answer>{answer}</answer>" if self.answer_format == "answer_tag" else answer

    # ------------------------------------------------------------------ scoring (choices 3, 4)
    def extract(self, response: str) -> str | None:
        """The answer in ``response`` (choice 3), None if there is none."""
        if self.answer_format == "plain":
            text = response.strip()
            return text or None
        found = ANSWER_TAG.findall(response)
        return found[-1].strip() if found else None

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        check_batch(self.name, prompts, responses, rows)
        answers = [self.extract(r) for r in responses]
        scores = []
        for answer, row in zip(answers, rows):
            ds = self.base[row["dataset"]]
            scores.append(float(ds.score_answer(answer, row["entry"])))
        score = torch.tensor(scores, dtype=torch.float32)  # [B]
        found = torch.tensor([a is not None for a in answers], dtype=torch.float32)
        correct = score >= 1.0
        total = score if self.reward == "score" else correct.float()
        metrics = self.validation_breakdown(rows, correct)
        return Rewards(total, {"score": score, "format": found}, correct, metrics=metrics)

    def validation_breakdown(self, rows: list[dict], correct: torch.Tensor) -> dict[str, float]:
        """``rg/<dataset>/accuracy`` of the rows of each data set present, when there are
        several (choice 4): the trainer logs it for held-out rows too."""
        if len(self.names) == 1:
            return {}
        hits: dict[str, list[bool]] = {}
        for ok, row in zip(correct.tolist(), rows):
            hits.setdefault(row["dataset"], []).append(ok)
        return {f"rg/{n}/accuracy": sum(h) / len(h) for n, h in hits.items()}

    # ------------------------------------------------------------------ curriculum (choice 5)
    def _set_level(self, name: str, level: int) -> None:
        top = max(len(a.levels) for a in self.curricula[name].attributes.values()) - 1
        self.levels[name] = min(level, top)
        self._seen[name] = [0, 0]

    def observe(self, rows: list[dict], correct: torch.Tensor) -> dict[str, float]:
        """A training batch's rows and whether each was solved: advance the levels (choice 5);
        returns ``curriculum/<dataset>/level`` for each data set (nothing without a curriculum)."""
        if not self.curriculum.enabled:
            return {}
        for row, ok in zip(rows, correct.tolist()):
            name = row["dataset"]
            if row.get("level") != self.levels[name]:
                continue  # drawn before the last raise
            seen = self._seen[name]
            seen[0] += 1
            seen[1] += int(ok)
            if seen[0] >= self.curriculum.window:
                if seen[1] / seen[0] >= self.curriculum.raise_at:
                    self._set_level(name, self.levels[name] + 1)
                else:
                    self._seen[name] = [0, 0]
        return {f"curriculum/{n}/level": float(lvl) for n, lvl in self.levels.items()}

    def state_dict(self) -> dict[str, Any]:
        """The curriculum's state (the save state's ``task_state``)."""
        return {"levels": dict(self.levels), "seen": {n: list(s) for n, s in self._seen.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, level in state.get("levels", {}).items():
            if name in self.levels:
                self.levels[name] = int(level)
        for name, seen in state.get("seen", {}).items():
            if name in self._seen:
                self._seen[name] = [int(seen[0]), int(seen[1])]


def _indexable(rg, name: str, config: dict[str, Any]):
    """Data set ``name`` and how many entries it can be indexed by (choice 2): most generate
    entry ``i`` from ``Random(seed + i)`` for any ``i`` (``SPACE``); one that holds a list of
    questions is built with ``POOL`` of them."""
    ds = rg.create_dataset(name, seed=0, size=1, **config)
    try:
        ds[SPACE - 1]
        return ds, SPACE
    except (IndexError, KeyError):
        return rg.create_dataset(name, seed=0, size=POOL, **config), POOL


class TrainStream(Sequence):
    """The first ``n`` rows of a training stream, each drawn when read (choice 2)."""

    def __init__(self, task: ReasoningGymTask, n: int, seed: int):
        self.task, self.n, self.seed = task, n, seed

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self.task.train_row(i, self.seed) for i in range(self.n)[index]]
        i = range(self.n)[index]  # IndexError past the end, negative indices from it
        return self.task.train_row(i, self.seed)
