"""DPO's stage 3 without side effects: the current policy on a batch's pairs.

    ρ_b = Σ_t (log π - log π_ref)·tm      margin = ρ_c - ρ_r      loss = -log σ(β·margin)
    KL_t = Σ_v π(v | x_<t) log(π(v | x_<t) / π_ref(v | x_<t))    at every response token

The implicit reward and margin are the DPO paper's (https://arxiv.org/abs/2305.18290, eq. 5,
without β as NeMo-RL logs them); the KL is exact over the vocabulary, not a sampled estimate:
the pairs' tokens need not come from the policy (a dataset's, or an older policy's), and k1/k3 on
them would estimate nothing. See docs/algorithms.md#the-dpo-loop.

Implementation choices:
1) One no-grad forward of the policy and of the reference over the batch, in chunks of rows
   small enough that two ``[rows, S, V]`` log-softmax tensors stay under ``MAX_ELEMENTS``; the
   policy's log-probs of the sampled tokens come from ``token_logprobs`` as in the update's
   forward, so the loss here is the update's (one global batch) to float precision.
2) The loss and NeMo-RL's metrics come from ``dpo_loss`` itself, on this process's rows; the
   loop's extra metrics are sums and counts over the kept pairs, summed over ranks, and are left
   out on a step with no pair (a gap in the curve, no NaN).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from rlnb.algorithms.logprobs import token_logprobs
from rlnb.algorithms.preference import dpo_loss
from rlnb.engine.data.preference_batch import PreferenceBatch, PreferenceScores
from rlnb.engine.models.policy import position_ids_from_mask

MAX_ELEMENTS = 2**25  # per log-softmax chunk: 128 MiB of float32


@torch.no_grad()
def logprobs_and_kl(policy, input_ids, attention_mask, token_mask
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs [B, S], kl [B, S])`` of the policy: log π of each token (stored layout,
    index 0 = 0) and the exact KL(π ‖ π_ref) of the next-token distributions at the positions
    that predict a response token (0 elsewhere)."""
    temperature = policy.config.generation.temperature
    B, S = input_ids.shape
    models = (policy.model, policy.reference_model)
    vocab = policy.model.get_input_embeddings().num_embeddings
    rows = max(1, min(policy.config.logprob_batch_size, MAX_ELEMENTS // max(S * vocab, 1)))
    was_training = [m.training for m in models]
    for m in models:
        m.eval()
    lps, kls = [], []
    for i in range(0, B, rows):
        ids = input_ids[i : i + rows].to(policy.device)
        mask = attention_mask[i : i + rows].to(policy.device)
        logits = [m(input_ids=ids, attention_mask=mask,
                    position_ids=position_ids_from_mask(mask)).logits[:, :-1].float()
                  for m in models]  # [b, S-1, V] each
        lps.append(F.pad(token_logprobs(logits[0], ids[:, 1:], temperature), (1, 0)).cpu())
        logp, logq = (F.log_softmax(z / temperature, dim=-1) for z in logits)
        kl = (logp.exp() * (logp - logq)).sum(-1)  # [b, S-1]: index t predicts token t+1
        kls.append(F.pad(kl, (1, 0)).cpu())
    for m, mode in zip(models, was_training):
        m.train(mode)
    return torch.cat(lps) * token_mask, torch.cat(kls) * token_mask


def score_pairs(policy, batch: PreferenceBatch, cfg, dist) -> PreferenceScores:
    """``PreferenceScores`` of ``batch`` (reference log-probs filled) under the policy now;
    ``cfg`` is a ``DPOLossConfig``, ``dist`` the trainer's ``Distributed``."""
    if batch.reference_logprobs is None:
        raise ValueError("compute_loss needs the batch's reference log-probs: run "
                         "trainer.reference_logprobs(batch) first")
    tm, sm, ref = batch.token_mask, batch.sample_mask, batch.reference_logprobs
    logprobs, kl = logprobs_and_kl(policy, batch.input_ids, batch.attention_mask, tm)
    rewards = ((logprobs - ref) * tm).sum(1)  # [B]
    if cfg.preference_average_log_probs:
        rewards = rewards / tm.sum(1).clamp(min=1)
    margins = rewards[0::2] - rewards[1::2]  # [P]
    losses = -F.logsigmoid(cfg.reference_policy_kl_penalty * margins)  # [P]
    loss, _ = dpo_loss(logprobs[:, 1:], ref[:, 1:], tm[:, 1:], sm,
                       global_valid_seqs=sm.sum(), **cfg.model_dump())
    kept = sm[0::2]  # [P]
    seq_logprobs = (logprobs * tm).sum(1)  # [B]
    row_kept = sm[:, None] * tm  # [B, S]
    totals = dist.sum(torch.stack([
        kept.sum(), (kept * seq_logprobs[0::2]).sum(), (kept * seq_logprobs[1::2]).sum(),
        (kept * margins).sum(), (kl * row_kept).sum(), row_kept.sum(),
    ]).double()).tolist()
    pairs, chosen, rejected, margin, kl_sum, tokens = totals
    metrics = {}
    if pairs > 0:  # choice 2
        metrics = {"train/logprobs_chosen": chosen / pairs,
                   "train/logprobs_rejected": rejected / pairs,
                   "train/reward_margin": margin / pairs,
                   "train/kl_to_reference": kl_sum / tokens}
    return PreferenceScores(batch, cfg.reference_policy_kl_penalty, logprobs, rewards, margins,
                            losses, kl, float(loss), metrics)
