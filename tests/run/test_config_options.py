"""Every option of every config section does something observable, or is refused at load time.

The walk generates one variant per option (each boolean flipped, each choice of an enumerated
option, each optional number set), loads it over a small base config and trains one step. A
variant either fails at load time with a message naming its key, or trains with finite metrics
and changes what one step produces (its metrics, its rollout or the weights) compared with the
base config on the same seed. Options that change no number by design (batch chunking) must
instead give the same numbers; run-layer options are checked in the run tests.
"""

import math
import types
import typing
from typing import Any, Literal

import pytest
import torch
from paths import TESTS
from pydantic import BaseModel

import rlnb
from rlnb.algorithms.estimators import estimator_names
from rlnb.algorithms.importance_sampling import TRUNCATED_IS_TYPES
from rlnb.algorithms.kl import KL_ESTIMATORS
from rlnb.engine.environments.tasks import TASKS, TaskConfig
from rlnb.engine.models.generation import GENERATION_BACKENDS
from rlnb.run.config.master_config import MasterConfig, packaged_config

# two optimizer steps per rollout (the ratio leaves 1 on the second), a KL penalty, validation
BASE = ["policy.train_global_batch_size=8", "policy.train_micro_batch_size=8",
        "loss_fn.reference_policy_kl_penalty=0.05", "grpo.val_period=2",
        "policy.generation.max_new_tokens=4"]
# the same under PPO (its loop section is `ppo`; it keeps no reference model by default, so β = 0)
PPO_BASE = ["policy.train_global_batch_size=8", "policy.train_micro_batch_size=8",
            "ppo.val_period=2", "policy.generation.max_new_tokens=4",
            "ppo.policy_training_start_step=0"]  # no critic warm-up: the actor trains at once
# the same under DPO (its loop section is `dpo`; its loss keys are there, loss_fn is not read)
DPO_BASE = ["policy.train_global_batch_size=8", "policy.train_micro_batch_size=8",
            "dpo.val_period=2", "policy.generation.max_new_tokens=4"]
