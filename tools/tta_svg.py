"""A standalone SVG line plot of accuracy curves (no plotting package): one line per (side, seed),
a colour per side and a dash pattern per seed, axes with round ticks, a legend.

    write_curves_svg("curves.svg", [("rlnb seed 0", "rlnb", 0, [(seconds, percent), ...]), ...])
"""

from __future__ import annotations

import math
from html import escape

COLOURS = {"rlnb": "#1f5fa8", "trl": "#d2691e"}
DASHES = ("", "7 4", "2 3", "10 3 2 3")
W, H = 760, 440
LEFT, RIGHT, TOP, BOTTOM = 64, 190, 44, 52  # margins: the legend sits on the right


def nice_step(span: float, ticks: int = 6) -> float:
    """A round tick spacing (1, 2 or 5 x 10^k) giving about ``ticks`` ticks over ``span``."""
    raw = max(span, 1e-9) / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def write_curves_svg(path: str, series: list[tuple[str, str, int, list[tuple[float, float]]]],
                     title: str, x_label: str = "training seconds",
                     y_label: str = "held-out accuracy (%)") -> None:
    """``series``: (label, side, seed index, [(x, y percent)]) lines; y spans 0-100."""
    x_max = max((x for *_, pts in series for x, _ in pts), default=1.0) or 1.0
    step = nice_step(x_max)
    x_top = step * math.ceil(x_max / step)
    plot_w, plot_h = W - LEFT - RIGHT, H - TOP - BOTTOM

    def sx(x):
        return LEFT + plot_w * x / x_top

    def sy(y):
        return TOP + plot_h * (1 - y / 100)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2:.0f}" y="22" text-anchor="middle" font-size="14">'
           f'{escape(title)}</text>']
    for i in range(int(round(x_top / step)) + 1):  # vertical grid and x ticks
        x = sx(i * step)
        out.append(f'<line x1="{x:.1f}" y1="{TOP}" x2="{x:.1f}" y2="{TOP + plot_h}" '
                   'stroke="#e4e4e4"/>')
        out.append(f'<text x="{x:.1f}" y="{TOP + plot_h + 18}" text-anchor="middle">'
                   f'{i * step:g}</text>')
    for y in range(0, 101, 20):  # horizontal grid and y ticks
        out.append(f'<line x1="{LEFT}" y1="{sy(y):.1f}" x2="{LEFT + plot_w}" y2="{sy(y):.1f}" '
                   'stroke="#e4e4e4"/>')
        out.append(f'<text x="{LEFT - 8}" y="{sy(y) + 4:.1f}" text-anchor="end">{y}</text>')
    out.append(f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" '
               'stroke="#444"/>')
    out.append(f'<text x="{LEFT + plot_w / 2:.0f}" y="{H - 12}" text-anchor="middle">'
               f'{escape(x_label)}</text>')
    out.append(f'<text transform="translate(18 {TOP + plot_h / 2:.0f}) rotate(-90)" '
               f'text-anchor="middle">{escape(y_label)}</text>')
    for n, (label, side, seed_index, pts) in enumerate(series):
        colour, dash = COLOURS.get(side, "#555"), DASHES[seed_index % len(DASHES)]
        style = f'stroke="{colour}" stroke-width="2" fill="none"' + (
            f' stroke-dasharray="{dash}"' if dash else "")
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{coords}" {style}/>')
        for x, y in pts:
            out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2" fill="{colour}"/>')
        ly = TOP + 10 + 20 * n  # the legend entry
        lx = LEFT + plot_w + 16
        out.append(f'<line x1="{lx}" y1="{ly}" x2="{lx + 34}" y2="{ly}" {style}/>')
        out.append(f'<text x="{lx + 42}" y="{ly + 4}">{escape(label)}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")
