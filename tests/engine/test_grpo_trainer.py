"""The GRPO engine on the tiny local model: stages, replay, updates, configs, bad input."""

import math

import pytest
import torch
from tiny_config import TINY

from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch
from rlnb.engine.models.policy import Policy
from rlnb.engine.models.policy_config import PolicyConfig
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config

SMALL = [*TINY, "grpo.val_period=0", "sft.enabled=false"]


@pytest.fixture
def trainer():
    return GRPOTrainer(load_config(None, SMALL + ["loss_fn.reference_policy_kl_penalty=0.05"]))


def params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_rollout_is_complete_and_consistent(trainer):
    b = trainer.rollout()
    B = 16
    assert isinstance(b, RolloutBatch) and len(b) == B and b.group.tolist() == sum([[i] * 4 for i in range(4)], [])
    assert b.input_ids.shape == b.token_mask.shape == b.prev_logprobs.shape == b.generation_logprobs.shape
    assert b.reference_logprobs is not None
    # token_mask covers exactly the generated tokens, which are attended
    assert (b.token_mask.sum(1) == b.response_lengths).all()
    assert ((b.token_mask > 0) <= (b.attention_mask > 0)).all()
    # the trainer's log-probs of the sampled tokens match the generator's (same weights)
    fresh = trainer.policy.logprobs(b.input_ids, b.attention_mask) * b.token_mask
    assert ((fresh - b.generation_logprobs) * b.token_mask).abs().max() < 1e-4
    assert set(b.to_frame().columns) >= {"prompt", "response", "reward", "correct", "length", "truncated"}
    assert "RolloutBatch(step=0)" in b.summary()


def test_advantage_replay_has_no_side_effects(trainer):
    b = trainer.rollout()
    b.rewards = (torch.arange(len(b)) % 3 == 0).float()  # batches are plain, editable objects
    b.rewards[:4] = 1.0  # group 0: all correct, no signal
    before = (b.rewards.clone(), b.sample_mask.clone(), b.prev_logprobs.clone())
    a1 = trainer.compute_advantages(b)
    a_rpp = trainer.compute_advantages(b, {"name": "reinforce_plus_plus"})
    a2 = trainer.compute_advantages(b)
    assert isinstance(a1, AdvantageBatch) and a_rpp.estimator == "reinforce_plus_plus"
    torch.testing.assert_close(a1.advantages, a2.advantages)
    assert not torch.equal(a1.advantages, a_rpp.advantages)
    for x, y in zip(before, (b.rewards, b.sample_mask, b.prev_logprobs)):
        assert torch.equal(x, y)
    # GRPO: every row's advantage is constant over its tokens and zero-signal groups get 0
    seq = a1.sequence_advantages()
    for g in b.zero_signal_groups():
        assert (seq[b.group == g] == 0).all()


@pytest.mark.smoke
def test_dry_run_changes_nothing_and_update_changes_every_parameter(trainer):
    b = trainer.rollout()
    a = trainer.compute_advantages(b)
    a.advantages = torch.randn(len(b), 1).expand_as(a.advantages).contiguous()  # a real signal
    p0 = params(trainer.policy.model)
    opt0 = len(trainer.policy.optimizer.state)
    dry = trainer.update(a, dry_run=True)
    assert dry.dry_run and trainer.step_count == 0 and len(trainer.policy.optimizer.state) == opt0
    assert all(torch.equal(p0[k], v) for k, v in params(trainer.policy.model).items())
    res = trainer.update(a)
    assert trainer.step_count == 1
    assert math.isfinite(res.metrics["train/loss"]) and res.metrics["train/grad_norm"] > 0
    changed = [k for k, v in params(trainer.policy.model).items() if not torch.equal(p0[k], v)]
    assert sorted(changed) == sorted(p0)  # every parameter moved
    assert dry.metrics["train/loss"] == pytest.approx(res.metrics["train/loss"], rel=1e-5)
    # the reference stayed where it was
    ref = dict(trainer.policy.reference_model.named_parameters())
    assert all(torch.equal(p0[k], ref[k]) for k in p0)


