"""Offline maths for HTML exports: a local MathJax next to the exported page.

nbconvert's HTML template loads MathJax from a CDN, so an export opened without a network shows
every formula as raw LaTeX. The ``jupyter-server-mathjax`` package (the ``notebook`` extra) ships
MathJax 2.7 as plain files; ``local_mathjax(folder)`` puts the part an export needs into
``folder/mathjax/`` and returns the relative URL to hand to the exporter.

Implementation choices:
1) Hard links where the file system allows them (a sweep exports one page per run), else copies.
   Left out: the SVG output, the accessibility explorer and the translations (about 9 of the
   package's 12 MB); what is kept is about 3 MB: the TeX input, the HTML-CSS output and its
   STIX-Web fonts, the menu and zoom extensions.
2) The package ships the STIX-Web fonts only, not MathJax's own TeX fonts, so a small config file
   (``config/rlnb.js``, written beside the package's) makes HTML-CSS use them, as the classic
   Jupyter notebook configured the same files.
3) Without the package the export keeps nbconvert's CDN URL (``None`` is returned).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

FOLDER = "mathjax"
# MathJax's own config file names (without .js), loaded in order: the package's TeX + HTML-CSS
# bundle, the Safe extension (as nbconvert's default URL has it), then ours (choice 2)
CONFIGS = ("TeX-AMS-MML_HTMLorMML-full", "Safe", "rlnb")
LEFT_OUT = ("localization", "jax/output/SVG", "extensions/a11y")
FONT_CONFIG = """MathJax.Hub.Config({
  "HTML-CSS": {availableFonts: [], preferredFont: null, imageFont: null, webFont: "STIX-Web"}
});
MathJax.Ajax.loadComplete("[MathJax]/config/rlnb.js");
"""


def mathjax_source() -> Path | None:
    """The MathJax files of the installed ``jupyter-server-mathjax`` package, or None."""
    spec = importlib.util.find_spec("jupyter_server_mathjax")  # found, not imported
    if spec is None or not spec.submodule_search_locations:
        return None
    static = Path(next(iter(spec.submodule_search_locations))) / "static"
    return static if (static / "MathJax.js").is_file() else None


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links not allowed
        shutil.copy2(src, dst)


def local_mathjax(folder: str | Path) -> str | None:
    """Put MathJax into ``folder/mathjax`` (once: an existing copy is kept) and return the URL
    of its loader relative to ``folder``, for ``HTMLExporter(mathjax_url=...)``; None if the
    package is not installed."""
    source = mathjax_source()
    if source is None:
        return None
    target = Path(folder) / FOLDER
    if not (target / "config" / "rlnb.js").is_file():
        skip = {source / part for part in LEFT_OUT}
        shutil.copytree(source, target, copy_function=_link_or_copy, dirs_exist_ok=True,
                        ignore=lambda d, names: [n for n in names if Path(d) / n in skip])
        (target / "config" / "rlnb.js").write_text(FONT_CONFIG, encoding="utf-8")
    return f"{FOLDER}/MathJax.js?config={','.join(CONFIGS)}"
