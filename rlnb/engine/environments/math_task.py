"""The ``math`` task: GSM8K-style question/answer rows for real models, scored with
``math_verify``.

    reward = 1[math_verify.verify(parse(answer), parse(response))]

Implementation choices:
1) ``math`` checks every row for its prompt and answer keys at load time, takes the reference
   after ``####`` (GSM8K's convention), and scores with ``math_verify.parse`` + ``verify``.
   ``math_verify`` times out with ``SIGALRM``, which works on the main thread only, so off the
   main thread (a notebook's background training loop) the timeout is disabled.
"""

from __future__ import annotations

import os
import random
import threading
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import Field, field_validator

from rlnb.engine.environments.base import Rewards, Task, TaskSettings, check_batch, take_rows

LOCAL_SUFFIXES = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}


def extract_reference(answer: Any) -> str:
    """The reference answer: the text after GSM8K's ``####`` when present, else all of it."""
    text = str(answer)
    return text.split("####")[-1].strip() if "####" in text else text.strip()


def _local_file(source: str) -> Path | None:
    """``source`` as a local data file, ``None`` if it names a hub data set (or a folder)."""
    path = Path(source).expanduser()
    if path.suffix.lower() in LOCAL_SUFFIXES:
        if path.is_dir():
            raise ValueError(f"data file {str(path)!r} is a directory, not a {path.suffix} file")
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

    if not str(source).strip():
        raise ValueError("data.dataset_name is empty: give a hub name or a local "
                         ".json/.jsonl/.parquet file")
    import datasets

    # datasets logs a failed parse (at error level) and draws progress bars on stderr: the
    # ValueError below says it all
    datasets.utils.logging.set_verbosity(datasets.utils.logging.CRITICAL)
    datasets.disable_progress_bars()
    path = _local_file(source)
    if path is not None:
        try:
            ds = load_dataset(LOCAL_SUFFIXES[path.suffix.lower()], data_files=str(path),
                              split="train")
        except Exception as err:  # datasets wraps the parser's error in its own types
            cause = err.__cause__ or err
            raise ValueError(f"data file {str(path)!r} could not be read as "
                             f"{LOCAL_SUFFIXES[path.suffix.lower()]} ({type(cause).__name__}: "
                             f"{str(cause).splitlines()[0] if str(cause) else ''})") from None
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
        prompt_key, answer_key: the columns with the question (None: ``"question"``) and the
            reference answer.
        num_val: how many validation rows.
        seed: which rows are held out when ``val_split`` is ``None``.
    """

    name = "math"

    class Settings(TaskSettings):
        """``data.name: math``'s settings."""

        dataset_name: str | None = Field(
            None, validate_default=True,
            description="hub name ('openai/gsm8k') or local .json/.jsonl/.parquet file")
        dataset_config: str | None = Field(None, description="hub config ('main' for GSM8K)")
        split: str = Field("train", description="hub split to train on")
        val_split: str | None = Field(
            None, description="validation split or file; None holds out num_val train rows")
        prompt_key: str | None = Field(
            None, description="the column with the prompt (None: 'question')")
        answer_key: str = Field("answer", description="column with the reference answer")
        verifier: Literal["math_verify", "dapo"] = Field(
            "math_verify", description="math_verify (symbolic equivalence; NeMo-RL's "
            "hf_math_verify) | dapo (DAPO's normalised string match of the last 'Answer:'; "
            "NeMo-RL's dapo_math_verify, dapo_verify.py)")

        @field_validator("dataset_name")
        @classmethod
        def _given(cls, v: str | None) -> str | None:
            if v is None:
                raise ValueError("the math task needs dataset_name (a hub name or a local file)")
            return v

    def __init__(
        self,
        dataset_name: str,
        dataset_config: str | None,
        split: str,
        val_split: str | None,
        prompt_key: str | None,
        answer_key: str,
        num_val: int,
        seed: int,
        verifier: str,
    ):
        if num_val < 1:
            raise ValueError(f"task 'math': num_val must be >= 1, got {num_val}")
        self.prompt_key, self.answer_key = prompt_key or "question", answer_key
        self.verifier = verifier
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
        return take_rows(self._val, n, "task 'math'")

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        """``math_verify`` equivalence of each response with its row's answer; ``[B]`` rewards.
        ``format`` is 1 when an answer could be extracted from the response at all."""
        check_batch(self.name, prompts, responses, rows)
        if self.verifier == "dapo":
            return self._score_dapo(responses, rows)
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

    def _score_dapo(self, responses: list[str], rows: list[dict]) -> Rewards:
        """DAPO's verifier (``verifier: dapo``); ``format`` is 1 when an ``Answer:`` was found."""
        from rlnb.engine.environments.dapo_verify import dapo_correct

        checked = [dapo_correct(r, str(row["answer"])) for r, row in zip(responses, rows)]
        ok = torch.tensor([c for c, _ in checked], dtype=torch.bool)
        fmt = torch.tensor([a is not None for _, a in checked], dtype=torch.float32)
        return Rewards(total=ok.float(), components={"correct": ok.float(), "format": fmt},
                       correct=ok)


