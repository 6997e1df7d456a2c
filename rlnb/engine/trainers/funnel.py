"""The sample funnel: of the rows a step generated, how many reached the gradient, and where the
others went.

    generated -> kept (not filtered) -> in a group with signal -> nonzero advantage = trained
    side counts: truncated, format failed;  tokens: generated, trained

A GRPO step whose loss is 0 is usually not a bug: every group had equal rewards (no signal), or
the filters removed the rows. The funnel says which, step by step (``funnel/*`` in the metrics,
``docs/metrics.md``; ``rlnb.run.training.funnel.step_funnel`` prints it for a run directory).

Implementation choices:
1) Counts are rows (sequences) of this process (rank 0's when several run: the stage makes no
   collective call, so a notebook may call it on one rank); ``trained`` counts rows whose
   advantage is nonzero on at least one generated token and whose sample mask is 1: what
   carries gradient in the policy-gradient term (the KL term, when on, reaches every kept row).
2) *No signal* is read from the raw rewards (before scaling and shaping): a group of equal
   rewards has zero advantages under any group baseline.
3) *Format failed* is counted where the task reports a ``format`` component (0 for a response
   whose answer could not be read); other tasks have no such key.
4) *Filtered* is the rows the advantage stage's sample mask drops: overlong filtering,
   log-prob-error masking, and the rows a rollout marked (agent episodes that failed or broke).
   Groups dynamic sampling discarded never reach this stage: its own metrics count them.
"""

from __future__ import annotations

import torch

from rlnb.engine.trainers.advantage_inputs import signal_per_group


def sample_funnel(group: torch.Tensor, raw_rewards: torch.Tensor, truncated: torch.Tensor,
                  token_mask: torch.Tensor, sample_mask: torch.Tensor, advantages: torch.Tensor,
                  format_ok: torch.Tensor | None = None) -> dict[str, float]:
    """The funnel of one batch (this process's rows).

    Args:
        group: ``[B]`` group ids; raw_rewards: ``[B]``; truncated: ``[B]`` bool.
        token_mask: ``[B, S]`` 1 on generated tokens; sample_mask: ``[B]`` after the filters;
        advantages: ``[B, S]``; format_ok: ``[B]`` the ``format`` component, if the task has one.
    """
    per_group, index = signal_per_group(group, raw_rewards)
    signal = per_group[index]  # [B]: the row's group has unequal rewards (choice 2)
    kept = sample_mask > 0  # [B]
    carries = (advantages != 0) & (token_mask > 0)  # [B, S]
    trained = kept & carries.any(dim=1)  # [B] (choice 1)
    out = {
        "funnel/generated": float(len(group)),
        "funnel/truncated": float(truncated.sum()),
        "funnel/no_signal": float((~signal).sum()),
        "funnel/filtered": float((~kept).sum()),
        "funnel/trained": float(trained.sum()),
        "funnel/generated_tokens": float((token_mask > 0).sum()),
        "funnel/trained_tokens": float((carries & kept[:, None]).sum()),
    }
    if format_ok is not None:
        out["funnel/format_failed"] = float((format_ok <= 0).sum())
    return out


FUNNEL_ORDER = ("generated", "truncated", "format_failed", "no_signal", "filtered", "trained")


def funnel_lines(record: dict[str, float]) -> list[str]:
    """A metrics record's funnel as text, one stage a line, with each stage's share."""
    total = record.get("funnel/generated")
    if not total:
        return ["no funnel in this record (a step of a loop without one, or an older run)"]
    lines = []
    for name in FUNNEL_ORDER:
        value = record.get(f"funnel/{name}")
        if value is None:
            continue
        lines.append(f"{name:>14}: {value:6.0f} rows ({100 * value / total:5.1f}%)")
    tokens = record.get("funnel/generated_tokens")
    if tokens:
        lines.append(f"{'tokens':>14}: {record.get('funnel/trained_tokens', 0):.0f} of "
                     f"{tokens:.0f} generated carried gradient")
    if record.get("funnel/trained") == 0:
        why = ("every group had equal rewards" if record.get("funnel/no_signal") == total
               else "the filters removed every row with signal")
        lines.append(f"no row carried gradient: {why}")
    return lines
