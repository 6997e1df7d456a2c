"""``rlnb doctor``: a run directory's diagnosis card (``rlnb.run.experiments.diagnosis``)."""

from __future__ import annotations

import argparse
import sys

from rlnb.cli.common import USER_ERRORS, error_message


def add_to(sub) -> None:
    p = sub.add_parser("doctor", help="why isn't it learning? a run's first steps read into "
                                      "findings, each with its fix",
                       description="Read a run directory's config and first steps into plain "
                                   "findings (no signal, truncation, too hard or too easy, "
                                   "constant rewards, ratio 1, entropy collapse, KL running "
                                   "away), each with its fix. Exit 0 whatever it finds. A "
                                   "folder of NeMo-RL's, verl's or TRL's rollout files is read "
                                   "as it is (rewards and the sample funnel).")
    p.add_argument("run_dir", help="the run directory (config.yaml, metrics.jsonl), or a folder "
                                   "of another framework's rollout files")
    p.add_argument("--first", type=int, default=20, metavar="N",
                   help="read the first N steps (default 20)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.run.experiments.diagnosis import diagnose_run

    try:
        card = diagnose_run(args.run_dir, args.first)
    except USER_ERRORS as err:
        print(f"rlnb doctor: {error_message(err)}", file=sys.stderr)
        return 2
    print(card.text())
    return 0
