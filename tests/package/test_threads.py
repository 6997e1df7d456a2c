"""How torch's threads wait on a shared machine (rlnb/threads.py): ``import rlnb`` watches the
cores and sets libgomp's wait policy before torch loads, in the C environment the OpenMP runtime
reads (a short spin when the run's threads have free cores, sleep at once when they do not); a
user's own setting and ``RLNB_OMP`` are kept; a busy machine is named in one line at a run's
start."""

import subprocess
import sys

import pytest
import torch  # noqa: F401 - loaded, as in a session that imported it before rlnb

from rlnb.threads import (
    SPIN_COUNT,
    Choice,
    busy_machine_note,
    contended,
    set_wait_policy,
    wait_policy,
)

PROBE = """
import ctypes, os
import rlnb
import torch
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
print(libc.getenv(b"GOMP_SPINCOUNT"), libc.getenv(b"OMP_WAIT_POLICY"), torch.get_num_threads())
"""
OURS = ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "RLNB_OMP", "RLNB_OMP_CHOSEN", "OMP_NUM_THREADS")


def probe(**env: str) -> subprocess.CompletedProcess:
    import os

    clean = {k: v for k, v in os.environ.items() if k not in OURS}
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={**clean, **env}, timeout=300)


def policy(**env: str) -> str:
    out = probe(**env)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_rlnb_sets_the_wait_policy_before_torch_loads_and_keeps_a_users_own():
    # the C environment torch's OpenMP runtime reads when torch loads it
    assert policy(RLNB_OMP="spin").startswith(f"b'{SPIN_COUNT}' None")
    assert policy(RLNB_OMP="passive").startswith("None b'PASSIVE'")
    assert policy(OMP_WAIT_POLICY="ACTIVE").startswith("None b'ACTIVE'")
    assert policy(GOMP_SPINCOUNT="77").startswith("b'77' None")
    assert policy(RLNB_OMP="off").startswith("None None")
    # one thread never waits for another: the short spin, nothing measured
    assert policy(OMP_NUM_THREADS="1").startswith(f"b'{SPIN_COUNT}' None")


def test_a_parents_choice_is_made_again_in_the_process_it_starts():
    # rlnb run's kernels, sweep points and launch ranks inherit the parent's environment: what
    # rlnb chose there is marked, and the child chooses for itself
    inherited = {"GOMP_SPINCOUNT": str(SPIN_COUNT), "RLNB_OMP_CHOSEN": "GOMP_SPINCOUNT"}
    assert policy(**inherited, RLNB_OMP="passive").startswith("None b'PASSIVE'")
    assert policy(**inherited, RLNB_OMP="off").startswith("None None")  # the runtime's own
    # a user's own variable carries no mark and is kept
    assert policy(GOMP_SPINCOUNT="77", RLNB_OMP="passive").startswith("b'77' None")


def test_a_wrong_rlnb_omp_is_refused_by_name():
    out = probe(RLNB_OMP="sometimes")
    assert out.returncode != 0
    assert "RLNB_OMP='sometimes': expected one of auto, spin, passive, off" in out.stderr


def test_two_busy_processes_on_the_cores_make_import_rlnb_choose_to_sleep():
    import os

    cores = os.cpu_count() or 1
    spinners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(cores)]
    try:
        assert policy().startswith("None b'PASSIVE'")  # every core taken: sleep at once
    finally:
        for p in spinners:
            p.kill()
            p.wait()


@pytest.mark.parametrize("others, threads, cores, expected", [
    (0.0, 2, 2, False), (0.3, 2, 2, False),  # a quiet machine, a light process beside it
    (0.5, 2, 2, True), (2.0, 2, 2, True),  # half a core short, two busy processes
    (1.0, 1, 2, False), (1.6, 1, 2, True),  # one thread: a free core is enough
    (1.5, 2, 4, False), (2.5, 2, 4, True)])
def test_contended_when_the_free_cores_fall_half_a_core_short_of_the_threads(
        others, threads, cores, expected):
    assert contended(others, threads, cores) is expected