CHOICES = {
    "grpo.adv_estimator.name": estimator_names("grpo"),
    # a dataset needs its rows (tests/engine/test_dpo.py trains on one; without: refused, naming it)
    "dpo.pairs.source": ["warm_start"],
    "loss_fn.reference_policy_kl_type": list(KL_ESTIMATORS),
    "loss_fn.truncated_importance_sampling_type": list(TRUNCATED_IS_TYPES),
    "policy.generation.backend": list(GENERATION_BACKENDS),
    "data.name": list(TASKS),
    "env.name": ["task", "retry"],
}
# a value for each optional number (its default is None) and a few required companions
OPTIONAL_VALUES = {
    "policy.tiny.intermediate_size": 48,
    "policy.tokenizer_name": "tiny",
    "policy.max_grad_norm": 1e-3,
    "policy.generation.top_k": 3,
    "policy.generation.stop_strings": ["5"],
    "policy.generation.stop_token_ids": [9],  # the tiny tokenizer's "5"
    # NeMo-RL's leave-one-out (the name sets the estimator's flag) against the recipe's group
    "grpo.use_leave_one_out_baseline": True,
    "loss_fn.ratio_clip_c": 3.0,
    "loss_fn.kl_input_clamp_value": 0.01,
    "loss_fn.kl_output_clamp_value": 1e-4,
    "loss_fn.truncated_importance_sampling_ratio": 1.001,
    "loss_fn.truncated_importance_sampling_ratio_min": 0.999,
    "grpo.adv_estimator.reward_weights": [1.0, 0.5],
    "grpo.advantage_clip_low": -0.1,
    "grpo.advantage_clip_high": 0.1,
    "grpo.seq_logprob_error_threshold": 1.0000001,
    "sft.stop_at_accuracy": 0.0,  # stops at the first check (the base runs every step)
    "data.dataset_name": "missing.json",
    "data.dataset_config": "main",
    "data.val_split": "test",
    "data.path": "rows.jsonl",  # refused: the default task (addition) reads no file
    "data.prompt_key": "q",
    "data.val_fraction": 0.5,
    "data.correct_reward": "exact",  # refused when the task is built: no reward functions
    "data.env_id": "my-env",  # refused: the default task (addition) is not verifiers
    "data.env_args": "{size: 3}",
    "data.max_rows": 10,
    "reward_funcs.name": "fmt",
    "logger.log_dir": "logs",
    "cluster.num_processes": 1,
    "ppo.max_num_epochs": 1,
    "ppo.val_batch_size": 8,
    "ppo.adv_estimator.gae_lambda_value": 0.5,
    "ppo.adv_estimator.gae_lambda_policy": 0.5,
    "ppo.seq_logprob_error_threshold": 1.0000001,
    "value.model_name": "tiny",
    "value_loss_fn.cliprange": 1e-4,  # under the first Adam steps of the head at lr 3e-4
    "policy.generation.vllm.gpu_memory_utilization": 0.5,
    "policy.generation.vllm.kv_cache_space_gib": 1,
    "policy.generation.vllm.max_model_len": 32,
    "policy.generation.vllm.enforce_eager": True,
    "grpo.reward_shaping.overlong_buffer_length": 3,
    "grpo.reward_shaping.overlong_buffer_penalty": 0.5,
    # 6: responses of 3 and 4 tokens go unpenalised (the buffer starts at 4) where the base's 4
    # gave them -0.5 and -1; at 3 every penalty would move by the same 0.5, which a group
    # baseline cancels exactly
    "grpo.reward_shaping.max_response_length": 6,
    "grpo.reward_shaping.stop_properly_penalty_coef": 0.5,
    "checkpointing.checkpoint_dir": "ckpts",
    "checkpointing.keep_top_k": 1,
    "grpo.async_grpo.collector_threads": 1,
    "grpo.async_grpo.trainer_threads": 1,
    "grpo.async_grpo.max_buffered_rollouts": 64,
    "policy.optimizer.warmup_start_factor": 0.5,
    "value.optimizer.warmup_start_factor": 0.5,
    "policy.lora.quantize": "4bit",  # refused: the tiny model is not loaded with from_pretrained
    "dpo.max_num_epochs": 1,
    "dpo.pairs.dataset": "missing.jsonl",
}
COMPANIONS = {  # what a variant needs to be meaningful at all
    "loss_fn.truncated_importance_sampling_type": ["loss_fn.use_importance_sampling_correction=true",
                                                   "loss_fn.truncated_importance_sampling_ratio=1.001",
                                                   "loss_fn.truncated_importance_sampling_ratio_min=0.999"],
    "loss_fn.truncated_importance_sampling_ratio": ["loss_fn.use_importance_sampling_correction=true",
                                                    "loss_fn.truncated_importance_sampling_type=tis"],
    "loss_fn.truncated_importance_sampling_ratio_min": [
        "loss_fn.use_importance_sampling_correction=true",
        "loss_fn.truncated_importance_sampling_type=tis",
        "loss_fn.truncated_importance_sampling_ratio=2"],
    "loss_fn.sequence_level_importance_ratios": ["loss_fn.token_level_loss=false"],
    "grpo.adv_estimator.reward_weights": ["grpo.adv_estimator.name=gdpo"],
    "grpo.adv_estimator.minus_baseline": ["grpo.adv_estimator.name=reinforce_plus_plus"],
    "env.name": ["grpo.max_rollout_turns=2"],
    "loss_fn.use_kl_in_reward": ["grpo.adv_estimator.name=reinforce_plus_plus"],

    "grpo.batch_multiplier": ["grpo.use_dynamic_sampling=true"],
    # the DAPO overlong penalty needs all three: the variant changes one of them
    **{f"grpo.reward_shaping.{k}": [
        "grpo.reward_shaping.enabled=true", "grpo.reward_shaping.overlong_buffer_length=2",
        "grpo.reward_shaping.overlong_buffer_penalty=1",
        "grpo.reward_shaping.max_response_length=4"]
       for k in ("overlong_buffer_length", "overlong_buffer_penalty", "max_response_length")},
    "grpo.reward_shaping.stop_properly_penalty_coef": [],  # alone: refused (shaping is off)
    # NeMo-RL's LinearLR start factor: against rlnb's (s+1)/W ramp (0.25 at the first step)
    "policy.optimizer.warmup_start_factor": ["policy.optimizer.warmup_steps=4"],
    "value.optimizer.warmup_start_factor": ["value.optimizer.warmup_steps=4"],
    "dpo.sft_average_log_probs": ["dpo.sft_loss_weight=0.5"],  # it shapes the SFT term
}
# PPO's copies of GRPO's shared settings need the same values and companions
for _k in [k for k in OPTIONAL_VALUES if k.startswith("grpo.reward_shaping.")]:
    OPTIONAL_VALUES[_k.replace("grpo.", "ppo.", 1)] = OPTIONAL_VALUES[_k]
