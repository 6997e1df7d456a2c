"""HTML exports typeset their formulas offline: a local MathJax beside the page, checked in a
headless Chromium whose every non-file request is aborted."""

import json
import re
from pathlib import Path

import pytest

pytest.importorskip("nbconvert")
pytest.importorskip("jupyter_server_mathjax", reason="pip install -e '.[notebook]'")

from paths import ROOT

from rlnb.run.notebooks.execute import export_html  # noqa: E402
from rlnb.run.notebooks.mathjax import local_mathjax  # noqa: E402

TUTORIAL = ROOT / "notebooks" / "03_policy_loss_and_kl.ipynb"  # the most formulas
# MathJax 2's HTML-CSS output: one .MathJax span per formula, in a .MathJax_Display for $$..$$
FORMULA, DISPLAY = ".MathJax", ".MathJax_Display"
RAW_TEX = re.compile(r"\$[^$\n]+\$|\\frac|\\rho|\\operatorname")


def markdown_notebook(path: Path, text: str) -> Path:
    path.write_text(json.dumps({
        "cells": [{"cell_type": "markdown", "id": "m0", "metadata": {}, "source": text}],
        "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                    "display_name": "Python 3"}},
        "nbformat": 4, "nbformat_minor": 5,
    }))
    return path


def test_export_points_at_a_local_mathjax_not_a_cdn(tmp_path):
    nb = markdown_notebook(tmp_path / "maths.ipynb", "Inline $\\rho_t$ and $$A_i = r_i - b_i$$")
    html = export_html(nb, tmp_path / "out" / "page.html")
    text = html.read_text()
    loader = re.search(r'<script src="([^"]*MathJax\.js[^"]*)"', text)
    assert loader and loader.group(1).startswith("mathjax/MathJax.js?config="), loader
    assert "cdnjs.cloudflare.com/ajax/libs/mathjax" not in text
    # nor any other script or style from the network (nbconvert's template loads require.js)
    assert not re.findall(r'(?:src|href)="(?:https?:)?//[^"]*"', text)
    assert "require.min.js" not in text
    folder = tmp_path / "out" / "mathjax"
    assert (folder / "MathJax.js").is_file() and (folder / "config" / "rlnb.js").is_file()
    for config in loader.group(1).split("config=")[1].split(","):  # every config it names
        assert (folder / "config" / f"{config}.js").is_file(), config
    assert (folder / "fonts" / "HTML-CSS" / "STIX-Web" / "woff").is_dir()
    assert not (folder / "localization").exists() and not (folder / "jax" / "output" / "SVG").exists()
    # a second export into the same folder reuses the copy (and says so by its URL)
    assert local_mathjax(tmp_path / "out") == loader.group(1)


def test_without_the_package_the_export_keeps_nbconvert_default(tmp_path, monkeypatch):
    import rlnb.run.notebooks.mathjax as mathjax

    monkeypatch.setattr(mathjax, "mathjax_source", lambda: None)
    html = export_html(markdown_notebook(tmp_path / "m.ipynb", "$x$"), tmp_path / "m.html")
    assert "cdnjs.cloudflare.com/ajax/libs/mathjax" in html.read_text()
    assert not (tmp_path / "mathjax").exists()


# --- in a browser with the network off

def _offline_page(browser, html: Path):
    """Open ``html`` with every request that is not a file aborted; return (page, requests)."""
    page = browser.new_page()
    requests: list[str] = []

    def route(r):
        requests.append(r.request.url)
        if r.request.url.startswith("file://"):
            r.continue_()
        else:
            r.abort()

    page.route("**/*", route)
    page.goto(html.as_uri())
    return page, requests


def _wait_typeset(page, at_least: int) -> None:
    page.wait_for_function(
        """([sel, n]) => document.querySelectorAll(sel).length >= n
            && window.MathJax && MathJax.Hub && MathJax.Hub.queue.pending === 0
            && !MathJax.Hub.queue.running""",
        arg=[FORMULA, at_least], timeout=60_000, polling=200,
    )


@pytest.fixture(scope="module")
def offline_browser(tmp_path_factory):
    pytest.importorskip("playwright.sync_api")
    from browser import chromium, find_chromium

    if find_chromium() is None:
        pytest.skip("no system Chromium (apt-get install chromium; never `playwright install`)")
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


