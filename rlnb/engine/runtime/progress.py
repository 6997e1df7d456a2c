"""Progress bars that end, in a terminal and in a notebook.

    bar = progress_bar(total=1500, desc="GRPO", unit="step"); ...; bar.update(); ...; bar.close()

A terminal gets tqdm's text bar (on stderr, redrawn in place, ended by ``close``). A notebook gets
tqdm's widget, whose output also carries a ``text/plain`` twin: what a saved, exported or reopened
notebook shows. tqdm fills that twin once, when the bar is displayed, so every saved notebook would
show its bars frozen at 0%.

Implementation choices:
1) In a notebook the bar is displayed under a display id, and ``close`` re-sends it under that id,
   so the saved output's text becomes the bar's final state (``GRPO: 100%|...| 1500/1500``, or
   where a Stop ended it). The widget itself is unchanged while it runs.
2) This module is the one place the core touches IPython, and only when tqdm has already chosen
   its notebook bar (so a kernel and ipywidgets are there): ``import rlnb`` and headless training
   never import either. A departure from the layering rule (the core imports nothing from
   Jupyter) that keeps every loop's progress bar honest without the widgets layer reaching into
   the loop.
"""

from __future__ import annotations


def progress_bar(*, total: int, desc: str, unit: str = "step"):
    """A ``tqdm`` bar; in a notebook its saved output shows where it ended (choice 1). Always
    ``close()`` it (a ``try/finally`` around the loop), or the saved twin keeps its first state."""
    from tqdm.auto import tqdm

    try:
        from tqdm.notebook import tqdm_notebook
    except ImportError:  # tqdm without its notebook module: the text bar is all there is
        tqdm_notebook = None
    if tqdm_notebook is None or not issubclass(tqdm, tqdm_notebook):
        return tqdm(total=total, desc=desc, unit=unit)
    from IPython.display import display

    bar = tqdm(total=total, desc=desc, unit=unit, display=False)
    handle = display(bar.container, display_id=True)
    close = bar.close

    def close_and_save():
        if bar.disable:  # closed already
            return
        close()
        if handle is not None:  # re-send: the saved text twin becomes the final state
            handle.update(bar.container)

    bar.close = close_and_save
    return bar
