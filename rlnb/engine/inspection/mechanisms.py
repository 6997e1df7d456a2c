"""What each published knob does to one frozen batch, as numbers per response and per token:
no training, no seeds, the same answer every time (notebook 07's first half).

    rollout = trainer.rollout()                                  # a frozen batch
    length_bias(rollout, max_new_tokens=12).responses           # the push on each response's tokens
    clip_higher(adv, logprobs, logits=vocab_logits(model, rollout)).summary
    dynamic_sampling_drop(rollout).summary                       # groups it would drop
    group_size_signal(rollout, sizes=(16, 2)).table              # signal per 256 rollouts
    kl_estimators(policy_logits, reference_logits, rollout).table  # k1/k2/k3 vs the exact KL

1) Length bias (Dr. GRPO, https://arxiv.org/abs/2503.20783 §3.1): the gradient weight
   ``w = A·c`` each aggregation gives each token (``rlnb.algorithms.token_weights``).
2) Clip-higher (DAPO, https://arxiv.org/abs/2503.14476 §3.1): the tokens with A > 0 and
   1 + 0.2 < ρ ≤ 1 + 0.28, whose gradient ε_high = 0.28 restores, their probabilities, and
   the first-order entropy change ``Σ w·h`` of pushing them (``rlnb.algorithms.entropy_change``).
3) Dynamic sampling (DAPO §3.2): the rows whose (leave-one-out) reward std is 0, the filter of
   ``rlnb.algorithms.dynamic_sampling``, and the generation batches that implies.
4) KL estimators: k1, k2, k3 on the sampled tokens against the exact per-position KL, and
   their exact bias and variance over the vocabulary (``rlnb.algorithms.kl_exact``).
5) Group size at equal rollouts (2-GRPO, https://arxiv.org/abs/2510.00977): one batch of many
   prompts x many answers cut into G answers for rollouts/G prompts, for each G; how many
   groups (distinct prompts) carry signal, against ``1 − p^G − (1 − p)^G`` per prompt.
The staleness finding's mechanism (importance weights of a stale batch) is ``staleness.py``.

Each function returns a small dataclass of pandas frames and the tensors behind them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from rlnb.algorithms.advantages import grpo_advantages
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.entropy_change import entropy_change_per_push
from rlnb.algorithms.kl import KL_ESTIMATORS
from rlnb.algorithms.kl_exact import kl_estimator_moments
from rlnb.algorithms.logprobs import token_entropy
from rlnb.algorithms.token_weights import policy_gradient_weights
from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch

GRPO, DAPO, DR_GRPO = "seq-mean + std (GRPO)", "token-mean + std (DAPO)", \
    "token-sum, no std (Dr. GRPO)"


def token_table(rollout: RolloutBatch, selected: torch.Tensor, columns: dict):
    """One row per selected token (``selected`` ``[B, S]`` bool): its row, its position in the
    response, the response text, then each of ``columns`` (name -> ``[B, S]`` tensor) there."""
    import pandas as pd

    rows, cols = selected.nonzero(as_tuple=True)
    starts = (rollout.token_mask > 0).float().argmax(-1)  # first response position of each row
    return pd.DataFrame({"row": rows.tolist(), "position": (cols - starts[rows]).tolist(),
                         "response": [rollout.responses[i] for i in rows.tolist()],
                         **{k: v[rows, cols].tolist() for k, v in columns.items()}})


@torch.no_grad()
def vocab_logits(model, rollout: RolloutBatch) -> torch.Tensor:
    """``[B, S, V]`` float32 logits of ``model`` in the stored layout: row t gives the
    distribution of token t (row 0, which no token has, is 0)."""
    from rlnb.engine.models.policy import position_ids_from_mask

    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    mask = rollout.attention_mask.to(device)
    logits = model(input_ids=rollout.input_ids.to(device), attention_mask=mask,
                   position_ids=position_ids_from_mask(mask)).logits.float().cpu()
    model.train(was_training)
    return torch.nn.functional.pad(logits[:, :-1], (0, 0, 1, 0))  # position t predicts t+1


# ---------------------------------------------------------------------------------- 1 length
@dataclass
class LengthBias:
    """``weights``: label -> ``[B, S]`` w per token; ``advantages``: ``"÷ std"`` and
    ``"no std"`` -> ``[B]``; ``responses``: one row per response; ``by_length``: the mean push
    per token by outcome and length; ``constant``: Dr. GRPO's C."""

    weights: dict[str, torch.Tensor]
    advantages: dict[str, torch.Tensor]
    responses: object
    by_length: object
    constant: float


