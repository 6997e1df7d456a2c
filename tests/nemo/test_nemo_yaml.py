"""NeMo-RL YAML configs: defaults: inheritance, ${...} interpolations, the key-by-key translation
(used / listed as ignored / refused by name), and rlnb train on NeMo-RL-shaped configs."""

import copy
import json
import subprocess
import sys

import pytest
import torch
import yaml
from nemo_shaped_configs import (  # noqa: F401 (offline: an autouse fixture)
    grpo_shaped,
    math_jsonl,
    offline,
    ppo_shaped,
    tiny_model,
    write_yaml,
)
from omegaconf import OmegaConf

import rlnb
from rlnb.cli import main
from rlnb.engine.models.policy_config import OptimizerConfig
from rlnb.run.config.master_config import default_config_path, packaged_config, read_yaml
from rlnb.run.config.nemo.reader import read_nemo_yaml, resolve_interpolations
from rlnb.run.config.nemo.translate import is_nemo_config, translate


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    root = tmp_path_factory.mktemp("nemo_assets")
    return {"model": tiny_model(root / "model"), "data": math_jsonl(root / "math.jsonl")}


def grpo(assets):
    return grpo_shaped(assets["model"], assets["data"])


def ppo(assets):
    return ppo_shaped(assets["model"], assets["data"])


def resolved(cfg):
    return resolve_interpolations(copy.deepcopy(cfg))


# --------------------------------------------------------------------------- defaults:


def test_defaults_merge_parents_depth_first_and_the_file_wins(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "grand.yaml").write_text("a: {x: 1, y: 1, list: [1, 2]}\nkeep: g\n")
    (tmp_path / "base" / "parent.yaml").write_text(
        "defaults: grand.yaml\na: {y: 2, z: 2, list: [3]}\nsection: {p: 1, q: 1}\n")
    (tmp_path / "other.yaml").write_text("a: {z: 3}\nsection: {q: 9}\n")
    (tmp_path / "child.yaml").write_text(
        "defaults: [base/parent.yaml, other.yaml]\n"
        "a: {x: 4}\nsection: {_override_: true, only: 1}\n")
    data = read_nemo_yaml(tmp_path / "child.yaml")
    # x from the child, y from the parent, z from the later parent; lists are replaced, not merged
    assert data["a"] == {"x": 4, "y": 2, "z": 3, "list": [3]}
    assert data["keep"] == "g"  # grandparent, reached through the parent's own defaults:
    assert data["section"] == {"only": 1}  # _override_ replaces the inherited section
    assert "defaults" not in data


