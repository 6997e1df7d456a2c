"""The plain objects of one step: RolloutBatch -> AdvantageBatch -> UpdateResult -> StepMetrics.

Each prints a readable summary, turns into a pandas frame (one row per response) and holds only
tensors, lists and dicts, so a notebook can inspect, plot, save, edit and feed it back in
(``batch_join.py`` joins batches and turns them into plain data).
Tensors use the stored layout (``[B, S]``, index t = token t; see ``rlnb/__init__.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from rlnb.engine.data import views


@dataclass
class RolloutBatch:
    """Stage 1: B = P·G sampled responses with rewards and the log-probs the update needs.

    Attributes:
        step: trainer step that produced it.
        rows: the P task rows repeated G times (``[B]`` dicts with ``prompt``, ``answer``...).
        prompts, responses: ``[B]`` texts.
        group: ``[B]`` prompt index within the step (rows of one group share it).
        prompt_ids: ``[B, L]`` left-padded prompt tokens, L the longest prompt (equal rows =
            one group, docs/algorithms.md#baselines).
        input_ids, attention_mask, token_mask: ``[B, S]`` prompt + response; token_mask = 1 on
            generated tokens.
        sample_mask: ``[B]`` 1.0 (the advantage stage may zero rows).
        generation_logprobs, prev_logprobs: ``[B, S]``; reference_logprobs ``[B, S]`` or None.
        rewards: ``[B]`` raw environment reward; reward_components: name -> ``[B]``.
        correct: ``[B]`` bool; truncated: ``[B]`` bool; response_lengths: ``[B]`` tokens.
        weight_version: the generator's weight version (refits so far) that sampled it.
        weight_versions: ``[B]`` the policy version (training step) whose weights sampled each
            row, when rows of one batch come from several (the async loop); else None.
        metrics: rollout metrics (``train/...``) and timings.
    """

    step: int
    rows: list[dict[str, Any]]
    prompts: list[str]
    responses: list[str]
    group: torch.Tensor
    prompt_ids: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_mask: torch.Tensor
    sample_mask: torch.Tensor
    generation_logprobs: torch.Tensor
    prev_logprobs: torch.Tensor
    reference_logprobs: torch.Tensor | None
    rewards: torch.Tensor
    reward_components: dict[str, torch.Tensor]
    correct: torch.Tensor
    truncated: torch.Tensor
    response_lengths: torch.Tensor
    weight_version: int = 0
    metrics: dict[str, float] = field(default_factory=dict)
    weight_versions: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.responses)

    @property
    def group_size(self) -> int:
        return int(torch.bincount(self.group).max()) if len(self) else 0


    # a notebook's views of the batch (views.py): one row per response, a few readable lines
    zero_signal_groups = views.zero_signal_groups
    to_frame = views.rollout_frame
    summary = views.rollout_summary
    __repr__ = views.summary_of  # a subclass's own summary too


@dataclass
class AdvantageBatch:
    """Stage 2: rewards turned into per-token advantages (one estimator on one RolloutBatch).

    Attributes:
        rollout: the RolloutBatch it was computed from (unchanged).
        estimator: name of the advantage estimator used.
        rewards: ``[B]`` after scaling / shaping; baseline, std: ``[B]``
            (docs/algorithms.md#baselines).
        advantages: ``[B, S]``; sample_mask: ``[B]`` after overlong / log-prob-error filters.
        metrics: ``train/...`` advantage-stage metrics.
    """

    rollout: RolloutBatch
    estimator: str
    rewards: torch.Tensor
    baseline: torch.Tensor
    std: torch.Tensor
    advantages: torch.Tensor
    sample_mask: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rollout)

    @property
    def kept(self) -> torch.Tensor:
        """``[B]`` bool: rows that reach the loss."""
        return self.sample_mask > 0

    def sequence_advantages(self) -> torch.Tensor:
        """``[B]`` mean advantage over each row's generated tokens."""
        m = self.rollout.token_mask.float()
        return (self.advantages * m).sum(1) / m.sum(1).clamp(min=1)

    def train_data(self) -> dict[str, torch.Tensor]:
        """The tensors ``Policy.train`` and the loss read (NeMo-RL's key names)."""
        r = self.rollout
        data = {
            "input_ids": r.input_ids,
            "attention_mask": r.attention_mask,
            "token_mask": r.token_mask.float(),
            "sample_mask": self.sample_mask,
            "advantages": self.advantages,
            "prev_logprobs": r.prev_logprobs,
            "generation_logprobs": r.generation_logprobs,
        }
        if r.reference_logprobs is not None:
            data["reference_policy_logprobs"] = r.reference_logprobs
        return data


    to_frame = views.advantage_frame
    summary = views.advantage_summary
    __repr__ = views.summary_of  # a subclass's own summary too


@dataclass
class UpdateResult:
    """Stage 3: the loss and optimizer step (or a dry run that changed nothing)."""

    step: int
    dry_run: bool
    metrics: dict[str, float]

    # the metrics its summary shows; a loop's subclass names its own (PPO's critic, DPO's terms)
    KEYS: ClassVar[tuple[str, ...]] = ("train/loss", "train/probs_ratio", "train/kl_penalty",
                                       "train/grad_norm", "train/approx_entropy")


    summary = views.update_summary
    __repr__ = views.summary_of  # a subclass's own summary too


class StepMetrics(dict):
    """One step's metrics as a plain dict (``{"step": k, "train/reward": ..., ...}``) that also
    carries the step's stage results, so whoever consumes a trainer's steps (the run directory,
    the dashboard) can log the rollouts without asking the trainer.

    Attributes:
        rollout, advantages, result: the step's ``RolloutBatch``, ``AdvantageBatch`` and
            ``UpdateResult``; all None for a validation-only record (step 0 before training).
    """

    def __init__(self, metrics: dict[str, Any], *, rollout: RolloutBatch | None = None,
                 advantages: AdvantageBatch | None = None, result: UpdateResult | None = None):
        super().__init__(metrics)
        self.rollout, self.advantages, self.result = rollout, advantages, result

    @property
    def step(self) -> int:
        return int(self["step"])

    @property
    def trained(self) -> bool:
        """True for a training step, False for a validation-only record."""
        return self.result is not None
