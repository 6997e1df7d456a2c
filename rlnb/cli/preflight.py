"""``rlnb preflight``: before a lab, check the install, a kernel, the warm starts, the speed;
with ``--memory CONFIG``, the memory plan of a GRPO config's step instead (no weight loads)."""

from __future__ import annotations

import argparse
import sys

from rlnb.cli.common import USER_ERRORS, error_message


def add_to(sub) -> None:
    p = sub.add_parser("preflight", help="before a lab: check the install and a kernel, build "
                                         "the warm starts, time the live runs; --memory: will "
                                         "a config's step fit on the device",
                       description="Check this machine before a lab: the install, a Jupyter "
                                   "kernel, the exercises, the warm starts (built and cached) "
                                   "and how long the lab's live runs take here. With --memory "
                                   "CONFIG [key=value ...]: the peak memory of each stage of a "
                                   "GRPO step (generation, log-probs, update) estimated from "
                                   "the config before any weight loads, and whether it fits "
                                   "the GPU (docs/memory.md).")
    p.add_argument("--fast", action="store_true", help="tiny runs (tests): times nothing")
    p.add_argument("--steps", type=int, default=5, metavar="K",
                   help="steps timed per live-run setting (default 5)")
    p.add_argument("--memory", nargs="+", default=None, metavar="CONFIG [key=value ...]",
                   help="plan the memory of this config's GRPO step instead (CONFIG: a YAML "
                        "file, or only overrides for the built-in config)")
    p.add_argument("--device-memory", type=float, default=None, metavar="GIB",
                   help="with --memory: the device's memory in GiB (default: the free memory "
                        "of the CUDA device, if there is one)")
    p.set_defaults(func=handle)


def handle(args: argparse.Namespace) -> int:
    if args.memory is not None:
        return memory(args.memory, args.device_memory)
    if args.device_memory is not None:
        print("rlnb preflight: --device-memory goes with --memory CONFIG", file=sys.stderr)
        return 2
    from rlnb.teach.preflight import preflight

    if args.steps < 1:
        print(f"rlnb preflight: --steps must be >= 1, got {args.steps}", file=sys.stderr)
        return 2
    return preflight(steps=args.steps, fast=args.fast)


def memory(items: list[str], device_gib: float | None) -> int:
    """Print the plan's table; 2 with one line on bad input."""
    config = items[0] if "=" not in items[0] else None
    overrides = items[1:] if config is not None else items
    bad = [x for x in overrides if "=" not in x]
    if bad:
        print(f"rlnb preflight: {bad[0]!r} is not a dotted.key=value override", file=sys.stderr)
        return 2
    if device_gib is not None and not device_gib > 0:
        print(f"rlnb preflight: --device-memory must be > 0 GiB, got {device_gib}",
              file=sys.stderr)
        return 2
    try:
        import torch

        from rlnb.engine.models.memory_plan import GIB
        from rlnb.engine.trainers.memory_check import plan_for
        from rlnb.run.config.master_config import load_config

        cfg = load_config(config, overrides)
        plan = plan_for(cfg, world_size=cfg.cluster.num_processes or 1)
    except USER_ERRORS as err:
        print(f"rlnb preflight: {error_message(err)}", file=sys.stderr)
        return 2
    device, where = None, "no GPU: plan only"
    if device_gib is not None:
        device, where = int(device_gib * GIB), f"device memory {device_gib:g} GiB (given)"
    elif torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        device = free
        where = f"{torch.cuda.get_device_name()}: {free / GIB:.1f} of {total / GIB:.1f} GiB free"
    s = plan.shape
    print(f"memory plan of one GRPO step per process ({s.parameters / 1e6:.1f} M parameters, "
          f"{s.trainable / 1e6:.2f} M trained, {plan.dtype_bytes} bytes each; {where})")
    print(plan.table(device))
    return 0
