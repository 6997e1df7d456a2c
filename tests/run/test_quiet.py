"""What a user sees on stderr from the CLI: progress bars that end, and nothing else."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import FAKE_NB, TRAIN_NB
from tiny_config import TINY

# one frame of a tqdm bar: "desc: 42%|####      | 21/50 [00:01<00:02, 9.8step/s, ...]"
BAR = re.compile(r"^(?P<desc>[^\n|]*?):\s+(?P<pct>\d+)%\|[^|]*\|\s*(?P<n>\d+)/(?P<total>\d+)")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def stray_stderr(text: str) -> list[str]:
    """What stderr holds besides progress-bar frames, plus every bar whose last frame is not
    its end (n == total): both are what a user should never see."""
    problems, last = [], {}
    for frame in re.split(r"[\r\n]+", ANSI.sub("", text)):
        if not frame.strip():
            continue
        m = BAR.match(frame.strip())
        if m is None:
            problems.append(frame.strip()[:200])
        else:
            last[m["desc"].strip()] = (int(m["n"]), int(m["total"]))
    problems += [f"bar {desc!r} ended at {n}/{total}" for desc, (n, total) in last.items()
                 if n != total]
    return problems


def test_the_stderr_filter_tells_bars_from_everything_else():
    ok = "GRPO:   0%|          | 0/2 [00:00<?, ?step/s]\rGRPO: 100%|##########| 2/2 [00:01<00:00]\n"
    assert stray_stderr(ok) == []
    assert stray_stderr("GRPO:  50%|#####     | 1/2 [00:01<00:01]\n") == ["bar 'GRPO' ended at 1/2"]
    warned = ok + "/x/sampler.py:110: FutureWarning: `past_key_values` is deprecated\n"
    assert stray_stderr(warned) == ["/x/sampler.py:110: FutureWarning: `past_key_values` is deprecated"]


def rlnb(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RLNB_CACHE_DIR": str(cwd / "cache"),
           "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter")}
    return subprocess.run([sys.executable, "-m", "rlnb.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.notebook
@pytest.mark.slow
@pytest.mark.parametrize("name, args", [
    ("demo", ["demo"]),
    # the default config shrunk, warm start included (its SFT bar and the GRPO bar)
    ("train", ["train", *TINY, "sft.max_steps=5", "sft.stop_at_accuracy=null",
               "grpo.val_period=2", "grpo.max_val_samples=8", "--steps", "2",
               "--run-dir", "RUN"]),
    ("run", ["run", str(TRAIN_NB), "--run-dir", "RUN"]),
    ("sweep", ["sweep", str(FAKE_NB), "-p", "seed", "0,1", "--root", "RUN"]),
])
def test_a_cli_command_writes_only_progress_bars_to_stderr(tmp_path, name, args):
    args = [str(tmp_path / "out") if a == "RUN" else a for a in args]
    proc = rlnb(*args, cwd=tmp_path)
    assert proc.returncode == 0, f"rlnb {name} failed:\n{proc.stderr[-3000:]}"
    assert stray_stderr(proc.stderr) == [], f"rlnb {name} wrote to stderr:\n{proc.stderr[-3000:]}"
