"""``rlnb preflight``: what a student runs before the lab.

    rlnb preflight [--fast] [--steps K]

1. the install: Python, rlnb and the packages the lab uses (torch, transformers, the notebook
   extra: JupyterLab, ipykernel, ipywidgets, plotly, papermill, nbconvert), with versions;
2. a Jupyter kernel: a one-cell notebook executed headless (papermill, as ``rlnb run`` does);
3. the exercises: the sources build into student and solution notebooks;
4. the warm starts: every live run of the lab starts from a cached warm start, built here once
   (the first build takes minutes on a laptop, then loads at once);
5. the speed: K steps of every live run's settings, timed, and from them how long each
   exercise's live run and the whole lab's take on this machine (PPO's runs: K steps after
   the critic's warm-up, whose steps are timed apart).

Implementation choices:
1) The timing runs the experiments themselves (``run_experiment`` with K steps), so the
   estimate covers what the lab runs, validation and start-up included: seconds for N steps =
   start-up + N x (seconds per step), both measured.
2) Nothing stops at the first problem: every check runs and the summary lists what failed
   (exit 1). ``--fast`` shrinks the runs (the packaged ``fast`` preset, no warm start) for
   tests; its timings say nothing about the lab.
3) The load average is printed with the timings: on a shared or busy machine they are upper
   bounds.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

CORE = ("torch", "transformers", "accelerate", "pydantic", "pandas")
NOTEBOOK = ("jupyterlab", "ipykernel", "ipywidgets", "plotly", "anywidget", "papermill",
            "nbconvert")
# import name where it differs from the distribution's
MODULE = {"jupyterlab": "jupyterlab", "ipykernel": "ipykernel"}


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def check_install(say: Callable[[str], None]) -> list[str]:
    """Versions of the lab's packages; the problems (missing ones)."""
    import rlnb

    problems = []
    say(f"  python {sys.version.split()[0]} ({sys.executable}), rlnb {rlnb.__version__}")
    for group, names in (("core", CORE), ("notebook extra", NOTEBOOK)):
        found, missing = [], []
        for name in names:
            version = _version(name)
            module = MODULE.get(name, name)
            if version is None or importlib.util.find_spec(module) is None:
                missing.append(name)
            else:
                found.append(f"{name} {version}")
        say(f"  {group}: {', '.join(found) or 'none'}")
        if missing:
            hint = "pip install -e '.[notebook]'" if group != "core" else "pip install -e ."
            problems.append(f"missing {', '.join(missing)} ({hint})")
    return problems


def check_kernel(say: Callable[[str], None]) -> list[str]:
    """Execute a one-cell notebook headless; the problems."""
    import json

    from rlnb.run.notebooks.execute import run_notebook

    with tempfile.TemporaryDirectory(prefix="rlnb-preflight-") as tmp:
        nb = Path(tmp) / "kernel_check.ipynb"
        cells = [{"cell_type": "code", "execution_count": None, "id": "parameters",
                  "metadata": {"tags": ["parameters"]}, "outputs": [], "source": "run_dir = None"},
                 {"cell_type": "code", "execution_count": None, "id": "check", "metadata": {},
                  "outputs": [], "source": "import rlnb, torch\nprint(rlnb.__version__)"}]
        nb.write_text(json.dumps({
            "cells": cells, "nbformat": 4, "nbformat_minor": 5,
            "metadata": {"kernelspec": {"name": "python3", "language": "python",
                                        "display_name": "Python 3"}}}))
        start = time.perf_counter()
        try:
            result = run_notebook(nb, run_dir=Path(tmp) / "run", progress=False)
        except (ImportError, ValueError) as err:
            return [f"no kernel could run a notebook: {err}"]
        if not result.ok:
            return [f"the kernel failed a one-cell notebook: {result.error}"]
        say(f"  a one-cell notebook ran headless in {time.perf_counter() - start:.1f} s "
            "(papermill, ipykernel on this Python)")
    return []


def check_exercises(say: Callable[[str], None]) -> list[str]:
    from rlnb.teach.build import build, default_source

    if not default_source().is_dir():
        say(f"  no exercise sources at {default_source()} (an installed rlnb without its "
            "checkout): skipped")
        return []
    with tempfile.TemporaryDirectory(prefix="rlnb-preflight-") as tmp:
        try:
            written = build(tmp)
        except (ValueError, FileNotFoundError) as err:
            return [f"the exercises do not build: {err}"]
    say(f"  {len(written) // 2} exercises build (rlnb teach build OUT writes them)")
    return []


def time_experiments(say: Callable[[str], None], *, steps: int, fast: bool, seed: int = 0
                     ) -> tuple[list[str], float, dict]:
    """Build every experiment's warm start, time ``steps`` steps of each setting and estimate
    each live run (choice 1). Returns (problems, estimated seconds of all live runs, each
    experiment's result)."""
    from rlnb.teach.live import EXPERIMENTS, FAST_STEPS, run_experiment

    problems, total, results = [], 0.0, {}
    for exp in EXPERIMENTS.values():
        start = time.perf_counter()
        warmup = 0 if fast else _critic_warmup(exp)
        n_timed = FAST_STEPS if fast else steps + warmup
        n_full = FAST_STEPS if fast else exp.steps
        try:
            result = run_experiment(exp, seed=seed, fast=fast, steps=n_timed, log=lambda *_: None)
        except Exception as err:  # report and go on (choice 2)
            problems.append(f"live run '{exp.name}' failed: {type(err).__name__}: {err}")
            say(f"  {exp.exercise:22s} FAILED: {type(err).__name__}: {err}")
            continue
        results[exp.name] = result
        estimate, startups = 0.0, []
        for label, records in result.records.items():
            timed = [(r["step"], r["timing/train/total_step_time"]) for r in records
                     if isinstance(r.get("timing/train/total_step_time"), (int, float))]
            # PPO's first steps train the critic only (cheaper): each phase timed on its own
            early = [t for step, t in timed if step <= warmup] or [0.0]
            later = [t for step, t in timed if step > warmup] or early
            startups.append(max(result.seconds[label] - sum(t for _, t in timed), 0.0))
            estimate += (min(warmup, n_full) * sum(early) / len(early)
                         + max(n_full - warmup, 0) * sum(later) / len(later))
        # the first setting's start-up may include building the warm start: the lab's runs
        # load it from the cache, so each run is charged the smallest start-up seen
        estimate += min(startups, default=0.0) * len(startups)
        total += estimate
        say(f"  {exp.exercise:22s} {exp.name:18s} {len(exp.settings)} runs x {n_full:3d} steps: "
            f"about {_minutes(estimate)}  (timed {n_timed} steps each in "
            f"{time.perf_counter() - start:.0f} s, warm starts included)")
    return problems, total, results