for _k in [k for k in COMPANIONS if k.startswith("grpo.reward_shaping.")]:
    COMPANIONS[_k.replace("grpo.", "ppo.", 1)] = [
        c.replace("grpo.", "ppo.", 1) for c in COMPANIONS[_k]]
# settings that go with the option in the variant (not in the base it is compared with)
WITH = {
    "ppo.reward_shaping.enabled": ["ppo.reward_shaping.stop_properly_penalty_coef=0.5"],
    "ppo.reward_scaling.enabled": ["ppo.reward_scaling.source_max=2"],
    "ppo.skip_reference_policy_logprobs_calculation": [  # keeping a reference only acts with β
        "loss_fn.reference_policy_kl_penalty=0.05"],
    "grpo.reward_shaping.enabled": ["grpo.reward_shaping.stop_properly_penalty_coef=0.5"],
    "grpo.reward_scaling.enabled": ["grpo.reward_scaling.source_max=2"],
    "dpo.pairs.source": ["dpo.pairs.pool_prompts=8"],  # a small pool: seconds, not minutes
    # NeMo-RL's budget: a response may fill the whole context (refused without the option)
    "policy.generation.fill_context": ["policy.generation.max_new_tokens=24"],
}
# loss options whose effect needs a batch the policy has moved away from (one step of the tiny
# model moves it by ~1e-5): their effect is asserted with hand-derived numbers on such batches
# in these test files, which must exercise the option by name
ASSERTED_ELSEWHERE = {
    # the tiny tokenizer's chat template changes nothing for text prompts (the base task); the
    # agent tests train with it (prompts, tool calls, the prefix check)
    "policy.tiny.chat_template": "engine/test_agents.py",
    "loss_fn.ratio_clip_c": "algorithms/test_policy_loss.py",
    "loss_fn.reference_policy_kl_type": "algorithms/test_policy_loss.py",
    "loss_fn.kl_input_clamp_value": "algorithms/test_policy_loss.py",
    "loss_fn.kl_output_clamp_value": "algorithms/test_policy_loss.py",
    "loss_fn.use_on_policy_kl_approximation": "algorithms/test_policy_loss.py",
    # importance weights π_old/π_gen: the base config reuses the generator's log-probs, so they
    # are exactly 1 in a step; the loss tests use batches where they are not
    "loss_fn.use_importance_sampling_correction": "algorithms/test_policy_loss.py",
    "loss_fn.truncated_importance_sampling_type": "algorithms/test_policy_loss.py",
    "loss_fn.truncated_importance_sampling_ratio": "algorithms/test_policy_loss.py",
    "loss_fn.truncated_importance_sampling_ratio_min": "algorithms/test_policy_loss.py",
    # the async sides' torch thread counts change no number; the async tests read them back
    "grpo.async_grpo.collector_threads": "engine/test_async_grpo.py",
    "grpo.async_grpo.trainer_threads": "engine/test_async_grpo.py",
    # the samplers pick the same groups on a step's first rollout (nothing is stale yet): the
    # async tests run the windowed one ahead, the buffer tests pick groups by hand
    "grpo.async_grpo.sampler": "engine/test_async_grpo.py",
    "grpo.async_grpo.max_buffered_rollouts": "engine/test_async_grpo.py",
    "grpo.async_grpo.sample_freshest_first": "engine/test_async_grpo.py",
    # an entry of reward_funcs needs an importable function: named there, and in the runs of
    # test_user_data.py
    "reward_funcs.name": "engine/test_reward_funcs.py",
    # which steps' rollouts are written: on disk, read back in the run tests
    "logger.rollouts_every": "run/test_training_run.py",
}
# a value for plain number options that the walk tries as well (the others size the run)
NUMBER_VALUES = {"logger.rollouts_every": 2}
# options that change no number by design: the same numbers must come out
SAME_NUMBERS = {"policy.logprob_batch_size": 4, "policy.train_micro_batch_size": 4,
                # auto is the CPU where torch sees no GPU (cuda there: refused at load)
                "policy.device": "cpu",
                # the recipe's eager attention against SDPA: float rounding apart (the
                # equality on every read log-prob and gradient: engine/test_attention.py)
                "policy.attn_implementation": "sdpa",
                # the generator's log-probs are the policy's (same weights): ~1e-6 apart
                "grpo.reuse_generation_logprobs": "false", "ppo.reuse_generation_logprobs": "false",
                "value.logprob_batch_size": 4, "value.train_micro_batch_size": 4,
                "value.model_name": "tiny",  # NeMo-RL's key: it must name the policy's model
                # the same tokens as the lean loop (test_sampler.py); log-probs ~1e-6 apart
                "policy.generation.sampler": "generate"}
