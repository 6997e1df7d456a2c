"""Two "machines" over 127.0.0.1 (two launcher processes, one rank each): rlnb launch and rlnb train join, train, agree."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT, TRAIN_NB
from tiny_config import TINY

pytestmark = pytest.mark.distributed

TRAIN = TRAIN_NB  # two GRPO steps, a weight digest per rank
MULTINODE = ROOT / "configs" / "accelerate" / "multinode.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("env")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           "RLNB_CACHE_DIR": str(tmp / "cache")}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU", "MASTER_ADDR",
                "MASTER_PORT"):
        env.pop(key, None)
    return env


def two_machines(make_cmd, cwd: Path, env: dict, timeout: int = 400):
    """Start machine 0 and machine 1 at once (``make_cmd(rank)``); both outputs when both end."""
    procs = [subprocess.Popen(make_cmd(rank), cwd=cwd, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for rank in (0, 1)]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode, out, err) for p, (out, err) in zip(procs, outs)]


@pytest.mark.notebook
@pytest.mark.slow
def test_rlnb_launch_on_two_machines_joins_trains_and_ends_with_identical_weights(tmp_path, env):
    port = free_port()

    def machine(rank):
        return [sys.executable, "-m", "rlnb.cli", "launch", "--num-processes", "2",
                "--num-machines", "2", "--machine-rank", str(rank), "--main-process-ip",
                "127.0.0.1", "--main-process-port", str(port), str(TRAIN), "-p", "seed", "4",
                "--run-dir", f"machine{rank}", "--no-progress"]

    (c0, out0, err0), (c1, out1, err1) = two_machines(machine, tmp_path, env)
    assert c0 == 0 and c1 == 0, (out0 + err0)[-3000:] + (out1 + err1)[-3000:]
    assert "machine 0: its 1 of 2 ranks done" in out0 and "machine 1: its 1 of 2 ranks done" in out1
    m0, m1 = tmp_path / "machine0", tmp_path / "machine1"
    info0 = json.loads((m0 / "rank0.json").read_text())
    info1 = json.loads((m1 / "rank1.json").read_text())
    assert (info0["rank"], info1["rank"]) == (0, 1)
    assert info0["world_size"] == info1["world_size"] == 2  # one process group across machines
    assert info0["weights_sha256"] == info1["weights_sha256"]  # DDP kept the replicas equal
    steps = [json.loads(x)["step"] for x in (m0 / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert not (m1 / "metrics.jsonl").exists()  # rank 1 writes only its notebook
    assert "trained 2 steps" in (m1 / "ranks" / "rank1.ipynb").read_text()
    assert (m0 / "notebook.html").is_file() and not (m1 / "notebook.html").exists()


@pytest.mark.slow
def test_rlnb_train_under_accelerate_launch_with_the_multinode_config(tmp_path, env):
    """The documented config file, with CPU overrides, on two launcher processes."""
    port = free_port()
    small = [*TINY, "grpo.val_period=0", "sft.enabled=false"]

    def machine(rank):
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
                str(MULTINODE), "--num_processes", "2", "--machine_rank", str(rank),
                "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                "--mixed_precision", "no", "-m", "rlnb.cli", "train", *small,
                "--run-dir", f"run{rank}", "--steps", "2", "--no-progress"]

    (c0, out0, err0), (c1, out1, err1) = two_machines(machine, tmp_path, env)
    assert c0 == 0 and c1 == 0, (out0 + err0)[-3000:] + (out1 + err1)[-3000:]
    assert "rlnb train: done" in out0 and "rlnb train: done" not in out1  # rank 0 reports
    steps = [json.loads(x)["step"] for x in (tmp_path / "run0" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert not (tmp_path / "run1").exists()  # rank 1 is no main process: it writes nothing
    state = json.loads((tmp_path / "run0" / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert state["data_position"]["consumed_prompts"] == 8  # both ranks' shards: 2 steps x 4


def test_multinode_config_is_read_by_accelerate_as_two_nodes():
    from accelerate.commands.config.config_args import load_config_from_file
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    config = load_config_from_file(str(MULTINODE))  # rejects unknown keys
    assert (config.num_machines, config.num_processes) == (2, 16)
    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(MULTINODE), "--machine_rank", "1", "x.py"])
    args, _, _ = _validate_launch_command(args)
    prepare_multi_gpu_env(args)  # the torchrun arguments each machine's launcher passes
    assert (args.nnodes, args.node_rank, args.nproc_per_node) == ("2", 1, "8")
    assert (args.rdzv_backend, args.rdzv_endpoint) == ("static", "10.0.0.1:29500")
