"""A lecturer's dry run, timed: docs/teaching.md's commands, in order, from a fresh clone.

    python benchmarks/lab_dry_run.py https://github.com/rlnb/rlnb.git WORKDIR [--record]
    python benchmarks/lab_dry_run.py --checkout DIR WORKDIR      # a clone made already

1. ``git clone SOURCE WORKDIR/rlnb`` (or ``--checkout DIR``: that checkout, as it is);
2. ``python3.11 -m venv .venv`` in it;
3. ``pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu``;
4. ``pip install -q -c requirements-lock.txt -e ".[notebook]"``;
5. ``rlnb preflight``, with an empty warm-start cache (``WORKDIR/cache``);
6. ``rlnb teach build lab/``;
7. every solution copy and notebook 01's opening, run as the lecturer runs them (``rlnb run``,
   seed 0, the cache preflight filled), and what they show compared value by value with the
   record of this CPU class (``bench_lab.py verify``).

Each step's wall time, the venv's size, the CPU class and the load are printed, kept in
``WORKDIR/dry_run.json`` after every step and, with ``--record``, stored under ``dry_run`` in this
checkout's ``benchmarks/lab_numbers.json`` (the guide's "dry run" table). A step that fails ends
the run with its output's last lines; run again, it keeps the steps ``WORKDIR/dry_run.json``
holds up to the install (their times as measured) and does the rest again, from an empty cache.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import ROOT, load_text

TORCH = ["pip", "install", "torch==2.13.0", "--index-url", "https://download.pytorch.org/whl/cpu"]


def step(name: str, args: list[str], cwd: Path, env: dict, steps: list, done: dict,
         workdir: Path) -> str:
    if name in done:  # measured by an earlier run of this dry run (an install)
        steps.append(done[name])
        print(f"{done[name]['seconds']:7.1f} s  {name}  (measured before)", flush=True)
        return ""
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        sys.exit(f"lab_dry_run: step '{name}' failed (exit {proc.returncode}): {' '.join(args)}")
    steps.append({"step": name, "command": " ".join(args), "seconds": round(seconds, 1),
                  "load": load_text()})
    print(f"{seconds:7.1f} s  {name}  (load {load_text()})", flush=True)
    (workdir / "dry_run.json").write_text(json.dumps({"steps": steps}, indent=1))
    return proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="?", help="the repository's address or a local path")
    parser.add_argument("workdir", type=Path)
    parser.add_argument("--checkout", type=Path, default=None, help="use this clone as it is")
    parser.add_argument("--python", default="python3.11")
    parser.add_argument("--resume", action="store_true",
                        help="keep every step WORKDIR/dry_run.json holds (preflight's cache "
                             "too) and go on from the first one it lacks")
    parser.add_argument("--compare-with", type=Path, default=None, metavar="RECORD",
                        help="the record to verify against (default: the checkout's own)")
    parser.add_argument("--record", action="store_true",
                        help="store the times in this checkout's benchmarks/lab_numbers.json")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    steps: list[dict] = []
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    cache = args.workdir / "cache"
    earlier = args.workdir / "dry_run.json"
    installs = ("clone", "venv", "torch (CPU build)", "rlnb and the notebook extra")
    done = {s["step"]: s for s in json.loads(earlier.read_text())["steps"]
            if s["step"] in installs or args.resume} if earlier.is_file() else {}
    if cache.exists() and not args.resume:
        import shutil

        shutil.rmtree(cache)  # preflight measures a student's first run
    if args.checkout is None:
        checkout = args.workdir / "rlnb"
        step("clone", ["git", "clone", "-q", args.source, str(checkout)], args.workdir, env, steps,
             done, args.workdir)
    else:
        checkout = args.checkout.resolve()
    step("venv", [args.python, "-m", "venv", ".venv"], checkout, env, steps, done, args.workdir)
    venv = {**env, "VIRTUAL_ENV": str(checkout / ".venv"), "RLNB_CACHE_DIR": str(cache),
            "PATH": f"{checkout / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"}
    step("torch (CPU build)", TORCH, checkout, venv, steps, done, args.workdir)
    step("rlnb and the notebook extra",
         ["pip", "install", "-q", "-c", "requirements-lock.txt", "-e", ".[notebook]"],
         checkout, venv, steps, done, args.workdir)
    size = subprocess.run(["du", "-sm", ".venv"], cwd=checkout, capture_output=True,
                          text=True).stdout.split()[0]
    report = step("rlnb preflight (empty cache)", ["rlnb", "preflight"], checkout, venv, steps,
                  done, args.workdir)
    if report:
        (args.workdir / "preflight.txt").write_text(report)
    report = (args.workdir / "preflight.txt").read_text()
    step("rlnb teach build lab/", ["rlnb", "teach", "build", "lab/"], checkout, venv, steps, done,
         args.workdir)
    times = args.workdir / "times.json"
    verified = step("the solutions and the opening, compared with the record",
                    ["python", "benchmarks/bench_lab.py", "verify", "--seeds", "0", "--cache",
                     str(cache), "--times", str(times),
                     *(["--record", str(args.compare_with.resolve())] if args.compare_with
                       else [])], checkout, venv, steps, done, args.workdir)
    print(verified.strip().splitlines()[-1] if verified.strip() else "")
    cpu = subprocess.run(["python", "-c", "import torch; print(torch.backends.cpu."
                                          "get_cpu_capability())"], cwd=checkout, env=venv,
                         capture_output=True, text=True).stdout.strip()
    result = {"cpu_class": cpu, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "venv_mb": int(size), "steps": steps,
              "notebooks": json.loads(times.read_text()) if times.is_file() else {},
              "preflight_output": report,
              "verify": verified.strip().splitlines()[-12:]}
    print(f"venv: {size} MB; CPU {cpu}")
    (args.workdir / "dry_run.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    if args.record:
        record_path = ROOT / "benchmarks" / "lab_numbers.json"
        record = json.loads(record_path.read_text()) if record_path.is_file() else {}
        record["dry_run"] = result
        record_path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"lab_dry_run: stored under dry_run in {record_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
