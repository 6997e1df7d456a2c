"""The notebook commands of the ``rlnb`` command line: ``rlnb run``, ``rlnb sweep`` and
``rlnb launch`` (their argument parsers are in ``rlnb.cli``), and how a command reports a user's
mistake: one line, exit 2, nothing written.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

USER_ERRORS = (ValueError, FileNotFoundError, ImportError)


def error_message(err: BaseException) -> str:
    """A user's mistake as the one line a command prints (a missing module: which one)."""
    if isinstance(err, ImportError) and not isinstance(err, ModuleNotFoundError):
        return str(err)
    if isinstance(err, ModuleNotFoundError):
        return f"{err.name} is not installed ({err})"
    return str(err)


def _show(path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    if path is None:
        return "-"
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _notebook_command(name: str, call) -> int:
    """Run ``call()``; bad arguments exit 2 with one line, before anything is written."""
    try:
        return call()
    except ImportError as err:
        print(f"rlnb {name}: {err.name or err} is missing; notebooks need the notebook extra: "
              "pip install -e '.[notebook]'", file=sys.stderr)
        return 2
    except USER_ERRORS as err:
        print(f"rlnb {name}: {error_message(err)}", file=sys.stderr)
        return 2


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


def rlnb_run(args: argparse.Namespace) -> int:
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
              f"  run directory  {_show(res.run_dir)}\n"
              f"  notebook       {_show(res.notebook)}\n"
              f"  html           {_show(res.html)}\n"
              f"  run files      {_run_files(res.run_dir)}")
        summary = _run_metrics(res.run_dir)
        if summary:
            print(f"  metrics        {summary}")
        return 0 if res.ok else 1

    return _notebook_command("run", call)


def rlnb_sweep(args: argparse.Namespace) -> int:
    """``rlnb sweep``: a grid of runs, then how many finished and where the report is."""
    from rlnb.run.experiments.sweep import parse_grid, sweep

    def call():
        grid, fixed = parse_grid(args.param)
        res = sweep(args.notebook, grid, root=args.root, parameters=fixed,
                    kernel_name=args.kernel, jobs=args.jobs, cpus_per_run=args.cpus_per_run,
                    gpus_per_run=args.gpus_per_run, ray=args.ray,
                    rerun_failed=args.rerun_failed, force=args.force)
        print(f"\nrlnb sweep: {len(res.runs) - len(res.failed)} of {len(res.runs)} runs ok\n"
              f"  sweep root  {_show(res.root)}  (sweep.json, summary.csv, logs/, a folder per "
              "run)\n"
              f"  report      {_show(res.report_html)}")
        for run in res.failed:
            print(f"  FAILED      {run.run_dir.name}: {run.error}")
        if res.report_error:
            print(f"  the report failed: {res.report_error}")
        return 0 if res.ok else 1

    return _notebook_command("sweep", call)


def rlnb_launch(args: argparse.Namespace) -> int:
    """``rlnb launch``: one notebook on N ranks, then each rank's notebook and error."""
    from rlnb.run.notebooks.parameters import parse_pairs
    from rlnb.run.pools.launch import RANKS, launch

    def call():
        params = parse_pairs(args.param)
        res = launch(args.notebook, args.num_processes, run_dir=args.run_dir,
                     parameters=params, kernel_name=args.kernel, progress=not args.no_progress,
                     num_machines=args.num_machines, machine_rank=args.machine_rank,
                     main_process_ip=args.main_process_ip,
                     main_process_port=args.main_process_port)
        ranks = f"{args.num_processes} rank{'s' if args.num_processes > 1 else ''}"
        if args.num_machines > 1:
            ranks = (f"machine {args.machine_rank}: its {args.num_processes // args.num_machines}"
                     f" of {ranks}")
        head = (f"{ranks} done in {res.seconds:.1f} s" if res.ok
                else f"FAILED in {res.seconds:.1f} s: {res.error}")
        lines = [f"\nrlnb launch: {head}",
                 f"  run directory  {_show(res.run_dir)}",
                 f"  notebook       {_show(res.notebook)}  (rank 0)",
                 f"  html           {_show(res.html)}"]
        if args.num_processes > 1:
            lines.append(f"  other ranks    {_show(res.run_dir / RANKS)}/rank<R>.ipynb")
        lines += [f"  rank {r}: {e}" if r >= 0 else f"  {e}" for r, e in res.rank_errors.items()]
        print("\n".join(lines))
        return 0 if res.ok else 1

    return _notebook_command("launch", call)
