"""One folder per training run: its config, its metrics, its rollouts and its checkpoints.

    runs/<name>/
      config.yaml                    the resolved config, as trained
      metrics.jsonl                  one line per logged step: {"step": k, "train/reward": ...}
      rollouts/steps_000001.parquet  steps 1-50's tables (prompts, completions, token ids,
                                     rewards, a `step` column); see rlnb.run.store.rollout_store
      checkpoints/step_000010/       see rlnb.run.store.checkpoint

Implementation choices:
1) ``config.yaml`` is the single record of what was trained. Reopening a folder that holds a
   different config is refused unless ``resume=True``, and resuming is refused if any key that
   changes the numerics differs (``RESUMABLE_KEYS`` lists the ones that may change: logging,
   the save period, the step budget). Errors list the dotted keys with both values.
2) Configs are compared after a YAML round trip (tuples become lists, paths strings), so a
   config compares equal to the one it wrote.
3) ``metrics.jsonl`` is appended one line per call, flushed and fsync'ed, so a crash loses at most
   the line being written; ``read_metrics`` drops such a trailing partial line and reopening the
   folder cuts it off before appending. Non-finite floats are written as ``null`` (JSON has no
   NaN), so a NaN loss stays visible as a gap instead of breaking every JSON reader.
4) Rollout tables go to Parquet (typed, compressed, readable by pandas and polars), one file per
   chunk of 50 steps (``rollout_store.py``: the chunk in progress, sealing, older runs' per-step
   files); per-row token ids and logprobs are list columns, ``[B, T]`` tensors become one list
   per row. ``read_run_rollouts(path)`` reads a run's rollouts without opening it for writing.
5) A failed construction leaves nothing behind: a folder created by that call is removed.
6) A folder holding only the notebook files of ``rlnb run`` / ``rlnb launch``
   (``NOTEBOOK_FILES``) counts as empty, so a notebook can start its run in its own run dir.
7) A config an older rlnb saved may say the same in another form (its ``data`` section held
   every task's keys): ``read_saved`` (the run layer's loader, round trip) reads the saved config
   as this version does before the comparison.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from numbers import Number
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel

from rlnb.config import flatten
from rlnb.run.store.atomic import atomic_write_bytes, atomic_write_text
from rlnb.run.store.rollout_files import is_tensor
from rlnb.run.store.rollout_store import CHUNK_STEPS, RolloutStore
from rlnb.user_files import load_yaml, read_text

# Dotted config keys (and prefixes of them) that may differ when resuming: they change what is
# logged and when the run stops, never the numbers it computes.
RESUMABLE_KEYS = ("logger", "checkpointing.save_period", "grpo.max_num_steps",
                  "dpo.max_num_steps")
_MISSING = "<missing>"


def _plain(value: Any, where: str) -> Any:
    """``value`` as YAML-safe builtins; raises ``TypeError`` naming the dotted key otherwise."""
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Path):
        return str(value)
    if (isinstance(value, np.generic) or is_tensor(value)) and np.ndim(value) == 0:
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"config key '{where}' holds a {type(value).__name__}, which YAML cannot "
                    "store; use a number, string, list or dict")


def config_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """``(dotted_key, old_value, new_value)`` for every leaf that differs, sorted by key."""
    a, b = flatten(old), flatten(new)
    return [(k, a.get(k, _MISSING), b.get(k, _MISSING))
            for k in sorted(a.keys() | b.keys()) if a.get(k, _MISSING) != b.get(k, _MISSING)]


def _is_resumable(key: str) -> bool:
    return any(key == p or key.startswith(p + ".") for p in RESUMABLE_KEYS)


def _format_diff(diff: list[tuple[str, Any, Any]]) -> str:
    return "\n".join(f"  {k}: {old!r} (saved) -> {new!r} (now)" for k, old, new in diff)


def _metric_value(key: str, value: Any) -> int | float | bool | None:
    """A JSON-safe scalar: finite number, or ``None`` for NaN/inf."""
    if is_tensor(value) or isinstance(value, (np.ndarray, np.generic)):
        if np.ndim(value) != 0:
            raise TypeError(f"metric '{key}' must be a scalar, got shape {tuple(value.shape)}")
        value = value.item()
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, Number) and not isinstance(value, complex):
        if isinstance(value, int):
            return int(value)
        value = float(value)
        return value if math.isfinite(value) else None
    raise TypeError(f"metric '{key}' must be a number, got {type(value).__name__}: {value!r}")


class RunDir:
    """A run's folder. ``RunDir(path, config=cfg)`` starts one, ``resume=True`` continues one."""

    CONFIG = "config.yaml"
    METRICS = "metrics.jsonl"
    ROLLOUTS = "rollouts"
    CHECKPOINTS = "checkpoints"
    # What `rlnb run` / `rlnb launch` put in the folder before the notebook's TrainingRun opens
    # it (papermill saves the executing notebook from the first cell on): a folder holding only
    # these still counts as empty.
    NOTEBOOK_FILES = ("notebook.ipynb", "notebook.html", "mathjax", "ranks")

    def __init__(self, path: str | Path, *, config: Mapping[str, Any] | BaseModel,
                 resume: bool = False, rollout_chunk_steps: int = CHUNK_STEPS,
                 read_saved: Callable[[dict], Mapping[str, Any]] | None = None):
        self.path = Path(path)
        self.read_saved = read_saved  # choice 7
        self.rollout_store = RolloutStore(self.rollouts_dir, chunk_steps=rollout_chunk_steps)
        config = _plain(config, "")
        if not isinstance(config, dict):
            raise TypeError(f"config must be a mapping, got {type(config).__name__}")
        # YAML round trip: what we compare against later is exactly what the file will hold
        self.config: dict[str, Any] = yaml.safe_load(yaml.safe_dump(config)) or {}
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"run dir {self.path} exists and is not a directory")
        if resume and not (self.path / self.CONFIG).is_file():
            raise ValueError(f"cannot resume {self.path}: it holds no {self.CONFIG}; "
                             "pass resume=False to start a new run there")
        created = first_missing(self.path)
        try:
            if created:
                self.path.mkdir(parents=True)
            else:
                self._check_existing(resume)
                self._cut_partial_metrics_line()
            atomic_write_text(self.config_path, yaml.safe_dump(self.config, sort_keys=False))
            self.rollouts_dir.mkdir(exist_ok=True)
            self.checkpoints_dir.mkdir(exist_ok=True)
            self.metrics_path.touch(exist_ok=True)
        except BaseException:
            if created:
                shutil.rmtree(created, ignore_errors=True)
            raise

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # --- paths
    @property
    def config_path(self) -> Path:
        return self.path / self.CONFIG

    @property
    def metrics_path(self) -> Path:
        return self.path / self.METRICS

    @property
    def rollouts_dir(self) -> Path:
        return self.path / self.ROLLOUTS

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / self.CHECKPOINTS

    @staticmethod
    def new_default_path(root: str | Path = "runs", name: str | None = None) -> Path:
        """``root/<name>``, or ``root/<YYYYmmdd-HHMMSS>`` (suffixed ``-2``, ... if taken)."""
        if name is not None:
            return Path(root) / name
        stamp = time.strftime("%Y%m%d-%H%M%S")
        path, n = Path(root) / stamp, 1
        while path.exists():
            n += 1
            path = Path(root) / f"{stamp}-{n}"
        return path

    def holds_steps(self) -> bool:
        """Whether a training step was logged or checkpointed here."""
        logged = self.metrics_path.is_file() and any(
            r.get("step", 0) > 0 for r in read_metrics_file(self.metrics_path))
        ckpts = self.checkpoints_dir.is_dir() and any(self.checkpoints_dir.glob("step_*"))
        return logged or ckpts

    # --- construction checks
    def _check_existing(self, resume: bool) -> None:
        if not self.config_path.is_file():
            if any(p.name not in self.NOTEBOOK_FILES for p in self.path.iterdir()):
                raise ValueError(f"{self.path} exists, is not empty and holds no {self.CONFIG}: "
                                 "it is not an rlnb run dir; choose a new dir")
            return
        if not resume and self.holds_steps():
            raise ValueError(
                f"{self.path} already holds a run with logged steps or checkpoints: continue it "
                f"with --resume {self.path} (resume=True), or choose a new run dir (starting "
                "again here would append duplicate steps and overwrite its checkpoints)")
        try:  # strictly: a key given twice (an edit by hand) is refused, naming both lines
            saved = load_yaml(read_text(self.config_path, "config file"),
                              str(self.config_path)) or {}
        except ValueError as err:
            raise ValueError(f"{err}; it is the record of what the run trained: restore it to "
                             "resume") from None
        if not isinstance(saved, dict):
            raise ValueError(f"{self.config_path} is corrupt: not a mapping of sections")
        if self.read_saved is not None:  # choice 7
            saved = yaml.safe_load(yaml.safe_dump(_plain(self.read_saved(saved), ""))) or {}
        diff = config_diff(saved, self.config)
        if not diff:
            return
        if not resume:
            raise ValueError(
                f"{self.path} already holds a run with a different config:\n"
                f"{_format_diff(diff)}\n"
                "pass resume=True to continue that run, or choose a new dir "
                "(RunDir.new_default_path())")
        numeric = [d for d in diff if not _is_resumable(d[0])]
        if numeric:
            raise ValueError(
                f"cannot resume {self.path}: these config keys change the numerics "
                f"(only {', '.join(RESUMABLE_KEYS)} may change on resume):\n"
                f"{_format_diff(numeric)}")

    def _cut_partial_metrics_line(self) -> None:
        """Drop a line left half-written by a crash, so the next append starts a fresh line."""
        if not self.metrics_path.is_file():
            return
        data = self.metrics_path.read_bytes()
        if data and not data.endswith(b"\n"):
            atomic_write_bytes(self.metrics_path, data[: data.rfind(b"\n") + 1])

    # --- metrics
    def log_metrics(self, step: int, metrics: Mapping[str, Any]) -> dict[str, Any]:
        """Append ``{"step": step, **metrics}`` to ``metrics.jsonl``; returns the record written."""
        if "step" in metrics:
            raise ValueError("metrics must not contain the key 'step'; pass it as `step`")
        record = {"step": int(step), **{k: _metric_value(k, v) for k, v in metrics.items()}}
        line = json.dumps(record, allow_nan=False) + "\n"
        with open(self.metrics_path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            # fsync per line: a crash then loses at most this step (costs ~ms, once per step)
            os.fsync(f.fileno())
        return record

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every logged record in file order; a trailing partial line (a crash) is dropped."""
        return read_metrics_file(self.metrics_path)

    def truncate_metrics(self, after_step: int) -> None:
        """Keep only records with ``step <= after_step`` (call on resume from that checkpoint,
        so replayed steps are not logged twice)."""
        kept = [r for r in self.read_metrics() if r["step"] <= after_step]
        atomic_write_text(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    # --- rollouts (stored in chunks of steps by rlnb.run.store.rollout_store)
    def rollouts_path(self, step: int) -> Path:
        """The file holding ``step``'s rollouts (its chunk, or an older run's per-step file)."""
        return self.rollout_store.path_of(step)

    def rollout_steps(self) -> list[int]:
        """Steps that have a rollout table, ascending."""
        return self.rollout_store.steps()

    def write_rollouts(self, step: int, table: Mapping[str, Any]) -> Path:
        """Write one row per sequence: ``{"reward": [B], "token_ids": [B, T] or B lists}``, into
        the chunk in progress; returns the file now holding it. Steps must increase."""
        return self.rollout_store.write(step, table)

    def seal_rollouts(self) -> None:
        """Write the chunk in progress as a Parquet chunk (when a run stops)."""
        self.rollout_store.seal()

    def truncate_rollouts(self, after_step: int) -> None:
        """Keep only the rollouts of steps ``<= after_step`` (call on resume from that
        checkpoint, with ``truncate_metrics``)."""
        self.rollout_store.truncate(after_step)

    def read_rollouts(self, step: int):
        """The rollout table of ``step`` as a ``pandas.DataFrame`` (list columns hold arrays)."""
        return self.rollout_store.read(step)

    def read_all_rollouts(self, first_step: int | None = None, last_step: int | None = None,
                          columns: list[str] | None = None):
        """Every step's rollouts (or those of ``first_step..last_step``) as one
        ``pandas.DataFrame`` with a ``step`` column; ``columns`` picks columns."""
        return self.rollout_store.read_all(first_step, last_step, columns)


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what creating it would add,
    so a failed start removes ``runs/`` too when it made it), or None if ``path`` exists."""
    missing = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing = p
    return missing


