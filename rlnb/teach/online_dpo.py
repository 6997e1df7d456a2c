"""Online DPO on the policy's own samples, for exercise 6's live run.

    for each step:  rollout (P prompts x G) -> one (right, wrong) pair per group that has both
                    -> one optimizer step on the DPO loss of those pairs against π_ref

DPO (https://arxiv.org/abs/2305.18290) trains on fixed preference pairs; here the pairs come
from the verifiable reward of the model's own answers, as in online/iterative DPO
(https://arxiv.org/abs/2402.04792), so it can be compared with GRPO on the same prompts.

Implementation choices:
1) The GRPO trainer's stages do the work: its ``rollout`` samples and scores, its policy's
   ``optimizer_step`` takes the step (one global batch: every pair of the step at once), and
   ``validate`` measures held-out accuracy. Only the pairing and the loss adapter are new.
2) π_ref is a frozen copy of the policy when DPO starts (the warm start), as in DPO.
3) The pair of a group is its first right and first wrong response (rows are in sampling
   order, so that is a random pair); groups that are all right or all wrong give no pair.
4) The loss is any ``loss(logprobs, reference_logprobs, token_mask, *, beta)`` over aligned
   ``[2K, T]`` tensors (rows interleaved chosen, rejected), so a student's own DPO loss trains
   the model; by default rlnb's ``dpo_loss``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from rlnb.teach.dpo import reference_dpo


def pair_rows(group: torch.Tensor, correct: torch.Tensor) -> list[int]:
    """Row indices interleaved chosen, rejected: one pair per group with a right and a wrong
    response (choice 3). ``group``, ``correct``: ``[B]``."""
    rows = []
    for g in group.unique().tolist():
        members = (group == g).nonzero().flatten().tolist()
        right = [i for i in members if bool(correct[i])]
        wrong = [i for i in members if not bool(correct[i])]
        if right and wrong:
            rows += [right[0], wrong[0]]
    return rows


class PairLoss:
    """``Policy.optimizer_step``'s loss interface around a DPO loss on aligned tensors."""

    def __init__(self, loss: Callable, beta: float):
        self.loss, self.beta = loss, beta

    def from_logprobs(self, logprobs, data, global_valid_seqs, global_valid_toks):
        # stored tensors: index t is token t; logprobs (current policy): index t is token t+1
        reference = data["reference_logprobs"][:, 1:]
        token_mask = data["token_mask"][:, 1:]
        loss = self.loss(logprobs, reference, token_mask, beta=self.beta)
        return loss, {"loss": float(loss.detach())}


def dpo_steps(trainer, num_steps: int, *, beta: float, loss: Callable | None = None):
    """Yield one metrics dict per online DPO step of ``trainer`` (a ``GRPOTrainer``), with a
    validation record first and held-out accuracy folded into the last step."""
    policy = trainer.policy
    reference_model = policy.make_reference()  # choice 2
    pair_loss = PairLoss(loss or reference_dpo, beta)
    if policy.config.train_global_batch_size < 2 * trainer.loop_config.num_prompts_per_step:
        raise ValueError("online DPO takes one optimizer step per rollout: "
                         "policy.train_global_batch_size must hold 2 rows per prompt")
    yield {"step": 0, **trainer.validate()}
    for i in range(num_steps):
        start = time.perf_counter()
        batch = trainer.rollout()
        rows = pair_rows(batch.group, batch.correct)
        metrics = {"step": trainer.step_count + 1, "train/reward": float(batch.rewards.mean()),
                   "dpo/pairs": len(rows) // 2}
        if rows:
            data = {k: getattr(batch, k)[rows] for k in ("input_ids", "attention_mask",
                                                          "token_mask")}
            data["sample_mask"] = torch.ones(len(rows))
            with torch.no_grad():
                data["reference_logprobs"] = policy.forward_logprobs(
                    reference_model, data["input_ids"], data["attention_mask"])
            step = policy.optimizer_step(data, pair_loss)
            metrics["dpo/loss"] = step["loss"]
        trainer.step_count += 1  # the next rollout and validation seed from the step count
        metrics["timing/train/total_step_time"] = time.perf_counter() - start  # as the loops log
        if i == num_steps - 1:
            metrics.update(trainer.validate())
        yield metrics
