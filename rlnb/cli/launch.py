"""``rlnb launch``: run a notebook on N processes, one rank each (accelerate)."""

from __future__ import annotations

import argparse

from rlnb.cli.common import notebook_arguments, notebook_command, show


def add_to(sub) -> None:
    p = sub.add_parser("launch", help="run a notebook on N processes (accelerate)",
                       description="Run a notebook on N processes, one rank each, through "
                                   "accelerate (GPUs, or CPU processes over gloo), on one "
                                   "machine or several.")
    p.add_argument("--num-processes", type=int, required=True, metavar="N",
                   help="ranks to start (GPUs, or CPU processes over gloo)")
    notebook_arguments(p, "VALUE", "a parameter of the notebook")
    p.add_argument("--run-dir", default=None,
                   help="run directory (default runs/<notebook>-<time>)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--num-machines", type=int, default=1, metavar="M",
                   help="machines taking part (run the same command on each; "
                        "--num-processes counts them all)")
    p.add_argument("--machine-rank", type=int, default=0, metavar="R",
                   help="this machine's rank, 0 to M-1")
    p.add_argument("--main-process-ip", default=None, metavar="IP",
                   help="machine 0's address (with --num-machines > 1)")
    p.add_argument("--main-process-port", type=int, default=None, metavar="P",
                   help="machine 0's rendezvous port (default: 29500 with several "
                        "machines, a free one with one)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
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
                 f"  run directory  {show(res.run_dir)}",
                 f"  notebook       {show(res.notebook)}  (rank 0)",
                 f"  html           {show(res.html)}"]
        if args.num_processes > 1:
            lines.append(f"  other ranks    {show(res.run_dir / RANKS)}/rank<R>.ipynb")
        lines += [f"  rank {r}: {e}" if r >= 0 else f"  {e}" for r, e in res.rank_errors.items()]
        print("\n".join(lines))
        return 0 if res.ok else 1

    return notebook_command("launch", call)
