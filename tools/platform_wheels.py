"""Which packages of a student's install have no wheel for another platform (docs/teaching.md,
"Apple-silicon and Windows laptops").

    python tools/platform_wheels.py                   # rlnb[notebook] on the lock, 3.11.7
    python tools/platform_wheels.py --extra notebook --platform macosx_14_0_arm64 win_amd64

It lists what ``pip install -c requirements-lock.txt -e ".[EXTRA]"`` installs here (pip's
``--dry-run --report``), then asks pip, package by package, whether that exact version has a
wheel for each platform and Python 3.11 (``--only-binary=:all: --no-deps --platform``;
``--dry-run``, so nothing is downloaded beyond the index and the metadata). A package without
one must build from source there (a compiler, and minutes), or fails. It prints one line per
platform: how many packages have a wheel, and which do not; ``--record`` also stores that under
``platforms`` in ``benchmarks/lab_numbers.json``, where docs/teaching.md quotes it from.
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

ROOT = Path(__file__).resolve().parent.parent


def pip(*args: str) -> subprocess.CompletedProcess:
    # the machine's own pip constraints (a cap for the local wheels) would hide other platforms'
    env = {**os.environ, "PIP_CONSTRAINT": "", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT)


def installed_set(extra: str) -> list[tuple[str, str]]:
    """(name, version) of every package the install resolves to here, rlnb excluded."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = pip("install", "--dry-run", "--ignore-installed", "-q", "-c",
                   "requirements-lock.txt", "-e", f".[{extra}]", "--report", str(report))
        if done.returncode:
            sys.exit(f"platform_wheels: pip could not resolve .[{extra}]: {done.stderr[-500:]}")
        items = json.loads(report.read_text())["install"]
    return sorted((i["metadata"]["name"], i["metadata"]["version"].split("+")[0])
                  for i in items if i["metadata"]["name"] != "rlnb")


def has_wheel(name: str, version: str, platform: str, python: str) -> bool:
    with tempfile.TemporaryDirectory() as tmp:
        done = pip("install", "--dry-run", "--ignore-installed", "--no-deps", "-q",
                   "--only-binary=:all:", "--platform", platform, "--python-version", python,
                   "--target", tmp, f"{name}=={version}")
    return done.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--extra", default="notebook")
    # a patch release, as pip reads a bare 3.11 as 3.11.0: soupsieve 4.1.3 (the lock's) requires
    # 3.11.5 or later, so an early 3.11 (Ubuntu 22.04's 3.11.0) cannot install the lock at all
    parser.add_argument("--python", default="3.11.7")
    parser.add_argument("--platform", nargs="+",
                        default=["macosx_14_0_arm64", "win_amd64", "macosx_13_0_x86_64"])
    parser.add_argument("--record", action="store_true",
                        help="store the result in benchmarks/lab_numbers.json (platforms)")
    args = parser.parse_args()
    packages = installed_set(args.extra)
    results = {}
    print(f"rlnb[{args.extra}] with requirements-lock.txt: {len(packages)} packages besides "
          f"rlnb, Python {args.python}")
    for platform in args.platform:
        missing = [f"{n}=={v}" for n, v in packages if not has_wheel(n, v, platform, args.python)]
        results[platform] = missing
        print(f"{platform}: {len(packages) - len(missing)} of {len(packages)} have a wheel"
              + (f"; none for {', '.join(missing)}" if missing else ""), flush=True)
    if args.record:
        path = ROOT / "benchmarks" / "lab_numbers.json"
        record = json.loads(path.read_text()) if path.is_file() else {}
        record["platforms"] = {"packages": len(packages), "python": args.python,
                               "extra": args.extra, "date": time.strftime("%Y-%m-%d"),
                               "results": results}
        path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        print(f"platform_wheels: stored under platforms in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
