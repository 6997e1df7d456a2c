"""``rlnb verify``: replay a run's steps from a checkpoint and compare them with its log."""

from __future__ import annotations

import argparse
import sys

from rlnb.cli.common import USER_ERRORS, error_message


def add_to(sub) -> None:
    p = sub.add_parser("verify", help="replay a run's steps from a checkpoint and compare "
                                      "them with what it logged (exit 1 on a difference)",
                       description="Replay a run's steps from one of its checkpoints and "
                                   "compare them with what it logged; exit 1 on a "
                                   "difference.")
    p.add_argument("run_dir", help="the run directory")
    p.add_argument("--from-step", type=int, default=None, metavar="K",
                   help="the checkpoint to start from (default: the earliest)")
    p.add_argument("--steps", type=int, default=None, metavar="N",
                   help="steps to replay (default: every logged step after K)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.run.training.verify import verify_run

    for flag, value, least in (("--from-step", args.from_step, 0), ("--steps", args.steps, 1)):
        if value is not None and value < least:
            print(f"rlnb verify: {flag} must be at least {least}, got {value}", file=sys.stderr)
            return 2
    try:
        report = verify_run(args.run_dir, args.from_step, args.steps)
    except USER_ERRORS as err:
        print(f"rlnb verify: {error_message(err)}", file=sys.stderr)
        return 2
    print(f"\nrlnb verify: {report.summary()}")
    return 0 if report.exact else 1
