"""The ``rlnb`` command line.

    rlnb train [CONFIG.yaml] [key=value ...] [--run-dir DIR] [--resume DIR]
    rlnb verify RUN_DIR [--from-step K] [--steps N]   replay steps from a checkpoint, compare
    rlnb demo                     a tour of the estimators and losses on one frozen batch
    rlnb run NOTEBOOK [-p KEY VALUE ...] [--run-dir DIR]          execute it headless
    rlnb sweep NOTEBOOK [-p KEY V1,V2 ...] [--root DIR] [--jobs N | --ray [ADDRESS]]
                                                       one run per grid point + report
    rlnb launch --num-processes N NOTEBOOK [-p KEY VALUE ...]     one rank per process
        [--num-machines M --machine-rank R --main-process-ip IP --main-process-port P]
    rlnb teach build OUT [--source DIR]   the exercises' student and solution notebooks
    rlnb preflight [--fast] [--steps K]   before a lab: install, kernel, warm starts, speed

Notebook commands (``rlnb.run.notebooks.execute``, ``rlnb.run.experiments.sweep``,
``rlnb.run.pools.launch``): ``-p`` values are read as YAML; a KEY with a dot
(``-p loss_fn.ratio_clip_max 0.28``) is a config override appended to the notebook's
``overrides``, any other KEY a papermill parameter. Exit codes: 0 done,
1 a notebook failed (it is saved with the error), 2 bad arguments (nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys

from rlnb.cli_notebooks import USER_ERRORS, error_message, rlnb_launch, rlnb_run, rlnb_sweep


def _demo(args: argparse.Namespace) -> int:
    from rlnb.demo import run_demo

    run_demo(seed=args.seed)
    return 0


def _train(args: argparse.Namespace) -> int:
    from rlnb.run.training.accelerator import RankWatch, auto_accelerator
    from rlnb.run.training.session import TrainingRun

    items = list(args.items)
    config = items.pop(0) if items and "=" not in items[0] else None
    overrides = items
    bad = [x for x in overrides if "=" not in x]
    if bad:
        print(f"rlnb train: {bad[0]!r} is not a dotted.key=value override", file=sys.stderr)
        return 2
    if args.resume and args.run_dir:
        print("rlnb train: give either --run-dir or --resume, not both", file=sys.stderr)
        return 2
    if args.steps is not None and args.steps < 0:
        print(f"rlnb train: --steps must be >= 0, got {args.steps}", file=sys.stderr)
        return 2
    watch = None
    try:
        accelerator = auto_accelerator()
        watch = RankWatch(accelerator)  # who is who, to name a rank that dies
        with watch.stopped_by_launcher():
            run = TrainingRun(
                config,
                overrides=overrides,
                run_dir=args.resume or args.run_dir,
                resume=bool(args.resume),
                accelerator=accelerator,
                progress=not args.no_progress,
                ignore_unsupported=args.ignore_unsupported,
            )
            summary = run.train(args.steps)
    except USER_ERRORS as err:
        if watch is not None:
            watch.report(err)
        print(f"rlnb train: {error_message(err)}", file=sys.stderr)
        return 2
    except Exception as err:  # a rank died: the others see a lost connection or SIGTERM
        blame = watch.blame(err) if watch is not None else None
        if blame is None:
            if watch is not None:
                watch.report(err)
            raise
        print(f"rlnb train: {blame}", file=sys.stderr, flush=True)
        return 1
    # only after success: a barrier with a failed rank would wait until the gloo timeout
    run.close()
    if run.dist.is_main:
        print(format_summary(summary))
    return 0


def _verify(args: argparse.Namespace) -> int:
    from rlnb.run.training.verify import verify_run

    try:
        report = verify_run(args.run_dir, args.from_step, args.steps)
    except USER_ERRORS as err:
        print(f"rlnb verify: {error_message(err)}", file=sys.stderr)
        return 2
    print(f"\nrlnb verify: {report.summary()}")
    return 0 if report.exact else 1


def _teach(args: argparse.Namespace) -> int:
    from rlnb.teach.build import run_build

    return run_build(args.out, args.source, prog="rlnb teach build")


def _preflight(args: argparse.Namespace) -> int:
    from rlnb.teach.preflight import preflight

    if args.steps < 1:
        print(f"rlnb preflight: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return 2
    return preflight(steps=args.steps, fast=args.fast)


def _notebook_arguments(p: argparse.ArgumentParser, values: str, help: str) -> None:
    p.add_argument("notebook", help="the .ipynb to execute")
    p.add_argument("-p", "--param", nargs=2, action="append", default=[],
                   metavar=("KEY", values),
                   help=f"{help}; values are read as YAML, a KEY with a dot is a config override")
    p.add_argument("--kernel", default=None, metavar="NAME",
                   help="a Jupyter kernelspec (default: ipykernel on this Python, whichever "
                        "kernelspec is called python3)")


def format_summary(s: dict) -> str:
    def pct(x):
        return "n/a" if x is None else f"{100 * x:.1f}%"

    gain = (
        None
        if s["accuracy_before"] is None or s["accuracy_after"] is None
        else s["accuracy_after"] - s["accuracy_before"]
    )
    lines = [
        "",
        "rlnb train: done",
        f"  steps              {s['steps']} in {s['seconds']:.0f} s",
        f"  held-out accuracy  {pct(s['accuracy_before'])} -> {pct(s['accuracy_after'])}"
        + ("" if gain is None else f"  ({100 * gain:+.1f} points)"),
        f"  final train reward {s['final_reward']:.3f}",
        f"  run directory      {s['run_dir']}  (config.yaml, metrics.jsonl, rollouts/, "
        "checkpoints/)",
    ]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    # argparse prints these texts in a terminal: plain text, no reStructuredText quotes
    parser = argparse.ArgumentParser(
        prog="rlnb",
        description="rlnb: RL post-training of language models (GRPO, PPO with a value model, "
                    "async GRPO, DPO), headless or from notebooks.",
        epilog="'rlnb COMMAND --help' shows a command's options. Exit codes: 0 done, 1 a run "
               "failed (or verify found a difference), 2 bad arguments (nothing written).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = sub.add_parser("demo", help="tour the estimators and losses on one frozen batch",
                          description="Print the advantage estimators, policy losses and KL "
                                      "estimators side by side on one frozen batch.")
    demo.add_argument("--seed", type=int, default=0, help="seed of the frozen batch")
    demo.set_defaults(func=_demo)
    train = sub.add_parser(
        "train", help="train a policy with GRPO, PPO with a value model, async GRPO or DPO",
        description="Train a policy with the loop the config names: GRPO (algorithm: grpo, the "
                    "default), PPO with a value model (algorithm: ppo), async GRPO (algorithm: "
                    "grpo with grpo.async_grpo.enabled=true) or DPO on preference pairs "
                    "(algorithm: dpo). Without a config: GRPO on the embedded tiny model "
                    "(configs/tiny.yaml; configs/ppo_tiny.yaml, configs/async_tiny.yaml and "
                    "configs/dpo_tiny.yaml are the other loops on it).")
    train.add_argument("items", nargs="*", metavar="[CONFIG.yaml] [key=value ...]",
                       help="a YAML config (default: built-in) then dotted.key=value overrides")
    train.add_argument("--run-dir", default=None, help="run directory (default runs/<time>)")
    train.add_argument("--resume", default=None, metavar="DIR", help="continue this run")
    train.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps to run (default: the loop's max_num_steps, e.g. grpo.max_num_steps, in "
             "total)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    train.add_argument("--ignore-unsupported", action="store_true",
                       help="with a NeMo-RL config: train although the keys rlnb has no use for "
                            "(cluster, parallelism, engine settings, ...) are ignored; without it "
                            "they are listed and nothing runs")
    train.set_defaults(func=_train)
    verify = sub.add_parser("verify", help="replay a run's steps from a checkpoint and compare "
                                           "them with what it logged (exit 1 on a difference)",
                            description="Replay a run's steps from one of its checkpoints and "
                                        "compare them with what it logged; exit 1 on a "
                                        "difference.")
    verify.add_argument("run_dir", help="the run directory")
    verify.add_argument("--from-step", type=int, default=None, metavar="K",
                        help="the checkpoint to start from (default: the earliest)")
    verify.add_argument("--steps", type=int, default=None, metavar="N",
                        help="steps to replay (default: every logged step after K)")
    verify.set_defaults(func=_verify)

    run = sub.add_parser("run", help="execute a notebook headless into a run directory",
                         description="Execute a notebook headless (papermill) into a run "
                                     "directory, with an HTML copy; exit 1 if a cell fails "
                                     "(the notebook is saved with the error).")
    _notebook_arguments(run, "VALUE", "a parameter of the notebook")
    run.add_argument("--run-dir", default=None,
                     help="run directory (default runs/<notebook>-<time>)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.set_defaults(func=rlnb_run)
    sweep = sub.add_parser("sweep", help="run a notebook over a grid of parameters, with a report",
                           description="Run a notebook once per point of a grid of parameters "
                                       "(one run directory each) and write an HTML report "
                                       "comparing them.")
    _notebook_arguments(sweep, "V1,V2", "comma-separated values are swept, one value is fixed")
    sweep.add_argument("--root", default=None,
                       help="sweep folder (default runs/sweep-<notebook>-<time>); a root that "
                            "holds this sweep is resumed (finished points are kept)")
    sweep.add_argument("--jobs", type=int, default=None, metavar="N",
                       help="points at once, each its own papermill process and kernel "
                            "(default 1; with --ray: tasks in flight, default all)")
    sweep.add_argument("--cpus-per-run", type=int, default=None, metavar="C",
                       help="threads per point (default: cores // jobs), or the CPUs a Ray "
                            "task asks for (default 1)")
    sweep.add_argument("--gpus-per-run", type=int, default=None, metavar="K",
                       help="GPUs per point, its share of CUDA_VISIBLE_DEVICES (default: 1 "
                            "with GPUs and --jobs > 1, else 0), or a Ray task's GPUs")
    sweep.add_argument("--ray", nargs="?", const=None, default=False, metavar="ADDRESS",
                       help="run each point as a Ray task: on a running cluster, else a local "
                            "one (ADDRESS: HOST:PORT, ray://HOST:PORT, auto, local); needs "
                            "rlnb[ray]")
    sweep.add_argument("--rerun-failed", action="store_true",
                       help="when resuming, rerun the points that failed too")
    sweep.add_argument("--force", action="store_true",
                       help="when resuming, rerun every point")
    sweep.set_defaults(func=rlnb_sweep)
    launch = sub.add_parser("launch", help="run a notebook on N processes (accelerate)",
                            description="Run a notebook on N processes, one rank each, through "
                                        "accelerate (GPUs, or CPU processes over gloo), on one "
                                        "machine or several.")
    launch.add_argument("--num-processes", type=int, required=True, metavar="N",
                        help="ranks to start (GPUs, or CPU processes over gloo)")
    _notebook_arguments(launch, "VALUE", "a parameter of the notebook")
    launch.add_argument("--run-dir", default=None,
                        help="run directory (default runs/<notebook>-<time>)")
    launch.add_argument("--no-progress", action="store_true", help="no progress bar")
    launch.add_argument("--num-machines", type=int, default=1, metavar="M",
                        help="machines taking part (run the same command on each; "
                             "--num-processes counts them all)")
    launch.add_argument("--machine-rank", type=int, default=0, metavar="R",
                        help="this machine's rank, 0 to M-1")
    launch.add_argument("--main-process-ip", default=None, metavar="IP",
                        help="machine 0's address (with --num-machines > 1)")
    launch.add_argument("--main-process-port", type=int, default=None, metavar="P",
                        help="machine 0's rendezvous port (default: 29500 with several "
                             "machines, a free one with one)")
    launch.set_defaults(func=rlnb_launch)

    teach = sub.add_parser("teach", help="build the exercises of a lab (docs/teaching.md)",
                           description="Exercises with checks for a lab on RL for LLMs.")
    build = teach.add_subparsers(dest="teach_command", required=True, metavar="COMMAND") \
        .add_parser("build", help="write OUT/student/ (stubs) and OUT/solution/ notebooks "
                                  "from notebooks/exercises/",
                    description="Build each exercise's student copy (stubs, no solution) and "
                                "solution copy.")
    build.add_argument("out", help="output folder")
    build.add_argument("--source", default=None, metavar="DIR", help="the exercise sources")
    build.set_defaults(func=_teach)
    pre = sub.add_parser("preflight", help="before a lab: check the install and a kernel, build "
                                           "the warm starts, time the live runs",
                         description="Check this machine before a lab: the install, a Jupyter "
                                     "kernel, the exercises, the warm starts (built and cached) "
                                     "and how long the lab's live runs take here.")
    pre.add_argument("--fast", action="store_true", help="tiny runs (tests): times nothing")
    pre.add_argument("--steps", type=int, default=5, metavar="K",
                     help="steps timed per live-run setting (default 5)")
    pre.set_defaults(func=_preflight)
    return parser


# A user's mistake (a bad config value, a missing file, a missing optional package) is one of
# these, with a message that names the culprit: exit 2, one line, no traceback.
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


if __name__ == "__main__":
    sys.exit(main())
