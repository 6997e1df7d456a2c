"""``rlnb preflight``: before a lab, check the install, a kernel, the warm starts, the speed."""

from __future__ import annotations

import argparse
import sys


def add_to(sub) -> None:
    p = sub.add_parser("preflight", help="before a lab: check the install and a kernel, build "
                                         "the warm starts, time the live runs",
                       description="Check this machine before a lab: the install, a Jupyter "
                                   "kernel, the exercises, the warm starts (built and cached) "
                                   "and how long the lab's live runs take here.")
    p.add_argument("--fast", action="store_true", help="tiny runs (tests): times nothing")
    p.add_argument("--steps", type=int, default=5, metavar="K",
                   help="steps timed per live-run setting (default 5)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.teach.preflight import preflight

    if args.steps < 1:
        print(f"rlnb preflight: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return 2
    return preflight(steps=args.steps, fast=args.fast)
