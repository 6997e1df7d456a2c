"""Training on a shared machine: steps in a fixed time, quiet and beside busy processes, for each
way of running torch's OpenMP threads, side by side in one run.

    python benchmarks/bench_busy.py                       # every arm, quiet then busy, 60 s each
    python benchmarks/bench_busy.py --seconds 100 --busy 1 2 --arms default passive rlnb

Each measurement is a fresh worker process that builds the embedded default trainer from its
(cached) warm start, takes two untimed steps, then steps GRPO until ``--seconds`` have passed
and reports the steps taken. An *arm* is the environment and thread count the worker starts with
(the OpenMP runtime reads its wait policy once, when torch loads it):

- ``default``: libgomp's own (``OMP_WAIT_POLICY`` unset: a waiting thread spins for about 300,000
  iterations before it sleeps), the torch threads = cores;
- ``passive``: ``OMP_WAIT_POLICY=PASSIVE`` (a waiting thread sleeps at once);
- ``spin<N>``: ``GOMP_SPINCOUNT=N`` (it spins N iterations, then sleeps);
- ``rlnb``: what ``import rlnb`` chooses by itself after watching the cores (``rlnb/threads.py``:
  a short spin when the run's threads have free cores, ``PASSIVE`` when they do not);
- ``1thread``: one torch thread (no OpenMP barrier at all).

*Busy* starts ``--busy`` processes that spin on a core each (a shell's ``while :; do :; done``,
as ``yes > /dev/null`` does) before the worker and stops them after. A job that would use all C
cores beside K busy processes is entitled to C / (K + C) of the machine (the scheduler gives
every runnable thread an equal slice): its fair-share speed is the quiet ``default`` speed x
C / (K + C), whatever thread count an arm chooses (2 cores, 2 busy: half the quiet speed). The
table prints each arm's steps, its ratio to the quiet ``default``, and, busy, its ratio to that
fair share. The load average is printed beside each figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

from harness import call_worker, load_text, machine_line, serve_worker, worker_env

ARMS = {
    "default": ({}, None),
    "passive": ({"OMP_WAIT_POLICY": "PASSIVE"}, None),
    "spin1k": ({"GOMP_SPINCOUNT": "1000"}, None),
    "spin10k": ({"GOMP_SPINCOUNT": "10000"}, None),
    "spin100k": ({"GOMP_SPINCOUNT": "100000"}, None),
    "rlnb": ({}, None),
    "1thread": ({}, 1),
}
# an arm starts from none of them
CLEARED = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "RLNB_OMP", "RLNB_OMP_CHOSEN")


def worker(spec: dict) -> dict:
    """Steps of the default trainer in ``spec["seconds"]`` (after two untimed steps)."""
    if spec["arm"] != "rlnb":  # the other arms measure torch as the environment sets it up
        os.environ["RLNB_OMP"] = "off"
    import rlnb  # first, as a user's notebook or rlnb's CLI does: it chooses before torch loads
    from rlnb.threads import CHOSEN

    chosen = CHOSEN  # None unless rlnb chose (the rlnb arm)
    import torch

    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    config = rlnb.load_config(None, [f"grpo.seed={spec['seed']}", "grpo.val_period=0",
                                     "grpo.val_at_start=false", "grpo.val_at_end=false"])
    trainer, _ = trainer_with_warm_start(config, progress=False, log=lambda *a: None)
    for _ in range(2):
        trainer.step()
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < spec["seconds"]:
        metrics = trainer.step()
        steps += 1
    return {"steps": steps, "seconds": time.perf_counter() - start,
            "threads": torch.get_num_threads(),
            "wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)"),
            "spincount": os.environ.get("GOMP_SPINCOUNT", "(unset)"),
            "chosen": None if chosen is None else
            f"{chosen.setting} (others held {chosen.others:.1f} cores)"
            if chosen.others is not None else chosen.setting,
            "reward": metrics.get("train/reward")}


def spinners(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(n)]


def measure(arm: str, args, busy: int) -> tuple[dict, str]:
    env_extra, threads = ARMS[arm]
    env = {k: v for k, v in worker_env(threads).items() if k not in CLEARED}
    env.update(env_extra)
    if threads is None:
        env.pop("OMP_NUM_THREADS", None)
        env.pop("MKL_NUM_THREADS", None)
    procs = spinners(busy)
    try:
        time.sleep(2 if busy else 0)  # the spinners running before torch starts
        run = call_worker(__file__, [], {"arm": arm, "seconds": args.seconds, "seed": args.seed},
                          label=f"{arm} ({'busy' if busy else 'quiet'})", env=env)
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
    return run.result, f"{load_text(run.load_before)} -> {load_text(run.load_after)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spec", help=argparse.SUPPRESS)
    ap.add_argument("--arms", nargs="+", choices=list(ARMS), default=list(ARMS))
    ap.add_argument("--seconds", type=float, default=60.0, help="timed training per measure")
    ap.add_argument("--busy", type=int, nargs="+", default=[2],
                    help="busy processes beside the job (each count measured after quiet)")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    if args.worker:
        serve_worker(worker, args.spec)
        return
    cores = os.cpu_count() or 1
    print(f"python {' '.join(sys.argv)}\nbench_busy: {machine_line()}", flush=True)
    results: dict[tuple[str, int], dict] = {}
    levels = [0, *args.busy]
    for busy in levels:
        for arm in args.arms:
            result, load = measure(arm, args, busy)
            results[(arm, busy)] = result
            chosen = f", rlnb chose {result['chosen']}" if result.get("chosen") else ""
            print(f"  {arm:>9} {busy} busy: {result['steps']:5d} steps in "
                  f"{result['seconds']:.0f} s, {result['threads']} threads{chosen}, load {load}",
                  flush=True)
    quiet = results[("default", 0)]["steps"] if "default" in args.arms else None
    print(f"\n{'arm':>9} | quiet steps | x default" + "".join(
        f" | {k} busy: steps | x fair share" for k in args.busy))
    for arm in args.arms:
        q = results[(arm, 0)]["steps"]
        line = f"{arm:>9} | {q:11d} | " + (f"{q / quiet:9.2f}" if quiet else f"{'':9}")
        for k in args.busy:
            b = results[(arm, k)]["steps"]
            fair = quiet * cores / (k + cores) if quiet else None
            line += f" | {b:13d} | " + (f"{b / fair:12.2f}" if fair else f"{'':12}")
        print(line)
    print(f"(fair share beside K busy: the quiet default's steps x {cores} / (K + {cores}); load "
          f"after the last run {load_text()})")


if __name__ == "__main__":
    main()
