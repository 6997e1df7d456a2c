"""``rlnb teach build``: the exercises' student and solution notebooks."""

from __future__ import annotations

import argparse


def add_to(sub) -> None:
    teach = sub.add_parser("teach", help="build the exercises of a lab (docs/teaching.md)",
                           description="Exercises with checks for a lab on RL for LLMs.")
    build = teach.add_subparsers(dest="teach_command", required=True, metavar="COMMAND") \
        .add_parser("build", help="write OUT/student/ (stubs) and OUT/solution/ notebooks "
                                  "from notebooks/exercises/",
                    description="Build each exercise's student copy (stubs, no solution) and "
                                "solution copy.")
    build.add_argument("out", help="output folder")
    build.add_argument("--source", default=None, metavar="DIR", help="the exercise sources")
    build.add_argument("--only-missing", action="store_true",
                       help="write only the notebooks that are not there (keeps every other "
                            "one, changed or not)")
    build.add_argument("--overwrite", action="store_true",
                       help="replace notebooks changed since they were built (their changes "
                            "are lost)")
    build.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.teach.build import run_build

    return run_build(args.out, args.source, prog="rlnb teach build", overwrite=args.overwrite,
                     only_missing=args.only_missing)
