"""A user's data set as task rows: ``{"prompt": text or messages, **other columns}``.

    rows = load_user_rows(ds)                       # datasets.Dataset, list of dicts, DataFrame
    rows = load_user_rows("problems.jsonl")         # or .json / .parquet / .csv / save_to_disk
    task = DatasetTask("problems.jsonl", val_fraction=0.1)      # data.name: dataset

The data format is TRL's: a ``prompt`` column holding text (standard) or a list of
``{"role", "content"}`` messages (conversational); every other column reaches the reward
functions as a keyword argument (``reward_funcs.py``).

Implementation choices:
1) Every row is checked before any is used: a missing prompt column lists the columns there
   are; a row whose prompt is empty, or not text or messages, is named by its index.
2) ``prompt_key`` renames a column to ``prompt`` (the column keeps no second name).
3) The held-out rows are the ``val_split`` (a split of a ``DatasetDict`` or a saved data set, or a
   second file), the ``eval_dataset`` given in Python, or else ``num_val`` rows (or a
   ``val_fraction`` of them) carved out with ``seed``; a training row is never a held-out one.
4) Training rows come in epochs, each a fresh shuffle of the loop's seed, so a resumed run reads
   exactly the rows it would have read (the data position is the run's save state).
5) Files are read without the ``datasets`` cache: JSON lines with ``json`` (a bad line is named),
   Parquet with ``pyarrow`` (lists stay lists), CSV with ``pandas``; a folder is a data set saved
   with ``save_to_disk``.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from rlnb.engine.environments.base import Rewards, Task, TaskSettings, take_rows
from rlnb.engine.environments.prompts import is_messages

SUFFIXES = (".jsonl", ".json", ".parquet", ".csv")


def read_file(path: str | Path) -> list[dict]:
    """The rows of a ``.jsonl``/``.json``/``.parquet``/``.csv`` file, or of a folder written by
    ``Dataset.save_to_disk`` (a ``DatasetDict`` folder gives ``{split: rows}``)."""
    path = Path(path).expanduser()
    if path.is_dir() and path.suffix.lower() in SUFFIXES:  # rows.jsonl/: a folder by mistake
        raise ValueError(f"data file {str(path)!r} is a directory, not a {path.suffix} file")
    if path.is_dir():
        from datasets import load_from_disk

        try:
            data = load_from_disk(str(path))
        except Exception as err:  # datasets raises several types; all mean "not a saved set"
            raise ValueError(f"data folder {str(path)!r} is not a data set saved with "
                             f"save_to_disk ({type(err).__name__}: {err})") from None
        return as_rows(data)
    if not path.is_file():
        raise FileNotFoundError(f"data file {str(path)!r} does not exist")
    suffix = path.suffix.lower()
    if suffix not in SUFFIXES:
        raise ValueError(f"data file {str(path)!r}: unsupported suffix {suffix!r}; valid: "
                         f"{', '.join(SUFFIXES)} or a folder saved with save_to_disk")
    try:
        if suffix == ".jsonl":
            rows = []
            for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as err:
                        raise ValueError(f"data file {str(path)!r}: line {i} is not JSON "
                                         f"({err.msg})") from None
            return rows
        if suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(data, list):
                raise ValueError(f"data file {str(path)!r} must hold a list of rows (objects), "
                                 f"got {type(data).__name__}")
            return data
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            return pq.read_table(path).to_pylist()
        import pandas as pd

        return pd.read_csv(path).to_dict(orient="records")
    except (UnicodeDecodeError, json.JSONDecodeError, OSError) as err:
        raise ValueError(f"data file {str(path)!r} could not be read as {suffix[1:]} "
                         f"({type(err).__name__}: {str(err).splitlines()[0]})") from None
    except Exception as err:  # pyarrow's and pandas' parser errors
        if isinstance(err, ValueError) and str(err).startswith("data file"):
            raise
        raise ValueError(f"data file {str(path)!r} could not be read as {suffix[1:]} "
                         f"({type(err).__name__}: {str(err).splitlines()[0]})") from None


def as_rows(data: Any) -> list[dict] | dict[str, list[dict]]:
    """Plain rows of what a user holds: a ``datasets.Dataset`` (or ``DatasetDict``: ``{split:
    rows}``), a pandas ``DataFrame``, a list of dicts, a dict of columns, or a path
    (``read_file``)."""
    if isinstance(data, (str, Path)):
        return read_file(data)
    if type(data).__name__ == "DatasetDict" or (isinstance(data, Mapping) and data and all(
            type(v).__name__ == "Dataset" for v in data.values())):
        return {str(split): as_rows(ds) for split, ds in data.items()}
    if isinstance(data, Mapping) and data and all(isinstance(v, (list, tuple))
                                                  for v in data.values()):
        lengths = {k: len(v) for k, v in data.items()}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"a dict of columns needs columns of one length, got {lengths}")
        return [dict(zip(data, values)) for values in zip(*data.values())]
    if type(data).__name__ == "IterableDataset":
        raise ValueError("an IterableDataset has no length and cannot be held out from: take "
                         "rows with ds.take(n) and pass Dataset.from_list(list(...))")
    if hasattr(data, "to_list") and hasattr(data, "column_names"):  # datasets.Dataset
        return data.to_list()
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # pandas.DataFrame
        return data.to_dict(orient="records")
    if isinstance(data, (list, tuple)):
        bad = next((i for i, r in enumerate(data) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise ValueError(f"data row {bad} is a {type(data[bad]).__name__}, not a dict of "
                             "columns")
        return [dict(r) for r in data]
    raise ValueError(f"data must be a datasets.Dataset or DatasetDict, a pandas DataFrame, a list "
                     f"of dicts or a .jsonl/.json/.parquet/.csv path, got {type(data).__name__}")


def pick_split(data, split: str, what: str) -> list[dict]:
    """``data``'s rows, or its ``split`` when it holds several (a ``DatasetDict``)."""
    if isinstance(data, dict):
        if split not in data:
            raise ValueError(f"{what} has splits {sorted(data)}, not {split!r} "
                             "(data.split / data.val_split name them)")
        return data[split]
    return data


