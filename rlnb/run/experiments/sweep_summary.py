"""A sweep's results, read back from its root: the table of runs, the per-setting summary over
seeds, and the report notebook (``rlnb.run.experiments.sweep`` writes the root).

    sweep_table(root)                  # one row per run: parameters, status, final metrics
    setting_summary(root, wide=True)   # mean ± sd over seeds of each final metric, per setting
    setting_differences(root)          # each setting minus the first, with a 95 % interval

Implementation choices:
1) A setting is a run's parameters other than the swept seeds (``seed`` or ``*.seed`` with
   several values); its runs are repeats. The statistics use finished (``ok``) runs only and
   count the others; they come from ``rlnb.run.experiments.stats`` (Welch t interval by default, see
   there for paired and bootstrap intervals and when to use which), which the ablation notebooks use
   too.
2) The report is a notebook built here and executed like any other. Its plotly figures carry
   plotly.js inline (``rlnb.widgets.show``), so ``report.html`` works offline.
   It calls ``sweep_table`` and the per-setting tables (here) and ``rlnb.widgets.sweep_figures``
   (plots are the UI layer's); so can any notebook.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlnb.run.experiments.stats import difference_ci, mean_sd
from rlnb.run.notebooks.execute import run_papermill, skip_iri_grammar, try_export_html
from rlnb.run.notebooks.parameters import format_value

SWEEP_JSON, SUMMARY_CSV, REPORT = "sweep.json", "summary.csv", "report"
# sweep_table's metric columns, in this order, where some run logged them
HEADLINE_METRICS = (
    "train/reward", "validation/accuracy", "train/loss", "train/kl_penalty",
    "train/approx_entropy", "train/clip_fraction", "train/grad_norm",
    "train/mean_gen_tokens_per_sample",
)


def _final_metrics(records: list[dict]) -> dict[str, Any]:
    """The last logged value of every key (keys logged now and then, like validation, too)."""
    final: dict[str, Any] = {}
    for rec in records:
        final.update({k: v for k, v in rec.items() if v is not None})
    return final


def read_sweep(root: Path) -> tuple[dict, list[tuple[dict, list[dict]]]]:
    from rlnb.run.store.rundir import RunDir, read_metrics_file

    record = json.loads((root / SWEEP_JSON).read_text(encoding="utf-8"))
    return record, [(run, read_metrics_file(root / run["name"] / RunDir.METRICS))
                    for run in record["runs"]]


def sweep_table(root: str | Path, metrics: Sequence[str] | str | None = None):
    """One row per run of the sweep in ``root``: its swept parameters, status, time, last step and
    the final value of each metric (default: ``HEADLINE_METRICS`` and every ``validation/*`` key
    that some run logged; ``"all"``: every key but ``timing/*``), then the error if it failed."""
    import pandas as pd

    record, runs = read_sweep(Path(root))
    finals = [_final_metrics(records) for _, records in runs]
    logged = {k for f in finals for k in f} - {"step"}
    if metrics is None:
        headline = [k for k in HEADLINE_METRICS if k in logged]
        metrics = headline + sorted(k for k in logged
                                    if k.startswith("validation/") and k not in headline)
    elif metrics == "all":
        metrics = sorted(k for k in logged if not k.startswith("timing/"))
    rows = []
    for (run, _), final in zip(runs, finals):
        rows.append({"run": run["name"], **run["parameters"], "status": run["status"],
                     "seconds": run["seconds"], "steps": final.get("step"),
                     **{k: final.get(k) for k in metrics}, "error": run["error"] or ""})
    columns = ["run", *record["grid"], "status", "seconds", "steps", *metrics, "error"]
    return pd.DataFrame(rows, columns=columns)


# ---------------------------------------------------------------------------------- per setting
def seed_keys(record: Mapping[str, Any]) -> list[str]:
    """The swept seed parameters (``seed`` or ``*.seed`` with several values): runs that differ
    only in them are repeats of one setting."""
    return [k for k, v in record["grid"].items()
            if (k == "seed" or k.endswith(".seed")) and len(v) > 1]


def setting_label(parameters: Mapping[str, Any], seeds: Sequence[str]) -> str:
    """``loss_fn.ratio_clip_max=0.2``: a run's parameters other than the seeds."""
    return " ".join(f"{k}={format_value(v)}" for k, v in parameters.items()
                    if k not in seeds) or "all runs"


def _settings(root: str | Path, metrics):
    """(table of finished runs with a ``setting`` and a ``seeds`` column, metric columns, every
    setting in grid order, failed-run count per setting)."""
    record, _ = read_sweep(Path(root))
    table = sweep_table(root, metrics)
    seeds = seed_keys(record)
    table["setting"] = [setting_label(r["parameters"], seeds) for r in record["runs"]]
    table["seeds"] = [" ".join(f"{k}={format_value(r['parameters'].get(k))}" for k in seeds)
                      for r in record["runs"]]  # pairs runs across settings (paired=True)
    order = list(dict.fromkeys(table["setting"]))
    failed = table[table["status"] != "ok"].groupby("setting").size().to_dict()
    metric_columns = table.columns[len(record["grid"]) + 4:-3]  # see sweep_table's columns
    columns = [c for c in metric_columns if table[c].map(
        lambda x: x is None or isinstance(x, (int, float)) and not isinstance(x, bool)).all()]
    return table[table["status"] == "ok"], columns, order, failed


def setting_summary(root: str | Path, metrics: Sequence[str] | str | None = None, *,
                    wide: bool = False):
    """Mean ± sd over seeds of each final metric, per setting (the grid's non-seed values),
    from the finished runs (``rlnb.run.experiments.stats.mean_sd``); ``failed`` counts the setting's
    other runs. ``wide=True``: one row per setting, one ``mean ± sd (n)`` column per metric."""
    import pandas as pd

    ok, columns, order, failed = _settings(root, metrics)
    rows = []
    for metric in columns:
        for setting in order:
            s = mean_sd(ok.loc[ok["setting"] == setting, metric].astype(float))
            rows.append({"metric": metric, "setting": setting, "n": s.n, "mean": s.mean,
                         "sd": s.sd, "failed": failed.get(setting, 0), "mean ± sd": str(s)})
    long = pd.DataFrame(rows, columns=["metric", "setting", "n", "mean", "sd", "failed",
                                       "mean ± sd"])
    if not wide:
        return long
    table = long.pivot(index="setting", columns="metric", values="mean ± sd")
    table = table.reindex(index=order, columns=columns)
    table.insert(0, "failed runs", [failed.get(s, 0) for s in order])
    return table


def setting_differences(root: str | Path, metrics: Sequence[str] | str | None = None, *,
                        reference: str | None = None, confidence: float = 0.95,
                        method: str = "t", paired: bool = False):
    """Each setting minus ``reference`` (default: the first setting of the grid), per final
    metric, with a ``confidence`` interval over seeds (``rlnb.run.experiments.stats.difference_ci``:
    Welch t by default; ``paired=True`` pairs runs by seed; ``method="bootstrap"``)."""
    import pandas as pd

    ok, columns, order, _ = _settings(root, metrics)
    reference = order[0] if reference is None else reference
    if reference not in order:
        raise ValueError(f"no setting {reference!r}; the settings are: {', '.join(order)}")
    rows = []
    for metric in columns:
        ref = ok[ok["setting"] == reference].set_index("seeds")[metric].astype(float)
        for setting in order:
            if setting == reference:
                continue
            mine = ok[ok["setting"] == setting].set_index("seeds")[metric].astype(float)
            if paired:
                common = [s for s in mine.index if s in ref.index]
                a, b = mine.loc[common].to_numpy(), ref.loc[common].to_numpy()
            else:
                a, b = mine.to_numpy(), ref.to_numpy()
            ci = difference_ci(a, b, confidence=confidence, method=method, paired=paired)
            rows.append({"metric": metric, "setting": setting, "reference": reference,
                         "difference": ci.estimate, "low": ci.low, "high": ci.high,
                         "excludes 0": ci.excludes_zero, "n": len(a), "n reference": len(b),
                         "interval": f"{100 * confidence:g} % {ci.method}", "df": ci.df})
    return pd.DataFrame(rows, columns=["metric", "setting", "reference", "difference", "low",
                                       "high", "excludes 0", "n", "n reference", "interval",
                                       "df"])


def write_report(root: str | Path, *, kernel_name: str | None = None
                 ) -> tuple[Path | None, Path | None, str | None]:
    """Build and execute ``report.ipynb`` in the sweep root, export ``report.html``; returns
    (notebook, html, error)."""
    skip_iri_grammar()
    import nbformat

    root = Path(root)
    record = json.loads((root / SWEEP_JSON).read_text(encoding="utf-8"))
    failed = sum(run["status"] != "ok" for run in record["runs"])
    grid = ", ".join(f"`{k}` in {v}" for k, v in record["grid"].items()) or "one point"
    v4 = nbformat.v4
    nb = v4.new_notebook(cells=[
        v4.new_markdown_cell(
            f"# Sweep of `{Path(record['notebook']).name}`\n\n{len(record['runs'])} runs over "
            f"{grid}; {failed} failed. Fixed parameters: `{record['parameters']}`.\n\n"
            "Written by `rlnb sweep`; rerun it in this folder to refresh."),
        v4.new_code_cell('root = "."  # the sweep root', metadata={"tags": ["parameters"]}),
        v4.new_code_cell(
            "from rlnb.run.experiments.sweep_summary import setting_differences, setting_summary, "
            "sweep_table\n"
            "from rlnb.widgets import show, sweep_figures  # plotly.js inline: no CDN needed"),
        v4.new_markdown_cell("## Runs\n\nOne row per run: its parameters, how it ended (with "
                             "the error if it failed) and its final metrics."),
        v4.new_code_cell("sweep_table(root)"),
        v4.new_markdown_cell(
            "## Per setting\n\nMean ± sample sd of each final metric over the seeds of each "
            "setting, from the finished runs (`failed runs` counts the others)."),
        v4.new_code_cell("setting_summary(root, wide=True)"),
        v4.new_markdown_cell(
            "## Differences between settings\n\nEach setting minus the first, with a 95 % "
            "Welch t interval over seeds (`rlnb.run.experiments.stats`; undefined with fewer than "
            "two finished seeds on a side). An interval that holds 0 is no evidence of a "
            "difference."),
        v4.new_code_cell("setting_differences(root)"),
        v4.new_markdown_cell("## Curves"),
        v4.new_code_cell("for fig in sweep_figures(root):\n    show(fig)"),
    ])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    out = root / f"{REPORT}.ipynb"
    error = run_papermill(nb, out, {}, kernel_name=kernel_name, cwd=root, progress=False)
    html = try_export_html(out, root / f"{REPORT}.html", f"sweep {root.name}")
    return (out if out.is_file() else None), html, error