def length_bias(rollout: RolloutBatch, *, leave_one_out: bool = True,
                max_new_tokens: int | None = None) -> LengthBias:
    """The gradient weight ``w = A·c`` per token under GRPO's sequence mean with ÷ std, DAPO's
    token mean with ÷ std, and Dr. GRPO's token sum over ``C = B·max_new_tokens`` (default: the
    longest response) without ÷ std, at ρ = 1; GRPO advantages on the raw rewards."""
    tm, sm = rollout.token_mask.float(), torch.ones(len(rollout))
    a_std = grpo_advantages(rollout.prompt_ids, rollout.rewards.float(),
                            leave_one_out=leave_one_out, normalize_rewards=True)  # [B]
    a_raw = grpo_advantages(rollout.prompt_ids, rollout.rewards.float(),
                            leave_one_out=leave_one_out, normalize_rewards=False)  # [B]
    lengths = tm.sum(-1)  # [B]: the tokens the loss sees
    budget = float(max_new_tokens if max_new_tokens is not None else lengths.max())
    constant = len(rollout) * budget
    weights = {
        GRPO: policy_gradient_weights(a_std, tm, sm, reduction="sequence_mean"),
        DAPO: policy_gradient_weights(a_std, tm, sm, reduction="token_mean"),
        DR_GRPO: policy_gradient_weights(a_raw, tm, sm, reduction="token_sum", constant=constant),
    }
    import pandas as pd

    frame = pd.DataFrame({
        "group": rollout.group.tolist(), "response": rollout.responses,
        "correct": rollout.correct.bool().tolist(), "tokens": lengths.long().tolist(),
        "A (÷ std)": a_std.tolist(), "A (no std)": a_raw.tolist()})
    for label, w in weights.items():
        frame[f"{label}: per token"] = (w.sum(-1) / lengths.clamp(min=1)).tolist()
        frame[f"{label}: whole response"] = w.sum(-1).tolist()
    signal = frame[frame["A (÷ std)"] != 0]  # rows with no advantage get no push at all
    per_token = [f"{label}: per token" for label in weights]
    by_length = (signal.assign(outcome=signal.correct.map({True: "correct", False: "incorrect"}))
                 .groupby(["outcome", "tokens"])
                 .agg(responses=("response", "size"), **{c: (c, "mean") for c in per_token})
                 .reset_index())
    return LengthBias(weights, {"÷ std": a_std, "no std": a_raw}, frame, by_length, constant)


# ---------------------------------------------------------------------------------- 2 clip-higher
@dataclass
class ClipHigher:
    """``freed``: ``[B, S]`` bool; ``tokens``: one row per freed token; ``summary``: counts,
    probabilities and entropy effects per group of A > 0 tokens; ``entropy``: ``Σ w·h`` over
    every token the loss pushes (A < 0 too) at each ε_high (see ``clip_higher``)."""

    ratio: torch.Tensor
    freed: torch.Tensor
    tokens: object
    summary: object
    entropy: dict


def clip_higher(advantages: AdvantageBatch, logprobs: torch.Tensor, *, logits=None,
                ratio_clip_min: float = 0.2, ratio_clip_max: float = 0.2,
                higher: float = 0.28, token_level_loss: bool = True,
                temperature: float = 1.0) -> ClipHigher:
    """The tokens with A > 0 whose ratio ρ = π/π_old (``logprobs`` ``[B, S]`` of the current
    policy on the frozen batch) lies in (1 + ``ratio_clip_max``, 1 + ``higher``]: clipped (no
    gradient) at ε_high = ``ratio_clip_max``, pushed up at ``higher``. With ``logits``
    (``[B, S, V]``, ``vocab_logits``) also each token's entropy H and ``h``, the first-order
    entropy change per unit push, and ``Σ w·h`` for every group of tokens, ``w = A·ρ·c`` the
    token's gradient weight under ``higher``."""
    r = advantages.rollout
    mask = (r.token_mask * advantages.sample_mask[:, None]) > 0  # [B, S]
    A = advantages.advantages
    ratio = torch.exp(logprobs - r.prev_logprobs)  # [B, S]
    positive = mask & (A > 0)
    flows_low = positive & (ratio <= 1 + ratio_clip_max)
    flows_high = positive & (ratio <= 1 + higher)
    freed = flows_high & ~flows_low
    reduction = "token_mean" if token_level_loss else "sequence_mean"
    w = policy_gradient_weights(A, r.token_mask, advantages.sample_mask, reduction=reduction,
                                ratio=ratio)
    h = H = None
    if logits is not None:
        h = entropy_change_per_push(logits, r.input_ids, temperature)
        H = token_entropy(logits, temperature)
    import pandas as pd

    tokens = token_table(r, freed, {"A": A, "π_old": r.prev_logprobs.exp(),
                                    "π": logprobs.exp(), "ρ": ratio, "w": w})
    rows, cols = freed.nonzero(as_tuple=True)
    if h is not None:
        tokens["H"] = H[rows, cols].tolist()
        tokens["h"] = h[rows, cols].tolist()
        tokens["w·h"] = (w * h)[rows, cols].tolist()
    groups = {f"A > 0, ρ ≤ 1 + {ratio_clip_max:g}: pushed at both": flows_low,
              f"A > 0, 1 + {ratio_clip_max:g} < ρ ≤ 1 + {higher:g}: freed": freed,
              f"A > 0, ρ > 1 + {higher:g}: clipped at both": positive & ~flows_high}
    pushed_at_higher = list(groups)[:2]  # the clipped-at-both tokens get no push
    summary = []
    for label, sel in groups.items():
        n = int(sel.sum())
        row = {"tokens": label, "count": n,
               "share of A > 0 tokens": n / max(int(positive.sum()), 1),
               "mean π_old": float(r.prev_logprobs[sel].exp().mean()) if n else math.nan}
        if h is not None:
            row["mean h"] = float(h[sel].mean()) if n else math.nan
            row[f"Σ w·h at ε_high = {higher:g}"] = \
                float((w * h)[sel].sum()) if label in pushed_at_higher else 0.0
        summary.append(row)
    entropy = {}
    if h is not None:  # A < 0 tokens flow while ρ ≥ 1 - ε_lo, the same at both ε_high
        negative = mask & (A < 0) & (ratio >= 1 - ratio_clip_min)
        for eps, flows in ((ratio_clip_max, flows_low), (higher, flows_high)):
            entropy[f"Σ w·h, every pushed token, ε_high = {eps:g}"] = \
                float((w * h)[flows | negative].sum())
    return ClipHigher(ratio, freed, tokens, pd.DataFrame(summary).set_index("tokens"), entropy)


