"""``rlnb train``: train a policy headless, then a summary of the run."""

from __future__ import annotations

import argparse
import sys

from rlnb.cli.common import USER_ERRORS, error_message


def add_to(sub) -> None:
    p = sub.add_parser(
        "train", help="train a policy with GRPO, PPO with a value model, async GRPO or DPO",
        description="Train a policy with the loop the config names: GRPO (algorithm: grpo, the "
                    "default), PPO with a value model (algorithm: ppo), async GRPO (algorithm: "
                    "grpo with grpo.async_grpo.enabled=true) or DPO on preference pairs "
                    "(algorithm: dpo). Without a config: GRPO on the embedded tiny model "
                    "(configs/tiny.yaml; configs/ppo_tiny.yaml, configs/async_tiny.yaml and "
                    "configs/dpo_tiny.yaml are the other loops on it).")
    p.add_argument("items", nargs="*", metavar="[CONFIG.yaml] [key=value ...]",
                   help="a YAML config (default: built-in) then dotted.key=value overrides")
    p.add_argument("--run-dir", default=None, help="run directory (default runs/<time>)")
    p.add_argument("--resume", default=None, metavar="DIR", help="continue this run")
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps to run, at least 1 (default: the loop's max_num_steps, e.g. "
             "grpo.max_num_steps, in total)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--ignore-unsupported", action="store_true",
                   help="with a NeMo-RL config: train although the keys rlnb has no use for "
                        "(cluster, parallelism, engine settings, ...) are ignored; without it "
                        "they are listed and nothing runs")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    from rlnb.run.store.space import DiskFull
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
    if args.steps is not None and args.steps < 1:  # 0 steps would leave a run with no checkpoint
        print(f"rlnb train: --steps must be at least 1, got {args.steps} (leave it out to train "
              "to the loop's max_num_steps)", file=sys.stderr)
        return 2
    if args.steps is None and not args.resume:  # nothing to train: refused before any run dir
        try:
            from rlnb.run.config.master_config import load_config

            loop = load_config(config, overrides, ignore_unsupported=args.ignore_unsupported)
        except USER_ERRORS as err:
            print(f"rlnb train: {error_message(err)}", file=sys.stderr)
            return 2
        if loop.loop_config.max_num_steps < 1:
            print(f"rlnb train: {section_of(loop)}.max_num_steps=0: nothing to train; set it to "
                  "1 or more, or pass --steps N", file=sys.stderr)
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
            left = run.trainer.loop_config.max_num_steps - run.trainer.step_count
            if args.steps is None and left < 1:  # a finished run resumed: nothing to train
                raise ValueError(
                    f"{run.path} has trained its {run.trainer.step_count} steps "
                    f"({section_of(run.config)}.max_num_steps="
                    f"{run.trainer.loop_config.max_num_steps}): nothing to train; raise it "
                    f"({section_of(run.config)}.max_num_steps=N) or pass --steps N to go on")
            summary = run.train(args.steps)
    except DiskFull as err:  # a machine fault: one line, exit 1 (what was written is intact)
        if watch is not None:
            watch.report(err)
        print(f"rlnb train: {err}", file=sys.stderr)
        return 1
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


def section_of(config) -> str:
    """The loop's own config section (``grpo``, ``ppo``, ``dpo``), as its keys are written."""
    from rlnb.engine.trainers.loops import LOOPS

    return LOOPS[config.algorithm].sections[0]


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
        f"  run directory      {s['run_dir']}  (config.yaml, parts.json, metrics.jsonl, "
        "rollouts/, checkpoints/)",
    ]
    return "\n".join(lines)
