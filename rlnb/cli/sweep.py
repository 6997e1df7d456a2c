"""``rlnb sweep``: run a notebook over a grid of parameters, with a report."""

from __future__ import annotations

import argparse

from rlnb.cli.common import notebook_arguments, notebook_command, show


def add_to(sub) -> None:
    p = sub.add_parser("sweep", help="run a notebook over a grid of parameters, with a report",
                       description="Run a notebook once per point of a grid of parameters "
                                   "(one run directory each) and write an HTML report "
                                   "comparing them.")
    notebook_arguments(p, "V1,V2", "comma-separated values are swept, one value is fixed")
    p.add_argument("--root", default=None,
                   help="sweep folder (default runs/sweep-<notebook>-<time>); a root that "
                        "holds this sweep is resumed (finished points are kept)")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="points at once, each its own papermill process and kernel "
                        "(default 1; with --ray: tasks in flight, default all)")
    p.add_argument("--cpus-per-run", type=int, default=None, metavar="C",
                   help="threads per point (default: cores // jobs), or the CPUs a Ray "
                        "task asks for (default 1)")
    p.add_argument("--gpus-per-run", type=int, default=None, metavar="K",
                   help="GPUs per point, its share of CUDA_VISIBLE_DEVICES (default: 1 "
                        "with GPUs and --jobs > 1, else 0), or a Ray task's GPUs")
    p.add_argument("--ray", nargs="?", const=None, default=False, metavar="ADDRESS",
                   help="run each point as a Ray task: on a running cluster, else a local "
                        "one (ADDRESS: HOST:PORT, ray://HOST:PORT, auto, local); needs "
                        "rlnb[ray]")
    p.add_argument("--rerun-failed", action="store_true",
                   help="when resuming, rerun the points that failed too")
    p.add_argument("--force", action="store_true",
                   help="when resuming, rerun every point")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    """``rlnb sweep``: a grid of runs, then how many finished and where the report is."""
    from rlnb.run.experiments.sweep import parse_grid, sweep

    def call():
        grid, fixed = parse_grid(args.param)
        res = sweep(args.notebook, grid, root=args.root, parameters=fixed,
                    kernel_name=args.kernel, jobs=args.jobs, cpus_per_run=args.cpus_per_run,
                    gpus_per_run=args.gpus_per_run, ray=args.ray,
                    rerun_failed=args.rerun_failed, force=args.force)
        print(f"\nrlnb sweep: {len(res.runs) - len(res.failed)} of {len(res.runs)} runs ok\n"
              f"  sweep root  {show(res.root)}  (sweep.json, summary.csv, logs/, a folder per "
              "run)\n"
              f"  report      {show(res.report_html)}")
        for run in res.failed:
            print(f"  FAILED      {run.run_dir.name}: {run.error}")
        if res.report_error:
            print(f"  the report failed: {res.report_error}")
        return 0 if res.ok else 1

    return notebook_command("sweep", call)
