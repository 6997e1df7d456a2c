"""Do rlnb's knobs reproduce published findings at toy scale? One table, seeds paired.

For each finding of ``rlnb.run.findings.FINDINGS`` (1 Dr. GRPO's length bias, 2 DAPO's
clip-higher, 3 DAPO's dynamic sampling) and each of its settings: train the tiny
character-level Llama from its warm start (cached after the first run of a seed; settings of one
finding share it) for the finding's number of steps, on each seed, in this process. Then print
one row per metric and comparison: setting A's mean ± sd over seeds, setting B's, the paired 95 %
t interval of A − B (``rlnb.run.stats``) and whether the interval lies on the side the paper
predicts. An effect that does not appear says so ("no clear effect"): the settings were fixed
before the first full run and are not tuned until one appears.

    python benchmarks/bench_findings.py                   # full: 3 seeds (see below)
    python benchmarks/bench_findings.py --quick           # smoke test: small model, 2 steps, 1 seed
    python benchmarks/bench_findings.py --findings clip_higher --seeds 0 1

Wall time and the load average (other processes on the machine slow every run down) are printed
with the table; ``--json PATH`` also writes every run's per-step record. Cost: most of a first
run is the warm starts (one per finding and seed, cached afterwards; up to 4000 SFT steps each).
Finding 2 alone took 1.5 min at load average 3.5 with two of its three warm starts to run; a
warm start of finding 1 took 12 min at load 6-9, and the whole full mode has not been timed yet.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from rlnb.run.findings import FINDINGS, effect_rows, run_setting

COLUMNS = ("metric", "A mean ± sd", "B mean ± sd", "A − B [95 % CI]", "reproduced")


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true",
                    help="check that it runs: small model, no warm start, 2 steps, one seed")
    ap.add_argument("--seeds", type=int, nargs="+", default=None)
    ap.add_argument("--findings", nargs="+", choices=list(FINDINGS), default=list(FINDINGS))
    ap.add_argument("--steps", type=int, default=None, help="override every finding's steps")
    ap.add_argument("--json", default=None, help="write every run's record to this file")
    args = ap.parse_args()
    seeds = args.seeds or ([0] if args.quick else [0, 1, 2])
    steps = 2 if args.quick and args.steps is None else args.steps
    print(f"bench_findings: {'quick' if args.quick else 'full'} mode, seeds {seeds}, "
          f"{torch.get_num_threads()} torch threads, load average {load()}", flush=True)
    start, rows, records = time.perf_counter(), [], {}
    for name in args.findings:
        finding = FINDINGS[name]
        runs: dict[str, list] = {}
        for setting in finding.settings:
            for seed in seeds:
                t0 = time.perf_counter()
                record = run_setting(finding, setting, seed, num_steps=steps, fast=args.quick)
                runs.setdefault(setting.label, []).append(record)
                print(f"  {name} | {setting.label} | seed {seed}: {len(record)} records in "
                      f"{time.perf_counter() - t0:.0f} s (load {load()})", flush=True)
        rows += effect_rows(finding, runs)
        records[name] = runs
    minutes = (time.perf_counter() - start) / 60
    print_table(rows)
    print(f"\nwall time {minutes:.1f} min for {len(args.findings)} finding(s) x "
          f"{len(seeds)} seed(s); load average (1, 5, 15 min) at the end: {load()}")
    if args.quick:
        print("quick mode: a smoke test of a model that learns nothing; its numbers mean nothing")
    no = [r for r in rows if r["reproduced"].startswith("no")]
    for r in no:
        print(f"not reproduced at this scale: {r['finding']}: {r['metric']} "
              f"({r['A']} vs {r['B']}): {r['A − B [95 % CI]']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"seeds": seeds, "minutes": minutes, "records": records,
                       "rows": [{k: v for k, v in r.items() if k != "interval"} for r in rows]},
                      f)


def print_table(rows: list[dict]) -> None:
    """Markdown table: one block per finding and comparison (A vs B named above it)."""
    header = "| finding | A vs B | " + " | ".join(COLUMNS) + " |"
    print("\n" + header + "\n" + "|---" * (len(COLUMNS) + 2) + "|")
    for r in rows:
        print(f"| {r['finding']} | {r['A']} vs {r['B']} | "
              + " | ".join(str(r[c]) for c in COLUMNS) + " |")


if __name__ == "__main__":
    main()
