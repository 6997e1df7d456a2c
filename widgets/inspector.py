"""Rollout inspector and token view: one prompt's group side by side, tokens coloured.

    RolloutInspector(trainer, batch, advantages).display()
    TokenView(trainer, batch, advantages, quantity="ratio").display()
    TokenView(dpo_trainer, pairs, scores).display()     # DPO's pairs: a PairView

The inspector shows a group's responses with reward, sequence advantage, length and truncation,
and flags groups whose rewards are all equal (zero std: GRPO gives them no learning signal).
The token view colours every response token by one per-token quantity from
``rlnb.engine.inspection.token_stats.token_stats``: advantage, probability ratio, KL, entropy, or
the generation-vs-training log-prob gap (diverging colours around the neutral value, hover for the
number), or the importance weight exp of that gap (the async loop's stale groups). Full
colour is the group's largest deviation from the neutral value, but never less than a floor
per quantity (``SCALE_FLOOR``), so float rounding is not drawn as if it were an effect.
Given DPO's pairs (a ``PreferenceBatch``), it is a ``PairView``: a pair's chosen and rejected
responses one above the other, every token coloured by log π - log π_ref, its share of the
implicit reward, so the tokens that carry the margin ρ_chosen - ρ_rejected stand out.
"""

from __future__ import annotations

import html
import math

from rlnb.widgets.static import LiveAndStatic, table_html

NEUTRAL = {"advantage": 0.0, "ratio": 1.0, "kl": 0.0, "entropy": 0.0, "logprob_gap": 0.0,
           "importance_weight": 1.0}
# The smallest |value - neutral| drawn in full colour. A group is scaled to its own largest
# deviation, but never below this floor: otherwise float rounding (a fresh batch's importance
# weights differ from 1 by ~1e-7) would be drawn as saturated as a real effect. Ratios and
# weights: 5 % from 1 (the clip range is ± 20 %); log gaps: 0.05 nats; advantages: 0.1 (GRPO's
# are O(1)); per-token KL: 0.01 nats; entropy: 0.1 nats.
SCALE_FLOOR = {"advantage": 0.1, "ratio": 0.05, "kl": 0.01, "entropy": 0.1,
               "logprob_gap": 0.05, "importance_weight": 0.05}


def group_rows(batch, advantages, group: int) -> list[dict]:
    """The rows of one group: index, response, reward, sequence advantage, length, truncated."""
    seq = advantages.sequence_advantages() if advantages is not None else None
    rows = []
    for i in (batch.group == group).nonzero().flatten().tolist():
        rows.append({
            "row": i, "response": batch.responses[i], "reward": float(batch.rewards[i]),
            "advantage": float(seq[i]) if seq is not None else None,
            "length": int(batch.response_lengths[i]), "truncated": bool(batch.truncated[i]),
            "kept": bool(advantages.sample_mask[i] > 0) if advantages is not None else True,
        })
    return rows


def group_label(batch, group: int, zero_signal: set[int]) -> str:
    rows = (batch.group == group).nonzero().flatten().tolist()
    prompt = batch.prompts[rows[0]].replace("\n", " ")
    flag = "  ⚠ no signal (all rewards equal)" if group in zero_signal else ""
    return f"group {group}: {prompt[:48]!r}{flag}"


def colour(value: float, neutral: float, scale: float) -> str:
    """Blue below ``neutral``, red above; alpha grows with |value - neutral| / scale."""
    if not math.isfinite(value):
        return "rgba(0,0,0,0.35)"
    x = max(-1.0, min(1.0, (value - neutral) / scale)) if scale > 0 else 0.0
    rgb = "214,39,40" if x > 0 else "31,119,180"
    return f"rgba({rgb},{abs(x) * 0.85:.3f})"


