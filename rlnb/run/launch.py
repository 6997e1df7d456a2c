"""Multi-rank launch (``rlnb launch``): one notebook run on N processes at once.

    launch("notebooks/01_grpo_step_by_step.ipynb", num_processes=2)

The run directory is the one ``rlnb.run.notebooks.run_notebook`` writes (rank 0's
``notebook.ipynb`` and ``notebook.html``, and what its ``TrainingRun`` wrote), plus
``ranks/rank{R}.ipynb`` for ranks R > 0.

Implementation choices:
1) ``launch`` starts ranks with ``accelerate launch --multi_gpu`` (``--cpu`` starts ONE process;
   with no GPU the ranks use gloo).
2) Each rank runs papermill in-process (``python -m rlnb.run.launch rank``); its kernel inherits
   RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, so ``rlnb.auto_accelerator()`` in the notebook
   joins the process group.
3) Rank 0's notebook is the record (and the only one exported to HTML); the others go to
   ``ranks/``. The run failed if any rank's notebook holds an error, or if accelerate exited
   non-zero with no rank to blame.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlnb.run.notebooks import HTML, NOTEBOOK, _execute, _export, _prepare, notebook_error

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
def launch_command(num_processes: int, args: Sequence[str], port: int | None = None) -> list[str]:
    """``accelerate launch`` that really starts ``num_processes`` ranks on one machine (GPUs, or
    gloo on CPU: ``--cpu`` would start only one), followed by ``args``."""
    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    # accelerate refuses --multi_gpu for one process; alone, the process runs without a group
    multi = ["--multi_gpu"] if num_processes > 1 else []
    return [sys.executable, "-m", "accelerate.commands.launch", *multi,
            "--num_processes", str(num_processes), "--num_machines", "1",
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "--main_process_port", str(port), *args]


def rank_notebook(run_dir: Path, rank: int) -> Path:
    return run_dir / NOTEBOOK if rank == 0 else run_dir / RANKS / f"rank{rank}.ipynb"


def launch(notebook: str | Path, num_processes: int, *, run_dir: str | Path | None = None,
           parameters: Mapping[str, Any] | None = None, kernel_name: str | None = None,
           progress: bool = True) -> LaunchResult:
    """Run ``notebook`` on ``num_processes`` ranks (one papermill and one kernel per rank)."""
    if num_processes < 1:
        raise ValueError(f"num_processes must be at least 1, got {num_processes}")
    nb, path, params = _prepare(notebook, run_dir, parameters, kernel_name)
    path.mkdir(parents=True, exist_ok=True)
    args = ["-m", "rlnb.run.launch", "rank", str(nb), str(path),
            "--parameters", json.dumps({**params, "run_dir": str(path)})]
    if kernel_name is not None:
        args += ["--kernel", kernel_name]
    if not progress:
        args.append("--no-progress")
    start = time.perf_counter()
    proc = subprocess.run(launch_command(num_processes, args))
    seconds = time.perf_counter() - start
    notebooks = [rank_notebook(path, r) for r in range(num_processes)]
    errors = {}
    for rank, nb_path in enumerate(notebooks):
        err = notebook_error(nb_path) if nb_path.is_file() else "wrote no notebook"
        if err:
            errors[rank] = err
    if proc.returncode and not errors:
        errors[-1] = f"accelerate launch exited with {proc.returncode}"
    html = _export(path / NOTEBOOK, path / HTML, f"{nb.stem}: {path.name}")
    first = next(iter(errors.items()), None)
    error = None if first is None else (
        first[1] if first[0] < 0 else f"rank {first[0]}: {first[1]}")
    return LaunchResult(path, path / NOTEBOOK, html, not errors, error, seconds, notebooks,
                        errors, proc.returncode)


def _rank_main(argv: Sequence[str] | None = None) -> int:
    """One rank of ``launch``: run the notebook into this rank's file (RANK from the launcher)."""
    parser = argparse.ArgumentParser(prog="python -m rlnb.run.launch")
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
    error = _execute(nb, out, json.loads(args.parameters), kernel_name=args.kernel,
                     cwd=nb.parent, progress=r == 0 and not args.no_progress)
    if error:
        print(f"rank {r}: {error}", file=sys.stderr, flush=True)
    return 1 if error else 0


if __name__ == "__main__":
    sys.exit(_rank_main())
