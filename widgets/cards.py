"""Metric cards: each plotted metric's formula, expected range and what to check.

The text is not written here: ``docs/metrics.md`` documents every metric key once, in tables
with the columns key | formula | expected range | what to check, and a test fails if a key that
rlnb emits has no row there. This module reads those tables, so a card can never disagree
with the docs.

    card = metric_card("train/kl_penalty")   # MetricCard(key, formula, expected_range, check)
    card.html()                              # a small HTML block for an info panel

Loss metrics are documented without their ``train/`` prefix (``kl_penalty``), as the loss
function returns them; ``metric_card`` looks the key up with and without it.
"""

from __future__ import annotations

import functools
import html
import re
from dataclasses import dataclass
from pathlib import Path

_ROW = re.compile(r"^\|\s*`([^`]+)`\s*\|(.*)\|\s*$")


@dataclass(frozen=True)
class MetricCard:
    key: str
    formula: str
    expected_range: str
    check: str

    def html(self, title: str | None = None) -> str:
        def md(text: str) -> str:  # `code` spans only; everything else escaped
            return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))

        return (
            f'<div class="rlnb-card"><b>{html.escape(title or self.key)}</b> '
            f"<code>{html.escape(self.key)}</code><br>"
            f"<b>formula</b>: {md(self.formula)}<br>"
            f"<b>expected</b>: {md(self.expected_range)}<br>"
            f"<b>if it looks wrong</b>: {md(self.check)}</div>"
        )


def docs_path() -> Path | None:
    """``docs/metrics.md`` of this checkout (rlnb is used from a clone: notebooks live there)."""
    import rlnb

    for root in (Path(rlnb.__file__).resolve().parents[1], Path.cwd(), Path.cwd().parent):
        path = root / "docs" / "metrics.md"
        if path.is_file():
            return path
    return None


@functools.lru_cache(maxsize=1)
def all_cards() -> dict[str, MetricCard]:
    """Every documented metric key -> its card (the 4-column tables of docs/metrics.md)."""
    path = docs_path()
    if path is None:
        return {}
    cards: dict[str, MetricCard] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        cells = [c.strip() for c in m.group(2).split(" | ")]
        if len(cells) != 3:
            continue
        cards.setdefault(m.group(1), MetricCard(m.group(1), *cells))
    return cards


def metric_card(key: str) -> MetricCard:
    """The card of ``key`` (``train/kl_penalty`` finds the loss row ``kl_penalty``)."""
    cards = all_cards()
    for candidate in (key, key.removeprefix("train/")):
        if candidate in cards:
            card = cards[candidate]
            return MetricCard(key, card.formula, card.expected_range, card.check)
    where = docs_path() or "docs/metrics.md (not found next to this rlnb checkout)"
    raise KeyError(f"metric '{key}' has no row in {where}")