def token_html(tokenizer, batch, stats, quantity: str, rows: list[int]) -> str:
    """HTML: one line per row, each response token a coloured span (title = its value)."""
    values = stats[quantity]
    mask = batch.token_mask
    neutral = NEUTRAL.get(quantity, 0.0)
    picked = values[rows][mask[rows] > 0]
    floor = SCALE_FLOOR.get(quantity, 0.0)
    largest = float((picked - neutral).abs().max()) if picked.numel() else 0.0
    scale = max(largest, floor) if floor > 0 else (largest or 1.0)
    lines = []
    for r in rows:
        cols = (mask[r] > 0).nonzero().flatten().tolist()
        spans = []
        for t in cols:
            tok = tokenizer.decode([int(batch.input_ids[r, t])]) if tokenizer else str(
                int(batch.input_ids[r, t]))
            v = float(values[r, t])
            spans.append(
                f"<span title='{quantity} = {v:.4g}' style='background:"
                f"{colour(v, neutral, scale)};padding:1px 2px;margin:0 1px;border-radius:2px'>"
                f"{html.escape(tok) or '∅'}</span>"
            )
        lines.append(f"<div style='font-family:monospace;margin:2px 0'><b>[{r}]</b> "
                     f"reward {float(batch.rewards[r]):.2f} │ {''.join(spans)}</div>")
    floored = (f" (the floor: the largest deviation here is {largest:.2g}, so these tokens stay "
               f"pale)" if largest < floor else "")
    legend = (f"<div style='font-size:90%'>colour: <b>{quantity}</b>, neutral {neutral:g} "
              f"(blue below, red above), full colour at ±{scale:.3g}{floored}</div>")
    return legend + "".join(lines)


class TokenView(LiveAndStatic):
    """Response tokens coloured by a per-token quantity, for one group of a frozen batch (DPO's
    pairs: a ``PairView``)."""

    def __new__(cls, trainer, batch, *args, **kwargs):
        if cls is TokenView and hasattr(batch, "chosen") and hasattr(batch, "pair"):
            return PairView(trainer, batch, *args, **kwargs)  # not a TokenView: no second init
        return super().__new__(cls)

    def __init__(self, trainer, batch, advantages=None, *, quantity: str = "advantage",
                 group: int = 0, kl_type: str = "k3"):
        import ipywidgets as w

        from rlnb.engine.inspection.token_stats import QUANTITIES, token_stats

        self.trainer, self.batch, self.advantages = trainer, batch, advantages
        self.stats = token_stats(trainer.policy, batch, advantages, kl_type=kl_type)
        groups = sorted(set(batch.group.tolist()))
        zero = set(batch.zero_signal_groups())
        self.group = w.Dropdown(options=[(group_label(batch, g, zero), g) for g in groups],
                                value=group, description="group")
        self.quantity = w.ToggleButtons(options=list(QUANTITIES), value=quantity,
                                        description="colour by")
        self.view = w.HTML()
        self.group.observe(lambda _: self.render(), names="value")
        self.quantity.observe(lambda _: self.render(), names="value")
        self.widget = w.VBox([self.group, self.quantity, self.view])
        self.render()

    def render(self) -> None:
        rows = (self.batch.group == self.group.value).nonzero().flatten().tolist()
        note = ""
        if self.quantity.value == "kl":
            note = (f"<div style='font-size:90%'>KL of the current policy against the "
                    f"{self.stats['kl_against']}</div>")
        self.view.value = note + token_html(self.trainer.policy.tokenizer, self.batch,
                                            self.stats, self.quantity.value, rows)

    def static_html(self) -> str:
        return self.view.value


class RolloutInspector(LiveAndStatic):
    """One prompt's group of responses side by side; zero-signal groups flagged."""

    def __init__(self, trainer, batch, advantages=None, *, group: int | None = None):
        import ipywidgets as w

        self.trainer, self.batch, self.advantages = trainer, batch, advantages
        self.zero_signal = set(batch.zero_signal_groups())
        groups = sorted(set(batch.group.tolist()))
        if group is None:  # open on a group that carries signal, if there is one
            group = next((g for g in groups if g not in self.zero_signal), groups[0])
        self.group = w.Dropdown(
            options=[(group_label(batch, g, self.zero_signal), g) for g in groups],
            value=group, description="group", layout=w.Layout(width="60%"))
        self.header = w.HTML()
        self.table = w.HTML()
        self.group.observe(lambda _: self.render(), names="value")
        self.widget = w.VBox([self.group, self.header, self.table])
        self.render()

    def render(self) -> None:
        g = self.group.value
        rows = group_rows(self.batch, self.advantages, g)
        first = rows[0]["row"]
        n_groups = len(set(self.batch.group.tolist()))
        flag = ("<span style='color:#b00'>⚠ all rewards equal: zero std, no learning signal "
                "for GRPO</span>" if g in self.zero_signal else "")
        self.header.value = (
            f"<div><b>prompt</b> <code>{html.escape(self.batch.prompts[first])}</code> "
            f"— answer <code>{html.escape(str(self.batch.rows[first].get('answer')))}</code> "
            f"{flag}<br><i>{len(self.zero_signal)}/{n_groups} groups without signal in this "
            f"batch</i></div>")
        self.table.value = table_html(rows)

    def static_html(self) -> str:
        return self.header.value + self.table.value