def test_defaults_errors_name_the_files(tmp_path):
    (tmp_path / "a.yaml").write_text("defaults: b.yaml\nx: 1\n")
    (tmp_path / "b.yaml").write_text("defaults: a.yaml\ny: 1\n")
    with pytest.raises(ValueError, match=r"defaults: form a cycle: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        read_nemo_yaml(tmp_path / "a.yaml")
    (tmp_path / "c.yaml").write_text("defaults: missing.yaml\n")
    with pytest.raises(ValueError, match=r"missing\.yaml \(named in defaults: of .*c\.yaml\)"):
        read_nemo_yaml(tmp_path / "c.yaml")


def test_numbers_read_as_nemo_rl_reads_them(tmp_path):
    (tmp_path / "n.yaml").write_text("eps: 1e-8\nlr: 5.0e-6\nn: 10\nname: '1e-8'\n"
                                     "day: 2025-01-31\n")
    data = read_nemo_yaml(tmp_path / "n.yaml")
    assert data["eps"] == 1e-8 and isinstance(data["eps"], float)  # plain PyYAML: '1e-8' (str)
    assert data["lr"] == 5e-6 and data["n"] == 10 and data["name"] == "1e-8"
    assert data["day"] == "2025-01-31"  # OmegaConf's loader reads no dates (PyYAML: a date)


def test_a_repeated_key_is_refused_as_omegaconf_refuses_it(tmp_path):
    """NeMo-RL reads its files with OmegaConf, which refuses a key given twice; rlnb refuses it
    too, naming the file, the key's dotted path and both lines (PyYAML kept the last)."""
    (tmp_path / "parent.yaml").write_text("policy:\n  model_name: a\n  precision: bf16\n"
                                          "  model_name: b\n")
    (tmp_path / "child.yaml").write_text("defaults: parent.yaml\ngrpo: {seed: 1}\n")
    with pytest.raises(ValueError, match=r"^config file .*parent\.yaml: key 'policy\.model_name' "
                                         r"appears twice, at lines 2 and 4 "):
        read_nemo_yaml(tmp_path / "child.yaml")  # found through defaults:
    with pytest.raises(yaml.YAMLError, match="found duplicate key model_name"):
        OmegaConf.load(tmp_path / "parent.yaml")  # NeMo-RL's verdict on the same file


def test_the_override_marker_replaces_top_level_sections_only_as_in_nemo_rl(tmp_path):
    """NeMo-RL's merge_with_override looks at the top-level sections: deeper down,
    ``_override_`` is an ordinary key and the section merges (nemo_rl/utils/config.py)."""
    (tmp_path / "parent.yaml").write_text(
        "policy:\n  megatron_cfg: {enabled: true, tp: 2}\n  lr: 1\ndata: {a: 1, b: 2}\n")
    (tmp_path / "child.yaml").write_text(
        "defaults: parent.yaml\npolicy:\n  megatron_cfg: {_override_: true, enabled: false}\n"
        "data: {_override_: true, c: 3}\n")
    data = read_nemo_yaml(tmp_path / "child.yaml")
    assert data["policy"] == {"megatron_cfg": {"enabled": False, "tp": 2, "_override_": True},
                              "lr": 1}
    assert data["data"] == {"c": 3}


def test_a_mapping_over_a_list_is_refused_naming_the_file(tmp_path):
    (tmp_path / "parent.yaml").write_text("data: {train: [{path: a}]}\n")
    (tmp_path / "child.yaml").write_text("defaults: parent.yaml\ndata: {train: {path: b}}\n")
    with pytest.raises(ValueError, match=r"child\.yaml: cannot be merged over its defaults"):
        read_nemo_yaml(tmp_path / "child.yaml")  # (rlnb's own reader replaced the list)


def test_a_folder_given_as_the_config_is_said_to_be_one(tmp_path):
    (tmp_path / "configs").mkdir()
    with pytest.raises(ValueError, match=r"config file .*configs is a directory, not a file"):
        read_nemo_yaml(tmp_path / "configs")
    (tmp_path / "c.yaml").write_text("defaults: configs\n")
    with pytest.raises(ValueError, match=r"configs is a directory, not a file \(named in "
                                         r"defaults: of .*c\.yaml\)"):
        read_nemo_yaml(tmp_path / "c.yaml")


# --------------------------------------------------------------------------- ${...}


def test_interpolations_absolute_relative_typed_and_resolvers():
    data = resolve_interpolations({
        "policy": {"len": 512, "mb": 4, "tokens": "${mul:${policy.len}, ${policy.mb}}",
                   "gen": {"t": 0.7, "val_t": "${.t}", "up": "${..mb}", "name": "len=${policy.len}"}},
        "sizes": {"sum": "${add:2, 3}", "half": "${div:${policy.len}, 2}", "max": "${max:3, 7}",
                  "diff": "${sub:${policy.len}, 12}", "pick": "${oc.select:policy.none, 9}"},
        "text": "\\${not.an.interpolation}",
    })
    assert data["policy"]["tokens"] == 2048  # 512 * 4, an int: a whole-string interpolation keeps the type
    assert data["policy"]["gen"]["val_t"] == 0.7 and data["policy"]["gen"]["up"] == 4
    assert data["policy"]["gen"]["name"] == "len=512"  # inside a string it is formatted
    assert data["sizes"] == {"sum": 5, "half": 256.0, "max": 7, "diff": 500, "pick": 9}
    assert data["text"] == "${not.an.interpolation}"  # an escaped one is text (OmegaConf's rule)


@pytest.mark.parametrize("cfg, message", [
    ({"a": "${oops:1, 2}"}, r"a: unknown resolver 'oops' in '\$\{oops:1, 2\}' \(NeMo-RL's are add, div, max, mul, sub; OmegaConf's oc\.env"),
    ({"a": {"b": "${policy.nope}"}}, r"a\.b: the interpolation '\$\{policy\.nope\}' refers to 'policy\.nope', which the config does not have"),
    ({"a": {"b": None}, "c": "${a.b.c}"}, r"c: the interpolation '\$\{a\.b\.c\}' refers to 'a\.b\.c', which the config does not have \(a\.b is not a section\)"),
    ({"a": "${b}", "b": "${a}"}, r"a: interpolation cycle: '\$\{b\}' leads back to a"),
    ({"a": "???"}, r"a: mandatory value '\?\?\?' is not set"),
    ({"a": "${b}", "b": "???"}, r"a: '\$\{b\}' needs a mandatory value '\?\?\?' that is not set"),
    ({"a": "${mul:1}"}, r"a: cannot resolve '\$\{mul:1\}': .*mul\(\) missing 1 required positional argument"),
    ({"a": {"b": "x ${"}}, r"a\.b: not a value OmegaConf reads"),
])
def test_interpolation_errors_name_the_key(cfg, message):
    with pytest.raises(ValueError, match=message):
        resolve_interpolations(cfg)


# --------------------------------------------------------------------------- translation


def test_rlnb_configs_are_not_mistaken_for_nemo_rl_ones(assets):
    for path in (default_config_path(), packaged_config("ppo_tiny"), packaged_config("async_tiny")):
        assert not is_nemo_config(read_yaml(path))
        # what a run writes as its config.yaml (every section, cluster included)
        written = rlnb.load_config(path).model_dump(mode="json")
        assert "cluster" in written and not is_nemo_config(written)
    assert is_nemo_config(grpo(assets)) and is_nemo_config(ppo(assets))
    assert is_nemo_config({"defaults": "grpo_math_1B.yaml"})


def test_grpo_shaped_config_keeps_nemo_rl_meaning(assets):
    cfg = grpo(assets)
    del cfg["grpo"]["val_at_end"], cfg["grpo"]["val_at_start"]  # NeMo-RL's defaults apply
    t = translate(resolved(cfg))
    assert t.refused == {}
    c = rlnb.load_config(write_yaml(assets_path(assets) / "g.yaml", cfg), ignore_unsupported=True)
    assert c.algorithm == "grpo" and c.sft.enabled is False  # NeMo-RL starts RL from the model
    assert c.grpo.val_at_end is False and c.grpo.val_at_start is False  # rlnb's own: True
    assert c.grpo.seed == 42 and c.grpo.max_num_steps == 3
    assert (c.grpo.num_prompts_per_step, c.grpo.num_generations_per_prompt) == (2, 4)
    assert c.grpo.adv_estimator.use_leave_one_out_baseline and c.grpo.adv_estimator.normalize_rewards
    assert c.grpo.reward_shaping.enabled is False  # its parameters are inert while disabled
    assert c.policy.model_name == assets["model"] and c.policy.tokenizer_name is None
    assert c.policy.chat_template is True  # NeMo-RL's math_hf_data_processor applies it
    assert c.policy.logprob_batch_size == 4  # ${policy.train_micro_batch_size}
    o = c.policy.optimizer
    assert (o.lr, o.weight_decay, o.betas, o.eps) == (5e-4, 0.01, (0.9, 0.999), 1e-8)
    assert (o.warmup_steps, o.warmup_start_factor) == (2, 0.1)  # LinearLR(0.1 -> 1, 2 steps)
    # one global batch per step (8 rows of 8): NeMo-RL's cadence and rlnb's are the same
    assert o.warmup_counts == "optimizer_steps"
    # ${policy.max_total_sequence_length}: each response fills what its own prompt leaves
    assert c.policy.generation.max_new_tokens == 24 and c.policy.generation.fill_context
    assert c.policy.generation.backend == "hf"
    assert c.loss_fn.reference_policy_kl_penalty == 0.01
    d = c.data
    assert (d.name, d.dataset_name, d.prompt_key, d.answer_key) == (
        "math", assets["data"], "problem", "expected_answer")
    assert d.num_val == 4  # grpo.max_val_samples rows held out
    assert (c.checkpointing.save_period, c.checkpointing.keep_top_k) == (10, 3)


def assets_path(assets):
    from pathlib import Path

    return Path(assets["data"]).parent


def test_every_key_is_used_listed_or_refused(assets):
    t = translate(resolved(grpo(assets)))
    for key in ("cluster.gpus_per_node", "policy.megatron_cfg.tensor_model_parallel_size",
                "policy.megatron_cfg.pipeline_dtype", "policy.dtensor_cfg.tensor_parallel_size",
                "policy.sequence_packing.enabled", "policy.dynamic_batching.train_mb_tokens",
                "policy.generation.vllm_cfg.gpu_memory_utilization", "logger.log_dir",
                "checkpointing.checkpoint_dir", "data.num_workers", "grpo.max_num_epochs",
                "policy.optimizer.kwargs.foreach", "data_plane.enabled"):
        assert key in t.ignored, key
    for key in ("loss_fn.ratio_clip_max", "grpo.num_prompts_per_step", "policy.model_name",
                "policy.optimizer.kwargs.lr", "policy.dtensor_cfg.lora_cfg.enabled",
                "grpo.reward_shaping.overlong_buffer_length", "reward_penalties.token_ids"):
        assert key not in t.ignored and key not in t.refused, key
    assert "policy.generation.max_new_tokens" not in t.ignored  # NeMo-RL's budget, mapped
    assert "data.max_input_seq_length" in t.ignored


def set_key(cfg, dotted, value):
    *parents, last = dotted.split(".")
    node = cfg
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    return cfg


@pytest.mark.parametrize("dotted, value, named", [
    ("policy.dtensor_cfg.lora_cfg", {"enabled": True, "dropout": 0.1, "dropout_position": "post"},
     "policy.dtensor_cfg.lora_cfg.dropout_position: 'post' with dropout 0.1"),
    ("policy.megatron_cfg", {"enabled": True, "optimizer": {"optimizer": "sgd", "lr": 1e-3}},
     "policy.megatron_cfg.optimizer.optimizer: 'sgd'"),
    ("policy.megatron_cfg", {"enabled": True, "optimizer": {"optimizer": "adam", "lr": 1e-3},
                             "scheduler": {"lr_decay_style": "cosine"}},
     "policy.megatron_cfg.scheduler.lr_decay_style: 'cosine'"),
    ("reward_penalties.penalize_duplicated_reasoning", True, "reward_penalties.penalize_duplicated_reasoning"),
    ("grpo.invalid_tool_call_advantage", -5.0, "grpo.invalid_tool_call_advantage: -5.0"),
    ("env.math.math_verify_impl", "minerva", "env.math.math_verify_impl: 'minerva'"),
    ("policy.optimizer.name", "torch.optim.SGD", "policy.optimizer.name"),
    ("policy.optimizer.kwargs.amsgrad", True, "policy.optimizer.kwargs.amsgrad"),
    ("policy.scheduler", [{"name": "torch.optim.lr_scheduler.CosineAnnealingLR",
                           "kwargs": {"T_max": 10}}], "policy.scheduler: rlnb's schedule"),
    ("async_rl", {"sampler": {"name": "custom", "target": "m:C"}}, "async_rl.sampler.name: 'custom'"),
    ("on_policy_distillation", {"enabled": True}, "on_policy_distillation: on-policy distillation"),
    ("policy.generation.bad_words", ["<img>"], "policy.generation.bad_words: ['<img>']"),
    ("data.train.dataset_name", "DAPOMath17K", "data.train.data_path: and data.train.dataset_name='DAPOMath17K'"),
    ("data.default.processor", "vlm_hf_data_processor", "data.default.processor"),
    ("data.default.env_name", "code", "data.default.env_name: 'code'"),
    ("grpo.brand_new_option", 1, "grpo.brand_new_option: not a key rlnb's NeMo-RL reader maps"),
    ("sft", {"max_num_steps": 10}, "sft: NeMo-RL's SFT loop"),
    ("policy.generation.val_temperature", 0.5, "policy.generation.val_temperature: 0.5"),
    ("data.train", [{"data_path": "a.jsonl"}, {"data_path": "b.jsonl"}],
     "data.train: several training data sets"),
])
def test_algorithm_keys_rlnb_cannot_run_are_refused_by_name(assets, dotted, value, named):
    cfg = set_key(grpo(assets), dotted, value)
    with pytest.raises(ValueError, match="rlnb cannot run as NeMo-RL would") as err:
        rlnb.load_config(write_yaml(assets_path(assets) / "bad.yaml", cfg), ignore_unsupported=True)
    assert named in str(err.value)


@pytest.mark.parametrize("dotted, value, named", [
    ("ppo.async_ppo.enabled", True, "ppo.async_ppo.enabled: True: rlnb has no asynchronous PPO"),
    ("value.model_name", "other/critic", "value.model_name: rlnb builds the critic"),
    ("value.precision", "bfloat16", "value.precision: 'bfloat16': the critic runs with policy.precision"),
    ("value.reward_model_cfg.reward_model_type", "bradley_terry", "value.reward_model_cfg.reward_model_type"),
])
def test_ppo_keys_rlnb_cannot_run_are_refused_by_name(assets, dotted, value, named):
    cfg = set_key(ppo(assets), dotted, value)
    with pytest.raises(ValueError, match=named.replace(".", r"\.").replace("(", r"\(")):
        rlnb.load_config(write_yaml(assets_path(assets) / "badppo.yaml", cfg), ignore_unsupported=True)


def test_ppo_shaped_config_keeps_nemo_rl_meaning(assets):
    c = rlnb.load_config(write_yaml(assets_path(assets) / "p.yaml", ppo(assets)),
                         ignore_unsupported=True)
    assert c.algorithm == "ppo" and c.ppo.ppo_epochs == 2 and c.ppo.max_num_epochs is None
    assert c.ppo.reward_scaling.target_min == -1.0 and c.ppo.reward_shaping.max_response_length == 4
    assert c.loss_fn.ratio_clip_c == 10 and c.loss_fn.ratio_clip_max == 0.28
    assert (c.value_loss_fn.scale, c.value_loss_fn.cliprange) == (0.4, 0.2)
    assert c.value.model_name is None  # ${policy.model_name}: rlnb's critic from the policy
    assert (c.value.train_global_batch_size, c.value.optimizer.lr) == (8, 3e-4)
    assert c.policy.optimizer.warmup_steps == 0  # ConstantLR(factor=1): no warm-up


def test_overrides_use_nemo_rl_paths_before_interpolation_and_rlnb_extras(assets):
    path = write_yaml(assets_path(assets) / "o.yaml", grpo(assets))
    c = rlnb.load_config(path, ["policy.max_total_sequence_length=30", "grpo.seed=7",
                                "rlnb.sft.enabled=true", "rlnb.logger.print_metrics=true"],
                         ignore_unsupported=True)
    assert c.policy.generation.max_new_tokens == 30  # the interpolation saw the override
    assert c.grpo.seed == 7 and c.sft.enabled and c.logger.print_metrics


def test_the_listing_fits_a_screen_and_names_the_flag(assets):
    path = write_yaml(assets_path(assets) / "l.yaml", grpo(assets))
    with pytest.raises(ValueError) as err:
        rlnb.load_config(path)
    text = str(err.value)
    assert len(text.splitlines()) <= 40
    assert "cluster.* (2)" in text and "policy.megatron_cfg.* (5)" in text
    assert "--ignore-unsupported" in text and "Nothing was written" in text
    with pytest.raises(ValueError, match="must be loaded from its file"):
        rlnb.load_config({"defaults": "grpo_math_1B.yaml", "grpo": {}})


def test_nemo_rl_linear_warmup_is_torchs_linear_lr():
    cfg = OptimizerConfig(lr=1.0, warmup_steps=4, warmup_start_factor=0.1)
    # by hand: 0.1 + 0.9·s/4 until s = 4, then 1
    assert [round(cfg.lr_factor(s), 6) for s in range(6)] == [0.1, 0.325, 0.55, 0.775, 1.0, 1.0]
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.0)
    ref = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=4),
        torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=10**9)], milestones=[4])
    torch_lrs = []
    for _ in range(8):
        torch_lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        ref.step()
    assert torch_lrs == pytest.approx([cfg.lr_factor(s) for s in range(8)])
    # rlnb's own warm-up is unchanged: (s+1)/W
    assert [OptimizerConfig(warmup_steps=4).lr_factor(s) for s in range(5)] == [0.25, 0.5, 0.75, 1.0, 1.0]
    with pytest.raises(ValueError, match="warmup_start_factor needs warmup_steps > 0"):
        OptimizerConfig(warmup_start_factor=0.1)