def test_micro_batches_accumulate_to_the_full_batch_gradient():
    torch.manual_seed(0)
    cfgs = [PolicyConfig(tiny={"hidden_size": 32, "num_hidden_layers": 1},
                         train_global_batch_size=8, train_micro_batch_size=m) for m in (8, 3)]
    pols = [Policy(c, seed=1) for c in cfgs]
    B, S = 8, 10
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 90, (B, S), generator=g)
    tm = torch.zeros(B, S)
    tm[:, 4:] = 1
    tm[2, 7:] = 0
    data = {"input_ids": ids, "attention_mask": torch.ones(B, S, dtype=torch.long),
            "token_mask": tm, "sample_mask": torch.ones(B),
            "advantages": torch.randn(B, 1, generator=g).expand(B, S).contiguous()}
    lp = pols[0].logprobs(ids, data["attention_mask"])
    data.update(prev_logprobs=lp, generation_logprobs=lp)
    from rlnb.algorithms.policy_loss import ClippedPGLossFn

    loss_fn = ClippedPGLossFn({"reference_policy_kl_penalty": 0.0})
    m_full = pols[0].optimizer_step(data, loss_fn)
    m_micro = pols[1].optimizer_step(data, loss_fn)
    assert m_full["loss"] == pytest.approx(m_micro["loss"], rel=1e-5)
    assert m_full["grad_norm"] == pytest.approx(m_micro["grad_norm"], rel=1e-4)
    for (k, a), b in zip(pols[0].model.named_parameters(), pols[1].model.parameters()):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5, msg=k)


def test_training_steps_yield_metrics_with_spec_names():
    t = GRPOTrainer(load_config(None, SMALL + ["grpo.val_period=2"]))
    steps = list(t.train(2))
    # val_at_start: a validation-only record for step 0 comes first (nothing trained yet)
    assert [(m["step"], m.trained) for m in steps] == [(0, False), (1, True), (2, True)]
    assert set(steps[0]) == {"step", "validation/accuracy", "validation/reward",
                             "validation/avg_length"}
    assert steps[1].result.step == 1 and steps[1].rollout.step == 0  # the batches ride along
    m = steps[-1]
    for key in ("train/reward", "train/loss", "train/probs_ratio", "train/approx_entropy",
                "train/kl_penalty", "train/grad_norm", "train/advantages/mean",
                "train/baseline_reward/pct_mixed", "timing/train/generation",
                "timing/train/policy_training", "timing/train/total_step_time",
                "validation/accuracy", "validation/avg_length"):
        assert key in m, key
    assert all(math.isfinite(v) for k, v in m.items() if not k.endswith(("_min", "_max")))


def test_same_seed_same_metrics_on_cpu():
    runs = []
    for _ in range(2):
        t = GRPOTrainer(load_config(None, SMALL))
        runs.append([{k: v for k, v in m.items() if not k.startswith(("timing/", "memory/"))} for m in t.train(2)])
    assert runs[0] == runs[1]


def test_config_overrides_and_unknown_keys():
    cfg = load_config("configs/tiny.yaml", ["loss_fn.ratio_clip_max=0.28", "grpo.seed=3"])
    assert cfg.loss_fn.ratio_clip_max == 0.28 and cfg.grpo.seed == 3
    # the embedded recipe's group baseline (TRL's); NeMo-RL's top-level name sets the estimator's
    assert cfg.grpo.adv_estimator.use_leave_one_out_baseline is False
    back = load_config("configs/tiny.yaml", ["grpo.use_leave_one_out_baseline=true"])
    assert back.grpo.adv_estimator.use_leave_one_out_baseline and back.grpo.leave_one_out
    with pytest.raises(ValueError, match=r"loss_fn\.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'"):
        load_config(None, ["loss_fn.ratio_clip_mx=0.3"])
    with pytest.raises(ValueError, match=r"polcy: unknown section; did you mean 'policy'"):
        load_config(None, ["polcy.model_name=x"])
    with pytest.raises(ValueError, match=r"grpo\.num_prompts_per_step"):
        load_config(None, ["grpo.num_prompts_per_step=0"])
    with pytest.raises(ValueError, match="dotted.key=value"):
        load_config(None, ["grpo.seed"])


