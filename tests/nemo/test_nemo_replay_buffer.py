"""rlnb.nemo.async_utils.replay_buffer: NeMo-RL's ReplayBufferImpl interface over rlnb's replay
buffer: filling, sampling and stalling, the watermark, checkpoints and the two restores."""

import pytest
import torch


def filled(max_size=10, drop=False, entries=((0, 1), (0, 1), (1, 2), (1, 3))):
    from rlnb.nemo.async_utils.replay_buffer import ReplayBufferImpl

    buf = ReplayBufferImpl(max_size=max_size, drop_incomplete_targets_on_restore=drop)
    for i, (v, t) in enumerate(entries):
        assert buf.add({"group": i}, weight_version=v, target_weight_version=t) == "success"
    return buf


def test_replay_buffer_fills_samples_and_stalls_like_nemo_rl():
    from rlnb.nemo.async_utils import ReplayBuffer, ReplayBufferImpl

    assert ReplayBuffer is ReplayBufferImpl
    buf = filled(max_size=4)
    assert buf.add({"group": 9}, 0, 1) == "full" and buf.size() == 4
    assert buf.get_existing_target_weights() == {1, 2, 3}
    assert buf.has_complete_batch(1, 2) and not buf.has_complete_batch(2, 2)
    assert buf.get_trajectories_needed(2, 2) == 1
    out = buf.sample(num_prompt_groups=2, current_weight_version=1, max_age_steps=1)
    assert [t["group"] for t in out["trajectories"]] == [0, 1]
    assert out["avg_trajectory_age"] == 1.0  # 1 - mean(0, 0)
    assert buf.get_last_target_weight_already_generated() == 1
    assert buf.sample(2, 2, 1) is None  # one group meant for step 2: stall, never borrow
    info = buf.get_debug_info()
    assert info == {"total_trajectories": 2, "trajectory_versions": [1, 1],
                    "target_weight_versions": [2, 3], "max_size": 4}
    buf.clear()
    assert buf.size() == 0 and buf.get_last_target_weight_already_generated() == 1


def test_replay_buffer_state_round_trip_and_restores():
    from rlnb.nemo.async_utils.replay_buffer import ReplayBufferImpl

    state = filled().state_dict()
    assert set(state) == {"trajectories", "trajectory_versions", "target_weight_versions",
                          "last_target_weight_already_generated", "max_size"}
    # resuming at step 2: past targets dropped, the watermark set to 1 so targets >= 2 refill
    buf = ReplayBufferImpl(10, False)
    buf.load_state_dict(state, num_prompts_per_step=2, current_training_step=2)
    assert buf.get_debug_info()["target_weight_versions"] == [2, 3]
    assert buf.get_last_target_weight_already_generated() == 1
    dropping = ReplayBufferImpl(10, True)  # incomplete targets (one group each) dropped
    dropping.load_state_dict(state, num_prompts_per_step=2, current_training_step=2)
    assert dropping.size() == 0
    # without a resume step: stale entries, then incomplete targets dropped; watermark below
    # the first target left
    loose = ReplayBufferImpl(10, False)
    loose.load_state_dict({**state, "last_target_weight_already_generated": 5},
                          num_prompts_per_step=2, max_age_steps=1)
    assert loose.get_debug_info()["target_weight_versions"] == [1, 1]
    assert loose.get_last_target_weight_already_generated() == 0
    with pytest.raises(ValueError, match="missing required keys: last_target_weight_already"):
        loose.load_state_dict({k: v for k, v in state.items()
                               if k != "last_target_weight_already_generated"})
    with pytest.raises(ValueError, match="inconsistent replay buffer lengths"):
        loose.load_state_dict({**state, "trajectory_versions": [0]})
    with pytest.raises(ValueError, match="needs num_prompts_per_step"):
        loose.load_state_dict(state, current_training_step=2)


def test_replay_buffer_saves_and_loads_a_file(tmp_path):
    from rlnb.nemo.async_utils.replay_buffer import ReplayBufferImpl

    buf = filled(entries=((0, 1), (1, 2)))
    buf._buffer.entries[0] = type(buf._buffer.entries[0])(
        {"ids": torch.tensor([1, 2]), "text": "a"}, 0, 1)
    assert buf.save_to_path(str(tmp_path / "rb.pt")) == 2
    back = ReplayBufferImpl(10, False)
    assert back.load_from_path(str(tmp_path / "rb.pt"), 1, 1, 1) == {"num_trajectories": 2}
    assert back.sample(1, 1, 1)["trajectories"][0]["ids"].tolist() == [1, 2]


def test_save_to_path_refuses_what_load_from_path_could_not_read(tmp_path):
    """NeMo-RL's own tests save trajectories holding arbitrary objects: torch.load
    (weights_only=True) then refuses the file, long after the save. Here the save refuses first,
    naming where the object is, and writes nothing; a file that is not a state is named at load."""
    import numpy as np

    from rlnb.nemo.async_utils.replay_buffer import ReplayBufferImpl

    buf = ReplayBufferImpl(max_size=4, drop_incomplete_targets_on_restore=False)
    buf.add({"ids": torch.arange(3), "text": "1+2=", "reward": 1.0}, 0, 1)
    assert buf.save_to_path(str(tmp_path / "ok.pt")) == 1
    again = ReplayBufferImpl(max_size=4, drop_incomplete_targets_on_restore=False)
    assert again.load_from_path(str(tmp_path / "ok.pt")) == {"num_trajectories": 1}
    buf.add({"ids": np.arange(3)}, 0, 1)
    with pytest.raises(ValueError, match=r"state\['trajectories'\]\[1\]\['ids'\] is a "
                                         r"numpy\.ndarray, which load_from_path"):
        buf.save_to_path(str(tmp_path / "bad.pt"))
    assert not (tmp_path / "bad.pt").exists()
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="load_from_path.*junk.pt.*not a replay buffer state"):
        again.load_from_path(str(tmp_path / "junk.pt"))
