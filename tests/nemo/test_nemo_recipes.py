"""Keys of NeMo-RL's newer recipes, read with NeMo-RL's meaning: LoRA under ``dtensor_cfg``, a
warm-up followed by a linear decay, the single-controller loop's samplers, NeMo-Gym's switches,
``max_val_samples: null``, a list of one data set, CISPO's lower clip of 1 (NeMo-shaped YAMLs
written here; the tests cannot fetch NeMo-RL)."""

import pytest
import torch
from nemo_shaped_configs import (  # noqa: F401 (offline: an autouse fixture)
    dpo_shaped,
    grpo_shaped,
    load_written,
    nemo_assets,
    offline,
)
from tiny_config import with_rewards

import rlnb
from rlnb.engine.models.policy_config import OptimizerConfig
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.nemo.translate import resolved, translate


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return nemo_assets(tmp_path_factory.mktemp("nemo_recipes"))


load = load_written


def translated(cfg):
    return translate(resolved(cfg))


def with_lora(assets, **lora):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["policy"]["dtensor_cfg"]["lora_cfg"] = {"enabled": True, "dim": 4, "alpha": 8, **lora}
    return cfg


# ------------------------------------------------------------------------------------ LoRA
@pytest.mark.parametrize("lora, want", [
    # NeMo-RL's default: every linear layer (the lists have no effect), A drawn Xavier-normal
    ({"match_all_linear": True, "target_modules": [], "exclude_modules": []},
     {"match_all_linear": True, "target_modules": [], "exclude_modules": [],
      "lora_A_init": "xavier"}),
    ({"match_all_linear": False, "target_modules": ["q_proj", "v_proj"]},
     {"match_all_linear": False, "target_modules": ["q_proj", "v_proj"], "exclude_modules": []}),
    # Automodel: no targets but exclusions = every linear layer but those
    ({"match_all_linear": False, "exclude_modules": ["*out_proj*"]},
     {"match_all_linear": True, "exclude_modules": ["*out_proj*"]}),
    # Automodel: nothing named = '*_proj'
    ({"match_all_linear": False}, {"match_all_linear": False, "target_modules": ["*_proj"]}),
    ({"lora_A_init": "uniform"}, {"lora_A_init": "kaiming"}),
])
def test_lora_cfg_is_policy_lora_with_automodels_choice_of_modules(assets, lora, want):
    c = load(assets, with_lora(assets, **lora)).policy.lora
    assert c.enabled and (c.dim, c.alpha) == (4, 8.0)
    for key, value in want.items():
        assert getattr(c, key) == value, key


def test_lora_module_lists_beside_match_all_linear_are_listed_as_without_effect(assets):
    t = translated(with_lora(assets, match_all_linear=True, target_modules=["q_proj"]))
    assert "adapts every linear layer" in t.ignored["policy.dtensor_cfg.lora_cfg.target_modules"]
    assert t.config["policy"]["lora"]["match_all_linear"] is True
    assert "target_modules" not in t.config["policy"]["lora"]


def test_lora_dropout_after_the_adapters_is_refused_and_before_them_kept(assets):
    with pytest.raises(ValueError, match=r"lora_cfg.dropout_position: 'post' with dropout 0.1"):
        load(assets, with_lora(assets, dropout=0.1, dropout_position="post"))
    assert load(assets, with_lora(assets, dropout=0.1, dropout_position="pre")
                ).policy.lora.dropout == 0.1
    assert load(assets, with_lora(assets, dropout=0.0)).policy.lora.dropout == 0.0  # post: inert


# ------------------------------------------------------------------------------- schedules
WARMUP_DECAY = [  # dpo-llama3.1-8b-tulu3's shape, shortened: 4 steps up, 6 down to 0
    {"name": "torch.optim.lr_scheduler.LinearLR",
     "kwargs": {"start_factor": 1e-6, "end_factor": 1.0, "total_iters": 4}},
    {"name": "torch.optim.lr_scheduler.LinearLR",
     "kwargs": {"start_factor": 1.0, "end_factor": 0.0, "total_iters": 6}},
    {"milestones": [4]}]


