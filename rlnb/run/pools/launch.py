"""Multi-rank launch (``rlnb launch``): one notebook run on N processes at once.

    launch("notebooks/01_grpo_step_by_step.ipynb", num_processes=2)

The run directory is the one ``rlnb.run.notebooks.execute.run_notebook`` writes (rank 0's
``notebook.ipynb`` and ``notebook.html``, and what its ``TrainingRun`` wrote), plus
``ranks/rank{R}.ipynb`` for ranks R > 0.

Implementation choices:
1) ``launch`` starts ranks with ``accelerate launch --multi_gpu`` (``--cpu`` starts ONE process;
   with no GPU the ranks use gloo).
2) Each rank runs papermill in-process (``python -m rlnb.run.pools.launch rank``); its kernel
   inherits RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so ``rlnb.auto_accelerator()`` in the
   notebook joins the process group.
3) Rank 0's notebook is the record (and the only one exported to HTML); the others go to
   ``ranks/``. The run failed if any rank's notebook holds an error, or if accelerate exited
   non-zero with no rank to blame.
4) When one rank dies the others fail too (a lost connection, the gloo timeout, or the
   launcher's SIGTERM), so the first error in rank order is usually a consequence. Each rank
   leaves ``ranks/rank<R>.status.json`` (its error, when, and whether it only lost a peer);
   the rank blamed is the first whose error is its own (a kernel that died says by which
   signal), else the root cause torch's launcher reports (a rank process that was killed
   leaves no status), else the first to fail.
5) Several machines: the same command on each, with its ``machine_rank``; accelerate's
   multi-node rendezvous (torchrun, static) meets at ``main_process_ip:main_process_port`` on
   machine 0 (port 29500 by default). ``num_processes`` counts every machine's ranks, as in
   accelerate. Each machine reports on its own ranks; machines other than 0 write only
   ``ranks/rank<R>.ipynb``, so all may share one run dir on a shared filesystem.
6) Threads: the ranks of a machine share its cores, ``cores // ranks`` each (``OMP_NUM_THREADS``
   and MKL's, OpenBLAS's; a smaller ``OMP_NUM_THREADS`` already set is kept), as a sweep's
   points do (``machine.default_threads``); torch's launcher alone would give each rank one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlnb.run.notebooks.execute import (
    HTML,
    NOTEBOOK,
    notebook_error,
    prepare_run,
    run_papermill,
    try_export_html,
)
from rlnb.run.pools.machine import THREAD_VARS, default_threads

RANKS = "ranks"


@dataclass
class LaunchResult:
    run_dir: Path
    notebook: Path  # rank 0's, the record
    html: Path | None
    ok: bool
    error: str | None
    seconds: float
    rank_notebooks: list[Path]
    rank_errors: dict[int, str]
    returncode: int


# ---------------------------------------------------------------------------------- launch
def launch_command(num_processes: int, args: Sequence[str], port: int | None = None, *,
                   num_machines: int = 1, machine_rank: int = 0,
                   main_process_ip: str | None = None) -> list[str]:
    """``accelerate launch`` that really starts ``num_processes`` ranks (over all
    ``num_machines``; GPUs, or gloo on CPU: ``--cpu`` would start only one), followed by ``args``.
    With several machines, this machine starts ranks ``machine_rank * per_machine`` onwards."""
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    # accelerate refuses --multi_gpu for one process; alone, the process runs without a group
    multi = ["--multi_gpu"] if num_processes > 1 else []
    machines = ["--num_machines", str(num_machines)]
    if num_machines > 1:  # accelerate's multi-node rendezvous (torchrun, static, at machine 0)
        machines += ["--machine_rank", str(machine_rank), "--main_process_ip", main_process_ip]
    return [sys.executable, "-m", "accelerate.commands.launch", *multi,
            "--num_processes", str(num_processes), *machines,
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), *args]


def check_machines(num_processes: int, num_machines: int, machine_rank: int,
                   main_process_ip: str | None, main_process_port: int | None) -> int | None:
    """ValueError naming the flag for a multi-node layout that cannot start; returns the port
    (29500, accelerate's default, when several machines are given none)."""
    if num_machines < 1:
        raise ValueError(f"--num-machines must be at least 1, got {num_machines}")
    if not 0 <= machine_rank < num_machines:
        raise ValueError(f"--machine-rank {machine_rank} is not one of --num-machines "
                         f"{num_machines} (0 to {num_machines - 1})")
    if num_processes % num_machines:
        raise ValueError(f"--num-processes {num_processes} (all machines together) is not a "
                         f"multiple of --num-machines {num_machines}")
    if main_process_port is not None and not 0 < main_process_port < 65536:
        raise ValueError(f"--main-process-port must be a port (1 to 65535), got "
                         f"{main_process_port}")
    if num_machines == 1:
        if main_process_ip is not None:
            raise ValueError("--main-process-ip is for --num-machines > 1 (one machine "
                             "rendezvous on this one)")
        return main_process_port
    if not main_process_ip:
        raise ValueError(f"--main-process-ip is required with --num-machines {num_machines}: "
                         "the address of machine 0, which the others can reach")
    port = main_process_port or 29500
    if machine_rank == 0:  # machine 0 listens there: accelerate would fail later, less clearly
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                raise ValueError(f"--main-process-port {port} is in use on this machine "
                                 "(machine 0 listens there): choose another") from None
    return port


def rank_notebook(run_dir: Path, rank: int) -> Path:
    return run_dir / NOTEBOOK if rank == 0 else run_dir / RANKS / f"rank{rank}.ipynb"


def launch(notebook: str | Path, num_processes: int, *, run_dir: str | Path | None = None,
           parameters: Mapping[str, Any] | None = None, kernel_name: str | None = None,
           progress: bool = True, num_machines: int = 1, machine_rank: int = 0,
           main_process_ip: str | None = None,
           main_process_port: int | None = None) -> LaunchResult:
    """Run ``notebook`` on ``num_processes`` ranks (one papermill and one kernel per rank); with
    ``num_machines > 1``, this machine's share of them, started the same way on every machine."""
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    port = check_machines(num_processes, num_machines, machine_rank, main_process_ip,
                          main_process_port)
    # machines other than 0 write only ranks/rank<R>.ipynb: they may share machine 0's run dir
    nb, path, params = prepare_run(notebook, run_dir, parameters, kernel_name,
                                   fresh=machine_rank == 0)
    path.mkdir(parents=True, exist_ok=True)
    args = ["-m", "rlnb.run.pools.launch", "rank", str(nb), str(path),
            "--parameters", json.dumps({**params, "run_dir": str(path)})]
    if kernel_name is not None:
        args += ["--kernel", kernel_name]
    if not progress:
        args.append("--no-progress")
    per_machine = num_processes // num_machines
    # this machine's cores shared among its ranks (torch's launcher would give each rank 1)
    threads = default_threads(per_machine)
    env = None if threads is None else {**os.environ, **dict.fromkeys(THREAD_VARS, str(threads))}
    start = time.perf_counter()
    returncode, launcher_tail = _run_teeing_stderr(launch_command(
        num_processes, args, port, num_machines=num_machines, machine_rank=machine_rank,
        main_process_ip=main_process_ip), env=env)
    seconds = time.perf_counter() - start
    ranks = range(machine_rank * per_machine, (machine_rank + 1) * per_machine)  # this machine's
    notebooks = [rank_notebook(path, r) for r in ranks]
    statuses = {r: s for r in ranks if (s := _read_status(path, r))}
    errors = {}
    for rank, nb_path in zip(ranks, notebooks):
        err = notebook_error(nb_path) if nb_path.is_file() else "wrote no notebook"
        if rank in statuses and (not err or not statuses[rank]["lost_peer"]):
            err = statuses[rank]["error"]  # its own account is more precise (a kernel's signal)
        if err:
            errors[rank] = err
    root = _root_cause(statuses, launcher_tail) if returncode or errors else None
    if root is not None:  # choice 4: the rank that failed first leads
        errors = {root[0]: root[1], **{r: e for r, e in errors.items() if r != root[0]}}
    if returncode and not errors:
        errors[-1] = f"accelerate launch exited with {returncode}"
    html = try_export_html(path / NOTEBOOK, path / HTML, f"{nb.stem}: {path.name}") \
        if machine_rank == 0 else None
    first = next(iter(errors.items()), None)
    error = None if first is None else (
        first[1] if first[0] < 0 else f"rank {first[0]} failed first: {first[1]}")
    return LaunchResult(path, path / NOTEBOOK, html, not errors, error, seconds, notebooks,
                        errors, returncode)


def _run_teeing_stderr(cmd: list[str], keep: int = 20_000, env: dict | None = None
                       ) -> tuple[int, str]:
    """Run ``cmd`` (in ``env``, default this process's) with its output shown as it comes;
    returns its exit code and the last ``keep`` characters of its stderr (where torch's launcher
    reports the failed rank)."""
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, env=env)
    tail = bytearray()

    def pump():  # raw chunks, not lines: progress bars redraw with \r
        while chunk := os.read(proc.stderr.fileno(), 65536):
            sys.stderr.buffer.write(chunk)
            sys.stderr.buffer.flush()
            tail.extend(chunk)
            del tail[:-keep]

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    returncode = proc.wait()
    thread.join(timeout=5)
    return returncode, tail.decode(errors="replace")


