"""PPO with a value model: each stage on hand-made tensors and on the tiny model, critic warm-up,
ppo_epochs, exact resume, 2 ranks, configs and bad input, metrics docs, NeMo-RL's names, widgets."""

import json
import math
import re

import pytest
import torch
from launching import launch
from paths import ROOT
from tiny_config import with_rewards

from rlnb.engine.data.batches import RolloutBatch
from rlnb.engine.models.policy import Policy
from rlnb.engine.models.policy_config import PolicyConfig
from rlnb.engine.models.value import ValueConfig, ValueModel, value_body
from rlnb.engine.trainers.loops import make_trainer
from rlnb.engine.trainers.ppo import PPOAdvantageBatch, PPOTrainer
from rlnb.run.config.master_config import load_config
from rlnb.run.training.session import TrainingRun

PPO = "configs/ppo_tiny.yaml"
# with preset="fast"; no critic warm-up unless a test asks for one
SMALL = ["sft.enabled=false", "ppo.val_period=0", "data.num_val=16",
         "ppo.policy_training_start_step=0"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def config(*extra):
    return load_config(PPO, [*SMALL, *extra], preset="fast")


def trainer(*extra) -> PPOTrainer:
    return PPOTrainer(config(*extra))


def params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def moved(before, model):
    return sorted(k for k, v in model.named_parameters() if not torch.equal(before[k], v))


# ---------------------------------------------------------------- stage 3 on hand-made tensors
def hand_batch() -> RolloutBatch:
    """Two rows, S = 5: row 0 = 2 prompt tokens then 3 generated; row 1 = a multi-turn row whose
    generated tokens (1 and 3) are separated by an environment token (2)."""
    tm = torch.tensor([[0, 0, 1, 1, 1], [0, 1, 0, 1, 0]], dtype=torch.float32)
    z = torch.zeros(2, 5)
    return RolloutBatch(
        step=0, rows=[{}, {}], prompts=["a", "b"], responses=["x", "y"], group=torch.arange(2),
        prompt_ids=torch.tensor([[5, 6], [0, 7]]), input_ids=torch.full((2, 5), 9),
        attention_mask=torch.ones(2, 5, dtype=torch.long), token_mask=tm,
        sample_mask=torch.ones(2), generation_logprobs=z, prev_logprobs=z,
        reference_logprobs=None, rewards=torch.tensor([1.0, 1.0]), reward_components={},
        correct=torch.tensor([True, True]), truncated=torch.tensor([False, False]),
        response_lengths=torch.tensor([3, 2]))


# values in the stored layout: V_t = value before token t, V_0 = 0
HAND_VALUES = torch.tensor([[0.0, 0.5, 0.2, 0.4, 0.8], [0.0, 0.3, 0.9, 0.6, 0.7]])


def test_gae_with_a_value_bootstrap_by_hand():
    """γ = 1, λ = 0.5, no whitening. Row 0, right to left (δ_t = R_t + V_next - V_t):
    t=4: δ = 1 - 0.8 = 0.2, A = 0.2;  t=3: δ = 0.8 - 0.4 = 0.4, A = 0.4 + 0.5·0.2 = 0.5;
    t=2: δ = 0.4 - 0.2 = 0.2, A = 0.2 + 0.5·0.5 = 0.45; prompt tokens carry A = 0.45 (masked to 0
    in the advantages, kept in returns = A + V). Row 1 (reward at t=3, the last generated token):
    t=4 masked: A = 0; t=3: δ = 1 - 0.6 = 0.4, A = 0.4; t=2 masked: skipped (A stays 0.4, the
    bootstrap stays V_3 = 0.6); t=1: δ = 0.6 - 0.3 = 0.3, A = 0.3 + 0.5·0.4 = 0.5; t=0: 0.5."""
    t = trainer()
    b = hand_batch()
    a = t.compute_advantages(b, HAND_VALUES, {"gae_lambda": 0.5, "normalize_advantages": False})
    assert isinstance(a, PPOAdvantageBatch) and a.estimator == "gae"
    torch.testing.assert_close(a.advantages, torch.tensor([[0, 0, 0.45, 0.5, 0.2],
                                                           [0, 0.5, 0, 0.4, 0]]))
    torch.testing.assert_close(a.returns, torch.tensor([[0.45, 0.95, 0.65, 0.9, 1.0],
                                                        [0.5, 0.8, 1.3, 1.0, 0.7]]))
    # the prompt's value (V at the first generated token) is PPO's baseline
    torch.testing.assert_close(a.baseline, torch.tensor([0.2, 0.3]))
    # λ = 1 (same frozen batch): A_t = r - V_t on generated tokens, returns = r there
    a1 = t.compute_advantages(b, HAND_VALUES, {"gae_lambda": 1.0, "normalize_advantages": False})
    torch.testing.assert_close(a1.advantages, torch.tensor([[0, 0, 0.8, 0.6, 0.2],
                                                            [0, 0.7, 0, 0.4, 0]]))
    assert a1.returns[0, 2:].tolist() == pytest.approx([1, 1, 1])
    # whitened (the default): mean 0 and unit Bessel std over the 5 generated tokens
    w = t.compute_advantages(b, HAND_VALUES, {"gae_lambda": 0.5})
    valid = w.advantages[b.token_mask > 0]
    assert float(valid.mean()) == pytest.approx(0, abs=1e-6)
    assert float(valid.std()) == pytest.approx(1, abs=1e-4)
    assert w.metrics["train/returns/max"] == pytest.approx(1.0)
    assert w.metrics["train/returns/min"] == pytest.approx(0.65)


def test_raw_reward_ignores_the_values_and_the_critic_learns_the_monte_carlo_return():
    t = trainer()
    b = hand_batch()
    b.rewards = torch.tensor([1.0, 0.0])
    a = t.compute_advantages(b, HAND_VALUES, {"name": "raw_reward", "normalize_advantages": False})
    assert a.estimator == "raw_reward"
    torch.testing.assert_close(a.advantages, torch.tensor([[1.0] * 5, [0.0] * 5]))
    # returns = GAE's with λ = 1: the reward to go (r on every generated token)
    assert a.returns[0, 2:].tolist() == pytest.approx([1, 1, 1])
    assert a.returns[1, 1].item() == pytest.approx(0) and a.returns[1, 3].item() == pytest.approx(0)


def test_filters_feed_the_mask_and_an_empty_mask_is_refused():
    t = trainer("ppo.overlong_filtering=true")
    b = hand_batch()
    b.truncated = torch.tensor([True, False])
    a = t.compute_advantages(b, HAND_VALUES)
    assert a.sample_mask.tolist() == [0.0, 1.0] and (a.advantages[0] == 0).all()
    b.truncated = torch.tensor([True, True])
    with pytest.raises(ValueError, match="no valid response tokens"):
        t.compute_advantages(b, HAND_VALUES)


# ---------------------------------------------------------------- the stages on the tiny model
def test_values_are_the_right_shifted_head_output_of_a_copy_of_the_policy():
    t = with_rewards(trainer())
    b = t.rollout()
    body, _ = value_body(t.policy.model)
    v = t.compute_values(b)
    assert v.shape == b.input_ids.shape and (v == 0).all()  # the head starts at zero
    critic = t.critic
    copied = dict(critic.model.body.named_parameters())
    for k, p in body.named_parameters():  # initialised from the policy's weights, not shared
        assert torch.equal(p, copied[k]) and p.data_ptr() != copied[k].data_ptr(), k
    torch.nn.init.normal_(critic.model.head.weight, std=0.1)
    v = t.compute_values(b)
    from rlnb.engine.models.policy import position_ids_from_mask

    with torch.no_grad():
        out = critic.model(b.input_ids, b.attention_mask, position_ids_from_mask(b.attention_mask))
    assert (v[:, 0] == 0).all()  # V_0 = 0
    torch.testing.assert_close(v[:, 1:], out[:, :-1])  # V_t = head output at t - 1
    with pytest.raises(TypeError, match="no log-probs"):
        critic.logprobs(b.input_ids, b.attention_mask)


def test_advantages_have_no_side_effects_and_lambda_replays_on_the_frozen_batch():
    t = with_rewards(trainer())
    b = t.rollout()
    v = t.compute_values(b) + torch.linspace(0, 0.5, b.input_ids.shape[1])  # some bootstrap
    before = (b.rewards.clone(), b.sample_mask.clone(), v.clone())
    a1 = t.compute_advantages(b, v)
    a_low = t.compute_advantages(b, v, {"gae_lambda": 0.0})
    a2 = t.compute_advantages(b, v)
    torch.testing.assert_close(a1.advantages, a2.advantages)
    assert not torch.allclose(a1.advantages, a_low.advantages)
    for x, y in zip(before, (b.rewards, b.sample_mask, v)):
        assert torch.equal(x, y)
    assert t.config.ppo.adv_estimator.gae_lambda == 0.95  # the config is untouched
    frame = a1.to_frame()
    assert {"value", "return", "advantage", "kept"} <= set(frame.columns)
    assert "PPOAdvantageBatch(gae" in repr(a1)
    with pytest.raises(ValueError, match=r"ppo\.adv_estimator\.name: 'grpo' is an estimator of GRPO's loop"):
        t.compute_advantages(b, v, {"name": "grpo"})


@pytest.mark.smoke
def test_dry_runs_change_nothing_and_update_trains_critic_and_policy():
    t = with_rewards(trainer())
    b = t.rollout()
    a = t.compute_advantages(b, t.compute_values(b))
    p0, c0 = params(t.policy.model), params(t.critic.model)
    for dry in (t.update_critic(a, dry_run=True), t.update_policy(a, dry_run=True),
                t.update(a, dry_run=True)):
        assert dry.dry_run and t.step_count == 0
    assert moved(p0, t.policy.model) == moved(c0, t.critic.model) == []
    assert len(t.policy.optimizer.state) == len(t.critic.optimizer.state) == 0
    r = t.update(a)
    assert t.step_count == 1 and r.step == 1
    assert math.isfinite(r.metrics["critic/loss"]) and math.isfinite(r.metrics["train/loss"])
    assert r.metrics["critic/loss"] > 0 and r.metrics["critic/grad_norm"] > 0
    assert moved(c0, t.critic.model) == sorted(c0)  # every critic parameter moved
    assert moved(p0, t.policy.model) == sorted(p0)  # and every policy parameter
    assert "critic/loss" in r.summary() and "probs_ratio" in r.summary()


def test_ppo_epochs_passes_over_one_batch():
    """ppo_epochs = 3 with one global batch per pass: 3 optimizer steps each, critic first."""
    t = with_rewards(trainer("ppo.ppo_epochs=3"))
    order = []
    for name in ("update_critic", "_policy_pass"):
        original = getattr(t, name)
        setattr(t, name, lambda *a, _f=original, _n=name, **k: order.append(_n) or _f(*a, **k))
    m = t.step()
    assert order == ["update_critic", "_policy_pass"] * 3
    steps = [s["step"] for s in t.policy.optimizer.state.values()]
    assert steps and all(int(s) == 3 for s in steps)
    assert all(int(s["step"]) == 3 for s in t.critic.optimizer.state.values())
    # the same batch each pass: the ratio is 1 in the first pass only, and the logged metrics
    # are the last pass's (NeMo-RL's)
    assert m["train/probs_ratio"] != pytest.approx(1.0, abs=1e-7)
    assert m["critic/loss"] < m["critic/loss"] + 1 and "critic/explained_var_before_update" in m


def test_critic_warm_up_trains_only_the_critic_before_policy_training_start_step():
    t = with_rewards(trainer("ppo.policy_training_start_step=2", "ppo.max_num_steps=10"))
    p0, c0 = params(t.policy.model), params(t.critic.model)
    steps = list(t.train(2))
    assert moved(p0, t.policy.model) == []  # steps 1 and 2: the policy never moved
    assert moved(c0, t.critic.model) == sorted(c0)  # the critic trained from the start
    assert all("train/loss" not in m and "critic/loss" in m for m in steps)
    assert t.state()["total_valid_tokens"] == 0
    m = next(iter(t.train(1)))
    assert moved(p0, t.policy.model) == sorted(p0) and "train/loss" in m
    assert t.step_count == 3 and t.state()["total_valid_tokens"] > 0


def test_step_metrics_timings_and_same_seed_same_metrics():
    runs = []
    for _ in range(2):
        t = with_rewards(trainer())
        runs.append([{k: v for k, v in m.items() if not k.startswith("timing/")}
                     for m in t.train(2)])
    assert runs[0] == runs[1]
    m = next(iter(with_rewards(trainer()).train(1)))
    for key in ("train/reward", "train/loss", "critic/loss", "critic/explained_var",
                "critic/values_mean", "critic/returns_mean", "critic/vf_clipfrac",
                "train/advantages/mean", "train/returns/mean", "timing/train/value_inference",
                "timing/train/value_training", "timing/train/policy_training",
                "timing/train/total_step_time"):
        assert key in m, key
    # explained variance from the aggregated moments (spec formula)
    ev = 1 - (m["critic/residual_sq_mean"] - (m["critic/returns_mean"] - m["critic/values_mean"]) ** 2) / max(
        m["critic/returns_sq_mean"] - m["critic/returns_mean"] ** 2, 1e-8)
    assert m["critic/explained_var"] == pytest.approx(ev)


def test_value_model_for_another_causal_lm_architecture():
    """Nothing is Llama-specific: a GPT-2 body gets a head too."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from rlnb.engine.models.tiny import build_char_tokenizer

    tok = build_char_tokenizer()
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=16, n_layer=1, n_head=2,
                                      n_positions=32))
    policy = Policy(PolicyConfig(), model=gpt2, tokenizer=tok)
    critic = ValueModel(ValueConfig(init_from_policy=False), policy, seed=1)
    ids = torch.randint(4, 50, (3, 7))
    assert critic.values(ids, torch.ones(3, 7, dtype=torch.long)).shape == (3, 7)
    assert type(critic.model.body).__name__ == "GPT2Model"


def test_a_policy_without_a_separate_body_is_refused_naming_value():
    cfg = config()
    policy = Policy(cfg.policy, seed=0)
    policy.model.base_model_prefix = "no_such_body"  # base_model is then the model itself
    with pytest.raises(ValueError, match=r"^value: cannot build a value model from the policy's LlamaForCausalLM"):
        PPOTrainer(cfg, policy=policy)


# ---------------------------------------------------------------- configs and bad input
@pytest.mark.parametrize("override, message", [
    ("ppo.ppo_epochs=0", r"ppo\.ppo_epochs: Input should be greater than or equal to 1"),
    ("ppo.adv_estimator.name=grpo",
     r"ppo\.adv_estimator\.name: 'grpo' is an estimator of GRPO's loop; PPO's loop takes 'gae', "
     r"'raw_reward'"),
    ("ppo.policy_training_start_step=1500", r"ppo\.policy_training_start_step=1500 is beyond ppo\.max_num_steps=1000"),
    ("loss_fn.reference_policy_kl_penalty=0.01", r"ppo\.skip_reference_policy_logprobs_calculation=true keeps no reference policy, but loss_fn\.reference_policy_kl_penalty=0\.01 needs one"),
    ("grpo.seed=1", r"grpo: a section of algorithm 'grpo', but algorithm is 'ppo'"),
    ("value.model_name=gpt2", r"value\.model_name='gpt2': rlnb builds the critic from the policy"),
    ("ppo.max_num_epochs=3", r"ppo\.max_num_epochs=3: rlnb's tasks stream rows"),
    ("ppo.val_batch_size=8", r"ppo\.val_batch_size=8 < ppo\.max_val_samples=200"),
    ("ppo.ppo_epoch=2", r"ppo\.ppo_epoch: unknown key"),
    ("value_loss_fn.clip=0.2", r"value_loss_fn\.clip: unknown key"),
])
def test_bad_ppo_configs_fail_at_load_with_the_key(override, message):
    extra = ["ppo.max_num_steps=1000"] if "start_step" in override else []
    with pytest.raises(ValueError, match=message):
        load_config(PPO, [override, *extra])


def test_ppo_sections_under_grpo_are_refused_and_grpo_configs_dump_as_before():
    with pytest.raises(ValueError, match=r"ppo: a section of algorithm 'ppo', but algorithm is 'grpo'"):
        load_config(None, ["ppo.ppo_epochs=2"])
    with pytest.raises(ValueError, match=r"use_kl_in_reward=true needs an estimator that puts the "
                                         r"KL into the reward .* not ppo\.adv_estimator\.name="
                                         r"'raw_reward'"):
        load_config(PPO, ["loss_fn.use_kl_in_reward=true", "loss_fn.reference_policy_kl_penalty=0.1",
                          "ppo.skip_reference_policy_logprobs_calculation=false",
                          "ppo.adv_estimator.name=raw_reward"])
    grpo = load_config(None).model_dump(mode="json")
    assert list(grpo) == ["policy", "loss_fn", "grpo", "sft", "data", "env", "logger",
                          "checkpointing", "cluster"]  # no algorithm, no PPO sections
    ppo = load_config(PPO)
    dumped = ppo.model_dump(mode="json")
    assert dumped["algorithm"] == "ppo" and "grpo" not in dumped and ppo.grpo is None
    assert load_config(dumped) == ppo  # a written config.yaml loads back the same
    # the fast preset shrinks whichever loop the config names
    assert config().ppo.num_prompts_per_step == 4


def test_a_grpo_config_is_refused_by_the_ppo_trainer():
    with pytest.raises(ValueError, match="PPOTrainer needs a config with algorithm: ppo"):
        PPOTrainer(load_config(None, preset="fast"))


def test_reconfigure_reaches_the_critic_and_the_loop():
    t = trainer()
    changed = t.reconfigure({"value.optimizer.lr": 0.01, "ppo.ppo_epochs": 2})
    assert changed["value.optimizer.lr"][1] == 0.01 and t.config.ppo.ppo_epochs == 2
    assert all(g["lr"] == 0.01 for g in t.critic.optimizer.param_groups)
    with pytest.raises(ValueError, match="grpo: a section of algorithm 'grpo'"):
        t.reconfigure({"grpo.adv_estimator.name": "grpo"})


def test_dynamic_sampling_works_for_ppo():
    t = with_rewards(trainer("ppo.use_dynamic_sampling=true"), pattern=(1.0, 0.0))
    b = t.rollout()
    assert len(b) == 16 and not b.zero_signal_groups()
    assert b.metrics["train/dynamic_sampling_num_gen_batches"] == 1


# ---------------------------------------------------------------- runs: resume, CLI, 2 ranks
RUN = [*SMALL, "ppo.val_period=2", "ppo.max_num_steps=4", "checkpointing.enabled=true",
       "checkpointing.save_period=2", "sft.enabled=true", "sft.max_steps=20",
       "sft.stop_at_accuracy=null"]


def comparable(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in rows]


def test_a_resumed_ppo_run_repeats_the_uninterrupted_run_exactly(tmp_path):
    kw = dict(preset="fast", progress=False, log=lambda *a: None)
    full = TrainingRun(PPO, overrides=RUN, run_dir=tmp_path / "full", **kw)
    assert isinstance(full.trainer, PPOTrainer)
    full.train(4)
    TrainingRun(PPO, overrides=RUN, run_dir=tmp_path / "cut", **kw).train(2)
    ckpt = tmp_path / "cut" / "checkpoints" / "step_000002"
    assert (ckpt / "value" / "model.safetensors").exists() and (ckpt / "value_optimizer.pt").exists()
    resumed = TrainingRun(PPO, overrides=RUN, run_dir=tmp_path / "cut", resume=True, **kw)
    assert resumed.trainer.step_count == 2
    resumed.train(2)
    a, b = comparable(tmp_path / "full" / "metrics.jsonl"), comparable(tmp_path / "cut" / "metrics.jsonl")
    assert [r["step"] for r in a] == [0, 1, 2, 3, 4] and "critic/loss" in a[-1]
    assert a == b  # every metric, bit for bit
    for (k, p), q in zip(full.trainer.critic.model.named_parameters(),
                         resumed.trainer.critic.model.parameters()):
        assert torch.equal(p, q), k
    state = json.loads((tmp_path / "cut" / "checkpoints" / "step_000004" / "trainer_state.json").read_text())
    assert set(state) >= {"consumed_samples", "current_step", "current_epoch", "total_steps",
                          "total_valid_tokens", "val_reward"}
    from rlnb.run.training.verify import verify_run  # `rlnb verify` replays a PPO run too

    report = verify_run(tmp_path / "full", 2, log=lambda *a: None)
    assert report.exact and report.weights_checked
    # made to differ in the critic only: the replay must compare the value model's weights too
    from safetensors.torch import load_file, save_file

    saved = tmp_path / "full" / "checkpoints" / "step_000004" / "value" / "model.safetensors"
    weights = load_file(saved)
    name = sorted(weights)[-1]
    weights[name] = weights[name] + 1e-6
    save_file(weights, saved)
    report = verify_run(tmp_path / "full", 2, log=lambda *a: None)
    assert not report.exact
    assert report.first_difference == f"step 4, value weights: 1 tensors differ (e.g. {name})"


def test_rlnb_train_picks_the_loop_from_the_config(tmp_path, capsys):
    from rlnb.cli import main

    code = main(["train", PPO, *SMALL, "policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
                 "ppo.num_prompts_per_step=4", "ppo.num_generations_per_prompt=4",
                 "policy.train_global_batch_size=16", "checkpointing.enabled=false",
                 "--run-dir", str(tmp_path / "run"), "--steps", "1", "--no-progress"])
    assert code == 0, capsys.readouterr().err
    metrics = comparable(tmp_path / "run" / "metrics.jsonl")
    assert "critic/explained_var" in metrics[-1]
    assert make_trainer(config()).__class__ is PPOTrainer


@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_end_with_identical_policy_and_critic_weights(tmp_path):
    from paths import ROOT, SUPPORT

    out = tmp_path / "out"
    proc = launch([str(SUPPORT / "dist_ppo_script.py"), str(out), "2"], ROOT, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-4000:]
    infos = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    w = [torch.load(out / f"rank{r}.pt") for r in (0, 1)]
    assert sorted(i["rank"] for i in infos) == [0, 1] and all(i["torch_world_size"] == 2 for i in infos)
    for step in range(2):  # each rank trained on its own half of the prompts
        assert not set(infos[0]["prompts"][step]) & set(infos[1]["prompts"][step])
    final0, final1 = w[0]["final"], w[1]["final"]
    assert any(k.startswith("critic.") for k in final0) and any(k.startswith("policy.") for k in final0)
    for k in final0:
        assert torch.equal(final0[k], final1[k]), k
        assert torch.equal(w[0]["start"][k], w[1]["start"][k]), k
    critic_moved = [k for k in final0 if k.startswith("critic.") and not torch.equal(final0[k], w[0]["start"][k])]
    policy_moved = [k for k in final0 if k.startswith("policy.") and not torch.equal(final0[k], w[0]["start"][k])]
    assert critic_moved and policy_moved
    for m0, m1 in zip(infos[0]["metrics"], infos[1]["metrics"]):
        for key in ("train/loss", "critic/loss", "critic/explained_var", "train/global_valid_toks"):
            assert m0[key] == pytest.approx(m1[key], rel=1e-6), key


# ---------------------------------------------------------------- docs, NeMo-RL names, widgets
def test_every_ppo_metric_has_a_row_in_docs_metrics():
    from metrics_doc import is_documented

    t = with_rewards(trainer("ppo.val_period=1", "ppo.val_num_generations_per_prompt=2",
                             "ppo.policy_training_start_step=1", "ppo.max_num_steps=4",
                             "ppo.seq_logprob_error_threshold=2.0"))
    keys = set()
    for m in t.train(2):  # a warm-up step (critic only), then a full step
        keys |= set(m)
    assert "train/loss" in keys and "critic/explained_var_before_update" in keys
    missing = sorted(k for k in keys if k != "step" and not is_documented(k)
                     and not (k.startswith("train/") and is_documented(k.removeprefix("train/"))))
    assert not missing, f"metrics without a row in docs/metrics.md: {missing}"

    doc = (ROOT / "docs" / "metrics.md").read_text()
    critic_rows = set(re.findall(r"^\| `(critic/[^`]+)` \|", doc, flags=re.MULTILINE))
    assert {k for k in keys if k.startswith("critic/")} == critic_rows  # nothing listed unused


def test_nemo_ppo_names_drive_the_trainer(tmp_path):
    from rlnb.nemo import ppo as nemo_ppo

    assert nemo_ppo.PPOConfig is type(config().ppo)
    parts = nemo_ppo.setup(load_config(PPO, [*SMALL, "checkpointing.enabled=false"], preset="fast"),
                           run_dir=tmp_path / "run")
    assert isinstance(parts.trainer, PPOTrainer) and parts.value_model is parts.trainer.critic
    assert set(parts.ppo_save_state) == set(nemo_ppo.PPOSaveState.__annotations__)
    summary = nemo_ppo.ppo_train(parts, 1)
    assert summary["steps"] == 1 and "validation/accuracy" in nemo_ppo.validate(parts)
    est = nemo_ppo._create_advantage_estimator(parts.master_config)
    assert type(est).__name__ == "GeneralizedAdvantageEstimator"
    with pytest.raises(ValueError, match="group estimator"):
        nemo_ppo._create_advantage_estimator({"ppo": {"adv_estimator": {"name": "grpo"}}, "loss_fn": {}})
    with pytest.raises(ValueError, match="algorithm"):
        nemo_ppo.setup(load_config(None, preset="fast"), run_dir=tmp_path / "grpo")


def test_dashboard_and_stepper_follow_the_ppo_loop(monkeypatch):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    monkeypatch.setenv("RLNB_HEADLESS", "1")
    from rlnb.widgets import Dashboard, StageStepper

    t = with_rewards(trainer())
    dash = Dashboard(t)
    keys = dash.plotted_keys()
    assert "critic/loss" in keys and "critic/explained_var" in keys and "train/kl_penalty" in keys
    assert "has no row" not in dash.cards_html()
    stepper = StageStepper(t, dash)
    assert [b for b in stepper.stages] == ["Rollout", "Values", "Advantages", "Update"]
    for stage in ("Rollout", "Values", "Advantages", "Update"):
        assert stepper.next_stage == stage
        stepper.press(stage)
        assert "Error" not in stepper.view.value, stepper.view.value
    assert t.step_count == 1 and dash.history[-1]["step"] == 1
    assert "critic/explained_var" in dash.history[-1]
    stepper.press("Advantages")  # the batch has been trained on: refused, shown in the widget
    assert "run Rollout first" in stepper.view.value
    stepper.press("Step")
    assert t.step_count == 2
    dash.run(1)
    assert t.step_count == 3 and len(dash.columns["critic/loss"][0]) == 3
    # the explained-variance subplot keeps a [-1, 1] axis however far one batch's EV falls
    ev_trace = dash.fig.data[dash._index[("critic/explained_var", "line")]]
    ev_axis = dash.fig.layout["yaxis" + ev_trace.yaxis.removeprefix("y")]
    assert tuple(ev_axis.range) == (-1.0, 1.0) and ev_axis.autorange is False
    loss_trace = dash.fig.data[dash._index[("critic/loss", "line")]]
    assert dash.fig.layout["yaxis" + loss_trace.yaxis.removeprefix("y")].range is None
