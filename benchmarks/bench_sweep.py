"""Wall time of one small sweep run serially, with ``--jobs 2``, and as Ray tasks.

Each mode runs the same 4-point grid (notebook 01 in its ``fast`` mode, seeds 0-3, by default)
through the real ``rlnb sweep`` command into a fresh root, and times it from outside. From the
sweep's progress lines, timestamped as they arrive, it also reports the start-up (command start to
the first point started: imports, and for Ray joining or starting the cluster), the mean time of
one point (its process start to its end, papermill, kernel and HTML export included) and the
tail (last point's end to exit: summary.csv and the report notebook).

    python benchmarks/bench_sweep.py [--modes serial jobs2 ray] [--points 4] [--notebook NB]

Modes: ``serial`` (``--jobs 1``, each point with torch's default threads), ``serial1``
(``--jobs 1 --cpus-per-run 1``), ``jobs2`` (``--jobs 2``: cores // 2 threads each), ``ray``
(``--ray local``: a new local Ray cluster, tasks of 1 CPU). On N cores ``--jobs N`` approaches
N x only if one point cannot use the cores by itself; the load average printed before and
after each mode says how busy the machine was (other processes slow every mode down).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, load_text, machine_line

MODES = {
    "serial": [],
    "serial1": ["--cpus-per-run", "1"],
    "jobs2": ["--jobs", "2"],
    "ray": ["--ray", "local"],
}


def run_mode(mode: str, notebook: Path, points: int, work: Path) -> dict:
    root = work / f"sweep-{mode}"
    seeds = ",".join(str(s) for s in range(points))
    cmd = [sys.executable, "-m", "rlnb.cli", "sweep", str(notebook), "-p", "fast", "true",
           "-p", "seed", seeds, "--root", str(root), *MODES[mode]]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    before = load_text()
    t0 = time.perf_counter()
    first_start = last_end = None
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    lines = []
    for line in proc.stdout:
        now = time.perf_counter() - t0
        lines.append(line)
        if "] start " in line and first_start is None:
            first_start = now
        if "] ok " in line or "] FAILED " in line:
            last_end = now
    code = proc.wait()
    wall = time.perf_counter() - t0
    if code != 0:
        sys.exit(f"{mode}: rlnb sweep exited with {code}:\n{''.join(lines)[-3000:]}")
    runs = json.loads((root / "sweep.json").read_text())["runs"]
    per_point = [r["seconds"] for r in runs]
    return {"mode": mode, "wall": wall, "startup": first_start, "tail": wall - last_end,
            "point": sum(per_point) / len(per_point), "load_before": before,
            "load_after": load_text()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", nargs="+", default=["serial", "jobs2", "ray"],
                        choices=list(MODES))
    parser.add_argument("--points", type=int, default=4)
    parser.add_argument("--notebook", type=Path,
                        default=ROOT / "notebooks" / "01_grpo_step_by_step.ipynb")
    args = parser.parse_args()
    print(f"{args.points}-point sweep of {args.notebook.name} (fast=true), "
          f"{machine_line()}")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        for mode in args.modes:
            res = run_mode(mode, args.notebook, args.points, Path(tmp))
            results.append(res)
            print(f"  {mode:8s} wall {res['wall']:6.1f} s  (load {res['load_before']} -> "
                  f"{res['load_after']})", flush=True)
    base = results[0]["wall"]
    print(f"\n| mode | wall (s) | vs {results[0]['mode']} | start-up (s) | one point (s, mean) "
          "| tail: summary + report (s) | load average after (1, 5, 15 min) |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['mode']} | {r['wall']:.1f} | {base / r['wall']:.2f}x | {r['startup']:.1f} "
              f"| {r['point']:.1f} | {r['tail']:.1f} | {r['load_after']} |")


if __name__ == "__main__":
    main()
