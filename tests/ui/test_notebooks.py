"""Every notebook in notebooks/: committed clean, one parameters cell, runs with fast=True."""

import ast
import re
import sys
from pathlib import Path

import pytest
from paths import ROOT

nbformat = pytest.importorskip("nbformat")
papermill = pytest.importorskip("papermill")

NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))  # whatever exists: new notebooks join themselves
IDS = [path.stem for path in NOTEBOOKS]
REQUIRED_PARAMETERS = {"fast", "seed", "run_dir", "overrides"}
PLOTLY_JSON = "application/vnd.plotly.v1+json"
# A hang guard per cell, not a timing check: a fast run takes well under a minute in all.
CELL_TIMEOUT_S = 300
ANSI = re.compile(r"\x1b\[[0-9;]*m")
# notebooks of an optional extra (pip install -e ".[envs]"): what they import from it
NEEDS = {"10_tasks_from_the_field": ("reasoning_gym", "verifiers")}


def read(path: Path):
    return nbformat.read(path, as_version=4)


def parameters_cells(nb) -> list:
    return [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]


def outputs(nb):
    """``(cell index, output)`` for every output of every code cell."""
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            for out in cell.get("outputs", []):
                yield i, out


def mime_outputs(nb, mime: str) -> list:
    return [out["data"][mime] for _, out in outputs(nb) if mime in out.get("data", {})]


def stdout(nb) -> str:
    return "".join(
        out["text"] for _, out in outputs(nb)
        if out["output_type"] == "stream" and out.get("name") == "stdout"
    )


# --- committed form


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_without_outputs_or_execution_counts(path):
    nb = read(path)
    dirty = [
        i for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} carry outputs or execution counts; clear them before "
        f"committing (jupyter nbconvert --clear-output --inplace notebooks/{path.name})"
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_title_kernelspec_and_one_parameters_cell_of_flat_literals(path):
    nb = read(path)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.source.startswith("# "), (
        f"{path.name}: the first cell must be a markdown title starting with '# '"
    )
    kernelspec = nb.metadata.get("kernelspec", {})
    assert kernelspec.get("name") == "python3" and kernelspec.get("language") == "python", (
        f"{path.name}: metadata.kernelspec must name the python3 kernel, got {kernelspec}"
    )
    cells = parameters_cells(nb)
    assert len(cells) == 1, f"{path.name}: {len(cells)} cells tagged 'parameters', expected 1"
    assert cells[0].cell_type == "code"
    names = set()
    for node in ast.parse(cells[0].source).body:
        assert isinstance(node, ast.Assign) and len(node.targets) == 1, (
            f"{path.name}: the parameters cell holds only `name = literal` lines, found "
            f"{ast.unparse(node)!r}"
        )
        target = node.targets[0]
        assert isinstance(target, ast.Name), f"{path.name}: {ast.unparse(node)!r}"
        try:  # flat literals, so papermill (and rlnb sweep) can override each one
            ast.literal_eval(node.value)
        except ValueError:
            pytest.fail(f"{path.name}: parameter {target.id} is not a literal: {ast.unparse(node)}")
        names.add(target.id)
    missing = REQUIRED_PARAMETERS - names
    assert not missing, f"{path.name}: the parameters cell does not define {sorted(missing)}"
    # papermill must see every one (it silently skips a line it cannot parse, e.g. a comment
    # holding '='), or `rlnb run -p name ...` refuses the name as undeclared
    import papermill

    inferred = set(papermill.inspect_notebook(str(path)))
    assert inferred == names, (
        f"{path.name}: papermill cannot parse the parameters {sorted(names - inferred)}")


# --- executed with fast=True (one papermill run per notebook, shared by the tests below)