# run-layer options: their effect is on disk, checked in test_training_run / test_rundir
RUN_LAYER = ("logger.", "checkpointing.", "cluster.", "sft.cache")


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, Any, Any]]:
    """(dotted key, annotation, default) of every leaf option of a config model."""
    out = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        ann = field.annotation
        inner = [a for a in typing.get_args(ann) if a is not type(None)]
        sub = next((a for a in [ann, *inner] if isinstance(a, type) and issubclass(a, BaseModel)),
                   None)
        if sub is not None:
            out += leaves(sub, key + ".")
        else:
            out.append((key, ann, field.default))
    if model is TaskConfig:  # data: beside its name, flat, the settings of every task
        keys = {key for key, _, _ in out}
        for cls in TASKS.values():
            for key, (ann, default) in {f"{prefix}{k}": (f.annotation, f.default) for k, f
                                        in cls.Settings.model_fields.items()}.items():
                if key not in keys:
                    keys.add(key)
                    out.append((key, ann, default))
    return out


def dotted(config, key: str):
    value = config
    for part in key.split("."):
        value = getattr(value, part, None)
    return value


def variants() -> list[tuple[str, list[str]]]:
    """One variant per option, relative to the base config's own value."""
    found = []
    base_config = rlnb.load_config(None, BASE, preset="fast")
    ppo_config = rlnb.load_config(packaged_config("ppo_tiny"), PPO_BASE, preset="fast")
    dpo_config = rlnb.load_config(packaged_config("dpo_tiny"), DPO_BASE, preset="fast")
    for key, ann, model_default in leaves(MasterConfig):
        ppo = key.startswith(("ppo.", "value.", "value_loss_fn."))
        loop = dpo_config if key.startswith("dpo.") else ppo_config if ppo else base_config
        default = dotted(loop, key)
        default = model_default if default is None and model_default is not None else default
        args = typing.get_args(ann)
        if key in CHOICES or typing.get_origin(ann) is Literal:
            values = CHOICES.get(key) or list(args)
            found += [(key, [f"{key}={v}"]) for v in values if v != default]
        elif ann is bool:
            found.append((key, [f"{key}={str(not default).lower()}"]))
        elif key in SAME_NUMBERS:
            found.append((key, [f"{key}={SAME_NUMBERS[key]}"]))
        elif key in NUMBER_VALUES:
            found.append((key, [f"{key}={NUMBER_VALUES[key]}"]))
        elif default is None or (isinstance(ann, types.UnionType) and type(None) in args):
            if key in OPTIONAL_VALUES:
                found.append((key, [f"{key}={OPTIONAL_VALUES[key]}"]))
            elif default is None:
                found.append((key, ["MISSING"]))  # a new optional option: give it a value above
    def companions(key):
        prefix = [v for k, v in PREFIX_COMPANIONS.items() if key.startswith(k)]
        return [*(prefix[0] if prefix else []), *COMPANIONS.get(key, [])]

    # the variant's own setting last: it wins over a companion of the same key, which then is
    # the base value it is compared with
    return [(key, [*(c for c in companions(key) if c not in over), *over, *WITH.get(key, [])])
            for key, over in found]


