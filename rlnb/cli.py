"""The ``rlnb`` command line: ``rlnb demo`` (a tour of the algorithms on a frozen batch).

``rlnb train``, ``run``, ``sweep`` and ``launch`` join it with the engine and notebook issues.
"""

from __future__ import annotations

import argparse
import sys


def _demo(args: argparse.Namespace) -> int:
    from rlnb.demo import run_demo

    run_demo(seed=args.seed)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlnb", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="tour the estimators and losses on one frozen batch")
    demo.add_argument("--seed", type=int, default=0, help="seed of the frozen batch")
    demo.set_defaults(func=_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
