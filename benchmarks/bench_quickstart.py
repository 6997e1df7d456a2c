"""The README's Quick start figure: what a new user sees from its command, over seeds.

For each seed this runs exactly the Quick start's command, ``rlnb run
notebooks/01_grpo_step_by_step.ipynb -p seed S``, in a fresh folder with an empty warm-start
cache (``RLNB_CACHE_DIR``), and reads from the executed notebook the held-out accuracy before
GRPO and after the run (200 held-out problems, one sampled answer each), the points gained and
the command's wall time. It prints one line per seed, then the range over the seeds and the
seeds that gained less than ``--aim`` points, with the machine's CPU class (torch's
``get_cpu_capability()``) and load average.

Exact values depend on the CPU's kernels (an AVX-512 machine, or ``--capability default``,
ATen's unvectorised kernels, gives other numbers from the same seed): read a seed's figure as
one draw, and the range as what to expect. ``--capability avx2`` on a wider machine gives an
AVX2 machine's numbers: it sets ``ATEN_CPU_CAPABILITY`` and keeps MKL and oneDNN within AVX2
(``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``), which reproduced an AVX2 machine's warm
start bit for bit (``tests/support/record_warm_start.py``); its times are the wider machine's.

    python benchmarks/bench_quickstart.py --seeds 0 1 2 3 4
    python benchmarks/bench_quickstart.py --seeds 0 1 2 3 4 --capability default --jobs 2

``--jobs 2`` runs two seeds at once, one thread each: the times are not a lone run's, and the
accuracies may differ from a two-thread run's in the last figures (the same on the AVX2 machine;
on the AVX-512 one seed 0 ended at 79.0% on one thread and 79.5% on two).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness import ROOT, load_text, machine_line

NOTEBOOK = ROOT / "notebooks" / "01_grpo_step_by_step.ipynb"
BEFORE = re.compile(r"held-out accuracy before GRPO: ([0-9.]+)")
AFTER = re.compile(r"held-out accuracy now: ([0-9.]+) after (\d+) steps")


def stdout_of(notebook: Path) -> str:
    nb = json.loads(notebook.read_text())
    return "".join("".join(out.get("text", "")) for cell in nb["cells"]
                   for out in cell.get("outputs", [])
                   if out.get("output_type") == "stream" and out.get("name") == "stdout")


def run_seed(seed: int, capability: str | None, threads: int | None) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RLNB_CACHE_DIR": str(Path(tmp) / "cache"), "HF_HUB_OFFLINE": "1"}
        if capability:
            env["ATEN_CPU_CAPABILITY"] = capability
            if capability.lower() in ("avx2", "default"):  # the BLAS and oneDNN within AVX2 too
                env.update(MKL_ENABLE_INSTRUCTIONS="AVX2", ONEDNN_MAX_CPU_ISA="AVX2")
        if threads:
            env["OMP_NUM_THREADS"] = str(threads)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "rlnb.cli", "run", str(NOTEBOOK), "-p", "seed",
                               str(seed), "--run-dir", str(Path(tmp) / "run")],
                              cwd=tmp, env=env, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if proc.returncode != 0:
            return {"seed": seed, "error": (proc.stderr or proc.stdout).strip()[-400:]}
        out = stdout_of(Path(tmp) / "run" / "notebook.ipynb")
    before, after = BEFORE.search(out), AFTER.search(out)
    if not (before and after):
        return {"seed": seed, "error": "the notebook printed no accuracy lines"}
    b, a = float(before.group(1)), float(after.group(1))
    return {"seed": seed, "before": b, "after": a, "gain": 100 * (a - b),
            "steps": int(after.group(2)), "seconds": seconds}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--capability", default=None,
                        help="ATEN_CPU_CAPABILITY for the runs (default: the CPU's own)")
    parser.add_argument("--jobs", type=int, default=1, help="seeds run at once (1 thread each)")
    parser.add_argument("--aim", type=float, default=30.0, help="points each seed should gain")
    args = parser.parse_args()

    env = dict(os.environ, ATEN_CPU_CAPABILITY=args.capability or "")
    capability = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
        env=env if args.capability else None, capture_output=True, text=True).stdout.strip()
    print(f"bench_quickstart: `rlnb run {NOTEBOOK.relative_to(ROOT)} -p seed S`, empty cache; "
          f"the runs' CPU class {capability}, {args.jobs} at a time; this machine: "
          f"{machine_line()}", flush=True)
    threads = 1 if args.jobs > 1 else None
    results = []
    with ThreadPoolExecutor(args.jobs) as pool:  # each seed's line as soon as it is done
        for r in pool.map(lambda s: run_seed(s, args.capability, threads), args.seeds):
            results.append(r)
            if "error" in r:
                print(f"seed {r['seed']}: FAILED: {r['error']}", flush=True)
            else:
                print(f"seed {r['seed']}: {100 * r['before']:.1f}% -> {100 * r['after']:.1f}% "
                      f"({r['gain']:+.1f} points) after {r['steps']} steps in "
                      f"{r['seconds']:.0f} s; load {load_text()}", flush=True)
    ok = [r for r in results if "error" not in r]
    if ok:
        def span(key, scale=1.0, fmt="{:.1f}"):
            values = [scale * r[key] for r in ok]
            return f"{fmt.format(min(values))}-{fmt.format(max(values))}"
        print(f"over seeds {[r['seed'] for r in ok]}: before {span('before', 100)} %, after "
              f"{span('after', 100)} %, gain {span('gain')} points, {span('seconds', fmt='{:.0f}')}"
              f" s; load {load_text()} at the end")
    short = [r["seed"] for r in ok if r["gain"] < args.aim]
    print(f"seeds short of +{args.aim:.0f} points: {short or 'none'}")
    return 1 if short or len(ok) < len(results) else 0


if __name__ == "__main__":
    sys.exit(main())