PREFIX_COMPANIONS = {  # a section that only exists (or only acts) with another setting
    "sft.": ["sft.enabled=true", "sft.max_steps=6", "sft.eval_every=3", "sft.eval_prompts=8",
             "sft.cache=false", "sft.stop_at_accuracy=null"],
    "ppo.": ["algorithm=ppo"], "value.": ["algorithm=ppo"], "value_loss_fn.": ["algorithm=ppo"],
    "dpo.": ["algorithm=dpo"],
    "policy.generation.vllm.": ["policy.generation.backend=vllm"],
    "policy.lora.": ["policy.lora.enabled=true"],
    # the random model's shape acts only with it (a small Qwen3: the default is 0.6 B)
    "policy.random_init.": ["policy.model_name=random", "policy.random_init.hidden_size=32",
                            "policy.random_init.num_hidden_layers=1",
                            "policy.random_init.num_attention_heads=2",
                            "policy.random_init.num_key_value_heads=1",
                            "policy.random_init.head_dim=16",
                            "policy.random_init.intermediate_size=64",
                            "policy.random_init.vocab_size=256"],
    "policy.compile.": ["policy.compile.enabled=true"],
    # the async loop needs the importance-sampling correction and recomputed prev_logprobs
    "grpo.async_grpo.": ["grpo.async_grpo.enabled=true",
                         "loss_fn.use_importance_sampling_correction=true",
                         "grpo.reuse_generation_logprobs=false"],
}


def scripted_rewards(task):
    """Give the untrained tiny model a learning signal: a fixed 0/1 reward per row."""
    score = task.score

    def rewarded(prompts, responses, rows):
        r = score(prompts, responses, rows)
        # every group of G = 4 rows gets one or two rewarded rows: a signal in every group
        bits = torch.arange(len(prompts)) % 3 == 0
        r.total = bits.float()
        r.components = {"correct": bits.float(), "format": (~bits).float()}
        r.correct = bits
        return r

    task.score = rewarded


def one_step(overrides: list[str]) -> dict:
    """What one training step produces: metrics (no timings), rollout tokens, weights."""
    from rlnb.engine.trainers.loops import make_trainer
    from rlnb.engine.trainers.warm_start import warm_start

    loop = next((x.split("=")[1] for x in overrides if x.startswith("algorithm=")), "grpo")
    source = packaged_config(f"{loop}_tiny") if loop != "grpo" else None
    base = {"grpo": BASE, "ppo": PPO_BASE, "dpo": DPO_BASE}[loop]
    config = rlnb.load_config(source, [*base, *overrides], preset="fast")
    trainer = make_trainer(config)
    scripted_rewards(trainer.task)
    if config.sft.enabled:
        warm_start(trainer, config.sft, log=lambda *a: None)
    records = list(trainer.train(1))
    metrics = {k: v for r in records for k, v in r.items() if not k.startswith(("timing/", "memory/"))}
    last = records[-1]
    modules = [trainer.policy.model, *(m for m, _, _ in trainer.checkpoint_parts().values())]
    # DPO's step carries its pairs' scores where GRPO's carries advantages: their implicit rewards
    scores = getattr(last.advantages, "advantages", None)
    return {"metrics": metrics, "tokens": last.rollout.input_ids,
            "advantages": last.advantages.rewards if scores is None else scores,
            "weights": [p.detach().clone() for m in modules for p in m.parameters()]}