# ---------------------------------------------------------------------------------- 3 dynamic
@dataclass
class DynamicSamplingDrop:
    """``kept``: ``[B]`` bool, the rows dynamic sampling keeps; ``groups``: one row per group;
    ``summary``: the shares and the generation batches they imply."""

    kept: torch.Tensor
    groups: object
    summary: dict


def dynamic_sampling_drop(rollout: RolloutBatch, *, leave_one_out: bool = True
                          ) -> DynamicSamplingDrop:
    """The rows DAPO's dynamic sampling would drop from this batch: those whose reward std
    (leave-one-out when ``leave_one_out``: the others' rewards) is 0, exactly the filter of
    ``select_nonzero_std``. ``generation batches per train batch`` = 1 / (share kept): how many
    batches like this one it takes to fill one train batch."""
    rewards = rollout.rewards.float()
    _, std = calculate_baseline_and_std_per_prompt(rollout.prompt_ids, rewards,
                                                   leave_one_out=leave_one_out)
    kept = std != 0  # [B]
    import pandas as pd

    rows = []
    for g in rollout.group.unique().tolist():
        sel = rollout.group == g
        r = rewards[sel]
        rows.append({"group": g, "prompt": rollout.prompts[int(sel.nonzero()[0])],
                     "rewards": " ".join(f"{x:g}" for x in r.tolist()), "rows": int(sel.sum()),
                     "kept": int(kept[sel].sum()), "mixed rewards": bool((r != r[0]).any())})
    groups = pd.DataFrame(rows)
    share_kept = float(kept.float().mean())
    summary = {
        "groups": len(groups), "groups with mixed rewards": int(groups["mixed rewards"].sum()),
        "groups dropped whole": int((groups.kept == 0).sum()), "rows": len(rollout),
        "rows kept": int(kept.sum()), "share of rows dropped": 1 - share_kept,
        "generation batches per train batch": 1 / share_kept if share_kept else math.inf,
    }
    return DynamicSamplingDrop(kept, groups, summary)


# ---------------------------------------------------------------------------------- 4 KL
@dataclass
class KLEstimators:
    """``moments``: ``kl_estimator_moments`` per position; ``sampled``: name -> ``[N]`` the
    estimates on the sampled tokens; ``table``: one row per estimator."""

    moments: dict[str, torch.Tensor]
    sampled: dict[str, torch.Tensor]
    table: object


