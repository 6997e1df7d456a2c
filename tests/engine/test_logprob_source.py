"""Where prev_logprobs come from (reuse_generation_logprobs) is decided when the config loads."""

import subprocess
import sys
import time

import pytest

import rlnb
from rlnb.run.config.master_config import load_config

SMALL = ["policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1", "sft.enabled=false"]
ASYNC = ["grpo.async_grpo.enabled=true", "loss_fn.use_importance_sampling_correction=true"]


@pytest.mark.parametrize("source, overrides, section, expected", [
    (None, [], "grpo", True),  # hf in float32: the generator is the policy's own module
    (None, ["policy.generation.backend=vllm"], "grpo", False),  # vLLM's log-probs differ
    (None, ["policy.precision=bfloat16"], "grpo", False),  # KV-cache vs full pass rounding
    (None, ASYNC, "grpo", False),  # the collector samples with older weights
    ("ppo_tiny", [], "ppo", True),
    ("ppo_tiny", ["policy.generation.backend=vllm"], "ppo", False),
    ("async_tiny", [], "grpo", False),
])
def test_auto_resolves_when_the_config_loads_and_is_written_resolved(
        source, overrides, section, expected):
    from rlnb.run.config.master_config import packaged_config

    config = load_config(packaged_config(source) if source else None, overrides)
    assert getattr(config, section).reuse_generation_logprobs is expected
    # the run directory's config.yaml records the decision, not "auto"
    assert config.model_dump(mode="json")[section]["reuse_generation_logprobs"] is expected
    # and loading that record again decides nothing new
    again = load_config(config.model_dump(mode="json"))
    assert getattr(again, section).reuse_generation_logprobs is expected


@pytest.mark.parametrize("overrides, words", [
    (["policy.generation.backend=vllm", "grpo.reuse_generation_logprobs=true"],
     ["grpo.reuse_generation_logprobs=true", "backend='vllm'", "auto or false"]),
    ([*ASYNC, "grpo.reuse_generation_logprobs=true"],
     ["grpo.reuse_generation_logprobs=true", "async_grpo.enabled=true"]),
])
def test_an_explicit_true_that_cannot_hold_is_refused_at_load_time(overrides, words):
    with pytest.raises(ValueError) as err:
        load_config(None, overrides)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_an_explicit_true_with_bfloat16_hf_is_kept():
    """bfloat16 only changes what auto picks: the user may still choose reuse with hf."""
    config = load_config(None, ["policy.precision=bfloat16", "grpo.reuse_generation_logprobs=true"])
    assert config.grpo.reuse_generation_logprobs is True


def test_a_config_changed_after_loading_is_checked_before_any_engine_starts():
    config = load_config(None, SMALL)
    assert config.grpo.reuse_generation_logprobs is True
    config.policy.generation.backend = "vllm"  # reuse still says true: no longer possible
    with pytest.raises(ValueError, match="reuse_generation_logprobs=true needs a generation"):
        rlnb.GRPOTrainer(config)  # this venv has no vLLM: an engine start would say that instead


def test_the_cli_refuses_the_combination_in_one_line_before_an_engine(tmp_path):
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "train", "policy.generation.backend=vllm",
         "grpo.reuse_generation_logprobs=true", "--run-dir", str(tmp_path / "run")],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    # the config's own error format: "invalid config:" then one line per bad key
    assert "Traceback" not in proc.stderr and "vllm is not installed" not in proc.stderr
    assert "grpo.reuse_generation_logprobs=true needs a generation backend" in proc.stderr
    assert not (tmp_path / "run").exists()
    assert time.monotonic() - start < 60  # a hang guard, not a timing check
