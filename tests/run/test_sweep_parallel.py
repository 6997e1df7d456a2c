"""rlnb sweep --jobs: points at once with split threads, Ctrl-C, resume, the per-setting report, bad flags."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest
from paths import FAKE_NB, TRAIN_NB

from rlnb.cli import main
from rlnb.run.pools.executors import LocalPool
from rlnb.run.pools.machine import cpu_cores, gpu_slots

pytest.importorskip("papermill")
psutil = pytest.importorskip("psutil")

FAKE = FAKE_NB  # made-up curves, fails or holds on demand
TRAIN = TRAIN_NB


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """Offline, a private cache, and no thread count set: the sweep must choose one."""
    tmp = tmp_path_factory.mktemp("env")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RLNB_CACHE_DIR": str(tmp / "cache")}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "ACCELERATE_USE_CPU", "OMP_NUM_THREADS",
                "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES"):
        env.pop(key, None)
    return env


def rlnb(*args, cwd, env, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlnb.cli", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def statuses(root: Path) -> dict[str, str]:
    return {r["name"]: r["status"] for r in json.loads((root / "sweep.json").read_text())["runs"]}


def span(run_dir: Path) -> tuple[datetime, datetime]:
    meta = json.loads((run_dir / "notebook.ipynb").read_text())["metadata"]["papermill"]
    return datetime.fromisoformat(meta["start_time"]), datetime.fromisoformat(meta["end_time"])


# --- points at once


@pytest.fixture(scope="module")
def parallel(tmp_path_factory, env):
    cwd = tmp_path_factory.mktemp("parallel")
    proc = rlnb("sweep", FAKE, "-p", "seed", "0,1,2,3", "--jobs", "2", "--root", "sw",
                cwd=cwd, env=env, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return cwd / "sw", proc


@pytest.mark.notebook
@pytest.mark.slow
def test_jobs_2_runs_two_points_at_once(parallel):
    root, proc = parallel
    names = [f"seed={s}" for s in range(4)]
    assert statuses(root) == dict.fromkeys(names, "ok")
    assert "rlnb sweep: 4 point(s), 2 at a time" in proc.stdout
    assert "[0/4 done, 2 running, 0 failed] start  seed=1" in proc.stdout
    assert "[4/4 done, 0 running, 0 failed] ok" in proc.stdout
    # the papermill runs really overlapped in time: seed 0 and seed 1 started together
    (s0, e0), (s1, e1) = span(root / names[0]), span(root / names[1])
    assert s1 < e0 and s0 < e1
    kernels = {json.loads((root / n / "point.json").read_text())["pid"] for n in names}
    assert len(kernels) == 4  # a kernel per point


@pytest.mark.notebook
@pytest.mark.slow
def test_jobs_split_the_cores_between_points(parallel):
    root, proc = parallel
    threads = max(1, cpu_cores() // 2)
    assert f"{threads} thread(s) each" in proc.stdout
    for s in range(4):
        point = json.loads((root / f"seed={s}" / "point.json").read_text())
        # the kernel's torch pool is sized by it, not by every core of the machine
        assert point["omp_num_threads"] == str(threads) and point["torch_threads"] == threads


@pytest.mark.notebook
@pytest.mark.slow
def test_one_job_with_cpus_per_run_sets_the_threads(tmp_path, env):
    proc = rlnb("sweep", FAKE, "-p", "seed", "5", "--cpus-per-run", "1", "--root", "sw",
                cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    point = json.loads((tmp_path / "sw" / "run" / "point.json").read_text())
    assert point["omp_num_threads"] == "1" and point["torch_threads"] == 1


@pytest.mark.notebook
@pytest.mark.slow
def test_per_setting_summary_in_the_parallel_report(parallel):
    root, _ = parallel
    html = (root / "report.html").read_text()
    # one setting (only the seed is swept): train/reward ends at 0.2 * 3 + 0.01 * seed
    assert "Per setting" in html and "0.615 ± 0.01291 (n=4)" in html


# --- Ctrl-C, then resume


@pytest.mark.notebook
@pytest.mark.slow
def test_ctrl_c_stops_every_running_point_and_a_rerun_resumes(tmp_path, env):
    hold = tmp_path / "hold"
    hold.write_text("points with seed > 0 wait while this file exists")
    args = ["sweep", FAKE, "-p", "seed", "0,1,2", "-p", "hold_file", hold, "--jobs", "2",
            "--root", "sw"]
    out = (tmp_path / "first.log").open("w")
    # SIGINT as a terminal gives it (a background ``pytest &`` would hand it down ignored)
    sweep = subprocess.Popen([sys.executable, "-m", "rlnb.cli", *map(str, args)], cwd=tmp_path,
                             env=env, stdout=out, stderr=subprocess.STDOUT, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    root = tmp_path / "sw"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:  # seed 0 done, seeds 1 and 2 holding in their kernels
        if (root / "sweep.json").is_file() and statuses(root) == {
                "seed=0": "ok", "seed=1": "running", "seed=2": "running"} and all(
                (root / f"seed={s}" / "point.json").is_file() for s in (1, 2)):
            break
        assert sweep.poll() is None, (tmp_path / "first.log").read_text()
        time.sleep(0.5)
    else:
        sweep.kill()
        pytest.fail("the sweep never reached two holding points: "
                    + (tmp_path / "first.log").read_text()[-3000:])
    finished = (root / "seed=0" / "notebook.ipynb").stat().st_mtime_ns
    kernels = [json.loads((root / f"seed={s}" / "point.json").read_text())["pid"] for s in (1, 2)]
    points = psutil.Process(sweep.pid).children()
    assert len(points) == 2 and all(psutil.pid_exists(k) for k in kernels)
    sweep.send_signal(signal.SIGINT)  # what Ctrl-C sends (the points are in their own sessions)
    assert sweep.wait(timeout=60) == 130
    text = (tmp_path / "first.log").read_text()
    assert "interrupted; 1 point(s) finished, 2 stopped" in text
    assert statuses(root) == {"seed=0": "ok", "seed=1": "interrupted", "seed=2": "interrupted"}
    for pid in [*kernels, *(p.pid for p in points)]:  # no point and no kernel outlives it
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert (root / "seed=0" / "notebook.ipynb").stat().st_mtime_ns == finished

    hold.unlink()
    proc = rlnb(*args, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 finished point(s) kept, 2 to run" in proc.stdout
    assert statuses(root) == dict.fromkeys(["seed=0", "seed=1", "seed=2"], "ok")
    assert (root / "seed=0" / "notebook.ipynb").stat().st_mtime_ns == finished  # not rerun
    assert "converged" in (root / "seed=2" / "notebook.ipynb").read_text()


@pytest.mark.notebook
@pytest.mark.slow
def test_resume_keeps_failed_points_unless_asked(tmp_path, env):
    args = ["sweep", FAKE, "-p", "seed", "0,1", "-p", "fail_above", "0.25", "--root", "sw"]
    first = rlnb(*args, cwd=tmp_path, env=env)
    assert first.returncode == 1 and "1 of 2 runs ok" in first.stdout, first.stderr[-2000:]
    root = tmp_path / "sw"

    def mtimes():
        return {s: (root / f"seed={s}" / "notebook.ipynb").stat().st_mtime_ns for s in (0, 1)}

    before = mtimes()
    again = rlnb(*args, cwd=tmp_path, env=env)
    assert again.returncode == 1, again.stderr[-2000:]  # the failure is still the result
    assert ("1 finished point(s) kept, 1 failed point(s) kept (--rerun-failed reruns them), "
            "0 to run") in again.stdout
    assert mtimes() == before
    rerun = rlnb(*args, "--rerun-failed", cwd=tmp_path, env=env)
    assert rerun.returncode == 1 and "1 finished point(s) kept, 1 to run" in rerun.stdout
    after = mtimes()
    assert after[0] == before[0] and after[1] != before[1]
    assert re.search(r"FAILED seed=1 in [\d.]+ s: cell In \[\d+\] raised RuntimeError", rerun.stdout)
    forced = rlnb(*args, "--force", cwd=tmp_path, env=env)
    assert forced.returncode == 1 and "0 finished point(s) kept" not in forced.stdout
    assert all(a != b for a, b in zip(mtimes().values(), after.values()))  # both reran
    assert statuses(root) == {"seed=0": "ok", "seed=1": "failed"}


# --- devices


def test_gpu_slots_give_each_point_its_own_gpus():
    assert gpu_slots(["0", "1", "2", "3"], 2, 2) == [["0", "1"], ["2", "3"]]
    assert gpu_slots(["4", "6"], 2, 1) == [["4"], ["6"]]  # CUDA_VISIBLE_DEVICES ids, in order
    assert gpu_slots([], 3, 0) == [[], [], []]
    with pytest.raises(ValueError, match=r"--gpus-per-run 3 is more GPUs than this machine has 2"):
        gpu_slots(["0", "1"], 1, 3)
    with pytest.raises(ValueError, match=r"--jobs 3 with 1 GPU\(s\) per run needs 3 GPUs .*--jobs 2"):
        gpu_slots(["0", "1"], 3, 1)
    pool = LocalPool(2, 4, gpu_slots(["0", "1", "2", "3"], 2, 2))
    assert pool.env(1)["CUDA_VISIBLE_DEVICES"] == "2,3" and pool.env(0)["OMP_NUM_THREADS"] == "4"
    assert pool.description == "2 at a time, 4 thread(s) and 2 GPU(s) each"


# --- bad input: one line naming the flag, exit 2, nothing written


def other_sweep(root: Path, notebook: Path = TRAIN, grid=None) -> None:
    """A sweep root as rlnb sweep leaves it (sweep.json and a run folder)."""
    grid = grid or {"seed": [0, 1]}
    runs = [{"name": f"seed={s}", "parameters": {"seed": s}, "status": "ok", "error": None,
             "seconds": 1.0} for s in grid["seed"]]
    root.mkdir()
    (root / "sweep.json").write_text(json.dumps(
        {"notebook": str(notebook), "grid": grid, "parameters": {}, "runs": runs}))
    (root / "seed=0").mkdir()


def busy_port() -> socket.socket:
    s = socket.socket()
    s.bind(("", 0))
    s.listen()
    return s


SWEEP = ["sweep", "FAKE", "-p", "seed", "0,1"]
LAUNCH = ["launch", "--num-processes", "2", "FAKE"]
SCALE_ROWS = [
    ([*SWEEP, "--jobs", "0"], "--jobs must be at least 1, got 0"),
    ([*SWEEP, "--jobs", "-2"], "--jobs must be at least 1"),
    ([*SWEEP, "--cpus-per-run", "0"], "--cpus-per-run must be at least 1"),
    ([*SWEEP, "--gpus-per-run", "-1"], "--gpus-per-run must be 0 or more"),
    ([*SWEEP, "--gpus-per-run", "999"], "--gpus-per-run 999 is more GPUs than this machine has"),
    ([*SWEEP, "--jobs", "2", "--gpus-per-run", "999"], "--gpus-per-run 999"),
    ([*SWEEP, "--ray", "NO_RAY"], "--ray needs the ray package"),
    ([*SWEEP, "--ray", "127.0.0.1:1"], "--ray 127.0.0.1:1: no Ray cluster answers there"),
    ([*SWEEP, "--ray", "not-an-address"], "--ray not-an-address: not a Ray address"),
    ([*SWEEP, "--ray", "auto"], "--ray auto: "),  # no cluster runs here (or only a stale record)
    ([*SWEEP, "--root", "other"], "--root other holds a sweep of another notebook"),
    ([*SWEEP, "--root", "mine"], "--root mine holds a sweep of fake_metrics.ipynb with other parameters"),
    ([*SWEEP, "--root", "garbled"], "--root garbled: its sweep.json is unreadable"),
    ([*SWEEP, "--root", "full"], "--root full exists and is not empty"),
    ([*LAUNCH, "--num-machines", "0"], "--num-machines must be at least 1"),
    ([*LAUNCH, "--num-machines", "2", "--machine-rank", "2", "--main-process-ip", "127.0.0.1"],
     "--machine-rank 2 is not one of --num-machines 2"),
    ([*LAUNCH, "--num-machines", "2"], "--main-process-ip is required with --num-machines 2"),
    (["launch", "--num-processes", "3", "FAKE", "--num-machines", "2", "--main-process-ip", "x"],
     "--num-processes 3 (all machines together) is not a multiple of --num-machines 2"),
    ([*LAUNCH, "--main-process-ip", "10.0.0.1"], "--main-process-ip is for --num-machines > 1"),
    ([*LAUNCH, "--main-process-port", "70000"], "--main-process-port must be a port"),
    ([*LAUNCH, "--num-machines", "2", "--main-process-ip", "127.0.0.1", "--main-process-port",
      "BUSY"], "is in use on this machine"),
]


@pytest.mark.parametrize(("args", "fragment"), SCALE_ROWS, ids=lambda x: " ".join(map(str, x))[6:50])
def test_scale_out_flags_bad_input_exit_2_and_write_nothing(args, fragment, tmp_path, monkeypatch,
                                                            capsys):
    monkeypatch.chdir(tmp_path)
    other_sweep(tmp_path / "other")
    other_sweep(tmp_path / "mine", FAKE.resolve(), {"seed": [0, 1, 2]})
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "sweep.json").write_text("{not json")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    if "NO_RAY" in args:  # as if ray were not installed: `import ray` fails
        monkeypatch.setitem(sys.modules, "ray", None)
        args = [a for a in args if a != "NO_RAY"]
    port = busy_port()
    args = [str(FAKE) if a == "FAKE" else str(port.getsockname()[1]) if a == "BUSY" else a
            for a in args]
    before = {str(p.relative_to(tmp_path)): p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    try:
        code = main(args)
    finally:
        port.close()
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err and "Traceback" not in out.err + out.out, out.err
    assert len(out.err.strip().splitlines()) == 1, out.err
    after = {str(p.relative_to(tmp_path)): p.stat().st_mtime_ns for p in tmp_path.rglob("*")}
    assert after == before  # nothing written, nothing touched


# --- the per-setting statistics, on a sweep root written by hand in rlnb sweep's format


def test_setting_summary_and_differences_by_hand(tmp_path):
    from rlnb.run.experiments.stats import t_quantile
    from rlnb.run.experiments.sweep import setting_differences, setting_summary

    finals = {0.2: [0.50, 0.56, 0.53], 0.28: [0.60, 0.70, 0.62]}  # final accuracy per seed
    runs = []
    for clip, values in finals.items():
        for seed, value in enumerate(values):
            name = f"clip={clip}__seed={seed}"
            (tmp_path / name).mkdir()
            lines = [{"step": 1, "validation/accuracy": 0.1}, {"step": 2, "validation/accuracy": value}]
            (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
            runs.append({"name": name, "parameters": {"clip": clip, "seed": seed}, "status": "ok",
                         "error": None, "seconds": 1.0})
    runs.append({"name": "clip=0.28__seed=3", "parameters": {"clip": 0.28, "seed": 3},
                 "status": "failed", "error": "boom", "seconds": 1.0})
    (tmp_path / "sweep.json").write_text(json.dumps({
        "notebook": "x.ipynb", "grid": {"clip": [0.2, 0.28], "seed": [0, 1, 2, 3]},
        "parameters": {}, "runs": runs}))
    long = setting_summary(tmp_path)
    rows = {r.setting: r for r in long.itertuples()}
    assert list(rows) == ["clip=0.2", "clip=0.28"] and set(long["metric"]) == {"validation/accuracy"}
    assert rows["clip=0.2"].mean == pytest.approx(0.53) and rows["clip=0.2"].sd == pytest.approx(0.03)
    assert rows["clip=0.28"].n == 3 and rows["clip=0.28"].failed == 1  # the failed seed is left out
    wide = setting_summary(tmp_path, wide=True)
    assert wide.loc["clip=0.28", "validation/accuracy"] == "0.64 ± 0.05292 (n=3)"
    (row,) = setting_differences(tmp_path).itertuples()
    a, b = np.array(finals[0.28]), np.array(finals[0.2])
    va, vb = a.var(ddof=1) / 3, b.var(ddof=1) / 3
    df = (va + vb) ** 2 / (va**2 / 2 + vb**2 / 2)
    half = t_quantile(0.975, df) * np.sqrt(va + vb)
    assert (row.setting, row.reference) == ("clip=0.28", "clip=0.2")
    assert (row.difference, row.low, row.high) == pytest.approx((0.11, 0.11 - half, 0.11 + half))
    paired = setting_differences(tmp_path, paired=True).iloc[0]
    d = a - b  # seed by seed: 0.10, 0.14, 0.09
    half = 4.3027 * d.std(ddof=1) / np.sqrt(3)
    assert (paired["low"], paired["high"]) == pytest.approx((d.mean() - half, d.mean() + half), abs=1e-4)
    assert paired["interval"] == "95 % paired t" and paired["excludes 0"]
    with pytest.raises(ValueError, match="no setting 'clip=9'"):
        setting_differences(tmp_path, reference="clip=9")
