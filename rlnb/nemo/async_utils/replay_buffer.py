"""NeMo-RL's ``ReplayBufferImpl`` interface over rlnb's ``rlnb.algorithms.replay_buffer``.

    buf = ReplayBufferImpl(max_size=8, drop_incomplete_targets_on_restore=False)
    buf.add(group, weight_version=0, target_weight_version=1)      # "success" | "full"
    out = buf.sample(num_prompt_groups=4, current_weight_version=1, max_age_steps=1)
    out["trajectories"], out["avg_trajectory_age"]                  # or None: stall
    buf.load_state_dict(buf.state_dict(), num_prompts_per_step=4, current_training_step=2)

Entries, ages, targets, eviction, the watermark and the restore for a resume step are rlnb's
(docs/algorithms.md#replay-buffer-and-trajectory-ages); this class renames (``trajectories`` /
``trajectory_versions`` in the state dict) and adds what only NeMo-RL's interface has: restoring
without a resume step (NeMo-RL then drops incomplete targets and keeps the newest entries),
``get_debug_info`` and the save/load to a file.

Deliberate differences (docs/nemo_rl_names.md): no Ray actor and no lock (``ReplayBuffer`` is this
class; share it between threads under your own lock); ``load_from_path`` reads with
``torch.load(weights_only=True)`` (tensors, lists, dicts, numbers and strings; no pickled code;
``BatchedDataDict``s are written as tagged dicts and rebuilt), so ``save_to_path`` refuses,
before writing, a state holding anything else, a subclass of those types included (naming where
it is and its type), rather than write a file its own load would refuse, and
``load_from_path`` returns ``{"num_trajectories"}`` only (no NeMo-Gym task index);
``get_debug_info`` has no starvation diagnostics (they read NeMo-RL's rollout metrics);
``current_training_step`` without ``num_prompts_per_step`` is refused.
"""

from __future__ import annotations

import pickle
from collections import Counter, OrderedDict
from typing import Any

import torch

from rlnb.algorithms import replay_buffer as rb
from rlnb.nemo.batched_data_dict import BatchedDataDict

__all__ = ["ReplayBuffer", "ReplayBufferImpl"]

_STATE_KEYS = ("trajectories", "trajectory_versions", "target_weight_versions",
               "last_target_weight_already_generated")


