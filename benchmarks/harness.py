"""What the benchmarks share: the machine line they print, the load around a measurement, and
the protocol by which a benchmark runs one measurement in a fresh worker process.

A benchmark script imports this module by name (``from harness import ...``): the scripts run as
``python benchmarks/<script>.py``, which puts this folder first on ``sys.path``.

- ``machine_line()``: one line naming the machine: CPU class (torch's ``get_cpu_capability()``),
  cores, torch threads, torch version and the load average (1, 5, 15 min). CPU timings swing
  with the load: every benchmark prints it at its start and beside each figure.
- ``load_text()``: the load average as ``"1.02 0.87 0.60"``; ``busy()``: whether CPU timings
  taken now are unreliable (other processes running).
- The worker protocol: the driver calls ``call_worker(script, [...], spec)``, which runs
  ``python script --worker [...] --spec '<json>'`` in a fresh process; the worker answers with
  ``serve_worker(fn, spec)``: ``fn(spec)``'s result printed as one ``RESULT <json>`` line, the
  last such line of its stdout being the answer. A worker that fails stops the benchmark with
  the ends of its output and one line naming it.
- ``worker_env(threads)``: a worker's environment: ``threads`` OpenMP/MKL threads, offline.
- A trainer with its warm start is the library's own: ``rlnb.trainer_with_warm_start``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULT = "RESULT "


def load_text(load: tuple[float, float, float] | None = None) -> str:
    """The load average (now, or ``load``) as three numbers."""
    return " ".join(f"{x:.2f}" for x in (load or os.getloadavg()))


def busy() -> bool:
    """Whether other processes are running (1-minute load above 1): a CPU timing taken now is
    not reliable (OpenMP threads competing for the cores slow small ops down many-fold)."""
    return os.getloadavg()[0] > 1.0


def machine_line() -> str:
    """E.g. ``CPU AVX2, 2 cores, 2 torch threads, torch 2.13.0+cpu, load 0.41 0.80 1.02``."""
    import torch

    return (f"CPU {torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores, "
            f"{torch.get_num_threads()} torch threads, torch {torch.__version__}, "
            f"load {load_text()}")


def worker_env(threads: int | None = None, **extra: str) -> dict[str, str]:
    """This process's environment for a worker: offline, unbuffered, and ``threads`` OpenMP and
    MKL threads when given; ``extra`` set on top."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONUNBUFFERED": "1", **extra}
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    return env


@dataclass
class WorkerRun:
    result: dict  # what the worker's function returned
    stderr: str  # what the worker wrote on stderr
    load_before: tuple[float, float, float]  # the load average when it started and ended
    load_after: tuple[float, float, float]
    started: float  # time.time() at its launch
    seconds: float  # its wall time, launch to exit


def call_worker(script: str | Path, args: list[str], spec: dict, *, label: str,
                python: str | Path = sys.executable, env: dict | None = None,
                timeout: float | None = None) -> WorkerRun:
    """Run ``python script --worker *args --spec <spec as JSON>`` from the repository root and
    return what it answered. A worker that exits non-zero, or prints no ``RESULT`` line, ends
    the benchmark: its output's last lines go to stderr, then one line naming ``label``."""
    before, started, t0 = os.getloadavg(), time.time(), time.perf_counter()
    cmd = [str(python), str(Path(script).resolve()), "--worker", *args, "--spec",
           json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env or worker_env(), cwd=ROOT,
                          timeout=timeout)
    seconds = time.perf_counter() - t0
    lines = [x for x in proc.stdout.splitlines() if x.startswith(RESULT)]
    if proc.returncode or not lines:
        print(proc.stdout[-3000:] + proc.stderr[-6000:], file=sys.stderr)
        sys.exit(f"{label}: the worker failed (exit {proc.returncode})")
    return WorkerRun(json.loads(lines[-1][len(RESULT):]), proc.stderr, before, os.getloadavg(),
                     started, seconds)


def serve_worker(fn, spec: str) -> None:
    """The worker's side: ``fn(the spec's JSON)`` printed as the ``RESULT`` line."""
    print(RESULT + json.dumps(fn(json.loads(spec)), default=str), flush=True)
