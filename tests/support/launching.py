"""Two real ranks through accelerate's launcher on a CPU machine, for the distributed tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list[str], cwd: Path, cache: Path) -> subprocess.CompletedProcess:
    """Two ranks through the real launcher. Not ``--cpu`` (that starts ONE process): on a machine
    with no GPU, --multi_gpu starts two and the program asks accelerate for CPU + gloo."""
    cmd = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
        "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
        "--dynamo_backend", "no", "--main_process_port", str(free_port()), *args,
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RLNB_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1"}
    env.pop("ACCELERATE_USE_CPU", None)  # the program itself must get the CPU case right
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