# ------------------------------------------------------------------------------------ DPO pairs
PAIR_QUANTITIES = ("log_ratio", "logprob", "reference_logprob", "kl")


def pair_stats(scores) -> dict:
    """Per-token ``[B, S]`` quantities of scored pairs (``PreferenceScores``): ``log_ratio`` =
    log π - log π_ref (summed over a response: its implicit reward ρ), ``logprob``,
    ``reference_logprob`` and the exact ``kl`` to the reference."""
    b = scores.batch
    return {"log_ratio": scores.log_ratios(), "logprob": scores.logprobs,
            "reference_logprob": b.reference_logprobs * b.token_mask, "kl": scores.kl}


def pair_html(tokenizer, scores, quantity: str, pair: int) -> str:
    """HTML: the chosen row above the rejected one, each token a coloured span (title = value),
    each row with its ρ, then the margin and the pair's loss."""
    b, values = scores.batch, pair_stats(scores)[quantity]
    rows = [2 * pair, 2 * pair + 1]
    mask = b.token_mask
    neutral = 0.0 if quantity in ("log_ratio", "kl") else float(values[rows][mask[rows] > 0].mean())
    picked = values[rows][mask[rows] > 0]
    scale = float((picked - neutral).abs().max()) if picked.numel() else 1.0
    lines = []
    for r, side in zip(rows, ("chosen", "rejected")):
        spans = []
        for t in (mask[r] > 0).nonzero().flatten().tolist():
            tok = tokenizer.decode([int(b.input_ids[r, t])])
            v = float(values[r, t])
            spans.append(f"<span title='{quantity} = {v:.4g}' style='background:"
                         f"{colour(v, neutral, scale)};padding:1px 2px;margin:0 1px;"
                         f"border-radius:2px'>{html.escape(tok) or '∅'}</span>")
        lines.append(f"<div style='font-family:monospace;margin:2px 0'><b>{side:>8}</b> ρ = "
                     f"{float(scores.rewards[r]):+.4f} │ {''.join(spans)}</div>")
    kept = bool(b.kept[pair])
    lines.append(f"<div style='font-size:90%'>margin ρ_c − ρ_r = {float(scores.margins[pair]):+.4f}"
                 f", loss −log σ(β·margin) = {float(scores.losses[pair]):.4f} (β = {scores.beta:g})"
                 f"{'' if kept else ' — an empty slot: not in the loss'}</div>")
    legend = (f"<div style='font-size:90%'><b>{html.escape(b.prompts[2 * pair])}</b> — colour: "
              f"<b>{quantity}</b>, neutral {neutral:.3g} (blue below, red above), full colour at "
              f"±{scale:.3g}; the colours of a row sum to its ρ with log_ratio</div>")
    return legend + "".join(lines)


class PairView(LiveAndStatic):
    """DPO's pairs, token by token: pick a pair and what colours its tokens.

    Args: ``trainer`` (a DPOTrainer), ``batch`` (a PreferenceBatch), ``scores`` (its
    ``compute_loss``; computed here, reference log-probs first, if None), ``quantity`` one of
    ``PAIR_QUANTITIES``, ``pair`` (``group`` is accepted too, as TokenView's name for it).
    """

    def __init__(self, trainer, batch, scores=None, *, quantity: str = "log_ratio",
                 pair: int | None = None, group: int | None = None, kl_type: str | None = None):
        import ipywidgets as w

        if batch.reference_logprobs is None:
            trainer.reference_logprobs(batch)
        self.trainer, self.batch = trainer, batch
        self.scores = scores if scores is not None else trainer.compute_loss(batch)
        kept = batch.kept.tolist()
        first = next((k for k, ok in enumerate(kept) if ok), 0)
        options = [(f"pair {k}: {batch.prompts[2 * k][:40]!r}"
                    f"{'' if ok else ' (empty)'}", k) for k, ok in enumerate(kept)]
        start = pair if pair is not None else group if group is not None else first
        self.pair = w.Dropdown(options=options, value=start, description="pair")
        self.quantity = w.ToggleButtons(options=list(PAIR_QUANTITIES),
                                        value="log_ratio" if quantity == "advantage"
                                        else quantity, description="colour by")
        self.view = w.HTML()
        self.pair.observe(lambda _: self.render(), names="value")
        self.quantity.observe(lambda _: self.render(), names="value")
        self.widget = w.VBox([self.pair, self.quantity, self.view])
        self.render()

    def render(self) -> None:
        self.view.value = pair_html(self.trainer.policy.tokenizer, self.scores,
                                    self.quantity.value, self.pair.value)

    def static_html(self) -> str:
        return self.view.value
