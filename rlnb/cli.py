"""The ``rlnb`` command line.

    rlnb train [CONFIG.yaml] [key=value ...] [--run-dir DIR] [--resume DIR]
    rlnb verify RUN_DIR [--from-step K] [--steps N]   replay steps from a checkpoint, compare
    rlnb demo                     a tour of the estimators and losses on one frozen batch
    rlnb run NOTEBOOK [-p KEY VALUE ...] [--run-dir DIR]          execute it headless
    rlnb sweep NOTEBOOK [-p KEY V1,V2 ...] [--root DIR] [--jobs N | --ray [ADDRESS]]
                                                       one run per grid point + report
    rlnb launch --num-processes N NOTEBOOK [-p KEY VALUE ...]     one rank per process
        [--num-machines M --machine-rank R --main-process-ip IP --main-process-port P]

Notebook commands (``rlnb.run.notebooks``, ``rlnb.run.sweep``, ``rlnb.run.launch``): ``-p`` values
are read as YAML; a KEY with a dot (``-p loss_fn.ratio_clip_max 0.28``) is a config override
appended to the notebook's ``overrides``, any other KEY a papermill parameter. Exit codes: 0 done,
1 a notebook failed (it is saved with the error), 2 bad arguments (nothing written).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path


def _demo(args: argparse.Namespace) -> int:
    from rlnb.demo import run_demo

    run_demo(seed=args.seed)
    return 0


def _train(args: argparse.Namespace) -> int:
    from rlnb.run.accelerator import RankWatch, auto_accelerator
    from rlnb.run.session import TrainingRun

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
            )
            summary = run.train(args.steps)
    except USER_ERRORS as err:
        if watch is not None:
            watch.report(err)
        print(f"rlnb train: {_message(err)}", file=sys.stderr)
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
    from rlnb.run.verify import verify_run

    try:
        report = verify_run(args.run_dir, args.from_step, args.steps)
    except USER_ERRORS as err:
        print(f"rlnb verify: {_message(err)}", file=sys.stderr)
        return 2
    print(f"\nrlnb verify: {report.summary()}")
    return 0 if report.exact else 1


# --------------------------------------------------------------------------- notebooks
def _show(path) -> str:
    """``path`` relative to the working directory when it lies below it."""
    if path is None:
        return "-"
    try:
        return str(Path(path).relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _notebook_command(name: str, call) -> int:
    """Run ``call()``; bad arguments exit 2 with one line, before anything is written."""
    try:
        return call()
    except ImportError as err:
        print(f"rlnb {name}: {err.name or err} is missing; notebooks need the notebook extra: "
              "pip install -e '.[notebook]'", file=sys.stderr)
        return 2
    except USER_ERRORS as err:
        print(f"rlnb {name}: {_message(err)}", file=sys.stderr)
        return 2


def _run_files(run_dir: Path) -> str:
    names = ["config.yaml", "metrics.jsonl", "rollouts/", "checkpoints/"]
    found = [n for n in names if (run_dir / n.rstrip("/")).exists()]
    return ", ".join(found) or "nothing else (the notebook wrote no run files)"


def _run_metrics(run_dir: Path) -> str | None:
    """'N steps; held-out accuracy a -> b; reward x -> y' from the run's metrics.jsonl."""
    from rlnb.run.rundir import RunDir, read_metrics_file

    records = read_metrics_file(run_dir / RunDir.METRICS)
    if not records:
        return None
    parts = [f"{max(r['step'] for r in records)} steps"]
    for key, label in (("validation/accuracy", "held-out accuracy"), ("train/reward", "reward")):
        values = [r[key] for r in records if r.get(key) is not None]
        if values:
            parts.append(f"{label} {values[0]:.3f} -> {values[-1]:.3f}")
    return "; ".join(parts)


def _run(args: argparse.Namespace) -> int:
    from rlnb.run.notebooks import run_notebook
    from rlnb.run.parameters import parse_pairs

    def call():
        params = parse_pairs(args.param)
        res = run_notebook(args.notebook, run_dir=args.run_dir, parameters=params,
                           kernel_name=args.kernel, progress=not args.no_progress)
        head = (f"done in {res.seconds:.1f} s" if res.ok
                else f"FAILED in {res.seconds:.1f} s: {res.error}")
        print(f"\nrlnb run: {head}\n"
              f"  run directory  {_show(res.run_dir)}\n"
              f"  notebook       {_show(res.notebook)}\n"
              f"  html           {_show(res.html)}\n"
              f"  run files      {_run_files(res.run_dir)}")
        summary = _run_metrics(res.run_dir)
        if summary:
            print(f"  metrics        {summary}")
        return 0 if res.ok else 1

    return _notebook_command("run", call)


def _sweep(args: argparse.Namespace) -> int:
    from rlnb.run.sweep import parse_grid, sweep

    def call():
        grid, fixed = parse_grid(args.param)
        res = sweep(args.notebook, grid, root=args.root, parameters=fixed,
                    kernel_name=args.kernel, jobs=args.jobs, cpus_per_run=args.cpus_per_run,
                    gpus_per_run=args.gpus_per_run, ray=args.ray,
                    rerun_failed=args.rerun_failed, force=args.force)
        print(f"\nrlnb sweep: {len(res.runs) - len(res.failed)} of {len(res.runs)} runs ok\n"
              f"  sweep root  {_show(res.root)}  (sweep.json, summary.csv, logs/, a folder per "
              "run)\n"
              f"  report      {_show(res.report_html)}")
        for run in res.failed:
            print(f"  FAILED      {run.run_dir.name}: {run.error}")
        if res.report_error:
            print(f"  the report failed: {res.report_error}")
        return 0 if res.ok else 1

    return _notebook_command("sweep", call)


def _launch(args: argparse.Namespace) -> int:
    from rlnb.run.launch import RANKS, launch
    from rlnb.run.parameters import parse_pairs

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
                 f"  run directory  {_show(res.run_dir)}",
                 f"  notebook       {_show(res.notebook)}  (rank 0)",
                 f"  html           {_show(res.html)}"]
        if args.num_processes > 1:
            lines.append(f"  other ranks    {_show(res.run_dir / RANKS)}/rank<R>.ipynb")
        lines += [f"  rank {r}: {e}" if r >= 0 else f"  {e}" for r, e in res.rank_errors.items()]
        print("\n".join(lines))
        return 0 if res.ok else 1

    return _notebook_command("launch", call)


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
    run.set_defaults(func=_run)
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
    sweep.set_defaults(func=_sweep)
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
    launch.set_defaults(func=_launch)
    return parser


# A user's mistake (a bad config value, a missing file, a missing optional package) is one of
# these, with a message that names the culprit: exit 2, one line, no traceback.
USER_ERRORS = (ValueError, FileNotFoundError, ImportError)


def _message(err: BaseException) -> str:
    if isinstance(err, ImportError) and not isinstance(err, ModuleNotFoundError):
        return str(err)
    if isinstance(err, ModuleNotFoundError):
        return f"{err.name} is not installed ({err})"
    return str(err)


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
        print(f"rlnb {args.command}: failed: {type(err).__name__}: {_message(err)} "
              "(RLNB_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