BASES: dict[tuple, dict] = {}


def _key_of(overrides: list[str]) -> str:
    """The option a variant is about (the last setting that is not one of its WITH)."""
    for item in reversed(overrides):
        key = item.split("=", 1)[0]
        if not any(item in extras for extras in WITH.values()):
            return key
    return overrides[-1].split("=", 1)[0]


def base_for(overrides: list[str]) -> dict:
    """The step of the base config plus the variant's companions (its loop, the section it
    needs), without the option itself: what the option is compared with."""
    key = overrides[-1 - len(WITH.get(_key_of(overrides), []))]
    companions = tuple(overrides[:overrides.index(key)])
    if companions not in BASES:
        BASES[companions] = one_step(list(companions))
    return BASES[companions]


def differs(a: dict, b: dict) -> bool:
    if a["metrics"].keys() != b["metrics"].keys() or a["tokens"].shape != b["tokens"].shape:
        return True
    if any(not (x == y or (isinstance(x, float) and math.isnan(x) and math.isnan(y)))
           for x, y in zip(a["metrics"].values(), b["metrics"].values())):
        return True
    return (not torch.equal(a["tokens"], b["tokens"])
            or not torch.equal(a["advantages"], b["advantages"])
            or any(not torch.equal(p, q) for p, q in zip(a["weights"], b["weights"])))


VARIANTS = variants()


def test_every_optional_option_has_a_value_to_try():
    missing = [key for key, over in VARIANTS if over[-1] == "MISSING"]
    assert not missing, f"give these optional options a value in OPTIONAL_VALUES: {missing}"


def test_bad_values_of_a_number_option_are_refused_naming_it():
    for bad in ("0", "-2", "2.5", "often"):
        with pytest.raises(ValueError, match=r"logger\.rollouts_every"):
            rlnb.load_config(None, [f"logger.rollouts_every={bad}"])


def test_the_walk_covers_every_section():
    sections = {key.split(".")[0] for key, _ in VARIANTS}
    assert sections >= {"policy", "loss_fn", "grpo", "sft", "data", "env", "logger",
                        "checkpointing"}, sections


@pytest.mark.parametrize(("key", "overrides"), [v for v in VARIANTS if v[1][-1] != "MISSING"],
                         ids=[f"{k}:{o[-1 - len(WITH.get(k, []))].split('=', 1)[1][:12]}"
                              for k, o in VARIANTS if o[-1] != "MISSING"])
def test_option_is_observable_or_refused(key, overrides, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if key in ASSERTED_ELSEWHERE:
        source = (TESTS / ASSERTED_ELSEWHERE[key]).read_text()
        assert key.rsplit(".", 1)[-1] in source, f"{ASSERTED_ELSEWHERE[key]} never sets {key}"
        return
    if key.startswith(RUN_LAYER):
        config = rlnb.load_config(None, [*BASE, *overrides], preset="fast")  # loads; on disk
        assert config is not None
        return
    try:
        got = one_step(overrides)
    except (ValueError, FileNotFoundError, ImportError) as err:
        names = [key.rsplit(".", 1)[-1], key]
        if key.startswith("policy.generation.vllm."):
            names.append("vllm")  # refused as a whole where vLLM is not installed
        assert any(n in str(err) for n in names), f"{key}: the error does not name it: {err}"
        return
    base = base_for(overrides)
    finite = [k for k, v in got["metrics"].items() if isinstance(v, float)
              and not math.isfinite(v) and not k.endswith(("_min", "_max"))]
    assert not finite, f"{key}: non-finite metrics {finite}"
    assert "train/loss" in got["metrics"]
    if key in SAME_NUMBERS:
        for k, v in base["metrics"].items():
            assert got["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-6), (key, k)
        return
    assert differs(got, base), f"{overrides} was accepted and changed nothing in a step"