# torch.distributed.elastic's ChildFailedError report: "Root Cause (first observed failure):"
# then "rank : 1 (local_rank: 1)", "exitcode : -9 (pid: 123)", "traceback : Signal 9 ..."
_ROOT_CAUSE = re.compile(r"Root Cause.*?\brank\s*:\s*(\d+).*?\bexitcode\s*:\s*(-?\d+)", re.S)


def _root_cause(statuses: dict[int, dict], launcher_tail: str) -> tuple[int, str] | None:
    """``(rank, why)`` of the rank that failed first (choice 4), or None if none is known."""
    from rlnb.run.notebooks.execute import exit_status

    own = sorted((s["time"], r) for r, s in statuses.items() if not s["lost_peer"])
    if own:
        return own[0][1], statuses[own[0][1]]["error"]
    match = _ROOT_CAUSE.search(launcher_tail)
    if match:
        rank, code = int(match.group(1)), int(match.group(2))
        was = "was " if code < 0 else ""
        return rank, f"its process {was}{exit_status(code)} (torch's launcher's root cause)"
    if statuses:
        first = min(statuses, key=lambda r: statuses[r]["time"])
        return first, statuses[first]["error"]
    return None


def _status_path(run_dir: Path, rank: int) -> Path:
    return run_dir / RANKS / f"rank{rank}.status.json"


