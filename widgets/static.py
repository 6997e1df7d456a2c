"""Static twins of live widgets: outputs that still render with no kernel.

A saved notebook (opened later, exported to HTML by ``rlnb run``, or viewed on a forge) has no
live kernel, so ipywidgets and ``FigureWidget`` views are gone. Everything rlnb displays
therefore also carries a static representation:

- ``show(fig)`` displays a plotly figure as two mime types at once: the plotly JSON (JupyterLab
  draws it with the plotly extension shipped in the ``plotly`` wheel) and HTML that draws it with
  plotly.js (the HTML export and other front ends use that one).
- ``ensure_plotlyjs()`` puts plotly.js itself, inline, into the first output that needs it, once
  per kernel: no CDN, so exports render offline.
- ``LiveAndStatic`` is the mimebundle of a live widget plus an HTML snapshot of it. JupyterLab
  picks the live view while the kernel runs; the HTML export (which drops widget views when no
  widget state is saved, as ``rlnb run`` arranges) and untrusted notebooks fall back to the HTML.

Implementation choice: plotly.js is embedded rather than fetched, which makes an executed
notebook about 4.7 MB larger; that is the price of exports that render without a network.
"""

from __future__ import annotations

import html
import json
from typing import Any

_PLOTLYJS_SHOWN = False


def ensure_plotlyjs() -> None:
    """Display plotly.js inline once per kernel (before the first static figure)."""
    global _PLOTLYJS_SHOWN
    if _PLOTLYJS_SHOWN:
        return
    from IPython.display import HTML, display
    from plotly.offline import get_plotlyjs

    # Hidden; defines window.Plotly for the figure scripts that follow in the page. With an AMD
    # loader on the page (nbconvert's HTML template loads require.js when online) plotly.js would
    # register as a module instead, so `define` is hidden while it loads.
    display(HTML(
        '<div style="display:none"><script>window.__rlnbDefine = window.define; '
        "window.define = undefined;</script>"
        f"<script>{get_plotlyjs()}</script>"
        "<script>window.define = window.__rlnbDefine;</script></div>"
    ))
    _PLOTLYJS_SHOWN = True


def figure_html(fig, *, height: int | None = None) -> str:
    """An HTML fragment that draws ``fig`` with the page's plotly.js (see ``ensure_plotlyjs``)."""
    import plotly.io as pio

    return pio.to_html(
        fig,
        include_plotlyjs=False,
        include_mathjax=False,
        full_html=False,
        default_width="100%",
        default_height=height or fig.layout.height or 420,
        validate=False,
    )


def figure_bundle(fig) -> dict[str, Any]:
    """Mimebundle of a figure: plotly JSON for JupyterLab, HTML + plotly.js for the rest."""
    ensure_plotlyjs()
    return {
        "application/vnd.plotly.v1+json": json.loads(fig.to_json()),
        "text/html": figure_html(fig),
        "text/plain": f"<plotly figure: {len(fig.data)} traces>",
    }


def show(fig) -> None:
    """Display a plotly figure so that it renders live, in saved notebooks and in HTML exports."""
    from IPython.display import display

    display(figure_bundle(fig), raw=True)


def table_html(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """A small HTML table (escaped), for static snapshots that need no script at all."""
    if not rows:
        return "<p><i>(empty)</i></p>"
    columns = columns or list(rows[0])
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows
    )
    return f'<table class="rlnb-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)


class LiveAndStatic:
    """Displays ``widget`` live, with ``static_html()`` as the no-kernel fallback.

    Subclasses set ``self.widget`` (an ipywidgets container) and implement ``static_html``.
    ``refresh_static()`` re-sends the display so that the saved output holds a fresh snapshot
    (call it after a long run; it is not needed for the live view).
    """

    widget: Any
    _handle: Any = None

    def static_html(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = dict(self.widget._repr_mimebundle_(include=include, exclude=exclude) or {})
        ensure_plotlyjs()
        bundle["text/html"] = self.static_html()
        return bundle

    def display(self):
        """Display with a display id, so ``refresh_static`` can update this output in place."""
        from IPython.display import display

        self._handle = display(self, display_id=True)
        return None

    def refresh_static(self) -> None:
        if self._handle is not None:
            self._handle.update(self)
