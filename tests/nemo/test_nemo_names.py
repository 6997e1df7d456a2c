"""NeMo-RL's grpo names (rlnb.nemo.grpo) drive rlnb's trainer with NeMo-RL's meaning."""

import typing

import rlnb
from rlnb.nemo.grpo import (
    GRPOLoggerConfig,
    GRPOSaveState,
    MasterConfig,
    _should_use_async_rollouts,
    grpo_train,
    refit_policy_generation,
    setup,
    validate,
)


def test_setup_grpo_train_validate_and_refit(tmp_path):
    config = rlnb.load_config(None, ["grpo.max_num_steps=2", "grpo.val_period=1"], preset="fast")
    assert isinstance(config, MasterConfig) and isinstance(config.logger, GRPOLoggerConfig)
    assert not _should_use_async_rollouts(config)
    parts = setup(config, run_dir=tmp_path / "run")
    assert parts.trainer.policy is parts.policy and parts.policy_generation is parts.trainer.generator
    assert set(parts.grpo_save_state) == set(typing.get_type_hints(GRPOSaveState))
    assert parts.grpo_save_state["current_step"] == 0
    summary = grpo_train(parts)
    assert summary["steps"] == 2 == parts.trainer.state()["current_step"]
    adam_steps = {int(s["step"]) for s in parts.policy.optimizer.state.values()}
    assert adam_steps == {2}  # one optimizer step per GRPO step
    records = parts.run.run_dir.read_metrics()
    assert [r["step"] for r in records] == [0, 1, 2]  # validation at start, then each step
    assert 0 <= validate(parts)["validation/accuracy"] <= 1
    version = parts.policy_generation.weight_version
    refit_policy_generation(parts.policy, parts.policy_generation)
    assert parts.policy_generation.weight_version == version + 1
