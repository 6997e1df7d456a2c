"""``rlnb diff``: two run directories side by side (``rlnb.run.experiments.run_diff``)."""

from __future__ import annotations

import argparse
import sys

from rlnb.cli.common import USER_ERRORS, error_message


def add_to(sub) -> None:
    p = sub.add_parser("diff", help="two runs side by side: config keys that differ, metrics, "
                                    "time per stage, and whether they are comparable",
                       description="Compare two run directories: the config keys that differ, "
                                   "the last steps' metrics, seconds per stage, and a warning "
                                   "when they train a different task, model or held-out set.")
    p.add_argument("run_a", help="the first run directory")
    p.add_argument("run_b", help="the second run directory")
    p.add_argument("--window", type=int, default=10, metavar="N",
                   help="the metrics are the mean of each run's last N steps (default 10)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.run.experiments.run_diff import diff_runs

    if args.window < 1:
        print(f"rlnb diff: --window {args.window}: must be >= 1", file=sys.stderr)
        return 2
    try:
        diff = diff_runs(args.run_a, args.run_b, args.window)
    except USER_ERRORS as err:
        print(f"rlnb diff: {error_message(err)}", file=sys.stderr)
        return 2
    print(diff.text())
    return 0
