"""The warm-start cache: entries built by other code or packages are rebuilt with a line saying
why, matching ones load; the code hash follows the source; WEIGHT_CODE covers what runs."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tiny_config import TINY

import rlnb
from rlnb.engine.trainers import warm_start as ws
from rlnb.engine.trainers.loops import make_trainer
from rlnb.run.store.warm_start_cache import cached_warm_start, stale_reason

SHORT = [*TINY, "sft.max_steps=12", "sft.stop_at_accuracy=null"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def trainer(*overrides):
    return make_trainer(rlnb.load_config(None, [*SHORT, *overrides]))


def start(t):
    """``cached_warm_start`` on ``t``; returns (info, logged lines)."""
    lines = []
    info = cached_warm_start(t, t.config.sft, log=lines.append)
    return info, lines


def weights(t):
    return {k: v.clone() for k, v in t.policy.model.state_dict().items()}


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_stale_entries_are_rebuilt_with_a_line_and_matching_ones_load(tmp_path):
    first = trainer()
    info, _ = start(first)
    built = weights(first)
    path = tmp_path / "cache" / "warm_start" / ws.warm_start_key(first, first.config.sft)
    assert info["path"] == str(path) and not info["cached"]
    stamp = json.loads((path / "info.json").read_text())["built_by"]
    assert stamp == ws.build_stamp(first) == {"code": ws.code_hash(),
                                              "packages": ws.package_versions()}
    assert set(stamp["packages"]) == {"torch", "transformers", "tokenizers", "numpy", "python"}

    loaded = trainer()
    info, lines = start(loaded)
    assert info["cached"] and lines == [f"warm start: loaded from cache {path} (12 SFT steps)"]
    assert same(weights(loaded), built)

    def make_stale(edit):
        """Give the entry an untrained model's weights (so loading it would show) and edit its
        recorded stamp."""
        fresh = trainer()
        names = load_file(path / "model.safetensors").keys()  # tied weights are saved once
        untrained = fresh.policy.model.state_dict()
        save_file({k: untrained[k].contiguous() for k in names}, path / "model.safetensors")
        meta = json.loads((path / "info.json").read_text())
        edit(meta)
        (path / "info.json").write_text(json.dumps(meta))
        return fresh

    transformers_now = stamp["packages"]["transformers"]

    def other_code(meta):
        meta["built_by"]["code"] = "0123456789abcdef"
        meta["built_by"]["packages"]["transformers"] = "4.0.0"

    t = make_stale(other_code)
    info, lines = start(t)
    assert lines[0] == (
        f"warm start: the cached entry at {path} was built by other code (rlnb code hash "
        f"0123456789abcdef, transformers 4.0.0) than this (rlnb code hash {ws.code_hash()}, "
        f"transformers {transformers_now}); rebuilding it")
    assert not info["cached"] and lines[1].startswith("warm start: 12 SFT steps")
    assert same(weights(t), built)  # rebuilt, not loaded: the same weights as the first run
    assert json.loads((path / "info.json").read_text())["built_by"] == stamp
    on_disk = load_file(path / "model.safetensors")
    assert same(on_disk, {k: built[k] for k in on_disk})
    assert start(trainer())[0]["cached"]  # the rebuilt entry loads

    t = make_stale(lambda meta: meta.pop("built_by"))  # written before rlnb recorded a stamp
    info, lines = start(t)
    assert lines[0] == (f"warm start: the cached entry at {path} was written by an older rlnb "
                        "that did not record the code that built it; rebuilding it")
    assert not info["cached"] and same(weights(t), built)
    assert json.loads((path / "info.json").read_text())["built_by"] == stamp
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # replaced, nothing left over


def test_stale_reason_names_only_what_differs():
    now = {"code": "b" * 16, "packages": {"torch": "2.13.0", "transformers": "5.24.0"}}
    assert stale_reason(now, now) is None
    then = {"code": "b" * 16, "packages": {"torch": "2.12.1", "transformers": "5.24.0"}}
    assert stale_reason(then, now) == ("was built by other code (torch 2.12.1) than this "
                                       "(torch 2.13.0)")
    gone = {"code": "a" * 16, "packages": {"torch": "2.13.0", "transformers": "5.24.0",
                                           "vllm": "0.32.0"}}
    assert stale_reason(gone, now) == (
        f"was built by other code (rlnb code hash {'a' * 16}, vllm 0.32.0) than this "
        f"(rlnb code hash {'b' * 16}, vllm none)")
    for old in (None, "abc", {"code": "x"}):
        assert stale_reason(old, now).startswith("was written by an older rlnb")


def test_code_hash_follows_the_source_of_each_module(tmp_path, monkeypatch):
    pkg = tmp_path / "fakepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "b.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    modules = ["fakepkg.a", "fakepkg.b"]
    before = ws.source_hash(modules)
    assert ws.source_hash(modules) == before and len(before) == 16
    (pkg / "b.py").write_text("Y = 3\n")  # one character of one module
    after = ws.source_hash(modules)
    assert after != before
    assert ws.source_hash(modules[::-1]) != after  # which source is which module counts
    (pkg / "b.py").write_text("Y = 2\n")
    assert ws.source_hash(modules) == before
    assert ws.source_hash(["fakepkg.gone"]) != ws.source_hash(["fakepkg.a"])
    assert "fakepkg.a" not in sys.modules  # read from disk, never imported
    sys.modules.pop("fakepkg", None)  # (finding a submodule imports its package)
    assert ws.code_hash() == ws.source_hash(ws.WEIGHT_CODE)


def test_settings_key_covers_sampling_and_precision_not_the_rl_optimizer():
    def key(*overrides):
        t = trainer(*overrides)
        return ws.warm_start_key(t, t.config.sft)

    base = key()
    # the RL loop's own settings: the warm start never reads them
    assert key("policy.optimizer.lr=1e-2", "policy.train_micro_batch_size=4") == base
    # read by the warm start: the SFT loss is taken at the sampling temperature, and probe
    # accuracy samples with these settings
    for override in ("policy.generation.temperature=0.7", "policy.generation.top_k=5",
                     "policy.precision=bfloat16", "sft.lr=2e-3", "grpo.seed=3",
                     "policy.compile.enabled=true"):  # its decode step samples the probe
        assert key(override) != base, override
    # compiling off: its sub-options do nothing, and the key is the one from before the option
    assert key("policy.compile.backend=aot_eager") == base


# Modules whose functions run while a warm start is built but that never change its numbers,
# with the reason; everything else that runs must be in WEIGHT_CODE.
EXEMPT = {
    "rlnb.config": "config validation",
    "rlnb.engine.models.compile_config": "config validation (policy.compile's own rules)",
    "rlnb.algorithms.checks": "argument checks and name look-ups",
    "rlnb.engine.runtime.distributed": "rank and device plumbing (the device type is in the key)",
    "rlnb.engine.trainers.loops": "picks the trainer class",
    "rlnb.run.config.master_config": "MasterConfig.loop_config: which section is the loop's "
                                     "(the sections' values are in the key)",
    "rlnb.algorithms.policy_loss": "the RL loss the trainer builds; the warm start never calls it",
    # the trainer re-checks its config's cross-field rules before use (rlnb.config.Config.check):
    # these modules' rules run, none of their code touches the weights
    "rlnb.algorithms.estimators": "config validation (the estimator's name is looked up)",
    "rlnb.algorithms.policy_loss_config": "config validation (loss_fn's rules)",
    "rlnb.algorithms.rewards": "config validation (reward scaling and shaping rules)",
    "rlnb.engine.trainers.collector": "config validation (async_grpo's rules)",
    "rlnb.engine.runtime.memory": "the stages' memory measured (GRPO's second step): no number",
}


@pytest.mark.slow
def test_weight_code_holds_every_module_that_runs_in_a_warm_start():
    config = rlnb.load_config(None, [*TINY, "sft.max_steps=2", "sft.eval_every=1",
                                     "sft.eval_prompts=4", "sft.batch_size=4"])
    root = str(Path(rlnb.__file__).parent)
    ran = set()

    def trace(frame, event, arg):
        code = frame.f_code
        if code.co_filename.startswith(root) and code.co_name != "<module>":
            ran.add(frame.f_globals.get("__name__"))
        return None  # no line events: calls only

    sys.settrace(trace)
    try:
        t = make_trainer(config)
        ws.warm_start(t, config.sft, log=lambda *a: None)
    finally:
        sys.settrace(None)
    ran = {m for m in ran if m and m.startswith("rlnb.")}
    assert {"rlnb.engine.models.sampler", "rlnb.engine.models.tiny",
            "rlnb.engine.trainers.warm_start"} <= ran  # the trace saw the warm start
    missing = sorted(ran - set(ws.WEIGHT_CODE) - set(EXEMPT))
    assert not missing, f"add these to warm_start.WEIGHT_CODE (or EXEMPT, saying why): {missing}"
    assert all(importlib.util.find_spec(m) is not None for m in ws.WEIGHT_CODE)
