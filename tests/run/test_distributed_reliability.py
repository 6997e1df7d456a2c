"""Two real ranks (accelerate over gloo) when a run is resumed or goes wrong: per-rank RNG states
make a resumed run exact, dynamic sampling and FSDP on CPU are refused, a killed rank is named."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from launching import launch
from paths import ROOT, TRAIN_NB
from safetensors.torch import load_file
from tiny_config import TINY

from rlnb.run.pools.launch import launch_command

pytestmark = pytest.mark.distributed

psutil = pytest.importorskip("psutil")  # finds the ranks' processes (ipykernel depends on it)

# a short warm start gives groups with mixed rewards, so the weights depend on every sample
RESUME = [*TINY, "grpo.val_period=0", "data.max_operand=9", "sft.enabled=true",
          "sft.max_steps=60", "sft.stop_at_accuracy=null", "grpo.max_num_steps=4",
          "checkpointing.save_period=2", "logger.tensorboard_enabled=false"]
LONG = [*TINY, "grpo.val_period=0", "sft.enabled=false", "grpo.max_num_steps=1000",
        "checkpointing.enabled=false", "logger.tensorboard_enabled=false"]


def env_for(tmp: Path) -> dict[str, str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "RLNB_CACHE_DIR": str(tmp / "cache")}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU"):
        env.pop(key, None)
    return env


def comparable(run: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith(("timing/", "memory/"))} for r in rows]


# ---------------------------------------------------------------- exact resume on 2 ranks
@pytest.mark.slow
def test_a_two_rank_run_resumed_at_step_2_repeats_the_uninterrupted_run(tmp_path, capsys):
    def train(*args) -> subprocess.CompletedProcess:
        proc = launch(["-m", "rlnb.cli", "train", "--no-progress", *args], tmp_path,
                      tmp_path / "cache")
        assert proc.returncode == 0, proc.stderr[-4000:]
        return proc

    train(*RESUME, "--run-dir", "cut", "--steps", "2")  # also fills the warm-start cache
    ckpt = tmp_path / "cut" / "checkpoints" / "step_000002"
    states = [torch.load(ckpt / name, weights_only=True)
              for name in ("rng_state.pt", "rng_state_rank1.pt")]
    assert not torch.equal(states[0]["torch"], states[1]["torch"])  # each rank its own stream
    # the same checkpoint as written before per-rank states: rank 0's file only
    shutil.copytree(tmp_path / "cut", tmp_path / "old")
    (tmp_path / "old" / "checkpoints" / "step_000002" / "rng_state_rank1.pt").unlink()

    train(*RESUME, "--run-dir", "full")
    train("--resume", "cut")
    old = train("--resume", "old")  # still loads, with a warning
    assert "holds no RNG state for rank 1" in old.stderr

    full, cut = comparable(tmp_path / "full"), comparable(tmp_path / "cut")
    assert [r["step"] for r in full] == [1, 2, 3, 4]
    assert cut == full  # every metric of every step, reduced over both ranks, bit for bit
    weights = [load_file(next((tmp_path / run / "checkpoints" / "step_000004" / "model")
                              .glob("*.safetensors"))) for run in ("full", "cut")]
    assert weights[0].keys() == weights[1].keys()
    for name in weights[0]:
        assert torch.equal(weights[0][name], weights[1][name]), name
    # with rank 0's state on rank 1 the resumed steps differ: the test sees rank 1's samples
    resumed_old = comparable(tmp_path / "old")
    assert resumed_old[:2] == full[:2] and resumed_old[2] != full[2]
    # one process cannot replay two ranks' samples: rlnb verify says so instead of "differs"
    from rlnb.cli import main

    assert main(["verify", str(tmp_path / "full")]) == 2
    assert "was trained on 2 processes and rlnb verify replays in one" in capsys.readouterr().err


# ---------------------------------------------------------------- refused on several ranks
def test_dynamic_sampling_on_two_ranks_is_refused_before_anything_is_written(tmp_path):
    proc = launch(["-m", "rlnb.cli", "train", *LONG, "grpo.use_dynamic_sampling=true",
                   "--run-dir", "run", "--no-progress"], tmp_path, tmp_path / "cache")
    assert proc.returncode != 0
    line = ("rlnb train: grpo.use_dynamic_sampling=true runs in one process only, but 2 were "
            "launched")
    assert proc.stderr.count(line) == 2, proc.stderr[-3000:]  # each rank, one line
    assert not (tmp_path / "run").exists()


def test_the_shipped_fsdp_config_on_cpu_is_refused_naming_where_it_works(tmp_path):
    """accelerate applies FSDP to GPU processes only: on CPU it would silently train DDP."""
    from launching import free_port

    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(ROOT / "configs" / "accelerate" / "fsdp.yaml"), "--num_processes", "2",
           "--main_process_port", str(free_port()),
           "-m", "rlnb.cli", "train", *LONG, "--run-dir", "run", "--no-progress"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env_for(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    line = ("rlnb train: FSDP (ACCELERATE_USE_FSDP=true, as configs/accelerate/fsdp.yaml sets) "
            "works on GPUs only: accelerate runs these processes as MULTI_CPU and would train "
            "plain DDP; on CPU launch with configs/accelerate/cpu_2proc.yaml")
    # each rank, one line (two ranks writing at once may interleave the newlines)
    assert proc.stderr.count(line) == 2, proc.stderr[-3000:]
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------- a rank that dies
def rank_processes(root: int, marker: str) -> dict[int, "psutil.Process"]:
    """The processes under ``root`` whose command line holds ``marker``, by their RANK."""
    found = {}
    for p in psutil.Process(root).children(recursive=True):
        try:
            if marker in " ".join(p.cmdline()) and "RANK" in p.environ():
                found[int(p.environ()["RANK"])] = p
        except psutil.NoSuchProcess:
            pass
    return found


def wait_until(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def kill_and_wait(proc: subprocess.Popen, victim: "psutil.Process") -> tuple[str, str, float]:
    """SIGKILL ``victim``; returns the launcher's output and the seconds until every process it
    started (launcher, ranks, kernels) was gone."""
    tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    victim.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    out, err = proc.communicate(timeout=150)
    _, alive = psutil.wait_procs(tree, timeout=max(1.0, 90 - (time.monotonic() - killed)))
    assert not alive, f"still running after the launcher exited: {alive}"
    return out, err, time.monotonic() - killed


@pytest.mark.slow
def test_a_killed_rank_ends_the_other_and_rlnb_train_names_it(tmp_path):
    cmd = launch_command(2, ["-m", "rlnb.cli", "train", *LONG, "--run-dir", "run",
                             "--no-progress"])
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env_for(tmp_path), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        metrics = tmp_path / "run" / "metrics.jsonl"
        wait_until(lambda: metrics.is_file() and metrics.stat().st_size > 0, 240, "a step")
        ranks = rank_processes(proc.pid, "rlnb.cli")
        assert sorted(ranks) == [0, 1]
        out, err, seconds = kill_and_wait(proc, ranks[1])
    finally:
        proc.kill()
    assert proc.returncode != 0 and seconds < 90, (proc.returncode, seconds)
    # rank 0 names rank 1 (not itself), and why it cannot say more
    assert f"rlnb train: rank 1 (pid {ranks[1].pid}) died first" in err, err[-3000:]
    assert "without a Python error" in err


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize(("victim", "why"), [
    ("ipykernel", "DeadKernelError: Kernel died (killed by SIGKILL)"),  # rank 1's kernel
    ("rlnb.run.pools.launch", "its process was killed by SIGKILL"),  # rank 1's papermill process
])
def test_a_killed_rank_ends_the_other_and_rlnb_launch_names_it(victim, why, tmp_path):
    run = tmp_path / "out"
    cmd = [sys.executable, "-m", "rlnb.cli", "launch", "--num-processes", "2", str(TRAIN_NB),
           "-p", "grpo.max_num_steps", "1000", "--run-dir", str(run), "--no-progress"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env_for(tmp_path), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        metrics = run / "metrics.jsonl"
        wait_until(lambda: metrics.is_file() and metrics.stat().st_size > 0, 300, "a step")
        ranks = rank_processes(proc.pid, victim)
        assert sorted(ranks) == [0, 1]
        out, err, seconds = kill_and_wait(proc, ranks[1])
    finally:
        proc.kill()
    assert proc.returncode == 1 and seconds < 90, (proc.returncode, seconds)
    head = next(line for line in out.splitlines() if line.startswith("rlnb launch:"))
    # the summary blames rank 1, which was killed, not rank 0 that lost its peer
    assert f"rank 1 failed first: {why}" in head, out[-3000:]
    lines = [line.strip() for line in out.splitlines()]
    assert lines.index(next(x for x in lines if x.startswith("rank 1:"))) < \
        lines.index(next(x for x in lines if x.startswith("rank 0:")))