@pytest.mark.browser
def test_an_exported_tutorial_typesets_every_formula_offline(offline_browser, tmp_path):
    """Notebook 03 exported (unexecuted: its markdown is what holds the formulas), opened from
    disk with the network off: each $$..$$ block is a typeset display, every inline formula a
    typeset span, and no TeX source is left in the rendered markdown."""
    source = json.loads(TUTORIAL.read_text())
    markdown = "".join("".join(c["source"]) for c in source["cells"] if c["cell_type"] == "markdown")
    displays = markdown.count("$$") // 2
    inline = len(re.findall(r"(?<!\$)\$[^$\n]+\$(?!\$)", markdown.replace("$$", "\n")))
    assert displays >= 5 and inline >= 20, (displays, inline)
    html = export_html(TUTORIAL, tmp_path / "run" / "notebook.html")
    page, requests = _offline_page(offline_browser, html)
    try:
        _wait_typeset(page, displays + inline)
        assert page.locator(DISPLAY).count() == displays
        assert page.locator(FORMULA).count() >= displays + inline
        # MathJax's error box ("Math Processing Error") would also count as a .MathJax span
        assert page.locator(".MathJax_Error, .merror").count() == 0
        text = "\n".join(page.locator(".jp-RenderedMarkdown").all_inner_texts())
        assert not RAW_TEX.search(text), RAW_TEX.search(text).group(0)
        fetched = [u for u in requests if "mathjax" in u.lower()]
        assert fetched and all(u.startswith("file://") for u in fetched), fetched
        # the page asked the network for nothing (every such request was aborted)
        assert [u for u in requests if not u.startswith("file://")] == []
        # the glyphs come from the STIX-Web fonts shipped beside the page
        assert any("STIX-Web" in u and u.split("?")[0].endswith(".woff") for u in fetched)
    finally:
        page.close()


def test_a_folder_holding_only_an_export_still_counts_as_empty(tmp_path):
    """`rlnb run` exports into the run dir; the MathJax beside the export is one of the notebook
    files (RunDir.NOTEBOOK_FILES), so a run can still start there."""
    from rlnb.run.store.rundir import RunDir

    nb = markdown_notebook(tmp_path / "notebook.ipynb", "$x$")
    export_html(nb, tmp_path / "notebook.html")
    assert (tmp_path / "mathjax").is_dir()
    run = RunDir(tmp_path, config={"seed": 0})
    assert run.config_path.is_file()


@pytest.mark.browser
@pytest.mark.notebook
def test_an_executed_run_with_figures_and_widgets_loads_nothing_from_the_network(
        offline_browser, tmp_path):
    """What `rlnb run` leaves (an executed notebook's notebook.html) opened from disk with the
    network off: the plotly figure draws, the formula typesets, a widget's output falls back to
    text, no script fails, and the page asks the network for nothing (nbconvert's template
    loads require.js from a CDN: the export drops it; plotly.js is inline)."""
    from rlnb.run.notebooks.execute import run_notebook

    cells = [
        {"cell_type": "markdown", "id": "m0", "metadata": {}, "source": "Ratio $\\rho = e^{\\ell}$"},
        {"cell_type": "code", "id": "c0", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import plotly.graph_objects as go\nfrom rlnb.widgets import show\n"
                   "show(go.Figure(go.Scatter(y=[1, 3, 2], name='reward')))"},
        {"cell_type": "code", "id": "c1", "metadata": {}, "execution_count": None, "outputs": [],
         "source": "import ipywidgets\nipywidgets.IntProgress(value=3, max=4)"},
    ]
    nb = tmp_path / "figures.ipynb"
    nb.write_text(json.dumps({
        "cells": cells, "nbformat": 4, "nbformat_minor": 5,
        "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                    "display_name": "Python 3"}}}))
    result = run_notebook(nb, run_dir=tmp_path / "run", progress=False)
    assert result.ok, result.error
    html = result.html
    text = html.read_text()
    assert "require.min.js" not in text and "plotly.js v" in text
    page, requests = _offline_page(offline_browser, html)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
        _wait_typeset(page, 1)
        assert page.locator(".js-plotly-plot .scatterlayer .trace").count() == 1
        assert "IntProgress" in page.locator("body").inner_text()
        assert errors == []
        assert [u for u in requests if not u.startswith("file://")] == []
    finally:
        page.close()
