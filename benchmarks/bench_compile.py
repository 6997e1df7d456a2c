"""Eager against compiled (``policy.compile``), side by side in one run, with the load average.

For each shape P x G x R (P prompts, G generations per prompt, R new tokens; 16x8x16 and 8x8x8
by default) on the embedded default model (configs/tiny.yaml: the character-level Llama,
hidden 128, 2 layers), three fresh processes run the same GRPO steps (no warm start, no
validation, one optimizer step over all P*G rows):

- ``eager``: ``policy.compile.enabled=false``.
- ``cold``: compiled, with an empty cache folder (``RLNB_CACHE_DIR`` in a temporary folder):
  the first step includes the first-run compile (``compile/seconds``).
- ``warm``: compiled again with the folder ``cold`` filled: what a second run on the machine
  costs to start.

Per process it prints the seconds from launching the process to the end of its first step
(imports, model, compile or cache load), the compile seconds, and over the steps after the
first (median): the whole GRPO step (``timing/train/total_step_time``), the update
(``timing/train/policy_training``) and the generation stage per new token (``timing/train/
generation`` / R, the decode step plus its eager sampling). The load average is printed before
and after each process; the cores are shared with whatever else runs, so compare numbers only
within one run and read them with the load.

    python benchmarks/bench_compile.py [--shapes 16x8x16 8x8x8] [--steps 6] [--threads N]
    python benchmarks/bench_compile.py --quick     # tiny sizes: checks that the script works
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time

from harness import ROOT, call_worker, load_text, machine_line, serve_worker, worker_env

BASE = ["sft.enabled=false", "grpo.val_period=0", "grpo.val_at_start=false",
        "grpo.val_at_end=false", "checkpointing.enabled=false"]
QUICK_MODEL = ["policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1"]


def shape_overrides(shape: str) -> list[str]:
    P, G, R = (int(x) for x in shape.split("x"))
    return [f"grpo.num_prompts_per_step={P}", f"grpo.num_generations_per_prompt={G}",
            f"policy.generation.max_new_tokens={R}", f"policy.train_global_batch_size={P * G}",
            f"policy.train_micro_batch_size={P * G}"]


def worker(spec: dict) -> dict:
    import torch

    if spec["threads"]:
        torch.set_num_threads(spec["threads"])
    import rlnb

    trainer = rlnb.GRPOTrainer(rlnb.load_config(None, spec["overrides"]))
    steps = [trainer.step()]
    first_done = time.time()  # wall clock: the parent compares it with its launch time
    steps += [trainer.step() for _ in range(spec["steps"] - 1)]
    R = int(spec["shape"].split("x")[2])
    later = steps[1:] or steps

    def median(key: str) -> float:
        return statistics.median(float(m[key]) for m in later)

    return {"first_step_end": first_done,
            "step": median("timing/train/total_step_time"),
            "update": median("timing/train/policy_training"),
            "per_token": median("timing/train/generation") / R,
            "compile_seconds": float(steps[0].get("compile/seconds", 0.0)),
            "recompiles": float(steps[-1].get("compile/recompiles", 0.0)),
            "eager_fallback": float(steps[-1].get("compile/eager", 0.0)),
            "threads": torch.get_num_threads()}


def run(spec: dict, cache: str) -> dict:
    """One fresh process; adds the seconds from its launch to the end of its first step."""
    env = worker_env(RLNB_CACHE_DIR=cache, PYTHONPATH=str(ROOT))
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the cache under RLNB_CACHE_DIR is measured
    run = call_worker(__file__, [], spec, label=f"{spec['variant']} {spec['shape']}", env=env,
                      timeout=3600)
    return {**run.result, "start": run.result["first_step_end"] - run.started,
            "stderr": run.stderr.strip(),
            "load": f"{load_text(run.load_before)} -> {load_text(run.load_after)}"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", nargs="+", default=["16x8x16", "8x8x8"],
                        help="P x G x R: prompts, generations per prompt, new tokens")
    parser.add_argument("--steps", type=int, default=6, help="GRPO steps per process")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: default)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny model and shapes, 2 steps: a smoke run, no figures to keep")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve_worker(worker, args.spec)
        return 0
    shapes, steps, model = args.shapes, args.steps, []
    if args.quick:
        shapes, steps, model = ["2x2x4"], 2, QUICK_MODEL
    print(f"bench_compile: {machine_line()}; steps per process {steps} (medians over all but "
          f"the first){' [--quick]' if args.quick else ''}")
    print(f"{'shape':>8} {'run':>6} {'start s':>8} {'compile s':>9} {'step s':>8} "
          f"{'update s':>8} {'token ms':>8} {'recomp':>6}  load before -> after")
    for shape in shapes:
        with tempfile.TemporaryDirectory(prefix="rlnb_bench_compile_") as cache:
            for variant, compiled in (("eager", False), ("cold", True), ("warm", True)):
                overrides = [*BASE, *model, *shape_overrides(shape),
                             f"policy.compile.enabled={str(compiled).lower()}"]
                spec = {"variant": variant, "shape": shape, "steps": steps,
                        "threads": args.threads, "overrides": overrides}
                r = run(spec, cache)
                flag = "  EAGER FALLBACK" if r["eager_fallback"] else ""
                print(f"{shape:>8} {variant:>6} {r['start']:8.2f} {r['compile_seconds']:9.2f} "
                      f"{r['step']:8.3f} {r['update']:8.3f} {1e3 * r['per_token']:8.2f} "
                      f"{r['recompiles']:6.0f}  {r['load']}{flag}", flush=True)
                if r["stderr"]:
                    print(f"         stderr of {variant}: {r['stderr'][-500:]}")
    print(f"threads per process: {r['threads']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
