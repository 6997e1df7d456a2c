"""`rlnb preflight`: the install, a kernel, the exercises, every live run and the speed, in one
command (run here with --fast: tiny runs, no timing asserted)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlnb.teach import EXPERIMENTS

pytest.importorskip("papermill")


def preflight(tmp_path, *args):
    env = {**os.environ, "RLNB_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1", "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
    return subprocess.run([sys.executable, "-m", "rlnb.cli", "preflight", *args], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=1800)


@pytest.mark.notebook
@pytest.mark.slow
def test_preflight_checks_everything_and_says_ready(tmp_path):
    done = preflight(tmp_path, "--fast", "--steps", "1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr == "", done.stderr
    out = done.stdout
    for section in ("install:", "kernel:", "exercises:", "warm starts and speed", "speed:"):
        assert f"\n{section}" in out, out
    assert "notebook extra: jupyterlab " in out and "papermill " in out
    assert "a one-cell notebook ran headless" in out
    assert "7 exercises build" in out
    for exp in EXPERIMENTS.values():  # one line per live run, with its estimate
        line = next((x for x in out.splitlines() if f" {exp.name} " in x), None)
        assert line is not None and f"{len(exp.settings)} runs x" in line and "about " in line
    assert "steps/s" in out and "all live runs together: about" in out
    assert out.rstrip().endswith("rlnb preflight: ready for the lab")
    # the lines a student pastes to the lecturer: verdict, machine, versions, cache, problems
    block = out.split("report (if something failed, paste these lines to the lecturer):\n")[1]
    lines = [x.strip() for x in block.splitlines()[:7]]
    assert lines[0] == "rlnb preflight report: ready", block
    assert lines[1].startswith("machine: ") and " cores, " in lines[1] and "CPU " in lines[1]
    assert lines[2].startswith("python 3.") and "torch 2." in lines[2] and "build)" in lines[2]
    assert lines[3].startswith(f"cache: {tmp_path / 'cache'} (") and "GiB free)" in lines[3]
    assert lines[4].startswith("the lab's live runs: about ") and lines[5] == "problems: none"
    assert not list(tmp_path.glob("runs")), "preflight leaves no run directory behind"


def test_bad_steps_exit_2_with_one_line(tmp_path):
    done = preflight(tmp_path, "--steps", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "rlnb preflight: --steps must be >= 1, got 0\n"
