"""The async GRPO replay buffer: prompt groups tagged with the weights that made them and the step
that will train on them.

    entry (group, v, t) is valid for step c  ⇔  max(0, c − a) ≤ v ≤ c;   step c trains on the
    first P entries with t = c, or waits

(v = ``weight_version`` that generated the group, t = ``target_weight_version`` it is meant for,
a = ``max_trajectory_age_steps``, P = ``num_prompts_per_step``.)

Papers: asynchronous off-policy RLHF, https://arxiv.org/abs/2410.18252 (generation runs ahead of
training on weights at most a steps old; the loss corrects with importance sampling).

See docs/algorithms.md#replay-buffer-and-trajectory-ages.

Implementation choices (names as in NeMo-RL):
1) An entry is one prompt group (one prompt × G generations), stored as given (any object,
   typically a ``dict[str, Tensor]`` of ``[G, ...]``) with its two versions. Capacity is
   ``P × a × 2`` entries (slack factor 2); ``add`` on a full buffer returns ``"full"`` and
   stores nothing (the collector backs off and retries).
2) Targets: a generation server holding weights v may fill ``[v0, …, v0 + a]`` when v is the
   initial version v0, else ``[v + 1, …, v + a]``. ``next_target`` returns the first one above
   the watermark ``last_target_weight_already_generated``, not being generated right now (a set
   the caller owns, passed in) and still short of P valid entries.
3) ``sample`` (NeMo-RL's ``in_order``) first evicts entries older than the window
   (v < max(0, c − a)), then stalls
   (returns ``None``) unless at least n entries are valid for c *and* at least n are meant for c;
   it never borrows another step's entries. It takes the first n intended entries in insertion
   order (FIFO), removes them, reports ``avg_trajectory_age = c − mean(v)`` and raises the
   watermark to ``max(old, c)``. The watermark moves only on a sample, never on ``add``.
   ``sample_window`` (NeMo-RL's single-controller ``windowed`` sampler) evicts the same way
   and takes the first n entries valid for c whatever their target (or the freshest first).
4) ``restore`` (resuming at step s): drop entries too old for their own target, drop targets
   below s, optionally drop targets holding fewer than P entries, truncate to capacity keeping the
   lowest targets (ties: oldest first, order kept), and set the watermark to s − 1 so the
   collector re-checks every target from s on and fills only what is missing.
5) Single-threaded: NeMo-RL's buffer is a Ray actor with a lock; a caller that shares this one
   between threads must lock around it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from pydantic import Field

from rlnb.config import Config

AddStatus = Literal["success", "full"]

# Replay capacity slack: room for two steps' worth of every in-flight target (NeMo-RL's 2).
REPLAY_SLACK_FACTOR = 2


class AsyncGRPOConfig(Config):
    """``grpo.async_grpo``: generation runs ahead of training on slightly stale weights."""

    enabled: bool = Field(
        False,
        description="Run the async GRPO loop (requires "
        "loss_fn.use_importance_sampling_correction=True).",
    )
    max_trajectory_age_steps: int = Field(
        1,
        ge=1,
        description="a: trajectories may be at most this many weight versions old when "
        "trained on; also how far ahead generation may run and the buffer size factor.",
    )
    max_generation_failures: int = Field(
        0,
        ge=0,
        description="Generation-worker failures tolerated before the collector aborts "
        "(0: the first one is fatal; a success resets the count).",
    )
    in_flight_weight_updates: bool = Field(
        False,
        description="Push new weights as soon as training finishes, without waiting for "
        "pending generations to drain.",
    )
    recompute_kv_cache_after_weight_updates: bool = Field(
        False,
        description="Recompute the KV cache of in-flight requests after a weight update.",
    )


def replay_buffer_capacity(*, num_prompts_per_step: int, max_trajectory_age_steps: int) -> int:
    """``max_size = num_prompts_per_step × max_trajectory_age_steps × 2`` prompt groups."""
    return num_prompts_per_step * max_trajectory_age_steps * REPLAY_SLACK_FACTOR


def candidate_targets(
    weight_version: int, *, initial_weight_version: int, max_trajectory_age_steps: int
) -> list[int]:
    """Training steps a server with weights ``weight_version`` may generate for, in order.

    The initial weights also serve their own step (nothing older exists yet): v0 → [v0 … v0+a];
    later weights v → [v+1 … v+a].
    """
    lead = max_trajectory_age_steps
    if weight_version == initial_weight_version:
        return list(range(initial_weight_version, initial_weight_version + lead + 1))
    return list(range(weight_version + 1, weight_version + lead + 1))


def is_valid_for(weight_version: int, target_weight_version: int, *,
                 max_age_steps: int | None) -> bool:
    """Whether a group made with ``weight_version`` may train step ``target_weight_version``
    (``max_age_steps=None``: no age rule, every group is valid, as in NeMo-RL)."""
    if max_age_steps is None:
        return True
    return max(0, target_weight_version - max_age_steps) <= weight_version <= target_weight_version


@dataclass(frozen=True)
class ReplayEntry:
    """One prompt group with the weights that generated it (v) and the step it is meant for (t)."""

    group: Any
    weight_version: int
    target_weight_version: int


@dataclass(frozen=True)
class SampledGroups:
    """What ``ReplayBuffer.sample`` returns: n groups for the current step, in FIFO order."""

    groups: list[Any]
    weight_versions: list[int]
    avg_trajectory_age: float


class ReplayBuffer:
    """Per-prompt-group replay buffer for async GRPO (see the module docstring).

    Attributes:
        max_size: capacity in prompt groups (``replay_buffer_capacity``).
        entries: ``ReplayEntry`` list in insertion order.
        last_target_weight_already_generated: the watermark; targets ≤ it are done.
    """

    def __init__(self, max_size: int) -> None:
        if max_size <= 0:
            raise ValueError(f"max_size must be > 0, got {max_size}")
        self.max_size = max_size
        self.entries: list[ReplayEntry] = []
        self.last_target_weight_already_generated = -1

    def __len__(self) -> int:
        return len(self.entries)

    # --- filling

    def add(self, group: Any, *, weight_version: int, target_weight_version: int) -> AddStatus:
        """Append one prompt group; ``"full"`` (and nothing stored) when at capacity."""
        if len(self.entries) >= self.max_size:
            return "full"
        self.entries.append(ReplayEntry(group, weight_version, target_weight_version))
        return "success"

    def trajectories_needed(
        self, target_weight_version: int, *, num_prompts_per_step: int, max_age_steps: int | None
    ) -> int:
        """``max(0, P − #{entries meant for t and valid for t})``."""
        have = sum(
            e.target_weight_version == target_weight_version
            and is_valid_for(e.weight_version, target_weight_version, max_age_steps=max_age_steps)
            for e in self.entries
        )
        return max(0, num_prompts_per_step - have)

    def next_target(
        self,
        weight_version: int,
        *,
        initial_weight_version: int,
        max_trajectory_age_steps: int,
        num_prompts_per_step: int,
        generating: Iterable[int] = (),
    ) -> int | None:
        """The step a server with ``weight_version`` should generate for next, or ``None``.

        Args:
            generating: targets other servers are generating for right now (the caller adds the
                returned target to it and removes it when that generation finishes).
        """
        busy = set(generating)
        for target in candidate_targets(
            weight_version,
            initial_weight_version=initial_weight_version,
            max_trajectory_age_steps=max_trajectory_age_steps,
        ):
            if target <= self.last_target_weight_already_generated or target in busy:
                continue
            needed = self.trajectories_needed(
                target,
                num_prompts_per_step=num_prompts_per_step,
                max_age_steps=max_trajectory_age_steps,
            )
            if needed > 0:
                return target
        return None

    # --- consuming

    def sample(
        self, num_prompt_groups: int, *, current_weight_version: int, max_age_steps: int
    ) -> SampledGroups | None:
        """Take ``num_prompt_groups`` groups meant for ``current_weight_version``, or stall.

        Evicts entries older than the age window first (even when it then stalls). Returns
        ``None`` when fewer than n entries are valid for the current step or fewer than n are
        meant for it.
        """
        if num_prompt_groups < 1:
            raise ValueError(f"num_prompt_groups must be >= 1, got {num_prompt_groups}")
        c = current_weight_version
        v_min = max(0, c - max_age_steps)
        self.entries = [e for e in self.entries if e.weight_version >= v_min]  # eviction

        valid = [i for i, e in enumerate(self.entries) if v_min <= e.weight_version <= c]
        if len(valid) < num_prompt_groups:  # includes "no valid entry at all"
            return None
        intended = [i for i in valid if self.entries[i].target_weight_version == c]
        if len(intended) < num_prompt_groups:
            return None  # stall: never borrow another step's groups

        chosen = intended[:num_prompt_groups]  # FIFO within the target
        picked = [self.entries[i] for i in chosen]
        taken = set(chosen)
        self.entries = [e for i, e in enumerate(self.entries) if i not in taken]
        versions = [e.weight_version for e in picked]
        self.last_target_weight_already_generated = max(
            self.last_target_weight_already_generated, c
        )
        return SampledGroups(
            groups=[e.group for e in picked],
            weight_versions=versions,
            avg_trajectory_age=c - sum(versions) / len(versions),
        )

    def sample_window(
        self, num_prompt_groups: int, *, current_weight_version: int, max_age_steps: int,
        freshest_first: bool = False,
    ) -> SampledGroups | None:
        """NeMo-RL's ``windowed`` sampler: take any ``num_prompt_groups`` groups made by
        weights in ``[c − a, c]``, whatever step they were generated for, or stall.

        Evicts older entries first; takes them in insertion order (``freshest_first``: the
        smallest lag c − v first, ties in insertion order). The watermark is not used.
        """
        if num_prompt_groups < 1:
            raise ValueError(f"num_prompt_groups must be >= 1, got {num_prompt_groups}")
        c = current_weight_version
        v_min = max(0, c - max_age_steps)
        self.entries = [e for e in self.entries if e.weight_version >= v_min]  # eviction
        valid = [i for i, e in enumerate(self.entries) if e.weight_version <= c]
        if len(valid) < num_prompt_groups:
            return None
        if freshest_first:
            valid.sort(key=lambda i: (c - self.entries[i].weight_version, i))
        chosen = valid[:num_prompt_groups]
        picked = [self.entries[i] for i in chosen]
        taken = set(chosen)
        self.entries = [e for i, e in enumerate(self.entries) if i not in taken]
        versions = [e.weight_version for e in picked]
        return SampledGroups(groups=[e.group for e in picked], weight_versions=versions,
                             avg_trajectory_age=c - sum(versions) / len(versions))

    # --- checkpointing

    def state_dict(self) -> dict[str, Any]:
        """Plain-data snapshot (groups are stored by reference, not copied)."""
        return {
            "groups": [e.group for e in self.entries],
            "weight_versions": [e.weight_version for e in self.entries],
            "target_weight_versions": [e.target_weight_version for e in self.entries],
            "last_target_weight_already_generated": self.last_target_weight_already_generated,
            "max_size": self.max_size,
        }

    def restore(
        self,
        state: Mapping[str, Any],
        *,
        resume_step: int,
        num_prompts_per_step: int,
        max_age_steps: int | None,
        drop_incomplete_targets: bool = False,
        window: bool = False,
    ) -> None:
        """Load ``state`` (from ``state_dict``) for resuming training at ``resume_step``.

        Keeps this buffer's ``max_size`` (the current config wins over the checkpoint's);
        ``max_age_steps=None`` skips the age rule. ``window`` (the windowed sampler): targets
        do not matter; an entry stays while some step from ``resume_step`` on may take it
        (v ≥ s − a), oldest dropped first beyond ``max_size``.
        """
        keys = ("groups", "weight_versions", "target_weight_versions")
        missing = [k for k in keys if k not in state]
        if missing:
            raise ValueError(f"replay buffer state is missing {', '.join(missing)}")
        if len({len(state[k]) for k in keys}) != 1:
            lengths = ", ".join(f"{k}={len(state[k])}" for k in keys)
            raise ValueError(f"replay buffer state has lists of different lengths: {lengths}")
        entries = [ReplayEntry(*x) for x in zip(*(state[k] for k in keys), strict=True)]
        if window:
            if max_age_steps is not None:
                entries = [e for e in entries if e.weight_version >= resume_step - max_age_steps]
            self.entries = entries[-self.max_size:]  # the newest when over capacity
            self.last_target_weight_already_generated = resume_step - 1
            return

        # Age first: a target that looked complete may lose stale entries and become incomplete.
        entries = [
            e
            for e in entries
            if is_valid_for(e.weight_version, e.target_weight_version, max_age_steps=max_age_steps)
        ]
        entries = [e for e in entries if e.target_weight_version >= resume_step]
        if drop_incomplete_targets:
            counts = Counter(e.target_weight_version for e in entries)
            entries = [
                e for e in entries if counts[e.target_weight_version] >= num_prompts_per_step
            ]
        if len(entries) > self.max_size:
            by_target = sorted(
                range(len(entries)), key=lambda i: (entries[i].target_weight_version, i)
            )
            keep = sorted(by_target[: self.max_size])  # lowest targets, insertion order kept
            entries = [entries[i] for i in keep]
        self.entries = entries
        self.last_target_weight_already_generated = resume_step - 1


def concatenate_groups(
    groups: Sequence[Mapping[str, torch.Tensor]], *, expected_rows: int
) -> dict[str, torch.Tensor]:
    """Stack sampled groups (each ``[G, ...]`` per key) into one ``[P·G, ...]`` train batch.

    Raises ``ValueError`` unless the result has exactly ``expected_rows`` rows
    (``num_prompts_per_step × num_generations_per_prompt``), as the async loop requires.
    """
    if not groups:
        raise ValueError("groups must not be empty")
    keys = list(groups[0])
    for i, g in enumerate(groups):
        if set(g) != set(keys):
            raise ValueError(f"groups[{i}] has keys {sorted(g)}, groups[0] has {sorted(keys)}")
    batch = {k: torch.cat([g[k] for g in groups]) for k in keys}
    rows = {k: v.shape[0] for k, v in batch.items()}
    if any(n != expected_rows for n in rows.values()):
        raise ValueError(f"concatenated groups have rows {rows}, expected {expected_rows}")
    return batch