def prompt_rows(raw: list[dict], prompt_key: str, what: str) -> list[dict]:
    """``raw`` with ``prompt_key`` renamed to ``prompt``; every row checked (choices 1, 2)."""
    if not raw:
        raise ValueError(f"{what} has no rows")
    columns = list(raw[0])
    if prompt_key not in columns:
        hint = "" if prompt_key != "prompt" else "; name the prompt column with data.prompt_key"
        raise ValueError(f"{what} has no {prompt_key!r} column (columns: {columns}){hint}")
    rows, chat = [], None
    for i, r in enumerate(raw):
        missing = [c for c in columns if c not in r]
        if missing:
            raise ValueError(f"{what}: row {i} has no {missing[0]!r} column (row 0 has "
                             f"{columns})")
        row = {"prompt": r[prompt_key], **{k: v for k, v in r.items() if k != prompt_key}}
        prompt = row["prompt"]
        if is_messages(prompt):
            row["prompt"] = [dict(m) for m in prompt]
        elif not isinstance(prompt, str) or not prompt:
            raise ValueError(f"{what}: row {i}'s {prompt_key!r} is {prompt!r}; a prompt is "
                             "non-empty text or a list of {'role', 'content'} messages")
        if chat is None:
            chat = isinstance(row["prompt"], list)
        elif chat != isinstance(row["prompt"], list):
            raise ValueError(f"{what}: row {i}'s prompt is {'messages' if not chat else 'text'}"
                             f" but row 0's is {'messages' if chat else 'text'}; use one format")
        rows.append(row)
    return rows


def fingerprint(*parts: Any) -> str:
    """A short hash of rows (and anything JSON-able): names the data in a warm-start cache key,
    so two data sets under one config never share a cached warm start."""
    blob = json.dumps(parts, sort_keys=True, default=repr)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


