"""Preference losses: DPO, the Bradley-Terry reward-model loss, and SFT negative log-likelihood.

    L_DPO = -E_pairs log σ(β·[(log π(y_c) - log π_ref(y_c)) - (log π(y_r) - log π_ref(y_r))])

Papers: DPO https://arxiv.org/abs/2305.18290; the Bradley-Terry reward model of InstructGPT
https://arxiv.org/abs/2203.02155 (same formula with β = 1 on the model's scalar scores).

See docs/algorithms.md#preference-losses-dpo-reward-model-sft.

Layout of the pure functions: every per-token tensor is *aligned*, i.e.
``logprobs[b, t]``, ``reference_logprobs[b, t]`` and ``token_mask[b, t]`` all describe the same
token. Pairwise losses take rows interleaved ``chosen, rejected, chosen, rejected, ...``: row 2k is
the chosen answer of pair k and row 2k+1 its rejected answer. The NeMo-RL-style classes at the
bottom do NeMo-RL's slicing (``[:, 1:]`` for masks, ``[:, :-1]`` for DPO's rolled reference) and
call the pure functions.

Implementation choices:
1) SEQUENCE_LEVEL over *pairs*: every pairwise mean divides by the global N_seq/2 (+1e-8), so
   summing micro-batches (each holding whole pairs) gives the full-batch loss exactly.
2) The implicit reward ρ_b = Σ_t (log π - log π_ref)·tm ignores sample_mask; masking happens only
   in the pair means, with the *chosen* row's sample_mask. A masked rejected row therefore still
   counts in its pair's loss; only ``rewards_rejected_mean`` uses the rejected row's mask.
3) NeMo-RL quirk reproduced: the chosen row's sample_mask multiplies the per-pair loss and is
   also the weight of the mean, i.e. it is applied twice. For the 0/1 masks that ``check_mask``
   enforces this is a no-op; it is kept so the code reads like NeMo-RL's formula.
4) ``accuracy`` is strict (ρ_c > ρ_r: a tie counts as wrong); the reward metrics are reported
   without β.
5) The optional SFT term of DPO uses the chosen rows only and ``tm·sm`` as its token mask
   (``max(count, 1)`` when averaged); it is computed only when ``sft_loss_weight > 0``.
6) ``num_valid_samples`` is Σ sm / 2 (pairs) for the pairwise losses and Σ sm (rows) for NLL.
7) Deliberate addition: ``DPOLossFn.rows_per_call = 2`` tells ``SequencePackingLossWrapper`` to
   hand it whole pairs. NeMo-RL calls the loss one sequence at a time and so cannot pack DPO
   batches (https://github.com/NVIDIA-NeMo/RL/issues/719); tests/algorithms/test_packing.py checks
   packed == unpacked.
8) ``NLLLoss(..., dpo_loss=True)`` returns NeMo-RL's per-row SFT term instead of the token mean:
   ``[B]`` of -Σ_t log π·tm·sm (÷ max(Σ_t tm·sm, 1) with ``dpo_average_log_probs``), the same
   quantity ``dpo_loss`` uses for its SFT term (``per_row_nll``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from pydantic import Field

from rlnb.algorithms.checks import check_mask, check_tensor
from rlnb.algorithms.logprobs import next_token_logprobs
from rlnb.algorithms.masked import masked_mean
from rlnb.config import Config, parse_config

# --- pure functions (aligned tensors) ----------------------------------------------------------


def _check_pairs(name: str, n_rows: int) -> None:
    if n_rows % 2:
        raise ValueError(
            f"{name} must have an even number of rows (interleaved chosen, rejected), got {n_rows}"
        )


def nll_loss(
    logprobs: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    global_valid_toks,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token-level negative log-likelihood: L = -Σ logprobs·tm·sm / (N_tok + 1e-8).

    Args:
        logprobs: ``[B, T]`` log-probs of the target tokens (aligned with ``token_mask``).
        token_mask: ``[B, T]`` 0/1, tokens to train on.
        sample_mask: ``[B]`` 0/1 per row.
        global_valid_toks: N_tok of the whole global batch (float or 0-d tensor).
    Returns: ``(loss, metrics)``; loss is 0-d; metrics ``loss``, ``num_unmasked_tokens``
    (Σ tm·sm of this call), ``num_valid_samples`` (Σ sm).
    """
    check_tensor("logprobs", logprobs, ndim=2, floating=True)
    B, T = logprobs.shape
    tm = check_mask("token_mask", token_mask, shape=(B, T))
    sm = check_mask("sample_mask", sample_mask, shape=(B,))
    mask = tm * sm.unsqueeze(-1)  # [B, T]
    loss = -masked_mean(logprobs, mask, global_normalization_factor=global_valid_toks)
    return loss, {
        "loss": loss.item(),
        "num_unmasked_tokens": mask.sum().item(),
        "num_valid_samples": sm.sum().item(),
    }


