"""Checkpoints on the tiny local Llama: exact save/load round trip, RNG, pruning, mismatch errors."""

import copy
import random

import numpy as np
import pytest
import torch

from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama
from rlnb.run.store.checkpoint import (
    CheckpointingConfig,
    capture_rng_state,
    checkpoint_problem,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    restore_rng_state,
    save_checkpoint,
    saved_rng_ranks,
)


def _state(step, **extra):
    return {"consumed_samples": 8 * step, "current_step": step, "current_epoch": 0,
            "total_steps": step, "total_valid_tokens": 100 * step, "val_reward": None,
            "data_position": {"epoch": 0, "index": 8 * step}, **extra}


def _trained(seed=0, hidden_size=32):
    """A tiny model plus an AdamW + scheduler that has taken two steps (non-empty state)."""
    tok = build_char_tokenizer()
    model = build_tiny_llama(len(tok), hidden_size=hidden_size, num_hidden_layers=1, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    ids = torch.randint(4, len(tok), (2, 6), generator=torch.Generator().manual_seed(seed))
    for _ in range(2):
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad()
    return tok, model, opt, sched, ids


def _draws():
    return (random.random(), np.random.rand(3).tolist(), torch.rand(3).tolist())


def _assert_nested_equal(a, b, where="state"):
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _assert_nested_equal(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_nested_equal(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_save_then_load_restores_weights_optimizer_scheduler_and_rng_exactly(tmp_path):
    tok, model, opt, sched, ids = _trained()
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    opt_state = copy.deepcopy(opt.state_dict())  # the live dict aliases the moments
    sched_state = dict(sched.state_dict())

    path = save_checkpoint(tmp_path, 2, model=model, optimizer=opt, scheduler=sched,
                           tokenizer=tok, trainer_state=_state(2))
    after_save = _draws()
    assert path.name == "step_000002"
    assert {p.name for p in path.iterdir()} == {
        "model", "optimizer.pt", "trainer_state.json", "rng_state.pt"}
    assert list((path / "model").glob("*.safetensors"))
    assert (path / "model" / "tokenizer.json").is_file()

    # perturb everything: weights, optimizer moments, scheduler, RNG
    model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    sched.step()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(1.0)
    _draws()
    assert not torch.equal(model.lm_head.weight, weights["lm_head.weight"])

    state = load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert state == _state(2)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    assert model.lm_head.weight is model.model.embed_tokens.weight  # ties survive the load
    _assert_nested_equal(opt.state_dict(), opt_state)
    assert sched.state_dict() == sched_state
    assert _draws() == after_save


def test_resumed_training_matches_uninterrupted_training(tmp_path):
    _, model, opt, sched, ids = _trained()
    save_checkpoint(tmp_path, 2, model=model, optimizer=opt, scheduler=sched,
                    trainer_state=_state(2))

    def step(m, o, s):
        batch = torch.randint(4, 100, ids.shape)  # global RNG, as sampling would: must be restored
        m(input_ids=batch, labels=batch).loss.backward()
        o.step()
        s.step()
        o.zero_grad()

    step(model, opt, sched)
    reference = {k: v.clone() for k, v in model.state_dict().items()}

    _, fresh, fresh_opt, fresh_sched, _ = _trained(seed=5)  # different init, other moments
    load_checkpoint(latest_checkpoint(tmp_path), model=fresh, optimizer=fresh_opt,
                    scheduler=fresh_sched)
    step(fresh, fresh_opt, fresh_sched)
    for name, tensor in fresh.state_dict().items():
        assert torch.equal(tensor, reference[name]), name


def test_keep_last_prunes_older_checkpoints_and_latest_is_highest(tmp_path):
    _, model, opt, _, _ = _trained()
    assert latest_checkpoint(tmp_path) is None
    for step in (1, 2, 3, 10):
        save_checkpoint(tmp_path, step, model=model, optimizer=opt, trainer_state=_state(step),
                        keep_last=2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [3, 10]
    assert latest_checkpoint(tmp_path) == tmp_path / "step_000010"
    # re-saving an earlier step after a rewind never prunes the checkpoint just written
    save_checkpoint(tmp_path, 4, model=model, optimizer=opt, trainer_state=_state(4), keep_last=1)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [4]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_000004"]


def test_loading_into_a_different_model_names_the_tensors_and_changes_nothing(tmp_path):
    _, model, opt, _, _ = _trained()
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, trainer_state=_state(1))
    _, wider, _, _, _ = _trained(hidden_size=48)
    before = {k: v.clone() for k, v in wider.state_dict().items()}
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, model=wider)
    msg = str(err.value)
    assert "does not match LlamaForCausalLM" in msg and "shape mismatch" in msg
    assert "model.embed_tokens.weight checkpoint [100, 32] vs model [100, 48]" in msg
    for name, tensor in wider.state_dict().items():
        assert torch.equal(tensor, before[name]), name

    deeper = build_tiny_llama(100, hidden_size=32, num_hidden_layers=2)
    with pytest.raises(ValueError, match=r"missing from the checkpoint \(9\): "
                                         r"model\.layers\.1\.self_attn\.q_proj\.weight \[32, 32\]"):
        load_checkpoint(path, model=deeper)


def test_bad_trainer_state_and_missing_checkpoint_are_clear_errors(tmp_path):
    _, model, opt, _, _ = _trained()
    state = _state(1)
    del state["data_position"]
    with pytest.raises(ValueError, match="lacks \\['data_position'\\]"):
        save_checkpoint(tmp_path, 1, model=model, optimizer=opt, trainer_state=state)
    with pytest.raises(ValueError, match="JSON"):
        save_checkpoint(tmp_path, 1, model=model, optimizer=opt,
                        trainer_state=_state(1, val_reward=float("nan")))
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        load_checkpoint(tmp_path / "step_000001", model=model)


def test_rng_capture_restore_roundtrip():
    state = capture_rng_state()
    first = _draws()
    restore_rng_state(state)
    assert _draws() == first


def _rank_states(seeds):
    """``capture_rng_state()`` after seeding every generator with each of ``seeds`` (the states
    of several ranks, which seed by rank)."""
    states = []
    for seed in seeds:
        random.seed(seed)
        np.random.seed(seed)
        torch.manual_seed(seed)
        states.append(capture_rng_state())
    return states


def test_each_rank_restores_its_own_rng_state(tmp_path):
    tok, model, opt, _, _ = _trained()
    states = _rank_states([11, 22, 33])
    expected = []
    for s in states:
        restore_rng_state(s)
        expected.append(_draws())
    assert len({str(e) for e in expected}) == 3  # the ranks' streams really differ
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, rng_states=states,
                           trainer_state=_state(1, data_position={"consumed_prompts": 8}))
    names = {p.name for p in path.iterdir()}
    assert {"rng_state.pt", "rng_state_rank1.pt", "rng_state_rank2.pt"} <= names
    assert saved_rng_ranks(path) == 3 and checkpoint_problem(path) is None
    for rank in (2, 0, 1):
        torch.manual_seed(99)  # whatever this process drew before the resume
        load_checkpoint(path, model=model, optimizer=opt, rank=rank)
        assert _draws() == expected[rank], f"rank {rank} did not get its own state back"
    (path / "rng_state_rank2.pt").write_bytes(b"garbage")
    assert "rng_state_rank2.pt is unreadable" in checkpoint_problem(path)


def test_a_one_file_checkpoint_still_loads_on_every_rank_with_a_warning(tmp_path):
    """Checkpoints written before per-rank states (or by one process) hold rng_state.pt only."""
    tok, model, opt, _, _ = _trained()
    (state,) = _rank_states([5])
    path = save_checkpoint(tmp_path, 1, model=model, optimizer=opt, trainer_state=_state(1),
                           rng_states=[state])
    assert not list(path.glob("rng_state_rank*")) and saved_rng_ranks(path) == 1
    restore_rng_state(state)
    rank0 = _draws()
    load_checkpoint(path, model=model, optimizer=opt)  # rank 0: its own, silently
    assert _draws() == rank0
    with pytest.warns(UserWarning, match="no RNG state for rank 1 .*restores rank 0's"):
        load_checkpoint(path, model=model, optimizer=opt, rank=1)
    assert _draws() == rank0


def test_checkpointing_config_defaults_and_validation(tmp_path):
    cfg = CheckpointingConfig()
    assert (cfg.enabled, cfg.save_period, cfg.keep_top_k) == (True, 10, 3)
    assert cfg.resolve_dir(tmp_path) == tmp_path / "checkpoints"
    assert [s for s in range(1, 31) if cfg.should_save(s)] == [10, 20, 30]
    for name, field in CheckpointingConfig.model_fields.items():
        assert field.description, name
    with pytest.raises(ValueError):
        CheckpointingConfig(save_period=0)
