"""NeMo-RL's ``BatchedDataDict``: a dict of per-row values (tensors ``[B, ...]`` or lists of B
items) with the row operations NeMo-RL's algorithm helpers use.

    batch = BatchedDataDict(total_reward=torch.tensor([1.0, 0.0]), message_log=[m0, m1])
    batch.size                       # 2
    batch.select_indices([1])        # rows in the given order, every key
    BatchedDataDict.from_batches([a, b])   # rows of a, then rows of b

The ``rlnb.nemo`` adapters take and return it so a NeMo-RL user's batch code keeps working; rlnb's
own functions take plain ``dict[str, Tensor]``. Only the row operations are here (NeMo-RL's
sharding, microbatching and multimodal packing are its distributed plumbing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F


def _rows(value: Any) -> int:
    return int(value.shape[0]) if isinstance(value, torch.Tensor) else len(value)


def _take(value: Any, index: list[int]) -> Any:
    if isinstance(value, torch.Tensor):
        return value[torch.tensor(index, dtype=torch.long, device=value.device)]
    return [value[i] for i in index]


class BatchedDataDict(dict):
    """A ``dict`` whose values all have one row per sample (see the module docstring)."""

    @property
    def size(self) -> int:
        """Rows of the batch: those of its first key, as NeMo-RL counts them. ``total_reward``
        is skipped when other keys exist: NeMo-RL's dynamic sampling leaves it longer than the
        rest (every generated reward), and NeMo-RL's batches never hold it first."""
        keys = [k for k in self if k != "total_reward"] or list(self)
        return _rows(self[keys[0]]) if keys else 0

    def select_indices(self, indices: Sequence[int] | torch.Tensor) -> BatchedDataDict:
        """The rows ``indices`` (in that order) of every key, as a new batch."""
        index = [int(i) for i in (indices.tolist() if isinstance(indices, torch.Tensor)
                                  else indices)]
        return type(self)({k: _take(v, index) for k, v in self.items()})

    def slice(self, start: int, end: int) -> BatchedDataDict:
        """Rows ``[start, end)`` of every key, as a new batch (tensors are views)."""
        return type(self)({k: v[start:end] for k, v in self.items()})

    @classmethod
    def from_batches(
        cls,
        batches: Sequence[Mapping[str, Any]],
        pad_value_dict: Mapping[str, int | float] | None = None,
        **_: Any,
    ) -> BatchedDataDict:
        """The rows of each batch in turn, key by key. Tensors with a second dim of different
        lengths are right-padded to the longest with 0 or ``pad_value_dict[key]``; lists are
        concatenated. Every batch must hold the same keys."""
        out = cls()
        batches = [b for b in batches if b is not None]
        if not batches:
            return out
        keys = list(batches[0])
        for i, b in enumerate(batches):
            if set(b) != set(keys):
                raise ValueError(f"from_batches: batch {i} has keys {sorted(b)}, batch 0 has "
                                 f"{sorted(keys)}")
        pads = dict(pad_value_dict or {})
        for k in keys:
            values = [b[k] for b in batches]
            if all(isinstance(v, torch.Tensor) for v in values):
                if values[0].ndim >= 2:
                    width = max(v.shape[1] for v in values)
                    values = [F.pad(v, (0, 0) * (v.ndim - 2) + (0, width - v.shape[1]),
                                    value=pads.get(k, 0)) for v in values]
                out[k] = torch.cat(values)
            else:
                out[k] = [x for v in values for x in (v.tolist() if isinstance(v, torch.Tensor)
                                                     else v)]
        return out