def _write_status(run_dir: Path, rank: int, error: str, lost: bool | None = None) -> None:
    from rlnb.run.training.accelerator import lost_peer

    lost = lost_peer(error) if lost is None else lost
    status = {"rank": rank, "error": error, "time": time.time(), "lost_peer": lost}
    _status_path(run_dir, rank).write_text(json.dumps(status) + "\n")


def _read_status(run_dir: Path, rank: int) -> dict | None:
    try:
        status = json.loads(_status_path(run_dir, rank).read_text())
    except (OSError, ValueError):
        return None
    return status if {"error", "time", "lost_peer"} <= set(status) else None


def _rank_main(argv: Sequence[str] | None = None) -> int:
    """One rank of ``launch``: run the notebook into this rank's file (RANK from the launcher)."""
    parser = argparse.ArgumentParser(prog="python -m rlnb.run.pools.launch")
    sub = parser.add_subparsers(dest="command", required=True)
    rank = sub.add_parser("rank", help="run NOTEBOOK as this process's rank (used by launch)")
    rank.add_argument("notebook")
    rank.add_argument("run_dir")
    rank.add_argument("--parameters", default="{}", help="papermill parameters as JSON")
    rank.add_argument("--kernel", default=None)
    rank.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    r = int(os.environ.get("RANK", "0"))
    out = rank_notebook(Path(args.run_dir), r)
    out.parent.mkdir(parents=True, exist_ok=True)
    nb = Path(args.notebook)
    run_dir = Path(args.run_dir)

    def stopped(signum, frame):  # torch's launcher ends the others when one rank exits
        _write_status(run_dir, r, "stopped by the launcher (SIGTERM) after another rank exited",
                      lost=True)
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, stopped)
    error = run_papermill(nb, out, json.loads(args.parameters), kernel_name=args.kernel,
                          cwd=nb.parent, progress=r == 0 and not args.no_progress)
    if error:
        _write_status(run_dir, r, error)
        print(f"rank {r}: {error}", file=sys.stderr, flush=True)
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(_rank_main())
