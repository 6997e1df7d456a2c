"""JupyterLab in a real headless Chromium: the tutorial's dashboard and stepper render and step."""

import json
import re
from pathlib import Path

import pytest

for module in ("playwright.sync_api", "jupyterlab", "ipywidgets", "plotly", "anywidget"):
    pytest.importorskip(module, reason=f"{module} is missing: pip install -e '.[notebook,dev]'")

# imported after the skips above, which name what is missing
from browser import (  # noqa: E402
    PLOTLY_GRAPH,
    button_labels,
    chromium,
    click_button,
    dialogs,
    error_outputs,
    find_chromium,
    jupyter_lab,
    notebook_session,
    plot_traces,
    run_all_cells,
    wait_for_more_points,
    widget_texts,
)
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError  # noqa: E402

pytestmark = pytest.mark.skipif(
    find_chromium() is None,
    reason="no system Chromium (apt-get install chromium; never `playwright install`)",
)

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "notebooks" / "01_grpo_step_by_step.ipynb"
# The stepper's button descriptions; "Run N" may carry its number ("Run 10").
STEPPER_LABELS = ["Rollout", "Advantages", "Update", "Step", r"Run (N|\d+)", "Stop"]
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    with jupyter_lab(tmp_path_factory.mktemp("lab")) as server:
        yield server


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with chromium(tmp_path_factory.mktemp("chromium-profile")) as context:
        yield context


def code_cell(source: str) -> dict:
    return {"cell_type": "code", "metadata": {}, "source": source, "outputs": [],
            "execution_count": None}


def write_notebook(path: Path, cells: list[dict]) -> None:
    cells = [{"id": f"cell-{i}", **cell} for i, cell in enumerate(cells)]  # nbformat 4.5 ids
    path.write_text(json.dumps({
        "cells": cells, "metadata": {"kernelspec": KERNELSPEC}, "nbformat": 4,
        "nbformat_minor": 5,
    }))


SMOKE_CELLS = [
    code_cell("import ipywidgets as widgets\nimport plotly.graph_objects as go"),
    code_cell(
        "fig = go.FigureWidget(go.Scatter(x=[0], y=[0.0], mode='lines+markers', name='reward'))\n"
        "step = widgets.Button(description='Step')\n"
        "\n"
        "def on_step(_):\n"
        "    trace = fig.data[0]\n"
        "    with fig.batch_update():\n"
        "        trace.x = (*trace.x, len(trace.x))\n"
        "        trace.y = (*trace.y, len(trace.y) / 10)\n"
        "\n"
        "step.on_click(on_step)\n"
        "widgets.VBox([step, fig])"
    ),
]


def test_lab_renders_figurewidget_and_button_callback(lab, browser, tmp_path):
    """The browser stack itself: widget extensions load, a FigureWidget draws, a click on a
    Button runs its Python callback in the kernel, and the plot redraws with the new point."""
    write_notebook(lab.root / "smoke.ipynb", SMOKE_CELLS)
    with notebook_session(browser, lab, "smoke.ipynb", tmp_path) as nb:
        run_all_cells(nb.page, timeout=90)
        assert error_outputs(nb.page) == []
        nb.page.wait_for_selector(PLOTLY_GRAPH, timeout=60_000)
        assert plot_traces(nb.page) == [
            {"traces": 1, "name": "reward", "points": 1, "title": None, "meta": None}
        ]
        assert button_labels(nb.page) == ["Step"]
        click_button(nb.page, "Step")
        assert wait_for_more_points(nb.page, 0, than=1, timeout=30) == 2
        click_button(nb.page, "Step")
        assert wait_for_more_points(nb.page, 0, than=2, timeout=30) == 3


def fast_copy_of_tutorial(dst: Path) -> None:
    """Copy the tutorial with its parameters cell switched to `fast = True` and the kernel set
    to the lab's python3 (whatever kernel name the notebook was saved with)."""
    nb = json.loads(TUTORIAL.read_text())
    tagged = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    assert len(tagged) == 1, f"{TUTORIAL.name} needs exactly one cell tagged 'parameters'"
    cell = tagged[0]
    source = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
    source, n = re.subn(r"^fast\s*=\s*False\b", "fast = True", source, flags=re.M)
    assert n == 1, f"{TUTORIAL.name}'s parameters cell needs a line `fast = False`:\n{source}"
    cell["source"] = source
    nb["metadata"]["kernelspec"] = KERNELSPEC
    dst.write_text(json.dumps(nb))


def dashboard_index(traces: list[dict]) -> int:
    """The dashboard's graph: the one rlnb.widgets tags with layout.meta "rlnb-dashboard", else
    the first whose first trace or title says reward, else the first graph in the page."""
    for i, t in enumerate(traces):
        if t["meta"] == "rlnb-dashboard":
            return i
    for i, t in enumerate(traces):
        if re.search("reward", f"{t['name']} {t['title']}", re.I):
            return i
    return 0


def test_grpo_step_by_step_dashboard_and_stepper_in_the_browser(lab, browser, tmp_path):
    """01_grpo_step_by_step with fast=True: Run All Cells raises nothing, the live dashboard
    and the stage stepper render, and a click on "Step" runs one GRPO step that adds one point
    to the dashboard's reward trace."""
    fast_copy_of_tutorial(lab.root / TUTORIAL.name)
    with notebook_session(browser, lab, TUTORIAL.name, tmp_path) as nb:
        run_all_cells(nb.page, timeout=180)
        assert error_outputs(nb.page) == []
        assert dialogs(nb.page) == []

        nb.page.wait_for_selector(PLOTLY_GRAPH, timeout=60_000)
        traces = plot_traces(nb.page)
        assert traces and all(t["traces"] >= 1 for t in traces), traces
        labels = button_labels(nb.page)
        for label in STEPPER_LABELS:
            assert any(re.fullmatch(label, text) for text in labels), (label, labels)

        graph = dashboard_index(traces)
        before = traces[graph]["points"]
        assert before is not None, f"the dashboard's first trace has no x values: {traces}"
        click_button(nb.page, "Step")
        try:
            after = wait_for_more_points(nb.page, graph, than=before, timeout=120)
        except PlaywrightTimeoutError:  # the stepper shows a failed step's error in its view
            raise AssertionError(f"no new dashboard point 120 s after Step (still {before}); "
                                 f"widget texts: {widget_texts(nb.page)}") from None
        assert after == before + 1
        assert error_outputs(nb.page) == []