class ReplayBufferImpl:
    """Per-prompt-group replay buffer for async GRPO with NeMo-RL's methods."""

    def __init__(self, max_size: int, drop_incomplete_targets_on_restore: bool) -> None:
        self._buffer = rb.ReplayBuffer(max_size)
        self._drop_incomplete_targets_on_restore = drop_incomplete_targets_on_restore

    @property
    def max_size(self) -> int:
        return self._buffer.max_size

    # --- filling and reading

    def add(self, trajectory: Any, weight_version: int, target_weight_version: int) -> str:
        """Append one prompt group; ``"full"`` (nothing stored) at capacity."""
        return self._buffer.add(trajectory, weight_version=weight_version,
                                target_weight_version=target_weight_version)

    def size(self) -> int:
        return len(self._buffer)

    def clear(self) -> None:
        """Drop every entry (the watermark stays, as in NeMo-RL)."""
        self._buffer.entries = []

    def get_last_target_weight_already_generated(self) -> int:
        return self._buffer.last_target_weight_already_generated

    def get_existing_target_weights(self) -> set[int]:
        return {e.target_weight_version for e in self._buffer.entries}

    def get_debug_info(self) -> dict[str, Any]:
        """Entries, their generation and target versions, and the capacity."""
        entries = self._buffer.entries
        return {"total_trajectories": len(entries),
                "trajectory_versions": [e.weight_version for e in entries],
                "target_weight_versions": [e.target_weight_version for e in entries],
                "max_size": self.max_size}

    def get_trajectories_needed(self, target_step: int, num_prompts_per_step: int,
                                max_age_steps: int | None = None) -> int:
        """Groups still missing for ``target_step`` (valid for it under ``max_age_steps``)."""
        return self._buffer.trajectories_needed(
            target_step, num_prompts_per_step=num_prompts_per_step, max_age_steps=max_age_steps)

    def has_complete_batch(self, target_step: int, num_prompts_per_step: int,
                           max_age_steps: int | None = None) -> bool:
        return self.get_trajectories_needed(target_step, num_prompts_per_step,
                                            max_age_steps) == 0

    def sample(self, num_prompt_groups: int, current_weight_version: int,
               max_age_steps: int) -> dict[str, Any] | None:
        """``{"trajectories", "avg_trajectory_age"}`` of the first ``num_prompt_groups`` groups
        meant for ``current_weight_version``, removed from the buffer; ``None``: stall."""
        out = self._buffer.sample(num_prompt_groups, current_weight_version=current_weight_version,
                                  max_age_steps=max_age_steps)
        if out is None:
            return None
        return {"trajectories": out.groups, "avg_trajectory_age": out.avg_trajectory_age}

    # --- checkpointing

    def state_dict(self) -> dict[str, Any]:
        """NeMo-RL's checkpoint keys (entries by reference, not copied)."""
        s = self._buffer.state_dict()
        return {"trajectories": s["groups"], "trajectory_versions": s["weight_versions"],
                "target_weight_versions": s["target_weight_versions"],
                "last_target_weight_already_generated": s["last_target_weight_already_generated"],
                "max_size": s["max_size"]}

    def save_to_path(self, path: str) -> int:
        """``torch.save`` the state; returns the number of entries saved. A state that
        ``load_from_path`` could not read back (a value other than tensors, numbers, strings,
        lists, tuples, dicts and BatchedDataDicts, each of exactly that type) is refused before
        anything is written, naming where it is and its type."""
        state = self.state_dict()
        where = _unloadable(state, "state")
        if where is not None:
            raise ValueError(f"save_to_path({path!r}): {where}, which load_from_path "
                             "(torch.load(weights_only=True)) refuses: store tensors, numbers, "
                             "strings, lists, tuples, dicts or BatchedDataDicts in the "
                             "trajectories")
        torch.save(_to_plain(state), path)
        return len(state["trajectories"])

    def load_from_path(self, path: str, num_prompts_per_step: int | None = None,
                       current_training_step: int | None = None,
                       max_age_steps: int | None = None) -> dict[str, int]:
        """``load_state_dict`` of a file written by ``save_to_path``."""
        try:
            state = _from_plain(torch.load(path, weights_only=True))
        except (pickle.UnpicklingError, RuntimeError, EOFError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ValueError(f"load_from_path({path!r}): not a replay buffer state this can "
                             f"read ({first[:200]})") from None
        self.load_state_dict(state, num_prompts_per_step=num_prompts_per_step,
                             current_training_step=current_training_step,
                             max_age_steps=max_age_steps)
        return {"num_trajectories": len(state["trajectories"])}

    def load_state_dict(self, state: dict[str, Any], num_prompts_per_step: int | None = None,
                        current_training_step: int | None = None,
                        max_age_steps: int | None = None) -> None:
        """Restore ``state``: for resuming at ``current_training_step`` (rlnb's ``restore``:
        stale entries, past targets and optionally incomplete targets dropped, the lowest
        targets kept, watermark = step − 1); without a step, stale entries and (given
        ``num_prompts_per_step``) incomplete targets are dropped and the newest entries kept."""
        missing = [k for k in _STATE_KEYS if k not in state]
        if missing:  # NeMo-RL's wording, so a caller matching on it still matches
            raise ValueError(f"Checkpoint missing required keys: {', '.join(missing)} (a "
                             "replay buffer state_dict)")
        lengths = {k: len(state[k]) for k in _STATE_KEYS[:3]}
        if len(set(lengths.values())) != 1:
            raise ValueError(f"Checkpoint has inconsistent replay buffer lengths: {lengths}")
        if current_training_step is not None:
            if num_prompts_per_step is None:
                raise ValueError("load_state_dict: current_training_step needs "
                                 "num_prompts_per_step (to find incomplete targets)")
            self._buffer.restore(
                {"groups": state["trajectories"], "weight_versions": state["trajectory_versions"],
                 "target_weight_versions": state["target_weight_versions"]},
                resume_step=current_training_step, num_prompts_per_step=num_prompts_per_step,
                max_age_steps=max_age_steps,
                drop_incomplete_targets=self._drop_incomplete_targets_on_restore)
            return
        entries = [rb.ReplayEntry(*x) for x in zip(state["trajectories"],
                                                   state["trajectory_versions"],
                                                   state["target_weight_versions"])]
        entries = [e for e in entries if rb.is_valid_for(e.weight_version, e.target_weight_version,
                                                         max_age_steps=max_age_steps)]
        watermark = state["last_target_weight_already_generated"]
        if num_prompts_per_step is not None and entries:
            counts = Counter(e.target_weight_version for e in entries)
            complete = [e for e in entries
                        if counts[e.target_weight_version] >= num_prompts_per_step]
            if len(complete) < len(entries):  # the collector must refill the dropped targets
                watermark = (min(watermark, min(e.target_weight_version for e in complete) - 1)
                             if complete else -1)
            entries = complete
        self._buffer.entries = entries[-self.max_size:]  # the newest, without a resume step
        self._buffer.last_target_weight_already_generated = watermark


ReplayBuffer = ReplayBufferImpl  # NeMo-RL's is the same class as a Ray actor


# what torch.load(weights_only=True) rebuilds, by exact type: a subclass (numpy.float64 of float,
# a namedtuple, an IntEnum, a defaultdict, a str subclass) is refused by the load
_PLAIN = frozenset({str, bytes, int, float, bool, complex, type(None), torch.Tensor,
                    torch.nn.Parameter, torch.dtype, torch.Size, torch.device})
_CONTAINERS = frozenset({dict, OrderedDict, list, tuple})
_BATCH_TAG = "__rlnb_BatchedDataDict__"  # a saved BatchedDataDict: {_BATCH_TAG: its plain dict}


def _unloadable(value: Any, where: str) -> str | None:
    """Where in ``value`` something lies that ``torch.load(weights_only=True)`` refuses, as
    ``"state['trajectories'][0]['x'] is a numpy.ndarray"``; None when all of it loads (a
    ``BatchedDataDict`` counts as its plain dict: ``save_to_path`` writes it as one)."""
    kind = type(value)
    if kind in _PLAIN:
        return None
    if isinstance(value, BatchedDataDict) or kind in (dict, OrderedDict):
        for k, v in value.items():
            found = _unloadable(k, f"a key of {where}") or _unloadable(v, f"{where}[{k!r}]")
            if found:
                return found
        return None
    if kind in (list, tuple):
        return next((f for i, v in enumerate(value) if (f := _unloadable(v, f"{where}[{i}]"))),
                    None)
    return f"{where} is a {kind.__module__}.{kind.__qualname__}"


def _to_plain(value: Any) -> Any:
    """``value`` with each ``BatchedDataDict`` as ``{_BATCH_TAG: dict}`` (a dict subclass is
    not something ``torch.load(weights_only=True)`` rebuilds)."""
    if isinstance(value, BatchedDataDict):
        return {_BATCH_TAG: {k: _to_plain(v) for k, v in value.items()}}
    if type(value) in (dict, OrderedDict):
        return type(value)((k, _to_plain(v)) for k, v in value.items())
    if type(value) in (list, tuple):
        return type(value)(_to_plain(v) for v in value)
    return value


def _from_plain(value: Any) -> Any:
    """The inverse of ``_to_plain``."""
    if type(value) in (dict, OrderedDict):
        if len(value) == 1 and _BATCH_TAG in value:
            return BatchedDataDict({k: _from_plain(v) for k, v in value[_BATCH_TAG].items()})
        return type(value)((k, _from_plain(v)) for k, v in value.items())
    if type(value) in (list, tuple):
        return type(value)(_from_plain(v) for v in value)
    return value