class DatasetTask(Task):
    """A user's rows (TRL's data format); it scores nothing by itself: the trainer scores its
    rows with the run's reward functions (``reward_funcs.py``).

    Args:
        path: a ``.jsonl``/``.json``/``.parquet``/``.csv`` file or a ``save_to_disk`` folder
            (``from_data`` takes a data set in Python instead).
        split: the split to train on when the data holds several (a ``DatasetDict``).
        val_split: the held-out rows: another split of the data, or a second file; None
            carves them out of the training rows (choice 3).
        prompt_key: the prompt column (default ``"prompt"``).
        answer_key: the column of demonstrations the warm start trains on (``sft``).
        num_val, val_fraction: how many rows to hold out (``val_fraction`` of them instead, if
            set); seed: which.
    """

    name = "dataset"

    class Settings(TaskSettings):
        """``data.name: dataset``'s settings."""

        path: str | None = Field(
            None, description="a .jsonl/.json/.parquet/.csv file or a save_to_disk folder with a "
            "'prompt' column (text or chat messages); the other columns reach the reward "
            "functions")
        split: str = Field("train", description="the split of a DatasetDict to train on")
        val_split: str | None = Field(
            None, description="validation split or file; None holds out num_val train rows")
        prompt_key: str | None = Field(
            None, description="the column with the prompt (None: 'prompt')")
        answer_key: str = Field("answer", description="column with the demonstration the warm "
                                "start trains on")
        val_fraction: float | None = Field(
            None, gt=0, lt=1, description="hold out this share of the rows instead of num_val")

    def __init__(self, path: str | None, split: str,
                 val_split: str | None, prompt_key: str | None,
                 answer_key: str, num_val: int,
                 val_fraction: float | None, seed: int):
        if path is None:
            raise ValueError("data.name=dataset needs data.path (a .jsonl/.json/.parquet/.csv "
                             "file), or the data in Python: GRPOTrainer(config, train_dataset=..., "
                             "reward_funcs=...)")
        data = as_rows(path)
        held = None
        if val_split is not None:
            if isinstance(data, dict) and val_split in data:
                held = data[val_split]
            elif Path(val_split).suffix.lower() in SUFFIXES or Path(val_split).is_dir():
                held = as_rows(val_split)
            else:
                raise ValueError(f"data.val_split={val_split!r} is neither a split of {path!r} "
                                 "nor a data file")
        self._setup(pick_split(data, split, f"data.path {path!r}"), held, str(path),
                    prompt_key=prompt_key or "prompt", answer_key=answer_key, num_val=num_val,
                    val_fraction=val_fraction, seed=seed)

    @classmethod
    def from_data(cls, train_dataset, eval_dataset=None, *, split: str = "train",
                  val_split: str | None = None, prompt_key: str | None = None,
                  answer_key: str = "answer", num_val: int = 200,
                  val_fraction: float | None = None, seed: int = 0) -> DatasetTask:
        """The task of data held in Python (``GRPOTrainer(..., train_dataset=, eval_dataset=)``):
        anything ``as_rows`` takes."""
        data = as_rows(train_dataset)
        held = None
        if eval_dataset is not None:
            held = pick_split(as_rows(eval_dataset), val_split or "test", "eval_dataset")
        elif val_split is not None:
            if not isinstance(data, dict):
                raise ValueError(f"data.val_split={val_split!r} names a split, but "
                                 "train_dataset has one; pass eval_dataset=")
            held = pick_split(data, val_split, "train_dataset")
        task = cls.__new__(cls)
        task._setup(pick_split(data, split, "train_dataset"), held, "train_dataset",
                    prompt_key=prompt_key or "prompt", answer_key=answer_key, num_val=num_val,
                    val_fraction=val_fraction, seed=seed)
        return task

    def _setup(self, train: list[dict], held: list[dict] | None, source: str, *,
               prompt_key: str, answer_key: str, num_val: int, val_fraction: float | None,
               seed: int) -> None:
        self.source, self.answer_key = source, answer_key
        rows = prompt_rows(train, prompt_key, source)
        if held is not None:
            self._val = prompt_rows(held, prompt_key, f"the held-out rows of {source}")
            self._train = rows
        else:  # choice 3: carve them out
            n = num_val if val_fraction is None else max(1, round(val_fraction * len(rows)))
            if n >= len(rows):
                key = "num_val" if val_fraction is None else "val_fraction"
                raise ValueError(
                    f"{source}: holding out {n} rows (data.{key}) would leave none of its "
                    f"{len(rows)} to train on; lower it, set "
                    "data.val_fraction, or give held-out rows (eval_dataset=, data.val_split)")
            order = list(range(len(rows)))
            random.Random(f"rlnb/dataset/val/{seed}").shuffle(order)
            out = set(order[:n])
            self._val = [rows[i] for i in sorted(out)]
            self._train = [r for i, r in enumerate(rows) if i not in out]
        self.chat = isinstance(self._train[0]["prompt"], list)
        self.columns = [c for c in self._train[0] if c != "prompt"]
        self.fingerprint = fingerprint(self._train, self._val)

    def train_rows(self, n: int, seed: int = 0) -> list[dict]:
        """``n`` rows in epochs: each pass over the data is a fresh shuffle of ``seed``."""
        rng = random.Random(f"rlnb/dataset/train/{seed}")
        out: list[dict] = []
        while len(out) < n:
            order = list(range(len(self._train)))
            rng.shuffle(order)
            out.extend(_copy(self._train[i]) for i in order[: n - len(out)])
        return out

    def val_rows(self, n: int | None = None) -> list[dict]:
        return [_copy(r) for r in take_rows(self._val, n, f"data set {self.source!r}")]

    def demonstration(self, row: dict) -> str:
        """The warm start's target for ``row``: its ``answer_key`` column."""
        if self.answer_key not in row:
            raise ValueError(
                f"the warm start (sft.enabled) trains on a demonstration per row, but "
                f"{self.source!r} has no {self.answer_key!r} column (columns: {self.columns}): "
                "name one with data.answer_key, or set sft.enabled=false")
        return str(row[self.answer_key])

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        raise ValueError("data.name=dataset has no reward of its own: give reward functions "
                         "(reward_funcs in the config, or reward_funcs= in Python)")


def _copy(row: dict) -> dict:
    # a caller editing a row (or its messages) must not change ours
    return {k: [dict(m) for m in v] if k == "prompt" and isinstance(v, list) else v
            for k, v in row.items()}
