"""The files of a run's rollout store: one step's table as an Arrow record batch, the chunk in
progress as an Arrow IPC stream, a sealed chunk as Parquet (``rollout_store.py`` decides which file
a step goes to and when a chunk is sealed).

pandas and pyarrow are imported only when rollouts are written or read.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlnb.run.store.atomic import atomic_replace


def is_tensor(value: Any) -> bool:
    """A torch tensor, asked without importing torch: a process that never imported it holds
    none, and the run directory's readers (``rlnb run``, a sweep's report) then start without
    torch's 2 s import."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def column(name: str, values: Any) -> list[Any]:
    """One rollout column as a Python list: scalars per row, or one list per row for ``[B, T]``."""
    if is_tensor(values):
        import torch

        values = values.detach().cpu()
        if values.dtype in (torch.bfloat16, torch.float16):  # numpy has no bfloat16
            values = values.float()
        values = values.numpy()
    if isinstance(values, np.ndarray):
        if values.ndim > 2:
            raise ValueError(f"rollout column '{name}' has shape {values.shape}; "
                             "expected [B] or [B, T]")
        return values.tolist()
    if isinstance(values, (list, tuple)):  # ragged per-row lists stay as they are
        return [column(f"{name}[{i}]", v) if is_tensor(v) or isinstance(v, np.ndarray) else v
                for i, v in enumerate(values)]
    raise TypeError(f"rollout column '{name}' must be a list, numpy array or tensor, "
                    f"got {type(values).__name__}")


def step_batch(step: int, table: Mapping[str, Any]):
    """``table`` (``{"reward": [B], "token_ids": [B, T] or B lists}``) as one Arrow record batch,
    with a ``step`` column first."""
    import pyarrow as pa

    if not table:
        raise ValueError(f"rollouts of step {step}: the table has no columns")
    if "step" in table:
        raise ValueError(f"rollouts of step {step}: the table must not contain a 'step' column "
                         "(it is added from `step`)")
    columns = {name: column(name, values) for name, values in table.items()}
    lengths = {name: len(col) for name, col in columns.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"rollouts of step {step}: columns have different numbers of rows: "
                         f"{lengths}")
    try:
        arrays = [pa.array(col) for col in columns.values()]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise ValueError(f"rollouts of step {step}: cannot store a column ({err})") from None
    rows = next(iter(lengths.values()))
    return pa.RecordBatch.from_arrays([pa.array([step] * rows, pa.int64()), *arrays],
                                      names=["step", *columns])


def read_stream(path: Path) -> Iterator:
    """The complete record batches of a chunk in progress, in order; a torn last batch (a write
    cut by a kill) ends the stream."""
    import pyarrow as pa

    with pa.OSFile(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
            while True:
                yield reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError):  # torn (or empty: a kill before the schema)
            return


def columns_of(path: Path) -> list[str]:
    """The column names of a rollout file (its schema only)."""
    if path.suffix == ".arrows":
        head = next(read_stream(path), None)
        return [] if head is None else head.schema.names
    return parquet_file(path).schema_arrow.names


def parquet_file(path: Path):
    """``pyarrow.parquet.ParquetFile(path)``; a damaged file (truncated, overwritten) raises
    ``ValueError`` naming it and the way out, not pyarrow's own line (a missing one raises
    ``FileNotFoundError``, as before)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as err:
        raise _damaged(path, err) from None


def read_parquet(path: Path, columns: list[str] | None = None, filters=None):
    """``pyarrow.parquet.read_table`` of a rollout chunk, a damaged one named as in
    ``parquet_file``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path, columns=columns, filters=filters)
    except FileNotFoundError:
        raise
    except (pa.ArrowException, OSError) as err:
        raise _damaged(path, err) from None


def _damaged(path: Path, err: BaseException) -> ValueError:
    reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    return ValueError(
        f"{path} is damaged and cannot be read ({reason}); the run's checkpoints and "
        f"metrics.jsonl do not depend on it: move it out of {path.parent.name}/ (the rollouts "
        "it held are then missing) or put back an intact copy, and try again")


def batches_per_step(table) -> list:
    """``table``'s rows as one record batch per step, in step order."""
    import pyarrow.compute as pc

    steps = sorted(set(table.column("step").to_pylist()))
    return [b for s in steps
            for b in table.filter(pc.equal(table.column("step"), s)).combine_chunks().to_batches()]


def batch_steps(batch) -> list[int]:
    return sorted(set(batch.column(batch.schema.get_field_index("step")).to_pylist()))


def fit_schema(batch, schema):
    """``batch`` cast to the chunk's ``schema`` (ints into a float column, an empty list column),
    or None if it cannot be (a step with other columns starts a new chunk)."""
    import pyarrow as pa

    if batch.schema.equals(schema):
        return batch
    if batch.schema.names != schema.names:
        return None
    try:
        return pa.RecordBatch.from_arrays(
            [col.cast(f.type) for col, f in zip(batch.columns, schema)], schema=schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        return None


def write_stream(path: Path, schema, batches: list) -> int:
    """(Re)write a chunk in progress atomically; returns its size in bytes."""
    with atomic_replace(path) as tmp, open(tmp, "wb") as f:
        size = 0
        for data in [schema.serialize(), *(b.serialize() for b in batches)]:
            f.write(memoryview(data))
            size += data.size
    return size


def write_parquet(path: Path, batches: Iterable) -> bool:
    """A sealed chunk, one row group per batch (per step: a reader skips the others), written
    atomically and batch by batch (memory: one step). False, and nothing written, if there is no
    batch."""
    import pyarrow.parquet as pq

    batches = iter(batches)
    head = next(batches, None)
    if head is None:
        return False
    with atomic_replace(path) as tmp, pq.ParquetWriter(str(tmp), head.schema) as writer:
        writer.write_batch(head)
        for batch in batches:
            writer.write_batch(batch)
    return True


@dataclass
class OpenChunk:
    """The chunk in progress, as this process writes it."""

    path: Path
    schema: Any
    steps: list[int]
    size: int  # bytes of complete batches: a failed append's torn tail is cut before the next


def spans(steps: list[int]) -> str:
    if len(steps) <= 8:
        return str(steps)
    return f"{len(steps)} steps from {steps[0]} to {steps[-1]}"