@pytest.fixture(scope="module", params=NOTEBOOKS, ids=IDS)
def executed(request, tmp_path_factory):
    """The notebook executed by papermill with fast=True, and the error papermill raised, if any."""
    path = request.param
    for module in NEEDS.get(path.stem, ()):  # an optional extra's notebook: skipped without it
        pytest.importorskip(module)
    tmp = tmp_path_factory.mktemp(path.stem)
    output = tmp / path.name
    error = None
    with pytest.MonkeyPatch.context() as mp:  # the kernel inherits this environment
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("OMP_NUM_THREADS", "1")
        mp.setenv("RLNB_CACHE_DIR", str(tmp / "cache"))  # a cold cache, as in CI
        # This interpreter's own kernelspec first: a user-level "python3" spec (searched before
        # the environment's) could point at another Python without rlnb.
        mp.setenv("JUPYTER_PATH", str(Path(sys.prefix) / "share" / "jupyter"))
        try:
            papermill.execute_notebook(
                str(path), str(output),
                parameters={"fast": True, "run_dir": str(tmp / "run")},
                kernel_name="python3", cwd=str(NOTEBOOK_DIR),
                execution_timeout=CELL_TIMEOUT_S, progress_bar=False,
            )
        except papermill.PapermillExecutionError as err:  # the saved notebook shows the cell
            error = err
    return path.stem, read(output), error


@pytest.mark.notebook
@pytest.mark.slow
def test_runs_end_to_end_without_errors(executed):
    name, nb, error = executed
    errors = [
        f"cell {i}: {out['ename']}: {out['evalue']}\n" + ANSI.sub("", "\n".join(out["traceback"]))
        for i, out in outputs(nb) if out["output_type"] == "error"
    ]
    assert error is None and not errors, f"{name} failed with fast=True:\n" + "\n\n".join(errors)


@pytest.mark.notebook
@pytest.mark.slow
def test_nothing_on_stderr(executed):
    """No warning, deprecation or stray progress bar reaches the reader: a stderr stream output is
    what JupyterLab draws in an error-coloured box. Progress bars are widgets (tqdm.auto) whose
    saved twin shows where they ended, never on stderr."""
    name, nb, _ = executed
    errs = [(i, ANSI.sub("", out["text"]).strip()[:300]) for i, out in outputs(nb)
            if out["output_type"] == "stream" and out.get("name") == "stderr"]
    assert not errs, f"{name} wrote to stderr:\n" + "\n".join(f"cell {i}: {t}" for i, t in errs)


@pytest.mark.notebook
@pytest.mark.slow
def test_progress_bars_show_where_they_ended(executed):
    """A progress bar's saved output (what an exported or reopened notebook shows) is its final
    state, not the 0% it was displayed at."""
    name, nb, _ = executed
    frozen = [(i, out["data"]["text/plain"][:120]) for i, out in outputs(nb)
              if re.search(r"\b0%\|", out.get("data", {}).get("text/plain", ""))]
    assert not frozen, f"{name}: progress bars saved at 0%: {frozen}"


PROGRESS_CELLS = [
    """import rlnb
SMALL = ["policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
         "policy.max_total_sequence_length=20", "policy.generation.max_new_tokens=4",
         "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
         "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4", "data.num_val=16",
         "grpo.val_period=0", "sft.max_steps=4", "sft.stop_at_accuracy=null",
         "logger.tensorboard_enabled=false"]
run = rlnb.TrainingRun(None, overrides=SMALL, run_dir=RUN_DIR, progress=True)""",
    "summary = run.train(3)",
    """steps = run.trainer.train(5, progress=True)
next(steps)  # one step of five, then the consumer stops (a Stop button does the same)
steps.close()""",
]


