"""Measured memory peaks of a step's stages: ``with meter.stage("generation"): ...``.

    peak(stage) = max over the stage of the bytes of tensors alive on the device      (bytes)

On CUDA the allocator counts: ``torch.cuda.reset_peak_memory_stats`` before a stage and
``torch.cuda.max_memory_allocated`` after it (every tensor of the process on that device,
not what the caching allocator reserves beyond them).

On CPU there is no allocator peak counter, so ``LiveTensorBytes`` counts tensors itself:
1) A ``TorchDispatchMode`` sees every operator call (forward, backward and the optimizer's
   foreach kernels alike) and adds the storage of each output that is not one of its inputs'
   (a view or an in-place result allocates nothing); a weak reference to each storage subtracts
   it when the storage is freed.
2) Tensors that exist before the meter is armed are invisible to the mode: ``arm`` is handed
   them (the model's and the reference's parameters and buffers, the gradients, the optimizer
   state) and counts them the same way, so a gradient freed by ``zero_grad`` leaves the count.
3) Its limits: what torch allocates inside an operator and frees before it returns (an
   operator's own workspace) is not seen, nor memory held outside tensors (the Python heap,
   the allocator's caches), nor other threads' tensors; pre-existing tensors not handed to
   ``arm`` are left out. It measures the tensors a step keeps alive, which is what the plan
   (``models/memory_plan.py``) estimates.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    """Bytes of the tensor storages alive on ``device`` (CPU measure, choices 1-2)."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = torch.device(device)
        self.live: dict[int, int] = {}  # id(storage) -> bytes
        self.now = self.peak = 0
        self.closed = False

    def count(self, tensors: Iterable[torch.Tensor]) -> None:
        """Start counting ``tensors`` that already exist (choice 2)."""
        for t in tensors:
            self._add(t)

    def _add(self, t) -> None:
        if not isinstance(t, torch.Tensor) or t.device != self.device or t.is_meta:
            return
        st = t.untyped_storage()
        key = id(st)
        if key in self.live:
            return
        self.live[key] = st.nbytes()
        self.now += self.live[key]
        self.peak = max(self.peak, self.now)
        weakref.finalize(st, self._free, key)

    def _free(self, key: int) -> None:
        if not self.closed and key in self.live:
            self.now -= self.live.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {id(t.untyped_storage()) for t in tree_flatten((args, kwargs))[0]
                  if isinstance(t, torch.Tensor) and not t.is_meta}
        for t in tree_flatten(out)[0]:  # a new storage: not a view or in-place result
            if isinstance(t, torch.Tensor) and not t.is_meta \
                    and id(t.untyped_storage()) not in inputs:
                self._add(t)
        return out


class StageMemory:
    """Per-stage peak bytes of one armed step; every ``stage`` block is free when disarmed."""

    def __init__(self, device: torch.device):
        self.device = torch.device(device)
        self.peaks: dict[str, int] = {}
        self.armed = False
        self._mode: LiveTensorBytes | None = None

    @contextlib.contextmanager
    def armed_step(self, existing: Iterable[torch.Tensor] = ()):
        """Measure the stages run inside this block; ``existing``: the tensors alive before it
        that the CPU count must include (choice 2; CUDA's allocator counts them itself)."""
        self.peaks, self.armed = {}, True
        if self.device.type == "cuda":
            try:
                yield self
            finally:
                self.armed = False
            return
        self._mode = LiveTensorBytes(self.device)
        self._mode.count(existing)
        try:
            with self._mode:
                yield self
        finally:
            self._mode.closed, self._mode, self.armed = True, None, False

    @contextlib.contextmanager
    def stage(self, name: str):
        """Record the peak bytes of the block under ``name`` (the max over repeated blocks)."""
        if not self.armed:
            yield
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._mode.peak = self._mode.now
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
                peak = torch.cuda.max_memory_allocated(self.device)
            else:
                peak = self._mode.peak
            self.peaks[name] = max(self.peaks.get(name, 0), peak)