def _critic_warmup(exp) -> int:
    """Steps that train the critic only (a loop with a critic warm-up: its section's
    ``policy_training_start_step``, PPO's), else 0."""
    from rlnb.run.config.master_config import load_config, packaged_config

    config = load_config(packaged_config(exp.config) if exp.config else None,
                         [*exp.common, *next(iter(exp.settings.values()))])
    return getattr(config.loop_config, "policy_training_start_step", 0)


def speed(say: Callable[[str], None], *, fast: bool, seed: int = 0, timed=None) -> None:
    """Steps per second of the default GRPO step (the tutorials' run): read off the group-size
    run's default setting when it was just timed (``timed``, its records), else timed here."""
    from rlnb.teach.live import Experiment, run_experiment

    if timed is None:
        probe = Experiment("speed", "", "", {"default": []}, 10, common=["grpo.val_period=0"])
        timed = run_experiment(probe, seed=seed, fast=fast, log=lambda *_: None).records[
            "default"]
    times = [r["timing/train/total_step_time"] for r in timed
             if isinstance(r.get("timing/train/total_step_time"), (int, float))]
    per_step = sum(times) / len(times)
    what = "the fast preset's GRPO step" if fast else "default GRPO step (16 prompts x 16 answers)"
    say(f"  {what}: {per_step:.3f} s, "
        f"{1 / per_step:.1f} steps/s; notebook 01's 1500 steps: about "
        f"{_minutes(1500 * per_step)}")


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


def preflight(*, steps: int = 5, fast: bool = False, say: Callable[[str], None] = print) -> int:
    """Run every check (module docstring); 0 when all pass, 1 otherwise."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    cores = os.cpu_count()
    say(f"rlnb preflight: {cores} CPU cores, load average {load:.1f}"
        + (" (fast mode: tiny runs, the timings say nothing about the lab)" if fast else ""))
    problems: list[str] = []
    for title, step in (("install", check_install), ("kernel", check_kernel),
                        ("exercises", check_exercises)):
        say(f"{title}:")
        problems += step(say)
    say("warm starts and speed of the lab's live runs"
        + ("" if fast else " (the first time, each warm start is built and cached: minutes)")
        + ":")
    start = time.perf_counter()
    found, total, results = time_experiments(say, steps=steps, fast=fast)
    problems += found
    say(f"  all live runs together: about {_minutes(total)} (this check took "
        f"{time.perf_counter() - start:.0f} s)")
    say("speed:")
    try:
        # the default step is group_size's first setting (16 prompts x 16 answers): not timed
        # twice (a separate run cost a start-up and ten steps)
        group = results.get("group_size")
        speed(say, fast=fast, timed=next(iter(group.records.values())) if group else None)
    except Exception as err:
        problems.append(f"the speed check failed: {type(err).__name__}: {err}")
    load_now = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    if cores and max(load, load_now) > cores:
        say(f"  the load average ({max(load, load_now):.1f}) exceeded the {cores} cores: other "
            "programs shared them, so these times are upper bounds")
    say("report (if something failed, paste these lines to the lecturer):")
    for line in report(problems, total):
        say(f"  {line}")
    if problems:
        say("rlnb preflight: NOT ready:\n" + "\n".join(f"  - {p}" for p in problems))
        return 1
    say("rlnb preflight: ready for the lab")
    return 0


def report(problems: list[str], lab_seconds: float) -> list[str]:
    """A few lines that say what a lecturer needs to help from afar: the verdict, the machine
    (OS, CPU class, cores, memory), the versions, which torch build (a CUDA build is a 2 GB
    download the lab does not need), the cache folder and its free space, the problems."""
    import platform

    import torch

    import rlnb
    from rlnb.run.store.space import free_bytes
    from rlnb.run.store.warm_start_cache import cache_dir

    try:
        memory = f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30:.1f} GiB RAM"
    except (ValueError, OSError, AttributeError):
        memory = "RAM unknown"
    build = "CUDA build" if torch.version.cuda else "CPU build"
    cache = cache_dir()
    lines = [
        f"rlnb preflight report: {'NOT ready' if problems else 'ready'}",
        f"machine: {platform.system()} {platform.release()} {platform.machine()}, CPU "
        f"{torch.backends.cpu.get_cpu_capability()}, {os.cpu_count()} cores, {memory}",
        f"python {sys.version.split()[0]}, rlnb {rlnb.__version__}, torch {torch.__version__} "
        f"({build}), transformers {_version('transformers')}, jupyterlab {_version('jupyterlab')}",
        f"cache: {cache} ({free_bytes(cache) / 2**30:.1f} GiB free)",
        f"the lab's live runs: about {_minutes(lab_seconds)}",
    ]
    lines += [f"problem: {p}" for p in problems] or ["problems: none"]
    return lines