def test_the_measure_decides_and_the_choice_is_recorded(monkeypatch):
    import rlnb.threads as threads

    monkeypatch.delitem(sys.modules, "torch")  # as before torch loads; the test restores it
    monkeypatch.setattr(threads.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(threads, "CHOSEN", None)
    quiet: dict = {}
    set_wait_policy(quiet, measure=lambda: 0.2)
    assert quiet == {"GOMP_SPINCOUNT": str(SPIN_COUNT), "RLNB_OMP_CHOSEN": "GOMP_SPINCOUNT"}
    assert threads.CHOSEN == Choice(0.2, 2, 2, f"GOMP_SPINCOUNT={SPIN_COUNT}")
    busy: dict = {}
    set_wait_policy(busy, measure=lambda: 1.9)
    assert busy == {"OMP_WAIT_POLICY": "PASSIVE", "RLNB_OMP_CHOSEN": "OMP_WAIT_POLICY"}

    def never():
        raise AssertionError("measured for one thread")

    one = {"OMP_NUM_THREADS": "1"}
    set_wait_policy(one, measure=never)
    assert one["GOMP_SPINCOUNT"] == str(SPIN_COUNT)


def test_the_policy_is_left_alone_once_torch_is_loaded_and_said_in_words():
    env: dict = {}
    set_wait_policy(env)  # torch is loaded in this test process: too late to set it
    assert env == {} and "torch" in sys.modules
    assert "spin of 10 then sleep" in wait_policy({"GOMP_SPINCOUNT": "10"})
    assert wait_policy({"OMP_WAIT_POLICY": "PASSIVE"}) == \
        "sleeping as soon as they wait (OMP_WAIT_POLICY=PASSIVE)"


def test_a_busy_machine_is_named_with_the_load_and_what_rlnb_chose(monkeypatch):
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    quiet = Choice(0.1, 2, 2, f"GOMP_SPINCOUNT={SPIN_COUNT}")
    assert busy_machine_note(2, cores=2, load=1.1, chosen=quiet) is None  # the run, starting
    note = busy_machine_note(2, cores=2, load=3.2, chosen=quiet)
    assert note.startswith("the machine is busy: load 3.20 on 2 cores; torch keeps 2 "
                           "thread(s), sleeping as soon as they wait (OMP_WAIT_POLICY=PASSIVE) "
                           "(chosen by rlnb)")
    assert "its numbers do not depend on the load" in note
    # what import rlnb saw is said even before the load average has caught up
    seen = busy_machine_note(2, cores=2, load=1.2, chosen=Choice(1.9, 2, 2, "OMP_WAIT_POLICY="
                                                                            "PASSIVE"))
    assert "other processes kept 1.9 of 2 cores busy when rlnb loaded, load 1.20" in seen
    assert busy_machine_note(1, cores=2, load=1.6, chosen=quiet) is None  # 1.5 cores free
    assert busy_machine_note(1, cores=2, load=2.6, chosen=quiet) is not None  # under one
    assert busy_machine_note(1, cores=4, load=2.0, chosen=quiet) is None


def train(run_dir, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``rlnb train`` on the tiny model in a process of its own (``env`` on top)."""
    import os

    from tiny_config import TINY

    clean = {k: v for k, v in os.environ.items() if k not in OURS}
    clean.update(HF_HUB_OFFLINE="1", RLNB_CACHE_DIR=str(run_dir.parent / "cache"), **env)
    out = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "train", *TINY, "sft.enabled=false",
         "grpo.val_period=0", "--no-progress", "--run-dir", str(run_dir), *args],
        capture_output=True, text=True, env=clean, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


@pytest.mark.slow
def test_the_wait_policy_changes_the_time_and_no_number(tmp_path):
    import json

    records = {}
    for mode in ("passive", "spin", "off"):  # off: the runtime's own default spin
        train(tmp_path / mode, "--steps", "3", RLNB_OMP=mode)
        lines = (tmp_path / mode / "metrics.jsonl").read_text().splitlines()
        records[mode] = [{k: v for k, v in json.loads(line).items()
                          if not k.startswith("timing/")} for line in lines]
    assert len(records["off"]) == 3 and "train/loss" in records["off"][-1]
    assert records["passive"] == records["off"] and records["spin"] == records["off"]


@pytest.mark.slow
def test_a_run_started_beside_busy_processes_says_so_in_its_log(tmp_path):
    # the real CLI, its log on stdout: what import rlnb saw, the load, what it chose
    import os

    cores = os.cpu_count() or 1
    spinners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(cores)]
    try:
        out = train(tmp_path / "run", "--steps", "1")
    finally:
        for p in spinners:
            p.kill()
            p.wait()
    line = next((x for x in out.stdout.splitlines() if "the machine is busy" in x), None)
    assert line, out.stdout[-2000:]
    assert "other processes kept" in line and f"of {cores} cores busy when rlnb loaded" in line
    assert "sleeping as soon as they wait (OMP_WAIT_POLICY=PASSIVE) (chosen by rlnb)" in line