def torch_lrs(schedule, steps, lr=1.0):
    """The rates torch's own schedulers give, built as NeMo-RL builds them (SequentialLR)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    parts = [getattr(torch.optim.lr_scheduler, e["name"].rsplit(".", 1)[-1])(opt, **e["kwargs"])
             for e in schedule if "name" in e]
    milestones = [m for e in schedule if "milestones" in e for m in e["milestones"]]
    sched = (torch.optim.lr_scheduler.SequentialLR(opt, parts, milestones)
             if len(parts) > 1 else parts[0])
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("schedule", [
    WARMUP_DECAY,
    [{"name": "torch.optim.lr_scheduler.LinearLR",  # a decay from the first step
      "kwargs": {"start_factor": 1.0, "end_factor": 0.25, "total_iters": 5}}],
])
def test_a_warm_up_then_a_linear_decay_follows_torchs_schedulers(assets, schedule):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["policy"]["scheduler"] = schedule
    opt = load(assets, cfg).policy.optimizer
    assert opt.decay_steps in (5, 6)
    ours = [opt.lr_factor(s) for s in range(14)]
    assert ours == pytest.approx(torch_lrs(schedule, 14), rel=1e-6, abs=1e-12)
    assert ours[-1] == opt.decay_end_factor  # held at the end


def test_decay_settings_are_refused_where_they_would_do_nothing():
    with pytest.raises(ValueError, match="decay_end_factor needs decay_steps > 0"):
        OptimizerConfig(decay_end_factor=0.5)
    assert OptimizerConfig(decay_steps=4, decay_end_factor=0.5).lr_factor(2) == 0.75  # 1 - .5·2/4


def test_a_decay_that_does_not_start_at_the_full_rate_is_refused(assets):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["policy"]["scheduler"] = [WARMUP_DECAY[0], {**WARMUP_DECAY[1], "kwargs": {
        "start_factor": 0.5, "end_factor": 0.0, "total_iters": 6}}, WARMUP_DECAY[2]]
    with pytest.raises(ValueError, match="policy.scheduler: rlnb's schedule is a linear warm-up"):
        load(assets, cfg)


# ------------------------------------------------------------------- the single controller
def single_controller(assets, sampler, **loss):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["grpo"]["async_grpo"] = None  # as NeMo-RL's single-controller recipes null it
    cfg["loss_fn"].update({"use_importance_sampling_correction": True, **loss})
    cfg["async_rl"] = {"sampler": sampler, "max_buffered_rollouts": 16,
                       "min_groups_for_streaming_train": 2,
                       "rollout_failure": {"max_infra_attempts_per_prompt": 5}}
    return cfg


def test_the_in_order_sampler_is_the_async_loop_and_no_look_ahead_the_synchronous_one(assets):
    a = load(assets, single_controller(assets, {"name": "in_order", "max_lookahead_versions": 2}))
    assert a.grpo.async_grpo.enabled and a.grpo.async_grpo.max_trajectory_age_steps == 2
    assert a.grpo.async_grpo.sampler == "in_order"
    sync = load(assets, single_controller(assets, {"name": "in_order",
                                                   "max_lookahead_versions": 0}))
    assert not sync.grpo.async_grpo.enabled
    t = translated(single_controller(assets, {"name": "in_order", "max_lookahead_versions": 0}))
    assert "async_rl.rollout_failure.max_infra_attempts_per_prompt" in t.ignored


def test_the_windowed_sampler_keeps_its_window_buffer_and_order(assets):
    w = load(assets, single_controller(assets, {"name": "windowed", "max_staleness_versions": 1,
                                                "sample_freshest_first": True}))
    a = w.grpo.async_grpo
    assert (a.enabled, a.sampler, a.max_trajectory_age_steps) == (True, "windowed", 1)
    assert (a.max_buffered_rollouts, a.sample_freshest_first) == (16, True)


def test_ready_first_is_read_as_in_order_and_listed(assets):
    t = translated(single_controller(assets, {"name": "ready_first",
                                              "max_staleness_versions": 1}))
    assert "rlnb's collector completes whole steps in order" in t.ignored["async_rl.sampler.name"]
    assert t.config["grpo"]["async_grpo"] == {"enabled": True, "max_trajectory_age_steps": 1}


def test_look_ahead_without_the_importance_correction_is_refused_by_name(assets):
    cfg = single_controller(assets, {"name": "in_order", "max_lookahead_versions": 1},
                            use_importance_sampling_correction=False)
    with pytest.raises(ValueError, match="async_rl.sampler.max_lookahead_versions: 1 without "
                                         "loss_fn.use_importance_sampling_correction"):
        load(assets, cfg)


# ---------------------------------------------------------------------------- NeMo-Gym
def test_nemo_gym_rollouts_are_refused_until_switched_off(assets):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["env"] = {"should_use_nemo_gym": True, "should_log_nemo_gym_responses": True,
                  "nemo_gym": {"uv_venv_dir": "/venvs"}}
    cfg["grpo"].update(penalize_invalid_tool_call=True, zero_variance_prompt_filtering=False,
                       max_val_samples=None)
    with pytest.raises(ValueError, match=r"env.should_use_nemo_gym: NeMo-Gym's rollouts"):
        load(assets, cfg, "gym.yaml")
    c = load(assets, cfg, "gym.yaml", ["env.should_use_nemo_gym=false"])
    # max_val_samples: null (NeMo-Gym's): every held-out row; NeMo-RL's 256 of them held out
    assert c.grpo.max_val_samples is None and c.data.num_val == 256
    t = translated(cfg | {"env": {**cfg["env"], "should_use_nemo_gym": False}})
    assert t.ignored["grpo.penalize_invalid_tool_call"].startswith("NeMo-RL reads no such key")
    cfg["grpo"]["invalid_tool_call_advantage"] = -5.0  # NeMo-RL: only with NeMo-Gym
    with pytest.raises(ValueError, match="grpo.invalid_tool_call_advantage: -5.0: NeMo-Gym's "
                                         "message-level penalties: NeMo-RL refuses them"):
        load(assets, cfg, "gym.yaml", ["env.should_use_nemo_gym=false"])


def test_validation_of_every_held_out_row_when_max_val_samples_is_null():
    cfg = rlnb.load_config(None, ["grpo.max_val_samples=null", "data.num_val=6"], preset="fast")
    t = with_rewards(GRPOTrainer(cfg))
    asked = []
    generate = t.generate_batch
    t.generate_batch = lambda rows, k: asked.append(len(rows)) or generate(rows, k)
    t.validate()
    assert asked == [6]


# ------------------------------------------------------------------------------- data
def test_a_list_of_one_data_set_is_that_data_set(assets):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["data"]["train"] = [cfg["data"]["train"]]
    cfg["data"].update(use_multiple_dataloader=False, num_prompts_per_dataloader=16,
                       custom_dataloader="examples.custom_dataloader.fn")
    assert load(assets, cfg, "list.yaml").data.dataset_name == assets["data"]
    with pytest.raises(ValueError, match=r"'train' is a list of 1 here, not a section: give "
                                         r"the whole list \(train=\[...\]\)"):
        load(assets, cfg, "list.yaml", ["data.train.data_path=other.jsonl"])


def test_keys_run_grpo_does_not_read_are_listed(assets):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["data"].update(dataset_name="DAPOMath17K", prompt_file=None, add_system_prompt=False)
    t = translated(cfg)
    assert "evaluation scripts' layout" in t.ignored["data.dataset_name"]
    assert "sliding-puzzle" in t.ignored["data.add_system_prompt"]
    assert not t.refused


def test_cispos_lower_clip_of_one_loads(assets):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["loss_fn"].update(use_cispo=True, ratio_clip_min=1.0, ratio_clip_max=4.0)
    c = load(assets, cfg)
    assert (c.loss_fn.use_cispo, c.loss_fn.ratio_clip_min) == (True, 1.0)


def test_dpo_sft_averaging_without_an_sft_term_is_listed_not_refused(assets):
    cfg = dpo_shaped(assets["model"], assets["pairs"])
    cfg["dpo"]["preference_average_log_probs"] = True  # sft_average_log_probs follows it
    cfg["data"]["validation"] = None
    t = translated(cfg)
    assert t.ignored["dpo.sft_average_log_probs"] == "no SFT term to average (sft_loss_weight is 0)"
    c = load(assets, cfg, "dpo.yaml")
    assert c.dpo.preference_average_log_probs and not c.dpo.sft_average_log_probs
