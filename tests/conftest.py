"""Shared set-up for the whole suite: offline, a private rlnb cache, threads sized for parallel
workers, the tier markers, and the tiny configuration as fixtures.

The layout mirrors the package (``tests/algorithms`` tests ``rlnb/algorithms``, and so on);
helpers that several files use live in ``tests/support`` (on ``sys.path`` through
``pyproject.toml``'s ``pythonpath``, so ``import tiny_config`` works under ``pytest`` and
``python -m pytest`` alike). The tiers are markers, registered in ``pyproject.toml``
(``--strict-markers`` makes a typo an error):

    pytest -q -m "not slow"              # the quick loop: no test over about 10 s
    pytest -q -m smoke                   # import and one step of each loop (the lower tier)
    pytest -q -m "notebook or browser"   # what a Jupyter user sees
"""

from __future__ import annotations

import os
import re

import pytest

# Nothing in the suite may reach a hub: set before any test imports transformers.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _xdist_workers() -> int:
    """How many pytest-xdist workers share this machine (1 when the suite runs in one process)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))


def pytest_configure(config: pytest.Config) -> None:
    workers = _xdist_workers()
    if workers > 1:
        # Each worker gets its share of the cores: torch's default (one thread per core) in every
        # worker would oversubscribe the machine, and OpenMP's spinning threads then slow both
        # workers far more than they gain. Child processes (kernels, launchers) inherit it unless
        # a test sets its own. Thread counts change no asserted number: the tests that pin
        # numbers pin their threads themselves.
        share = max(1, (os.cpu_count() or 1) // workers)
        os.environ.setdefault("OMP_NUM_THREADS", str(share))
        import torch

        torch.set_num_threads(share)


# --- parallel workers (`pytest -n 2`)
# Each scope runs whole in one worker, so its module-scoped set-up (a JupyterLab server, a sweep,
# a two-rank run, an executed notebook) runs once: a scope is a file, except the notebook tests,
# which split by notebook (each notebook's executed copy is its own fixture), and files that
# share one machine-wide resource, which run in one worker one after the other: `--ray auto` in
# test_sweep_parallel.py must find no Ray cluster while test_sweep_ray.py runs one.
SHARED_SCOPES = {"tests/run/test_sweep_parallel.py": "ray", "tests/run/test_sweep_ray.py": "ray"}
NOTEBOOK_TESTS = "tests/ui/test_notebooks.py"
# The longest scopes start first (longest processing time first), so no worker is left with one
# long file at the end while the other idles: seconds on the 2-core build machine, in one process
# (`pytest --durations=0`, 2026-11-27; compile, browser, exercises and async from CI on
# 2026-11-29); every other file takes under 45 s.
# One exception: the Ray files (328 s) start after about 500 s of the others, not first: Ray
# gives its raylet a fixed 30 s to register, which the machine misses while tests/run_all.sh
# still builds the tiers' venvs beside the suite (their builds take 450-550 s).
LONGEST_FIRST = {
    "tests/engine/test_compile.py": 465, "tests/ui/test_browser.py": 460,
    "tests/teach/test_exercises.py": 245, "tests/run/test_notebook_cli.py": 177,
    "tests/engine/test_async_grpo.py": 140,
    "tests/run/test_distributed_reliability.py": 114, "tests/run/test_bad_input.py": 73,
    "ray": 72,
    f"{NOTEBOOK_TESTS}::04_ablation_sweep": 70, "tests/run/test_quiet.py": 67,
    "tests/run/test_config_options.py": 57, "tests/run/test_training_run.py": 50,
    f"{NOTEBOOK_TESTS}::09_dpo_vs_grpo": 47,
}


def scope_of(nodeid: str) -> str:
    """The unit a worker runs whole (see above)."""
    path = nodeid.split("::", 1)[0]
    if path in SHARED_SCOPES:
        return SHARED_SCOPES[path]
    notebook = re.search(r"\[(\d\d_\w+)\]$", nodeid)
    if path == NOTEBOOK_TESTS and notebook:
        return f"{path}::{notebook.group(1)}"
    return path


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's: absent without it
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With ``-n N`` (``--dist load``, the default), schedule by ``scope_of``. (xdist's own
    ``--dist loadgroup`` would do this through markers, but its group names never reach the
    scheduler under pytest 9, whose node ids no longer come from ``_nodeid``.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    config.option.loadscopereorder = False  # keep the longest-first order of the collection
    return ScopeScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a parallel worker, the longest scopes first (a stable sort: each file keeps its own
    order, and every worker collects the same list, as xdist requires); then ``gpu`` tests
    skip, with the reason, on a machine whose torch sees no CUDA device."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=lambda item: -LONGEST_FIRST.get(scope_of(item.nodeid), 0))
    skip_gpu(items)


def skip_gpu(items: list[pytest.Item]) -> None:
    if not any(item.get_closest_marker("gpu") for item in items):
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no CUDA device: the gpu tier runs on a GPU machine "
                                   "(benchmarks/gpu_check.py)")
    for item in items:
        if item.get_closest_marker("gpu"):
            item.add_marker(skip)


@pytest.fixture(autouse=True, scope="session")
def _private_rlnb_cache(tmp_path_factory):
    """One rlnb cache for the session (per xdist worker), never the user's: warm starts built by
    one test are reused by the next, and a developer's own cache is neither read nor filled.
    Tests that need a cold cache set ``RLNB_CACHE_DIR`` themselves (see ``cold_cache``)."""
    before = os.environ.get("RLNB_CACHE_DIR")
    os.environ["RLNB_CACHE_DIR"] = str(tmp_path_factory.mktemp("rlnb-cache"))
    yield
    if before is None:
        os.environ.pop("RLNB_CACHE_DIR", None)
    else:
        os.environ["RLNB_CACHE_DIR"] = before


@pytest.fixture
def cold_cache(tmp_path, monkeypatch):
    """An empty rlnb cache of this test's own (``tmp_path / "cache"``): warm starts are built."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RLNB_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def tiny_overrides() -> list[str]:
    """The small tiny-model configuration the engine tests share (``tiny_config.TINY``)."""
    from tiny_config import TINY

    return list(TINY)


@pytest.fixture
def tiny_grpo():
    """Build a GRPO trainer on the small tiny model: ``tiny_grpo("grpo.seed=3")``."""
    from tiny_config import TINY

    import rlnb

    def build(*extra: str) -> rlnb.GRPOTrainer:
        return rlnb.GRPOTrainer(rlnb.load_config(None, [*TINY, *extra]))

    return build
