"""The lab's fallback for a laptop whose install failed: one machine serves JupyterLab to the class
with the command docs/teaching.md gives, and a student reaches it with the token (and not
without), the lab's notebooks and the check the guide says to run."""

import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from paths import ROOT

from rlnb.teach.build import build

pytest.importorskip("jupyterlab")
TOKEN = "a-class-token-0123"


def documented(prefix: str) -> str:
    """The one line of docs/teaching.md's code blocks that starts with ``prefix``."""
    lines = [x.strip() for x in (ROOT / "docs" / "teaching.md").read_text().splitlines()
             if x.strip().startswith(prefix)]
    assert len(lines) == 1, f"docs/teaching.md: {len(lines)} lines start with {prefix!r}"
    return lines[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (urllib.error.URLError, OSError):  # not listening yet
        return 0, ""


@pytest.mark.notebook
@pytest.mark.slow
def test_one_machine_serves_the_lab_with_the_documented_command(tmp_path):
    build(tmp_path / "lab", ROOT / "notebooks" / "exercises")
    (tmp_path / "lab" / "alice").mkdir()
    (tmp_path / "lab" / "alice" / "01_grpo_advantages.ipynb").write_bytes(
        (tmp_path / "lab" / "student" / "01_grpo_advantages.ipynb").read_bytes())
    port = free_port()
    command = documented("jupyter lab --no-browser --ip 0.0.0.0")
    command = command.replace("8888", str(port)).replace('"$TOKEN"', TOKEN)
    args = shlex.split(command)
    assert args[:2] == ["jupyter", "lab"] and f"--ServerApp.token={TOKEN}" in args, args
    args = [sys.executable, "-m", "jupyterlab", *args[2:]]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        args.append("--allow-root")  # CI runs as root; the guide says when to add it
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces")}
    log = (tmp_path / "jupyter.log").open("wb")
    proc = subprocess.Popen(args, cwd=tmp_path, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while fetch(f"{url}/api/status?token={TOKEN}")[0] != 200:
            assert proc.poll() is None, (tmp_path / "jupyter.log").read_text()[-2000:]
            assert time.monotonic() < deadline, (tmp_path / "jupyter.log").read_text()[-2000:]
            time.sleep(0.5)
        check = documented("curl -fsS")  # the guide's check, as a student's machine runs it
        assert re.search(r'http://HOST:8888/api/status\?token=\$TOKEN', check), check
        status, body = fetch(f"{url}/api/status?token={TOKEN}")
        assert status == 200 and '"kernels"' in body
        assert fetch(f"{url}/api/status")[0] == 403  # no token, no lab
        status, page = fetch(f"{url}/lab?token={TOKEN}")
        assert status == 200 and "JupyterLab" in page
        status, body = fetch(f"{url}/api/contents/alice/01_grpo_advantages.ipynb?token={TOKEN}")
        assert status == 200 and "implement this: " in body
        status, body = fetch(f"{url}/api/contents/student?token={TOKEN}")
        assert status == 200 and body.count(".ipynb") >= 7
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