def kl_estimators(logits: torch.Tensor, reference_logits: torch.Tensor, rollout: RolloutBatch,
                  *, temperature: float = 1.0) -> KLEstimators:
    """k1, k2, k3 of KL(π ‖ π_ref) on the batch's sampled tokens against the exact KL at each
    position (``logits`` of π, which must be the policy that sampled the batch for k1 and k3 to
    be unbiased, and ``reference_logits``, both ``[B, S, V]`` as ``vocab_logits`` gives them),
    and each estimator's exact bias and per-token sd over the vocabulary. Raw estimators, no
    clamps."""
    valid = rollout.token_mask > 0
    logp = torch.log_softmax(logits.double() / temperature, -1)
    logq = torch.log_softmax(reference_logits.double() / temperature, -1)
    moments = kl_estimator_moments(logp, logq)
    ids = rollout.input_ids.long().unsqueeze(-1)
    ell = (logq.gather(-1, ids) - logp.gather(-1, ids)).squeeze(-1)[valid]  # [N] ℓ = log q/p
    exact = moments["exact"][valid]
    sampled, rows = {}, []
    import pandas as pd

    for name, estimator in KL_ESTIMATORS.items():
        k = estimator(ell)
        sampled[name] = k
        gap = k - exact
        rows.append({
            "estimator": name, "mean on the sampled tokens": float(k.mean()),
            "exact KL (mean over positions)": float(exact.mean()),
            "bias on this batch": float(gap.mean()),
            "± s.e.": float(gap.std() / math.sqrt(gap.numel())) if gap.numel() > 1 else math.nan,
            "expected bias E[k] − KL": float((moments[f"{name}_mean"][valid] - exact).mean()),
            "sd over the sampled tokens": float(k.std()) if k.numel() > 1 else math.nan,
            "sd per token (exact)": float(moments[f"{name}_var"][valid].mean().sqrt()),
            "share < 0": float((k < 0).double().mean()),
        })
    return KLEstimators(moments, sampled, pd.DataFrame(rows).set_index("estimator"))


# ---------------------------------------------------------------------------------- 5 group size
@dataclass
class GroupSizeSignal:
    """``table``: one row per group size, the same number of rollouts each; ``prompts``: one
    row per prompt of the frozen batch, with its share of right answers; ``advantages``:
    G -> ``[rollouts]`` each used row's advantage."""

    table: object
    prompts: object
    advantages: dict


def group_size_signal(rollout: RolloutBatch, sizes=(16, 2), *, rollouts: int | None = None,
                      leave_one_out: bool = True, normalize_rewards: bool = True
                      ) -> GroupSizeSignal:
    """The frozen batch (P prompts x G answers, G ≥ every size) cut, for each G' in ``sizes``,
    into the first ``rollouts/G'`` prompts with their first G' answers (``rollouts`` default:
    P x the smallest size): the groups with mixed rewards, the rows with a nonzero GRPO
    advantage, and the share of groups with signal predicted per prompt,
    ``mean(1 − p^G' − (1 − p)^G')`` with p the prompt's share right over all its answers. The
    advantages group rows by prompt tokens, as the trainer's do (a prompt drawn twice is one
    group); the groups with signal are counted per generated group, as
    ``train/groups_with_signal``."""
    ids = rollout.group.unique().tolist()  # the groups in their order
    members = [(rollout.group == g).nonzero().flatten() for g in ids]
    answers = min(len(m) for m in members)
    rollouts = len(ids) * min(sizes) if rollouts is None else rollouts
    rewards = rollout.rewards.float()
    share = torch.stack([rollout.correct[m].float().mean() for m in members])  # [P]
    rows, advantages = [], {}
    for g in sizes:
        n = rollouts // g
        if g > answers or n > len(ids) or n * g != rollouts:
            raise ValueError(f"group size {g} at {rollouts} rollouts needs {rollouts / g:g} "
                             f"prompts x {g} answers; the batch has {len(ids)} x {answers}")
        idx = torch.cat([m[:g] for m in members[:n]])  # [n*g]
        r = rewards[idx]
        a = grpo_advantages(rollout.prompt_ids[idx], r, leave_one_out=leave_one_out,
                            normalize_rewards=normalize_rewards)  # [n*g]
        advantages[g] = a
        by_group = r.view(n, g)  # [n, G']: the rows are taken group by group
        mixed = (by_group != by_group[:, :1]).any(-1)  # [n]
        p = share[:n]
        rows.append({"G": g, "prompts": n, "rollouts": n * g,
                     "groups with signal": int(mixed.sum()),
                     "share of groups with signal": float(mixed.float().mean()),
                     "predicted share, mean 1 − p^G − (1 − p)^G":
                         float((1 - p ** g - (1 - p) ** g).mean()),
                     "rows with A ≠ 0": int((a != 0).sum()),
                     "Σ|A|": float(a.abs().sum())})
    import pandas as pd

    prompts = pd.DataFrame({"group": ids, "prompt": [rollout.prompts[int(m[0])] for m in members],
                            "answers": [len(m) for m in members], "share right": share.tolist()})
    return GroupSizeSignal(pd.DataFrame(rows).set_index("G"), prompts, advantages)
