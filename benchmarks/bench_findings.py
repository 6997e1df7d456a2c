"""Do rlnb's knobs reproduce published findings at toy scale? A pilot for power, then one table.

For each finding of ``rlnb.run.experiments.findings.FINDINGS`` (1 Dr. GRPO's length bias, 2 DAPO's
clip-higher, 3 DAPO's dynamic sampling, 4 2-GRPO's group size at equal rollouts, 5 stale
trajectories and the importance-sampling correction) every setting trains the tiny
character-level Llama from its warm start (cached after the first run of a seed; settings of one
finding share it) over the seeds, through ``rlnb.ablate`` (in this process, or ``--jobs N``
processes), each run on one torch thread (``Finding.threads``: ``--jobs 2`` gives the same
numbers on two cores in about half the time).

1. Pilot (``--pilot-seeds``, ``--pilot-steps``; skipped with ``--no-pilot``): a few seeds and
   steps estimate the seed-to-seed spread of each metric's A − B, and the smallest effect the
   planned seeds can detect is printed before the main run (80 % power, two-sided α = 0.05).
   The spread after a few steps is not the spread after many: read it as a first guess.
2. Main run: per metric and comparison, A's and B's mean ± sd over seeds, the paired 95 % t
   interval of A − B (``rlnb.run.experiments.stats``), the sd of the per-seed differences, the
   smallest effect these seeds detect, the seeds the observed difference would need, and whether the
   interval lies on the side the paper predicts ("yes"), or "not reproduced". The settings were
   chosen on tuning seeds 10-19; the seeds reported are 0, 1, ... (``Finding.seeds`` of them),
   and the re-run on seeds the study never saw is ``--seeds 20 21 22 23 24``.

    python benchmarks/bench_findings.py                   # pilot, then each finding's seeds
    python benchmarks/bench_findings.py --quick           # smoke test: small model, 2 steps
    python benchmarks/bench_findings.py --findings clip_higher --seeds 0 1 2 --no-pilot
    python benchmarks/bench_findings.py --no-pilot --seeds 20 21 22 23 24   # unseen seeds

The command, wall time and load average (other processes on the machine slow every run down)
are printed with the table; ``--json PATH`` also writes every run's per-step record. Runs are
written under ``--root`` (default ``runs/bench-findings-<time>``).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from harness import load_text, machine_line

from rlnb.run.experiments.findings import FINDINGS, run_finding

COLUMNS = ("metric", "A mean ± sd", "B mean ± sd", "A − B [95 % CI]", "sd(A − B)",
           "detectable (80 % power)", "seeds for A − B", "verdict")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="check that it runs: small model, no warm start, 2 steps, 2 seeds")
    ap.add_argument("--seeds", type=int, nargs="+", default=None,
                    help="default: 0, 1, ... up to each finding's planned number of seeds")
    ap.add_argument("--findings", nargs="+", choices=list(FINDINGS), default=list(FINDINGS))
    ap.add_argument("--steps", type=int, default=None, help="override every finding's steps")
    ap.add_argument("--pilot-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--pilot-steps", type=int, default=10)
    ap.add_argument("--no-pilot", action="store_true", help="skip the pilot")
    ap.add_argument("--jobs", type=int, default=None,
                    help="runs at once, each in its own process (default: one, in this one)")
    ap.add_argument("--root", default=None, help="where the runs are written")
    ap.add_argument("--json", default=None, help="write every run's record to this file")
    args = ap.parse_args()
    def seeds_of(finding) -> list[int]:
        return args.seeds or ([0, 1] if args.quick else list(range(finding.seeds)))

    steps = 2 if args.quick and args.steps is None else args.steps
    pilot_seeds = args.pilot_seeds[:2] if args.quick else args.pilot_seeds
    pilot_steps = 1 if args.quick else args.pilot_steps
    root = Path(args.root or Path("runs") / time.strftime("bench-findings-%Y%m%d-%H%M%S"))
    fast = ["grpo.val_period=0"] if args.quick else []
    command = "python " + " ".join(shlex.quote(a) for a in [sys.argv[0], *sys.argv[1:]])
    print(f"{command}\nbench_findings: {'quick' if args.quick else 'full'} mode, "
          f"{machine_line()}", flush=True)
    start, rows, records, summary = time.perf_counter(), [], {}, []
    for name in args.findings:
        finding = FINDINGS[name]
        seeds = seeds_of(finding)
        if args.quick and name == "dynamic_sampling":
            # an untrained model never finds a group with signal; its fast warm start is long
            print(f"\n{name}: skipped in quick mode", flush=True)
            continue
        options = dict(fast=args.quick, extra=fast, jobs=args.jobs, progress=False)
        if not args.no_pilot:
            t0 = time.perf_counter()
            pilot = run_finding(finding, pilot_seeds, num_steps=pilot_steps,
                                root=root / f"{name}-pilot", **options)
            print(f"\n{name}: pilot of {len(pilot_seeds)} seeds x {pilot_steps} steps in "
                  f"{time.perf_counter() - t0:.0f} s (load {load_text()}); power of {len(seeds)} "
                  "seeds from its spread:", flush=True)
            for line in pilot.power_lines(planned=len(seeds)):
                print(f"  {line}")
        t0 = time.perf_counter()
        result = run_finding(finding, seeds, num_steps=steps, root=root / name, **options)
        print(f"{name}: {len(finding.settings)} settings x {len(seeds)} seeds x "
              f"{result.steps} steps in {time.perf_counter() - t0:.0f} s on {finding.threads} "
              f"torch thread(s) a run (load {load_text()}); "
              f"warm start shared by the settings of each seed: {result.shared_warm_start}",
              flush=True)
        rows += [{"finding": finding.title, "seeds": len(seeds), **r} for r in result.rows]
        records[name] = result.runs
        summary.append(reproduced_line(finding, result.rows, len(seeds)))
    minutes = (time.perf_counter() - start) / 60
    print_table(rows)
    print("\n" + "\n".join(line for _, line in summary))
    print(f"findings reproduced: {sum(ok for ok, _ in summary)} of {len(summary)}")
    print(f"\nwall time {minutes:.1f} min for {len(records)} finding(s); "
          f"load average (1, 5, 15 min) at the end: {load_text()}")
    if args.quick:
        print("quick mode: a smoke test of a model that learns nothing; its numbers mean nothing")
    for r in rows:
        if r["verdict"].startswith("not reproduced"):
            print(f"not reproduced at this scale: {r['finding']}: {r['metric']} "
                  f"({r['A']} vs {r['B']}): {r['A − B [95 % CI]']}; {r['seeds']} seeds detect "
                  f"{r['detectable (80 % power)']}, the observed difference would need "
                  f"{r['seeds for A − B']} seeds")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"command": command, "minutes": minutes,
                       "records": records,
                       "rows": [{k: v for k, v in r.items() if k != "interval"} for r in rows]},
                      f)


def reproduced_line(finding, rows: list[dict], num_seeds: int) -> tuple[bool, str]:
    """Whether the finding reproduced (its claim's metric, the first one with a predicted sign,
    "yes" in every comparison), and a line saying so with every predicted effect's verdict."""
    head = next(m.label for m in finding.metrics if m.expect)
    predicted = [r for r in rows if r["verdict"] == "yes" or r["verdict"].startswith("not rep")]
    ok = all(r["verdict"] == "yes" for r in predicted if r["metric"] == head)
    what = "; ".join(f"{r['metric']}, {r['A']} vs {r['B']}: {r['verdict']}" for r in predicted)
    return ok, (f"{finding.title}: {'reproduced' if ok else 'not reproduced'} ({head}) over "
                f"{num_seeds} seeds; every predicted effect: {what}")


def print_table(rows: list[dict]) -> None:
    """Markdown table: one row per finding, comparison and metric."""
    header = "| finding | A vs B | seeds | " + " | ".join(COLUMNS) + " |"
    print("\n" + header + "\n" + "|---" * (len(COLUMNS) + 3) + "|")
    for r in rows:
        print(f"| {r['finding']} | {r['A']} vs {r['B']} | {r['seeds']} | "
              + " | ".join(str(r[c]) for c in COLUMNS) + " |")


if __name__ == "__main__":
    main()
