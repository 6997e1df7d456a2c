"""The ``rlnb`` command line: one module per command (``add_to`` adds its parser, ``handle``
runs it), assembled here in the order ``rlnb --help`` lists them.

    rlnb train [CONFIG.yaml] [key=value ...] [--run-dir DIR] [--resume DIR]
    rlnb verify RUN_DIR [--from-step K] [--steps N]   replay steps from a checkpoint, compare
    rlnb diff RUN_A RUN_B [--window N]   two runs side by side (config, metrics, stage times)
    rlnb doctor RUN_DIR [--first N]   why isn't it learning: findings with their fixes
    rlnb demo                     a tour of the estimators and losses on one frozen batch
    rlnb run NOTEBOOK [-p KEY VALUE ...] [--run-dir DIR]          execute it headless
    rlnb sweep NOTEBOOK [-p KEY V1,V2 ...] [--root DIR] [--jobs N | --ray [ADDRESS]]
                                                       one run per grid point + report
    rlnb launch --num-processes N NOTEBOOK [-p KEY VALUE ...]     one rank per process
        [--num-machines M --machine-rank R --main-process-ip IP --main-process-port P]
    rlnb teach build OUT [--source DIR] [--update]   the exercises' student and solution notebooks
    rlnb teach grade SUBMISSIONS [--csv FILE]   students' notebooks checked: a table and a CSV
    rlnb preflight [--fast] [--steps K]   before a lab: install, kernel, warm starts, speed
    rlnb preflight --memory CONFIG [key=value ...] [--device-memory GIB]
                                  the memory plan of a GRPO step: will it fit the GPU

Notebook commands (``rlnb.run.notebooks.execute``, ``rlnb.run.experiments.sweep``,
``rlnb.run.pools.launch``): ``-p`` values are read as YAML; a KEY with a dot
(``-p loss_fn.ratio_clip_max 0.28``) is a config override appended to the notebook's
``overrides``, any other KEY a papermill parameter. Exit codes: 0 done,
1 a notebook failed (it is saved with the error), 2 bad arguments (nothing written).

Its modules: ``train``, ``verify``, ``diff``, ``doctor``, ``demo``, ``run``, ``sweep``,
``launch``, ``teach`` and ``preflight`` (one per command, as above); ``common`` (how a command
reports a user's mistake, what they share); ``__main__`` (``python -m rlnb.cli``).
"""

from __future__ import annotations

import argparse
import os
import sys

from rlnb.cli import demo, diff, doctor, launch, preflight, run, sweep, teach, train, verify
from rlnb.cli.common import error_message

COMMANDS = (demo, train, verify, diff, doctor, run, sweep, launch, teach, preflight)


def build_parser() -> argparse.ArgumentParser:
    # argparse prints these texts in a terminal: plain text, no reStructuredText quotes
    parser = argparse.ArgumentParser(
        prog="rlnb",
        description="rlnb: RL post-training of language models (GRPO, PPO with a value model, "
                    "async GRPO, DPO), headless or from notebooks.",
        epilog="'rlnb COMMAND --help' shows a command's options. Exit codes: 0 done, 1 a run "
               "failed (or verify found a difference), 2 bad arguments (nothing written).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.add_to(sub)
    return parser


# A user's mistake (a bad config value, a missing file, a missing optional package) is one of
# rlnb.cli.common.USER_ERRORS, with a message that names the culprit: exit 2, one line, no
# traceback (each handler catches those); anything else ends here.
def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # overrides after an option (`--steps 5 grpo.seed=1`) land here
        if args.command != "train" or any(x.startswith("-") for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.items = [*args.items, *extra]
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\nrlnb {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # not a user's mistake: one line, the traceback on request
        if os.environ.get("RLNB_DEBUG"):
            raise
        print(f"rlnb {args.command}: failed: {type(err).__name__}: {error_message(err)} "
              "(RLNB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1