@pytest.mark.notebook
@pytest.mark.slow
def test_progress_bars_in_a_notebook_end_and_are_saved_where_they_ended(tmp_path):
    """Progress bars shown in a real kernel: nothing on stderr, and each bar's saved text twin is
    its last state: the warm start's 4 of 4 SFT steps, 3 of 3 GRPO steps, and 1 of 5 where the
    consumer stopped the loop (not the 0% every bar was first displayed at)."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python",
                                 "display_name": "Python 3"}
    nb.cells = [nbformat.v4.new_code_cell(f"RUN_DIR = {str(tmp_path / 'run')!r}"),
                *map(nbformat.v4.new_code_cell, PROGRESS_CELLS)]
    source, output = tmp_path / "bars.ipynb", tmp_path / "bars_out.ipynb"
    nbformat.write(nb, source)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
        mp.setenv("JUPYTER_PATH", str(Path(sys.prefix) / "share" / "jupyter"))
        papermill.execute_notebook(str(source), str(output), kernel_name="python3",
                                   progress_bar=False, execution_timeout=CELL_TIMEOUT_S)
    done = read(output)
    errs = [out["text"] for _, out in outputs(done)
            if out["output_type"] == "stream" and out.get("name") == "stderr"]
    assert not errs, errs
    bars = {i: out["data"]["text/plain"] for i, out in outputs(done)
            if "application/vnd.jupyter.widget-view+json" in out.get("data", {})}
    texts = list(bars.values())
    assert any(t.startswith("warm start (SFT): 100%") and "4/4" in t for t in texts), texts
    assert any(t.startswith("GRPO: 100%") and "3/3" in t for t in texts), texts
    assert any(t.startswith("GRPO:  20%") and "1/5" in t for t in texts), texts
    assert not any(re.search(r"\b0%\|", t) for t in texts), texts


@pytest.mark.notebook
@pytest.mark.slow
def test_shows_a_plotly_figure(executed):
    name, nb, _ = executed
    html = mime_outputs(nb, "text/html")
    assert mime_outputs(nb, PLOTLY_JSON) or any("Plotly.newPlot" in h for h in html), (
        f"{name}: no plotly figure in the executed notebook"
    )


# Per-notebook checks on the executed notebook: notebook stem -> functions that raise
# AssertionError. Add yours: assert something a broken notebook would not show.


def _formula_checks(nb, *lines):
    """The cells that compute a shown formula by hand ran and printed their verdict (each also
    asserts, so a mismatch fails the run)."""
    out = stdout(nb)
    missing = [line for line in lines if line not in out]
    assert not missing, f"formula checks that did not report: {missing}"


def _policy_loss_and_kl(nb):
    tables = [h for h in mime_outputs(nb, "text/html") if "<table" in h]
    assert any("ratio_clip_max" in t and "zero gradient" in t for t in tables), (
        "no clip-fraction table"
    )
    assert any("ratio_clip_max" in t and "kl_penalty" in t for t in tables), (
        "no dry-run comparison table"
    )
    out = stdout(nb)
    assert "zero-gradient tokens == the formula's: True" in out  # clipped tokens get no gradient
    assert "weights unchanged: True" in out  # dry runs leave the weights alone
    _formula_checks(nb, "rlnb.clipped_pg_loss", ": matches",
                    "the dual-clip formula matches rlnb.clipped_pg_loss",
                    "k1, k2, k3 by hand match rlnb.calculate_kl",
                    "each setting's loss matches the formula with its weights",
                    "ClippedPGLossFn: ")


def _widgets_have_static_twins(nb):
    """Every live widget output also carries HTML, which saved notebooks and exports show."""
    widget_outputs = [o for _, o in outputs(nb)
                      if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widget_outputs, "no live widget displayed"
    missing = [o["data"]["text/plain"][:60] for o in widget_outputs
               if "text/html" not in o["data"]]
    assert not missing, f"widgets without a static twin: {missing}"


def _grpo_step_by_step(nb):
    out = stdout(nb)
    assert "weights unchanged by the dry run: True" in out
    assert "held-out accuracy before GRPO" in out and "metrics.jsonl" in out
    # the dashboard's saved snapshot was refreshed when training ended: 1 step by hand + 3
    html = mime_outputs(nb, "text/html")
    assert any("rlnb dashboard</b> — 4 steps" in h for h in html), "stale dashboard snapshot"
    _widgets_have_static_twins(nb)
    # by hand: the group [1, 0, 0, 0] has mean 1/4 and Bessel std 1/2, so (1 - 1/4) / (1/2) and
    # (0 - 1/4) / (1/2); leave-one-out, the right answer's others agree (std 0): 1 - 0, and a
    # wrong one's are [1, 0, 0]: (0 - 1/3) / 0.577
    _formula_checks(nb, "1 right of 4: A = group: 1.500 (right), -0.500 (wrong); leave-one-out: "
                    "1.000 (right), -0.577 (wrong) (by hand = library)",
                    "1 right of 16: A = group: 3.750 (right)",  # (15/16) / (1/4) = (G - 1)/√G
                    "all 16 advantages of the batch (leave_one_out=False): the formula matches "
                    "compute_advantages",
                    "L by hand")


def _advantage_estimators(nb):
    assert "same advantages on a second call" in stdout(nb)
    tables = [h for h in mime_outputs(nb, "text/html") if "<table" in h]
    assert any("reinforce_plus_plus" in t and "gdpo" in t for t in tables)
    _widgets_have_static_twins(nb)
    _formula_checks(nb, *(f"{name:24s} max |by hand − library|" for name in (
        "grpo", "grpo, leave_one_out=True", "grpo, no ÷ std", "reinforce_plus_plus", "gdpo")))
    assert any("with a format advantage ≠ 0" in t for t in tables), "no GDPO decomposition"


def _ablation_sweep(nb):
    assert "2 runs, 0 failed" in stdout(nb)
    tables = [h for h in mime_outputs(nb, "text/html") if "<table" in h]
    assert any("ratio_clip_max" in t and "ok" in t for t in tables), "no sweep table"
    # the per-setting summary: both seeds of the one fast setting, as mean ± sd (rlnb.run.experiments.stats)
    assert any("± " in t and "(n=2)" in t for t in tables), "no per-setting summary"


def _ppo_value_model(nb):
    _formula_checks(nb, "V_t = head(h_(t-1)) matches compute_values",
                    "by hand matches on all 16 rows; the whitening and λ = 1 (A_t = r − V_t) too",
                    "L_V by hand")


def _async_grpo(nb):
    out = stdout(nb)
    _formula_checks(nb, "train/token_mult_prob_error: by hand",
                    "matches (and the raw mean matches async/importance_weight/mean)")
    assert "loop: AsyncGRPOTrainer" in out and "weight versions [0]" in out  # step 0 is fresh
    assert "groups by age" in out and "steps/min" in out, "no age histogram or side-by-side"
    assert "collector running: False" in out  # the dashboard's run stopped the collector
    html = mime_outputs(nb, "text/html")
    assert any("rlnb dashboard</b>" in h and "replay buffer" in h for h in html), (
        "no async dashboard snapshot")
    assert len(mime_outputs(nb, PLOTLY_JSON)) >= 3  # weights, buffer and ages, side by side
    _widgets_have_static_twins(nb)


def _reproducing_findings(nb):
    out = stdout(nb)
    # the mechanisms on frozen batches, each checked against the library
    for line in ("per-token weights == -dL/dlog π of clipped_pg_loss: True",
                 "freed tokens == autograd's: True", "h == <grad H, grad log π_y> by autograd: True",
                 "kept rows == select_nonzero_std's: True",
                 "E[k1] == E[k3] == exact KL at every position: True",
                 "sampled estimates == calculate_kl on the batch's log-probs: True",
                 "E∇(w·k1) == E∇(w·k3) == ∇KL(π‖π_ref): True",
                 "without the score term, E∇k1 == 0: True and E∇k3 == ∇KL(π_ref‖π): True",
                 "groups with signal == groups_with_signal's, by hand: True",
                 "w == exp(log π_θ − log π_v): True",
                 "pushes == -dL/dlog π of clipped_pg_loss, with and without the correction: True"):
        assert line in out, line
    tables = [h for h in mime_outputs(nb, "text/html") if "<table" in h]
    assert any("seq-mean + std (GRPO): per token" in t and "incorrect" in t for t in tables)
    assert any("freed" in t and "mean π_old" in t for t in tables), "no clip-higher summary"
    assert any("expected bias E[k] − KL" in t for t in tables), "no KL table"
    assert any("predicted share, mean 1 − p^G" in t for t in tables), "no group-size table"
    assert any("push kept" in t and "age k" in t for t in tables), "no staleness table"
    # the pilot through rlnb.ablate, with the power of the planned seeds
    assert any("detectable (80 % power)" in t and "seq-mean + std" in t for t in tables)
    assert "power of 5 seeds, from the pilot's spread:" in out
    assert "with 5 seeds the smallest effect detected with 80 % power" in out
    # every figure has its command printed beside it
    assert out.count("rlnb run notebooks/07_reproducing_findings.ipynb -p fast True") == 5
    assert "rlnb.ablate({'seq-mean + std': ['loss_fn.token_level_loss=false']" in out
    # the findings: every diff printed, dynamic sampling skipped in fast mode, one table
    assert "+ loss_fn.token_level_loss=false" in out and "+ loss_fn.ratio_clip_max=0.28" in out
    assert "+ grpo.num_generations_per_prompt=2" in out and "+ grpo.async_grpo.lockstep=true" in out
    assert "fast mode: skipped" in out
    # 2 x 3 (length) + 3 (clip-higher) + 3 (group size) + 2 x 2 x 3 (staleness at ages 1, 8)
    assert "24 comparisons from 2 seeds" in out
    assert "predicted effects reproduced with 2 seeds" in out
    summary = [t for t in tables if "Dr. GRPO" in t and "ε_high" in t and "verdict" in t]
    assert summary, "no table of all findings"
    figures = mime_outputs(nb, PLOTLY_JSON)
    titles = [f.get("layout", {}).get("title", {}).get("text", "") for f in figures]
    assert "train/mean_gen_tokens_incorrect" in titles and "train/approx_entropy" in titles, titles
    assert any(t.startswith("Push per token on incorrect") for t in titles), titles
    assert any(t.startswith("Which groups carry signal") for t in titles), titles
    assert any(t.startswith("The stale batch's importance weights") for t in titles), titles


def _dpo_vs_grpo(nb):
    out = stdout(nb)
    assert "rolled layout == stored[:, 1:]: True" in out  # NeMo-RL's reference layout
    assert "loss == the formula's: True" in out  # formula == dpo_loss == compute_loss == dry run
    assert "weights unchanged by the dry run: True" in out
    assert "PreferenceBatch(dataset" in out  # the pairs written as .jsonl, read back
    html = mime_outputs(nb, "text/html")
    assert any("rlnb dashboard</b>" in h and "preference loss" in h for h in html), (
        "no DPO dashboard snapshot")
    assert any("margin ρ_c − ρ_r" in h for h in html), "no token view of a pair"
    tables = [h for h in html if "<table" in h]
    assert any("offline DPO" in t and "on-policy DPO" in t and "GRPO" in t and "gain" in t
               for t in tables), "no comparison table"
    figures = mime_outputs(nb, PLOTLY_JSON)
    titles = [f.get("layout", {}).get("title", {}).get("text", "") for f in figures]
    assert any(t.startswith("held-out accuracy over training time") for t in titles), titles
    _widgets_have_static_twins(nb)



def _learning_per_rollout(nb):
    tables = [h for h in mime_outputs(nb, "text/html") if "<table" in h]
    # the advantages by formula, per group: the lone right answer's ratio loo / group sits there
    assert any("right: loo / group" in t for t in tables), "no advantage table"
    # one update under NeMo-RL's numerics, each choice alone and TRL's three
    assert any("NeMo-RL&#x27;s numerics" in t or "NeMo-RL's numerics" in t for t in tables)
    assert any("TRL&#x27;s three (the recipe)" in t or "TRL's three (the recipe)" in t
               for t in tables), "no update-size table"
    assert any("steps to +40" in t for t in tables), "no study table"
    assert "steps to +40" in stdout(nb)  # the power lines

EXTRA_CHECKS = {
    "01_grpo_step_by_step": [_grpo_step_by_step],
    "02_advantage_estimators": [_advantage_estimators],
    "03_policy_loss_and_kl": [_policy_loss_and_kl],
    "04_ablation_sweep": [_ablation_sweep],
    "05_ppo_value_model": [_ppo_value_model],
    "06_async_grpo": [_async_grpo],
    "07_reproducing_findings": [_reproducing_findings],
    "09_dpo_vs_grpo": [_dpo_vs_grpo],
    "12_learning_per_rollout": [_learning_per_rollout],
}


@pytest.mark.notebook
@pytest.mark.slow
def test_notebook_specific_checks(executed):
    name, nb, error = executed
    if error is not None:
        pytest.skip("the notebook failed (see test_runs_end_to_end_without_errors)")
    for check in EXTRA_CHECKS.get(name, []):
        check(nb)