# --------------------------------------------------------------------------- rlnb train


def test_rlnb_train_without_the_flag_lists_and_writes_nothing(assets, tmp_path, capsys,
                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_yaml(tmp_path / "grpo_math_1B.yaml", grpo(assets))
    code = main(["train", path, "--run-dir", str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "rlnb train: NeMo-RL config grpo_math_1B.yaml" in err and "cluster.* (2)" in err
    assert len(err.splitlines()) <= 40
    assert sorted(p.name for p in tmp_path.iterdir()) == ["grpo_math_1B.yaml"]  # no run dir


def test_rlnb_train_runs_a_grpo_math_1b_shaped_config(assets, tmp_path):
    path = write_yaml(tmp_path / "grpo_math_1B.yaml", grpo(assets))
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "rlnb.cli", "train", path, "--ignore-unsupported",
                          "--run-dir", str(run), "--no-progress"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]  # val_at_start: false, as the file says
    # NeMo-RL's LinearLR(start_factor=0.1, total_iters=2) warm-up of lr 5e-4, one step per step
    assert [m["train/lr"] for m in metrics] == pytest.approx([5e-5, 2.75e-4, 5e-4])
    written = read_yaml(run / "config.yaml")
    assert written["policy"]["optimizer"]["warmup_start_factor"] == 0.1
    assert written["sft"]["enabled"] is False


def test_rlnb_train_runs_a_ppo_math_1b_shaped_config(assets, tmp_path, capsys):
    path = write_yaml(tmp_path / "ppo_math_1B.yaml", ppo(assets))
    run = tmp_path / "run"
    code = main(["train", path, "--ignore-unsupported", "--run-dir", str(run), "--no-progress"])
    assert code == 0, capsys.readouterr().err[-2000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all("critic/loss" in m and "train/loss" in m for m in metrics)
    assert read_yaml(run / "config.yaml")["algorithm"] == "ppo"


@pytest.mark.parametrize("dotted", ["grpo.num_prompts_per_step", "grpo.num_generations_per_prompt",
                                    "policy.generation.max_new_tokens",
                                    "policy.max_total_sequence_length"])
def test_a_value_of_the_wrong_type_is_named_by_its_own_key(assets, dotted):
    """A word where a count belongs is named as itself, not through a rule computed from it
    (the schedule check multiplied the two before their types were checked)."""
    cfg = set_key(grpo(assets), dotted, "many")
    with pytest.raises(ValueError) as err:
        rlnb.load_config(write_yaml(assets_path(assets) / "words.yaml", cfg),
                         ignore_unsupported=True)
    assert dotted in str(err.value) and "many" not in str(err.value).split(dotted)[0], err.value
    assert "scheduler" not in str(err.value)


@pytest.mark.parametrize("key", ["start_factor", "end_factor", "total_iters"])
def test_a_scheduler_setting_that_is_not_a_number_is_named(assets, key):
    cfg = grpo(assets)
    cfg["policy"]["scheduler"][0]["kwargs"][key] = "many"
    with pytest.raises(ValueError, match=rf"policy\.scheduler\[0\]\.kwargs\.{key}: 'many' is "
                                         "not (a number|an integer)"):
        rlnb.load_config(write_yaml(assets_path(assets) / "sched.yaml", cfg),
                         ignore_unsupported=True)

