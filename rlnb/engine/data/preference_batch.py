"""The plain objects of one DPO step: PreferenceBatch -> PreferenceScores -> DPOUpdateResult.

Rows are interleaved as the DPO loss takes them: row 2k is the chosen response of pair k, row
2k+1 its rejected one (docs/algorithms.md#preference-losses-dpo-reward-model-sft). Tensors use
the stored layout (``[B, S]``, index t = token t; ``rlnb/__init__.py``): a row is its prompt
(left-padded) then its response (right-padded), as a generated row is. Each object prints a
summary, turns into a pandas frame (one row per pair) and holds only tensors, lists and dicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from rlnb.engine.data.batches import RolloutBatch, UpdateResult


@dataclass
class PreferenceBatch:
    """Stage 1 of DPO: P pair slots, B = 2·P rows (chosen, rejected, chosen, ...).

    Attributes:
        step: trainer step that produced it; source: ``on_policy``, ``warm_start`` or
            ``dataset`` (``dpo.pairs.source``).
        rows: ``[P]`` the row each pair came from (a task row with ``prompt``/``answer``, or a
            dataset row).
        prompts, responses: ``[B]`` texts (each pair's prompt twice).
        pair: ``[B]`` pair index; chosen: ``[B]`` bool, True on the chosen rows (even rows).
        input_ids, attention_mask, token_mask: ``[B, S]``; token_mask = 1 on response tokens.
        sample_mask: ``[B]`` 1.0 for a pair, 0.0 for an empty slot (a prompt whose responses all
            got the same reward, or two identical responses): both rows of a pair share it.
        rewards: ``[B]`` the task's reward of each response (NaN for a dataset's pairs);
            correct: ``[B]`` bool (False where unknown).
        response_lengths: ``[B]`` response tokens.
        reference_logprobs: ``[B, S]`` log π_ref of every response token (0 elsewhere), filled
            by ``DPOTrainer.reference_logprobs``; None before.
        samples: the ``RolloutBatch`` of G responses per prompt the pairs were drawn from
            (``on_policy``), else None.
        metrics: the pair stage's metrics (``train/...``) and timings.
    """

    step: int
    source: str
    rows: list[dict[str, Any]]
    prompts: list[str]
    responses: list[str]
    pair: torch.Tensor
    chosen: torch.Tensor
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    token_mask: torch.Tensor
    sample_mask: torch.Tensor
    rewards: torch.Tensor
    correct: torch.Tensor
    response_lengths: torch.Tensor
    reference_logprobs: torch.Tensor | None = None
    samples: RolloutBatch | None = None
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.responses)

    @property
    def num_pairs(self) -> int:
        """P, the pair slots (valid or not)."""
        return len(self) // 2

    @property
    def kept(self) -> torch.Tensor:
        """``[P]`` bool: the slots that hold a pair (reach the loss)."""
        return self.sample_mask[0::2] > 0

    def train_data(self) -> dict[str, torch.Tensor]:
        """The tensors ``Policy.optimizer_step`` and ``DPOLossFn`` read, with NeMo-RL's keys and
        layout: ``reference_policy_logprobs`` rolled left by one (index t = log π_ref of token
        t+1), as NeMo-RL's ``add_ref_logprobs_to_data`` stores it."""
        if self.reference_logprobs is None:
            raise ValueError("the batch has no reference log-probs yet: run "
                             "trainer.reference_logprobs(batch) first")
        return {
            "input_ids": self.input_ids,
            "attention_mask": self.attention_mask,
            "token_mask": self.token_mask.float(),
            "sample_mask": self.sample_mask,
            "reference_policy_logprobs": torch.roll(self.reference_logprobs, -1, dims=-1),
        }

    def to_rows(self) -> list[dict[str, str]]:
        """The kept pairs as a dataset's rows, TRL's text format: ``{"prompt", "chosen",
        "rejected"}`` (what ``dpo.pairs.source: dataset`` reads back)."""
        return [{"prompt": self.prompts[2 * k], "chosen": self.responses[2 * k],
                 "rejected": self.responses[2 * k + 1]}
                for k in range(self.num_pairs) if bool(self.kept[k])]

    def to_frame(self):
        """One row per pair slot: prompt, chosen, rejected, their task rewards, kept."""
        import pandas as pd

        c, r = slice(0, None, 2), slice(1, None, 2)
        return pd.DataFrame({
            "pair": list(range(self.num_pairs)),
            "prompt": self.prompts[c],
            "chosen": self.responses[c],
            "rejected": self.responses[r],
            "reward_chosen": self.rewards[c].tolist(),
            "reward_rejected": self.rewards[r].tolist(),
            "kept": self.kept.tolist(),
        })

    def summary(self) -> str:
        kept = int(self.kept.sum())
        lines = [f"PreferenceBatch({self.source}, step={self.step}): {self.num_pairs} pair slots "
                 f"({kept} pairs, {self.num_pairs - kept} empty) = {len(self)} rows"]
        if self.samples is not None:
            s = self.samples
            lines.append(f"  drawn from {len(s)} samples = {int(s.group.max()) + 1} prompts x "
                         f"{s.group_size}; sample reward mean {s.rewards.mean():.3f}")
        for k in [k for k in range(self.num_pairs) if bool(self.kept[k])][:3]:
            rc, rr = float(self.rewards[2 * k]), float(self.rewards[2 * k + 1])
            scored = "" if math.isnan(rc) else f"  rewards {rc:.2f} > {rr:.2f}"
            lines.append(f"  [{k}] {self.prompts[2 * k]!r}: chosen {self.responses[2 * k]!r} over "
                         f"rejected {self.responses[2 * k + 1]!r}{scored}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()

    def rollout_table(self, scores: PreferenceScores | None = None) -> dict[str, Any]:
        """Per-row token-level record of a step (``rollouts/`` of a run directory): the rows
        with their pair, side, task reward, masks, reference log-probs and, with ``scores``, the
        policy's log-probs and implicit rewards before the update."""

        def rows(x):
            return None if x is None else [r.tolist() for r in x]

        table = {
            "prompt": self.prompts, "response": self.responses,
            "reward": self.rewards.tolist(), "correct": self.correct.tolist(),
            "group": self.pair.tolist(), "chosen": self.chosen.tolist(),
            "kept": (self.sample_mask > 0).tolist(),
            "input_ids": rows(self.input_ids), "attention_mask": rows(self.attention_mask),
            "token_mask": rows(self.token_mask),
            "reference_logprobs": rows(self.reference_logprobs),
        }
        if scores is not None:
            table["logprobs"] = rows(scores.logprobs)
            table["implicit_reward"] = scores.rewards.tolist()
        return {k: v for k, v in table.items() if v is not None}


@dataclass
class PreferenceScores:
    """Stage 3 of DPO (``DPOTrainer.compute_loss``): the current policy on a batch's pairs.

    Attributes:
        batch: the PreferenceBatch scored (unchanged).
        beta: β (``dpo.reference_policy_kl_penalty``) of the losses below.
        logprobs: ``[B, S]`` log π of every response token under the policy (0 elsewhere).
        rewards: ``[B]`` implicit reward ρ_b = Σ_t (log π - log π_ref)·tm, without β (÷ the
            row's tokens with ``preference_average_log_probs``).
        margins: ``[P]`` ρ_chosen - ρ_rejected; losses: ``[P]`` -log σ(β·margin).
        kl: ``[B, S]`` exact KL(π ‖ π_ref) over the vocabulary at each response token's position
            (0 elsewhere).
        loss: the DPO loss of the whole batch (this process's rows), as one global batch.
        metrics: ``train/...`` metrics over the kept pairs (all ranks) and the stage's timing.
    """

    batch: PreferenceBatch
    beta: float
    logprobs: torch.Tensor
    rewards: torch.Tensor
    margins: torch.Tensor
    losses: torch.Tensor
    kl: torch.Tensor
    loss: float
    metrics: dict[str, float] = field(default_factory=dict)

    @property
    def kept(self) -> torch.Tensor:
        return self.batch.kept

    def log_ratios(self) -> torch.Tensor:
        """``[B, S]`` log π - log π_ref per response token: each token's share of ρ_b."""
        b = self.batch
        return (self.logprobs - b.reference_logprobs) * b.token_mask

    def to_frame(self):
        """The batch's frame with each pair's implicit rewards, margin and loss."""
        frame = self.batch.to_frame()
        frame["implicit_reward_chosen"] = self.rewards[0::2].tolist()
        frame["implicit_reward_rejected"] = self.rewards[1::2].tolist()
        frame["margin"] = self.margins.tolist()
        frame["loss"] = self.losses.tolist()
        return frame

    def summary(self) -> str:
        kept = self.kept
        if not bool(kept.any()):
            return f"PreferenceScores(β={self.beta:g}): no pair to score"
        m = self.margins[kept]
        return (f"PreferenceScores(β={self.beta:g}, step={self.batch.step}): {int(kept.sum())} "
                f"pairs, loss {self.loss:.4f} (log 2 = {math.log(2):.4f} at the reference)\n"
                f"  implicit reward chosen {self.rewards[0::2][kept].mean():+.3f}  rejected "
                f"{self.rewards[1::2][kept].mean():+.3f}  margin mean {m.mean():+.3f}   "
                f"pairs ordered right {int((m > 0).sum())}/{int(kept.sum())}")

    def __repr__(self) -> str:
        return self.summary()


class DPOUpdateResult(UpdateResult):
    """An ``UpdateResult`` whose summary shows the DPO loss's terms and accuracy."""

    KEYS = ("train/loss", "train/preference_loss", "train/sft_loss", "train/accuracy",
            "train/rewards_chosen_mean", "train/rewards_rejected_mean", "train/grad_norm")