def read_metrics_file(path: str | Path) -> list[dict[str, Any]]:
    """The records of a ``metrics.jsonl`` in file order, without opening the run for writing;
    a trailing partial line (a crash mid-write) is dropped. A missing file reads as []."""
    path = Path(path)
    if not path.is_file():
        return []
    data = path.read_bytes()
    # every write ends in "\n", so bytes after the last newline were cut mid-write: drop them
    # (before decoding: the cut may split a multi-byte character)
    complete = data[: data.rfind(b"\n") + 1]
    try:
        lines = complete.decode("utf-8").split("\n")
    except UnicodeDecodeError as err:
        line = complete[: err.start].count(b"\n") + 1
        raise ValueError(f"{path}:{line} is not UTF-8 text (byte {err.start} of the file): the "
                         "file is damaged; restore it from a copy, or move it aside to start "
                         "the run's log afresh") from None
    records = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{i} is not valid JSON ({err})") from None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            raise ValueError(f"{path}:{i} is not a metrics record (an object with an integer "
                             f"'step'): {line[:60]!r}")
        records.append(record)
    return records


def read_run_rollouts(run_dir: str | Path, first_step: int | None = None,
                      last_step: int | None = None, columns: list[str] | None = None):
    """A run's rollouts (or those of ``first_step..last_step``) as one ``pandas.DataFrame`` with
    a ``step`` column, read without opening the run for writing (chunked and per-step layouts)."""
    path = Path(run_dir)
    if not (path / RunDir.CONFIG).is_file():
        raise ValueError(f"{path} is not a run directory (no {RunDir.CONFIG})")
    return RolloutStore(path / RunDir.ROLLOUTS).read_all(first_step, last_step, columns)
