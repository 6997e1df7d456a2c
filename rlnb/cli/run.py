"""``rlnb run``: execute a notebook headless into a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlnb.cli.common import notebook_arguments, notebook_command, show


def add_to(sub) -> None:
    p = sub.add_parser("run", help="execute a notebook headless into a run directory",
                       description="Execute a notebook headless (papermill) into a run "
                                   "directory, with an HTML copy; exit 1 if a cell fails "
                                   "(the notebook is saved with the error).")
    notebook_arguments(p, "VALUE", "a parameter of the notebook")
    p.add_argument("--run-dir", default=None,
                   help="run directory (default runs/<notebook>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=handle)


def _run_files(run_dir: Path) -> str:
    names = ["config.yaml", "metrics.jsonl", "rollouts/", "checkpoints/"]
    found = [n for n in names if (run_dir / n.rstrip("/")).exists()]
    return ", ".join(found) or "nothing else (the notebook wrote no run files)"


def _run_metrics(run_dir: Path) -> str | None:
    """'N steps; held-out accuracy a -> b; reward x -> y' from the run's metrics.jsonl."""
    from rlnb.run.store.rundir import RunDir, read_metrics_file

    records = read_metrics_file(run_dir / RunDir.METRICS)
    if not records:
        return None
    parts = [f"{max(r['step'] for r in records)} steps"]
    for key, label in (("validation/accuracy", "held-out accuracy"), ("train/reward", "reward")):
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            parts.append(f"{label} {values[0]:.3f} -> {values[-1]:.3f}")
    return "; ".join(parts)


def handle(args: argparse.Namespace) -> int:
    """``rlnb run``: one notebook, then where its run directory and files are."""
    from rlnb.run.notebooks.execute import run_notebook
    from rlnb.run.notebooks.parameters import parse_pairs

    def call():
        params = parse_pairs(args.param)
        res = run_notebook(args.notebook, run_dir=args.run_dir, parameters=params,
                           kernel_name=args.kernel, progress=not args.no_progress)
        head = (f"done in {res.seconds:.1f} s" if res.ok
                else f"FAILED in {res.seconds:.1f} s: {res.error}")
        print(f"\nrlnb run: {head}\n"
              f"  run directory  {show(res.run_dir)}\n"
              f"  notebook       {show(res.notebook)}\n"
              f"  html           {show(res.html)}\n"
              f"  run files      {_run_files(res.run_dir)}")
        summary = _run_metrics(res.run_dir)
        if summary:
            print(f"  metrics        {summary}")
        return 0 if res.ok else 1

    return notebook_command("run", call)
