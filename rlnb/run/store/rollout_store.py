"""A run's rollouts on disk as one chunked dataset: a Parquet file per 50 steps, not per step.

    runs/<name>/rollouts/
      steps_000001.parquet    a sealed chunk: steps 1-50, a `step` column, one row group per step
      steps_000051.parquet    steps 51-100, ...
      _steps_000101.arrows    the chunk in progress (Arrow IPC stream, one record batch per step)
      step_000001.parquet     runs written before chunking: one file per step (still read)

    store = RolloutStore("runs/x/rollouts")
    store.steps()                         # [1, 2, ...]
    store.read(7)                         # step 7's table (pandas), one row per sequence
    store.read_all(first_step=100)        # steps 100.. as one DataFrame with a `step` column

Implementation choices:
1) A chunk holds ``chunk_steps`` (50) written steps, so a 2,500-step run leaves 50 files. A file
   is named for its first step: names sort by step, and a chunk cut short on resume keeps its
   name.
2) The chunk in progress lives on disk, not in memory: each step's table is appended to an Arrow
   IPC stream as one record batch, flushed and fsync'ed (like a ``metrics.jsonl`` line). A
   process killed mid-write leaves a torn last batch, which readers stop before: a kill loses at
   most the step being written, and memory holds one step's table however large the chunk.
   Sealed chunks are never opened for writing again, so a kill cannot corrupt them.
3) Sealing copies the stream into Parquet under a hidden temporary name, renames it into place
   (atomic) and then deletes the stream. Killed between the two, both exist for the same first
   step: the Parquet copy is complete and wins; the next writer deletes the stream.
4) A chunk is sealed when it is full and when a run stops (``seal``: ``TrainingRun`` calls it when
   ``steps``/``train`` end, Ctrl-C included, and in ``close``). The next write (the notebook
   trains on, ``--resume``) first takes back, as its chunk in progress, a stream a killed run left
   or the newest sealed chunk if it is short, so the folder keeps one file per ``chunk_steps``
   steps however often a run stops and continues.
5) A step whose columns differ from the chunk's (a column more or less, a type that cannot be
   cast to the chunk's) seals the chunk and starts a new one; a type that can (ints into a float
   column, an all-empty list column) is cast to the chunk's.
6) ``truncate(k)`` (resuming from checkpoint k) deletes the files wholly after k and rewrites the
   one holding k with its steps <= k (atomically), so a resumed run logs no step twice. Steps
   must increase otherwise: writing a step the folder already holds is refused.
7) Readers index step -> file from the file names and each chunk's ``step`` column, cached per
   file by (size, mtime): reading step after step reads each chunk's index once, and a step is
   read from its own row groups (Parquet statistics skip the others). The stream's name starts
   with ``_``, which Parquet dataset readers (pyarrow, pandas, polars) skip, so globbing or
   reading the folder as Parquet sees the sealed chunks only.
8) pandas and pyarrow are imported only when rollouts are written or read.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rlnb.run.store.atomic import fsync_dir
from rlnb.run.store.rollout_files import (
    OpenChunk,
    batch_steps,
    batches_per_step,
    columns_of,
    fit_schema,
    parquet_file,
    read_parquet,
    read_stream,
    spans,
    step_batch,
    write_parquet,
    write_stream,
)

CHUNK_STEPS = 50
_SEALED = re.compile(r"steps_(\d+)\.parquet")
_OPEN = re.compile(r"_steps_(\d+)\.arrows")
_PER_STEP = re.compile(r"step_(\d+)\.parquet")  # the layout before chunking


class RolloutStore:
    """The ``rollouts/`` folder of a run: write steps in order, read any step or all of them.
    Constructing one touches nothing; only ``write``, ``seal`` and ``truncate`` write."""

    def __init__(self, folder: str | Path, *, chunk_steps: int = CHUNK_STEPS):
        if int(chunk_steps) < 1:
            raise ValueError(f"chunk_steps must be >= 1, got {chunk_steps}")
        self.folder = Path(folder)
        self.chunk_steps = int(chunk_steps)
        self._open: OpenChunk | None = None
        self._cache: dict[str, tuple[tuple[int, int], list[int]]] = {}
        # a notebook reads (rollout_steps) while the dashboard's thread writes
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"RolloutStore({str(self.folder)!r}, chunk_steps={self.chunk_steps})"

    # --- the index
    def _scan(self) -> tuple[dict[int, Path], dict[int, Path], dict[int, Path]]:
        """(sealed chunks, chunks in progress, per-step files), each keyed by (first) step."""
        sealed, opened, per_step = {}, {}, {}
        if self.folder.is_dir():
            for path in self.folder.iterdir():
                for pattern, found in ((_SEALED, sealed), (_OPEN, opened), (_PER_STEP, per_step)):
                    m = pattern.fullmatch(path.name)
                    if m:
                        found[int(m[1])] = path
                        break
        return sealed, opened, per_step

    def _steps_in(self, path: Path) -> list[int]:
        """The steps ``path`` holds, cached until its size or mtime changes."""
        m = _PER_STEP.fullmatch(path.name)
        if m:
            return [int(m[1])]
        st = path.stat()
        key = (st.st_size, st.st_mtime_ns)
        hit = self._cache.get(path.name)
        if hit is not None and hit[0] == key:
            return hit[1]
        if path.suffix == ".arrows":
            steps = sorted({s for b in read_stream(path) for s in batch_steps(b)})
        else:
            steps = sorted(set(read_parquet(path, columns=["step"]).column("step").to_pylist()))
        self._cache[path.name] = (key, steps)
        return steps

    def _index(self, retries: int = 2) -> dict[int, Path]:
        """step -> the file holding it, ascending."""
        sealed, opened, per_step = self._scan()
        try:
            index = dict(per_step)
            for first, path in sorted(opened.items()):
                if first not in sealed:  # else a seal killed before deleting it (choice 3)
                    index.update(dict.fromkeys(self._steps_in(path), path))
            for _, path in sorted(sealed.items()):
                index.update(dict.fromkeys(self._steps_in(path), path))
        except FileNotFoundError:  # another process sealed or truncated while we listed
            if not retries:
                raise
            return self._index(retries - 1)
        return dict(sorted(index.items()))

    # --- reading
    def steps(self) -> list[int]:
        """Steps that have rollouts, ascending."""
        with self._lock:
            return list(self._index())

    def path_of(self, step: int) -> Path:
        """The file holding ``step``'s rollouts (a chunk, or an older run's per-step file)."""
        with self._lock:
            index = self._index()
        if int(step) not in index:
            raise FileNotFoundError(f"no rollouts for step {step} in {self.folder}; steps with "
                                    f"rollouts: {spans(list(index))}")
        return index[int(step)]

    def read(self, step: int, columns: list[str] | None = None):
        """The rollout table of ``step`` as a ``pandas.DataFrame`` (list columns hold arrays)."""
        with self._lock:
            table = self._table(self.path_of(step), int(step), int(step), columns)
        return table.drop_columns(["step"]).to_pandas()

    def read_all(self, first_step: int | None = None, last_step: int | None = None,
                 columns: list[str] | None = None):
        """Every step's rollouts in ``[first_step, last_step]`` (None: no bound) as one
        ``pandas.DataFrame`` with a ``step`` column first, ascending; ``columns`` picks columns
        (a column some steps lack is null there)."""
        import pandas as pd
        import pyarrow as pa
        import pyarrow.compute as pc

        lo = -1 if first_step is None else int(first_step)
        hi = float("inf") if last_step is None else int(last_step)
        with self._lock:
            by_file: dict[Path, list[int]] = {}
            for step, path in self._index().items():
                if lo <= step <= hi:
                    by_file.setdefault(path, []).append(step)
            if columns is not None and by_file:
                known = {c for path in by_file for c in columns_of(path)} - {"step"}
                missing = [c for c in columns if c not in known | {"step"}]
                if missing:
                    raise ValueError(f"no rollout column {missing[0]!r} in {self.folder}; "
                                     f"columns: {sorted(known)}")
            tables = []
            for path, steps in by_file.items():
                table = self._table(path, steps[0], steps[-1], columns)
                # the index's choice where two files hold a step (choice 3)
                tables.append(table.filter(pc.is_in(table.column("step"), pa.array(steps))))
        if not tables:
            return pd.DataFrame({"step": pd.Series(dtype="int64"),
                                 **{c: [] for c in columns or [] if c != "step"}})
        table = pa.concat_tables(tables, promote_options="permissive")
        return table.sort_by("step").to_pandas()  # a stable sort: rows keep their order

    def _table(self, path: Path, first: int, last: int, columns: list[str] | None):
        """Rows of ``path`` with ``first <= step <= last``, as an Arrow table with ``step``
        first; ``columns`` (and ``step``) only, where the file has them."""
        import pyarrow as pa
        import pyarrow.compute as pc

        def pick(names: list[str]) -> list[str] | None:
            return None if columns is None else ["step", *(c for c in columns
                                                          if c in names and c != "step")]

        m = _PER_STEP.fullmatch(path.name)
        if m:  # an older run's file: one step, no step column
            names = pick(parquet_file(path).schema_arrow.names)
            table = read_parquet(path, columns=None if names is None else names[1:])
            return table.add_column(0, "step", pa.array([int(m[1])] * table.num_rows, pa.int64()))
        if path.suffix == ".arrows":
            batches = [b for b in read_stream(path)
                       if any(first <= s <= last for s in batch_steps(b))]
            if not batches:
                return pa.table({"step": pa.array([], pa.int64())})
            table = pa.Table.from_batches(batches)
            table = table.filter(pc.and_(pc.greater_equal(table.column("step"), first),
                                         pc.less_equal(table.column("step"), last)))
            names = pick(table.column_names)
            return table if names is None else table.select(names)
        names = pick(parquet_file(path).schema_arrow.names)
        return read_parquet(path, columns=names,
                            filters=[("step", ">=", first), ("step", "<=", last)])

    # --- writing
    def write(self, step: int, table: Mapping[str, Any]) -> Path:
        """Append ``step``'s table (one row per sequence) to the chunk in progress; returns the
        file now holding it. Steps must increase."""
        step = int(step)
        batch = step_batch(step, table)
        with self._lock:
            if self._open is None:
                self._start(step)
            o = self._open
            if o is not None and o.steps and step <= o.steps[-1]:
                raise ValueError(f"rollouts of step {step}: step {o.steps[-1]} is already "
                                 "written; steps must increase (a resume drops the steps after "
                                 "its checkpoint first)")
            if o is not None:
                fitted = fit_schema(batch, o.schema)
                if fitted is None:  # other columns: a new chunk (choice 5)
                    self._seal_open()
                    o = None
                else:
                    batch = fitted
            if o is None:
                path = self.folder / f"_steps_{step:06d}.arrows"
                o = self._open = OpenChunk(path, batch.schema, [],
                                       write_stream(path, batch.schema, []))
            self._append(o, batch, step)
            if len(o.steps) >= self.chunk_steps:
                return self._seal_open()
            return o.path

    def seal(self) -> None:
        """Write the chunk in progress as a Parquet chunk (a run that stops calls it)."""
        with self._lock:
            self._seal_open()

    def truncate(self, after_step: int) -> None:
        """Drop the rollouts of steps after ``after_step`` (resuming from that checkpoint)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        k = int(after_step)
        with self._lock:
            self._open = None  # its file is cut below like any other; the next write takes it back
            sealed, opened, per_step = self._scan()
            for step, path in per_step.items():
                if step > k:
                    path.unlink()
            for first, path in opened.items():
                if first in sealed:  # a seal killed before deleting it: the Parquet copy wins
                    path.unlink()
                    continue
                batches = list(read_stream(path))
                kept = [b for b in batches if max(batch_steps(b), default=0) <= k]
                if not kept:
                    path.unlink()
                elif len(kept) < len(batches):
                    write_stream(path, kept[0].schema, kept)
            for _, path in sealed.items():
                steps = self._steps_in(path)
                if not steps or steps[0] > k:
                    path.unlink()
                elif steps[-1] > k:
                    table = read_parquet(path)
                    table = table.filter(pc.less_equal(table.column("step"), pa.scalar(k)))
                    write_parquet(path, batches_per_step(table))
            if self.folder.is_dir():
                fsync_dir(self.folder)

    def _append(self, o: OpenChunk, batch, step: int) -> None:
        data = batch.serialize()
        with open(o.path, "r+b") as f:
            if os.fstat(f.fileno()).st_size != o.size:
                f.truncate(o.size)  # a failed append left a torn batch: cut it, then write on
            f.seek(o.size)
            f.write(memoryview(data))
            f.flush()
            # fsync per step: a crash then loses at most this step (costs ~ms, once per step)
            os.fsync(f.fileno())
        o.size += data.size
        o.steps.append(step)
        st = o.path.stat()  # the index knows the stream without rereading it
        self._cache[o.path.name] = ((st.st_size, st.st_mtime_ns), list(o.steps))

    def _start(self, step: int) -> None:
        """Before this process's first write: clean up after a killed writer and take back the
        chunk to continue (choice 4)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for tmp in self.folder.glob(".*.tmp"):  # a write killed before its rename
            tmp.unlink(missing_ok=True)
        sealed, opened, _ = self._scan()
        for first in [f for f in opened if f in sealed]:  # a seal killed before deleting it
            opened.pop(first).unlink()
        index = self._index()
        if index and step <= max(index):
            raise ValueError(f"rollouts of step {step}: {self.folder} already holds rollouts up "
                             f"to step {max(index)}; steps must increase (a resume drops the "
                             "steps after its checkpoint first)")
        streams = sorted(opened.items())
        newest = max(sealed, default=None)
        for _, path in streams[:-1]:  # only after crashes in odd places: seal the older ones
            self._seal_stream(path)
        if streams:
            first, path = streams[-1]
            batches = list(read_stream(path))
            if (batches and len(batches) < self.chunk_steps
                    and (newest is None or first > newest)):
                # rewritten, which cuts a torn last batch off before appending after it
                size = write_stream(path, batches[0].schema, batches)
                self._open = OpenChunk(path, batches[0].schema,
                                   [s for b in batches for s in batch_steps(b)], size)
                return
            self._seal_stream(path)
            sealed, _, _ = self._scan()
            newest = max(sealed, default=None)
        if newest is None:
            return
        path = sealed[newest]
        steps = self._steps_in(path)
        if steps and len(steps) < self.chunk_steps and steps[-1] == max(self._index()):
            table = read_parquet(path)
            stream = self.folder / f"_steps_{newest:06d}.arrows"
            batches = batches_per_step(table)
            size = write_stream(stream, table.schema, batches)
            path.unlink()  # killed before this: both hold the same steps, the Parquet copy wins
            fsync_dir(self.folder)
            self._open = OpenChunk(stream, table.schema, steps, size)

    def _seal_open(self) -> Path | None:
        o, self._open = self._open, None
        return None if o is None else self._seal_stream(o.path)

    def _seal_stream(self, stream: Path) -> Path | None:
        """Copy a stream into its Parquet chunk, then delete it (choice 3)."""
        target = self.folder / f"steps_{int(_OPEN.fullmatch(stream.name)[1]):06d}.parquet"
        wrote = write_parquet(target, read_stream(stream))  # nothing if no batch is complete
        stream.unlink()
        fsync_dir(self.folder)
        return target if wrote else None