def per_row_nll(logprobs: torch.Tensor, mask: torch.Tensor, *, average: bool) -> torch.Tensor:
    """-Σ_t logprobs·mask per row, divided by max(Σ_t mask, 1) when ``average``.

    Args: logprobs, mask ``[B, T]``. Returns ``[B]``.
    """
    nll = -(logprobs * mask).sum(-1)  # [B]
    return nll / mask.sum(-1).clamp(min=1) if average else nll


def _pairwise(
    rewards: torch.Tensor, sample_mask: torch.Tensor, global_valid_seqs, beta: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Bradley-Terry loss of interleaved per-row rewards ``[B]``; returns (loss, acc, rc, rr)."""
    chosen, rejected = rewards[0::2], rewards[1::2]  # [B/2] each
    sm_c, sm_r = sample_mask[0::2], sample_mask[1::2]  # [B/2] each
    n_pairs = global_valid_seqs / 2
    # sm_c appears twice (NeMo-RL quirk, choice 3): no-op for 0/1 masks.
    per_pair = -F.logsigmoid(beta * (chosen - rejected)) * sm_c  # [B/2]
    loss = masked_mean(per_pair, sm_c, global_normalization_factor=n_pairs)
    with torch.no_grad():
        acc = masked_mean((chosen > rejected).float(), sm_c, global_normalization_factor=n_pairs)
        rc = masked_mean(chosen, sm_c, global_normalization_factor=n_pairs)
        rr = masked_mean(rejected, sm_r, global_normalization_factor=n_pairs)
    return loss, acc, rc, rr


def preference_loss(
    scores: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    global_valid_seqs,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Reward-model (Bradley-Terry) loss on raw scores: Σ_pairs -log σ(s_c - s_r)·sm_c / (N_seq/2).

    Args:
        scores: ``[B]`` scalar score per row, rows interleaved chosen, rejected (B even).
        sample_mask: ``[B]`` 0/1 per row.
        global_valid_seqs: N_seq (rows, not pairs) of the whole global batch.
    Returns: ``(loss, metrics)`` with metrics ``loss, accuracy, rewards_chosen_mean,
    rewards_rejected_mean, num_valid_samples`` (Σ sm / 2).
    """
    check_tensor("scores", scores, ndim=1, floating=True)
    _check_pairs("scores", scores.shape[0])
    sm = check_mask("sample_mask", sample_mask, shape=(scores.shape[0],))
    loss, acc, rc, rr = _pairwise(scores, sm, global_valid_seqs, beta=1.0)
    return loss, {
        "loss": loss.item(),
        "accuracy": acc.item(),
        "rewards_chosen_mean": rc.item(),
        "rewards_rejected_mean": rr.item(),
        "num_valid_samples": sm.sum().item() / 2,
    }


def dpo_loss(
    logprobs: torch.Tensor,
    reference_logprobs: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    global_valid_seqs,
    reference_policy_kl_penalty: float = 0.05,
    preference_loss_weight: float = 1.0,
    sft_loss_weight: float = 0.0,
    preference_average_log_probs: bool = False,
    sft_average_log_probs: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """DPO loss (plus optional SFT on the chosen rows).

    Args:
        logprobs: ``[B, T]`` current-policy log-probs (differentiable), rows interleaved
            chosen, rejected (B even).
        reference_logprobs: ``[B, T]`` reference-policy log-probs of the same tokens.
        token_mask: ``[B, T]`` 0/1, response tokens.
        sample_mask: ``[B]`` 0/1 per row.
        global_valid_seqs: N_seq (rows) of the whole global batch.
        reference_policy_kl_penalty: β of the DPO paper (0.05 in NeMo-RL; the paper uses 0.1).
        preference_loss_weight / sft_loss_weight: weights of the two terms.
        preference_average_log_probs: divide ρ_b by the row's token count (IPO/SimPO-style
            length normalisation) instead of summing.
        sft_average_log_probs: per-row mean instead of sum in the SFT term.
    Returns: ``(loss, metrics)`` with metrics ``loss, sft_loss, preference_loss, accuracy,
    rewards_chosen_mean, rewards_rejected_mean, num_valid_samples`` (Σ sm / 2).
    """
    check_tensor("logprobs", logprobs, ndim=2, floating=True)
    B, T = logprobs.shape
    _check_pairs("logprobs", B)
    check_tensor("reference_logprobs", reference_logprobs, shape=(B, T), floating=True)
    tm = check_mask("token_mask", token_mask, shape=(B, T))
    sm = check_mask("sample_mask", sample_mask, shape=(B,))

    # --- preference term: implicit reward ρ_b, no sample_mask here (choice 2)
    rewards = ((logprobs - reference_logprobs) * tm).sum(-1)  # [B]
    if preference_average_log_probs:
        rewards = rewards / tm.sum(-1).clamp(min=1)
    pref, acc, rc, rr = _pairwise(rewards, sm, global_valid_seqs, reference_policy_kl_penalty)

    # --- SFT term on chosen rows (choice 5)
    sft = torch.zeros((), dtype=pref.dtype, device=pref.device)
    if sft_loss_weight > 0:
        nll = per_row_nll(logprobs, tm * sm.unsqueeze(-1), average=sft_average_log_probs)  # [B]
        sft = masked_mean(nll[0::2], sm[0::2], global_normalization_factor=global_valid_seqs / 2)

    loss = sft_loss_weight * sft + preference_loss_weight * pref
    return loss, {
        "loss": loss.item(),
        "sft_loss": sft.item(),
        "preference_loss": pref.item(),
        "accuracy": acc.item(),
        "rewards_chosen_mean": rc.item(),
        "rewards_rejected_mean": rr.item(),
        "num_valid_samples": sm.sum().item() / 2,
    }


# --- config and NeMo-RL-style wrappers ---------------------------------------------------------


class DPOLossConfig(Config):
    """The loss keys of NeMo-RL's ``dpo`` section (loop keys live with the DPO trainer)."""

    reference_policy_kl_penalty: float = Field(
        0.05, description="β: strength of the implicit KL to the reference (DPO paper: 0.1)."
    )
    preference_loss_weight: float = Field(1.0, ge=0, description="Weight of the DPO term.")
    sft_loss_weight: float = Field(
        0.0, ge=0, description="Weight of the NLL of the chosen answers (0 disables it, RPO-like)."
    )
    preference_average_log_probs: bool = Field(
        False, description="Length-normalise the implicit reward (mean instead of sum over tokens)."
    )
    sft_average_log_probs: bool = Field(
        False, description="Per-row token mean instead of sum in the SFT term."
    )


def _require(data: Mapping[str, Any], key: str, where: str) -> Any:
    """``data[key]``, or a ValueError naming the missing key and the keys that are there."""
    if not isinstance(data, Mapping):
        raise TypeError(f"{where}: data must be a mapping of tensors, got {type(data).__name__}")
    if key not in data:
        raise ValueError(f"{where}: data is missing key {key!r} (has {sorted(data)})")
    return data[key]


class NLLLoss:
    """SFT loss with NeMo-RL's call shape; ``data``: input_ids, token_mask ``[B, S]``,
    sample_mask ``[B]``."""

    loss_type = "token_level"  # divides by N_tok

    def __call__(
        self,
        next_token_logits: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs,
        global_valid_toks,
        dpo_loss: bool = False,
        dpo_average_log_probs: bool = False,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """``next_token_logits``: ``[B, S, V]``.

        Returns ``nll_loss``'s ``(loss, metrics)``; with ``dpo_loss=True`` (NeMo-RL's DPO use,
        choice 8) the loss is the ``[B]`` per-row NLL instead, averaged over each row's tokens
        when ``dpo_average_log_probs``, and ``metrics["loss"]`` is that ``[B]`` tensor
        (detached); ``global_valid_toks`` is then unused.
        """
        input_ids = _require(data, "input_ids", "NLLLoss")
        logprobs = next_token_logprobs(next_token_logits, input_ids)  # [B, S-1]
        return self.from_logprobs(logprobs, data, global_valid_seqs, global_valid_toks,
                                  dpo_loss=dpo_loss, dpo_average_log_probs=dpo_average_log_probs)

    def from_logprobs(
        self,
        logprobs: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs,
        global_valid_toks,
        dpo_loss: bool = False,
        dpo_average_log_probs: bool = False,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The same loss from the next-token log-probs ``[B, S-1]`` already computed
        (``data`` then needs token_mask ``[B, S]`` and sample_mask ``[B]`` only)."""
        token_mask = _require(data, "token_mask", "NLLLoss")
        sample_mask = _require(data, "sample_mask", "NLLLoss")
        check_tensor("logprobs", logprobs, ndim=2, floating=True)
        check_tensor("token_mask", token_mask, shape=(logprobs.shape[0], logprobs.shape[1] + 1))
        # token_mask index t is token t; logprobs index t is token t+1 (off by one).
        if not dpo_loss:
            return nll_loss(
                logprobs, token_mask[:, 1:], sample_mask, global_valid_toks=global_valid_toks
            )
        B, T = logprobs.shape
        tm = check_mask("token_mask", token_mask[:, 1:], shape=(B, T))
        sm = check_mask("sample_mask", sample_mask, shape=(B,))
        mask = tm * sm.unsqueeze(-1)  # [B, S-1]
        loss = per_row_nll(logprobs, mask, average=dpo_average_log_probs)  # [B]
        return loss, {
            "loss": loss.detach(),
            "num_unmasked_tokens": mask.sum().item(),
            "num_valid_samples": sm.sum().item(),
        }


class PreferenceLoss:
    """Reward-model loss with NeMo-RL's call shape; ``data``: sample_mask ``[2P]``."""

    loss_type = "sequence_level"  # divides by N_seq / 2

    def __call__(
        self,
        scores: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs,
        global_valid_toks=None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``scores``: ``[2P, 1]`` or ``[2P]`` reward-model outputs; global_valid_toks is unused."""
        sample_mask = _require(data, "sample_mask", "PreferenceLoss")
        check_tensor("scores", scores, ndim=(1, 2))
        if scores.ndim == 2:
            if scores.shape[1] != 1:
                raise ValueError(f"scores must be [2P, 1] or [2P], got {tuple(scores.shape)}")
            scores = scores.squeeze(-1)  # [2P]
        return preference_loss(scores, sample_mask, global_valid_seqs=global_valid_seqs)


class DPOLossFn:
    """DPO with NeMo-RL's call shape.

    ``data``: input_ids ``[B, S]``, token_mask ``[B, S]``, sample_mask ``[B]`` and
    reference_policy_logprobs ``[B, S]`` stored *rolled left by one* (index t = ref log-prob of
    token t+1), so it is sliced ``[:, :-1]`` while token_mask is sliced ``[:, 1:]``.
    """

    loss_type = "sequence_level"  # divides by N_seq / 2
    rows_per_call = 2  # chosen + rejected must reach the loss together (choice 7)

    def __init__(self, cfg: DPOLossConfig | Mapping[str, Any] | None = None):
        self.cfg = parse_config(DPOLossConfig, cfg, "dpo")

    def __call__(
        self,
        next_token_logits: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs,
        global_valid_toks=None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """``next_token_logits``: ``[B, S, V]``; returns ``dpo_loss``'s ``(loss, metrics)``."""
        input_ids = _require(data, "input_ids", "DPOLossFn")
        logprobs = next_token_logprobs(next_token_logits, input_ids)  # [B, S-1]
        return self.from_logprobs(logprobs, data, global_valid_seqs, global_valid_toks)

    def from_logprobs(
        self,
        logprobs: torch.Tensor,
        data: Mapping[str, Any],
        global_valid_seqs,
        global_valid_toks=None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The same loss from the current log-probs ``[B, S-1]`` (index t = log-prob of token
        t+1) already computed, as a trainer's forward pass gives them."""
        token_mask = _require(data, "token_mask", "DPOLossFn")
        sample_mask = _require(data, "sample_mask", "DPOLossFn")
        ref = _require(data, "reference_policy_logprobs", "DPOLossFn")
        check_tensor("logprobs", logprobs, ndim=2, floating=True)
        stored = (logprobs.shape[0], logprobs.shape[1] + 1)  # [B, S]
        check_tensor("token_mask", token_mask, shape=stored)
        check_tensor("reference_policy_logprobs", ref, shape=stored)
        # Off-by-one trap: ref was rolled left when stored, so [:, :-1] (not [:, 1:]) aligns it.
        return dpo_loss(
            logprobs,
            ref[:, :-1],
            token_mask[:, 1:],
            sample_mask,
            global_valid_seqs=global_valid_seqs,
            **self.cfg.model_dump(),
        )
