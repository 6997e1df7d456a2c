"""``rlnb demo``: a tour of the estimators and losses on one frozen batch."""

from __future__ import annotations

import argparse


def add_to(sub) -> None:
    p = sub.add_parser("demo", help="tour the estimators and losses on one frozen batch",
                       description="Print the advantage estimators, policy losses and KL "
                                   "estimators side by side on one frozen batch.")
    p.add_argument("--seed", type=int, default=0, help="seed of the frozen batch")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.demo import run_demo

    run_demo(seed=args.seed)
    return 0
