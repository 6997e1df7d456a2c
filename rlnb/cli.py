"""The ``rlnb`` command line.

    rlnb train [CONFIG.yaml] [key=value ...] [--run-dir DIR] [--resume DIR]
    rlnb demo                     a tour of the estimators and losses on one frozen batch

``rlnb run``, ``sweep`` and ``launch`` (notebooks) join them with the notebooks issue.
"""

from __future__ import annotations

import argparse
import os
import sys


def _demo(args: argparse.Namespace) -> int:
    from rlnb.demo import run_demo

    run_demo(seed=args.seed)
    return 0


def _train(args: argparse.Namespace) -> int:
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
    accelerator = None
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        import torch
        from accelerate import Accelerator

        # without cpu=True on a machine with no GPU, every launched process is rank 0 of 1
        accelerator = Accelerator(cpu=not torch.cuda.is_available())
    try:
        run = TrainingRun(
            config,
            overrides=overrides,
            run_dir=args.resume or args.run_dir,
            resume=bool(args.resume),
            accelerator=accelerator,
            progress=not args.no_progress,
        )
        summary = run.train(args.steps)
    except ValueError as err:
        print(f"rlnb train: {err}", file=sys.stderr)
        return 2
    # only after success: a barrier with a failed rank would wait until the gloo timeout
    _shut_down(accelerator)
    if run.dist.is_main:
        print(format_summary(summary))
    return 0


def _shut_down(accelerator) -> None:
    """Leave the process group together: a rank that exits while gloo's threads still run
    aborts with 'terminate called without an active exception'."""
    if accelerator is None:
        return
    import torch.distributed as dist

    accelerator.wait_for_everyone()
    accelerator.end_training()
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


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
    parser = argparse.ArgumentParser(prog="rlnb", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="tour the estimators and losses on one frozen batch")
    demo.add_argument("--seed", type=int, default=0, help="seed of the frozen batch")
    demo.set_defaults(func=_demo)
    train = sub.add_parser("train", help="train with GRPO (default: the embedded tiny model)")
    train.add_argument("items", nargs="*", metavar="[CONFIG.yaml] [key=value ...]",
                       help="a YAML config (default: built-in) then dotted.key=value overrides")
    train.add_argument("--run-dir", default=None, help="run directory (default runs/<time>)")
    train.add_argument("--resume", default=None, metavar="DIR", help="continue this run")
    train.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps to run (default: grpo.max_num_steps in total)",
    )
    train.add_argument("--no-progress", action="store_true", help="no progress bars")
    train.set_defaults(func=_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # overrides after an option (`--steps 5 grpo.seed=1`) land here
        if args.command != "train" or any(x.startswith("-") for x in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.items = [*args.items, *extra]
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