def test_bad_model_path_and_long_prompt_and_nan_reward(tmp_path):
    with pytest.raises(ValueError, match=r"policy.model_name: no model folder at"):
        GRPOTrainer(load_config(None, [f"policy.model_name={tmp_path / 'nope'}"]))
    t = GRPOTrainer(load_config(None, SMALL + ["policy.max_total_sequence_length=8"]))
    with pytest.raises(ValueError, match=r"prompt 0 is \d+ tokens, longer than the maximum 4"):
        t.rollout()
    t = GRPOTrainer(load_config(None, SMALL))
    t.task.score = lambda prompts, responses, rows: type(t.task).score(t.task, prompts, responses, rows).__class__(
        total=torch.full((len(prompts),), float("nan")), components={}, correct=torch.zeros(len(prompts), dtype=torch.bool))
    with pytest.raises(ValueError, match=r"row 0"):
        t.rollout()


def test_dynamic_sampling_fills_the_batch_with_rows_that_carry_signal():
    from rlnb.engine.environments.base import Rewards

    t = GRPOTrainer(load_config(None, SMALL + ["grpo.use_dynamic_sampling=true",
                                               "grpo.use_leave_one_out_baseline=false"]))
    calls = []

    def score(prompts, responses, rows):  # group k of call c: all-equal when (k + c) is even
        c = len(calls)
        calls.append(c)
        r = torch.tensor([float((i // 4 + c) % 2 and i % 2) for i in range(len(prompts))])
        return Rewards(total=r, components={}, correct=r > 0)

    t.task.score = score
    b = t.rollout()
    assert len(b) == 16 and len(calls) >= 2  # needed a second generation batch
    assert not b.zero_signal_groups()
    assert b.metrics["train/dynamic_sampling_num_gen_batches"] == len(calls)
    # all-equal rewards everywhere: no signal, give up after max_gen_batches with a clear error
    t2 = GRPOTrainer(load_config(None, SMALL + ["grpo.use_dynamic_sampling=true",
                                                "grpo.dynamic_sampling_max_gen_batches=2"]))
    with pytest.raises(ValueError, match="generation batches"):
        t2.rollout()


def test_reuse_generation_logprobs_skips_the_second_forward_and_trains_the_same():
    """grpo.reuse_generation_logprobs: prev_logprobs are the generator's own (no second
    forward), within rounding of a training forward, and the trained weights follow."""
    extra = ["policy.train_global_batch_size=8"]  # 2 optimizer steps per batch: the ratio moves
    base = GRPOTrainer(load_config(None, SMALL + extra + ["grpo.reuse_generation_logprobs=false"]))
    reuse = GRPOTrainer(load_config(None, SMALL + extra + ["grpo.reuse_generation_logprobs=true"]))
    calls = []
    original = reuse.policy.logprobs
    reuse.policy.logprobs = lambda *a, **k: calls.append(1) or original(*a, **k)
    b = reuse.rollout()
    assert calls == []  # no log-prob forward in the rollout
    assert torch.equal(b.prev_logprobs, b.generation_logprobs * b.token_mask)
    fresh = original(b.input_ids, b.attention_mask) * b.token_mask
    assert (fresh - b.prev_logprobs).abs().max() < 1e-4
    for _ in range(2):
        m_base, m_reuse = base.step(), reuse.step()
        assert m_reuse["train/loss"] == pytest.approx(m_base["train/loss"], abs=1e-4)
        assert m_reuse["train/reward"] == m_base["train/reward"]  # same samples
    for (n, p), q in zip(base.policy.model.named_parameters(), reuse.policy.model.parameters()):
        assert torch.allclose(p, q, atol=1e-4), n
