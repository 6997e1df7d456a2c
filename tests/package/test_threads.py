"""How torch's threads wait on a shared machine (rlnb/threads.py): ``import rlnb`` sets libgomp's
spin count before torch loads, in the C environment the OpenMP runtime reads; a user's own
setting and ``RLNB_OMP=off`` are kept; a busy machine is named in one line at a run's start."""

import subprocess
import sys

import torch  # noqa: F401 - loaded, as in a session that imported it before rlnb

from rlnb.threads import SPIN_COUNT, busy_machine_note, set_wait_policy, wait_policy

PROBE = """
import ctypes, os
import rlnb
import torch
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
print(libc.getenv(b"GOMP_SPINCOUNT"), libc.getenv(b"OMP_WAIT_POLICY"), torch.get_num_threads())
"""


def probe(**env: str) -> str:
    import os

    clean = {k: v for k, v in os.environ.items()
             if k not in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY", "RLNB_OMP")}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         env={**clean, **env}, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_import_rlnb_sets_the_spin_count_before_torch_loads_and_keeps_a_users_own():
    # the C environment torch's OpenMP runtime reads when torch loads it
    assert probe().startswith(f"b'{SPIN_COUNT}' None")
    assert probe(OMP_WAIT_POLICY="PASSIVE").startswith("None b'PASSIVE'")
    assert probe(GOMP_SPINCOUNT="77").startswith("b'77' None")
    assert probe(RLNB_OMP="off").startswith("None None")


def test_the_policy_is_left_alone_once_torch_is_loaded_and_said_in_words():
    env: dict = {}
    set_wait_policy(env)  # torch is loaded in this test process: too late to set it
    assert env == {} and "torch" in sys.modules
    assert "spin of 10 then sleep" in wait_policy({"GOMP_SPINCOUNT": "10"})
    assert wait_policy({"OMP_WAIT_POLICY": "PASSIVE"}) == "OMP_WAIT_POLICY=PASSIVE"


def test_a_busy_machine_is_named_with_the_load_and_what_rlnb_chose():
    assert busy_machine_note(2, cores=2, load=1.1) is None  # the run itself, starting
    note = busy_machine_note(2, cores=2, load=3.2)
    assert note.startswith("the machine is busy: load 3.20 on 2 cores (other processes hold "
                           "about 2); torch keeps 2 thread(s)")
    assert "its numbers do not depend on the load" in note
    assert busy_machine_note(1, cores=2, load=1.6) is None  # a core and a half free: enough
    assert busy_machine_note(1, cores=2, load=2.6) is not None  # under one free core
    assert busy_machine_note(1, cores=4, load=2.0) is None
