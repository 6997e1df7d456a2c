"""Bad input, table-driven: each row an input, the exit code or exception, and a fragment of the
message that names the culprit; no row may print a traceback or leave files behind."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from paths import FAKE_NB, ROOT
from tiny_config import TINY

import rlnb
from rlnb.cli import main
from rlnb.run.training.session import TrainingRun

SMALL = [*TINY, "grpo.val_period=2", "grpo.max_val_samples=16", "grpo.max_num_steps=4",
         "sft.max_steps=10", "sft.stop_at_accuracy=null", "checkpointing.save_period=2"]


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def a_run(tmp_path_factory):
    """A finished 4-step run with checkpoints at steps 2 and 4 (copied by each resume row)."""
    root = tmp_path_factory.mktemp("a_run")
    TrainingRun(None, overrides=SMALL, run_dir=root / "run", progress=False,
                log=lambda *a: None).train()
    return root / "run"


def files(where: Path) -> set[str]:
    return {str(p.relative_to(where)) for p in where.rglob("*")
            if "cache" not in p.relative_to(where).parts}


def write(path: str, data: bytes | str) -> str:
    Path(path).write_bytes(data if isinstance(data, bytes) else data.encode())
    return path


# --- rlnb train: configs and overrides (nothing may be written)
TRAIN_ROWS = [
    (["policy.precision=bogus"], "policy.precision"),
    (["grpo.num_prompts_per_step=true"], "grpo.num_prompts_per_step"),
    (["grpo.num_generations_per_prompt=1"], "num_generations_per_prompt=1"),
    (["grpo.num_generations_per_prompt=1.5"], "grpo.num_generations_per_prompt"),
    (["grpo.seed=[1,"], "not valid YAML"),
    (["--steps", "-1"], "--steps"),
    (["logger.wandb_enabled=true"], "wandb"),
    (["policy.tiny.hidden_size=30"], "num_attention_heads"),
    (["policy.max_total_sequence_length=4"], "max_total_sequence_length"),
    (["data.name=math"], "dataset_name"),
    (["data.name=math", "data.dataset_name=missing.json"], "missing.json"),
    (["grpo.adv_estimator.name=opd"], "teacher"),
    (["grpo.adv_estimator.name=nope"], "nope"),
    (["loss_fn.ratio_clip_mx=0.3"], "did you mean 'ratio_clip_max'"),
    (["grpo.sed=1"], "grpo.sed: unknown key; did you mean 'seed'"),  # an optional section too
    (["policy.generation.backend=vllm", "grpo.reuse_generation_logprobs=true"],
     "grpo.reuse_generation_logprobs=true needs a generation backend"),
    (["nosection.x=1"], "unknown section"),
    (["loss_fn.ratio_clip_min=1.5"], "ratio_clip_min"),
    (["loss_fn.reference_policy_kl_type=k4"], "k4"),
    (["loss_fn.truncated_importance_sampling_ratio=2"], "truncated_importance_sampling_type"),
    (["loss_fn.ratio_clip_c=0.5"], "ratio_clip_c"),
    (["policy.generation.temperature=0"], "policy.generation.temperature"),
    (["policy.generation.top_p=1.5"], "policy.generation.top_p"),
    (["grpo.seq_logprob_error_threshold=-1"], "seq_logprob_error_threshold"),
    (["grpo.batch_multiplier=2"], "batch_multiplier"),
    (["env.name=retry"], "max_rollout_turns"),
    (["policy.model_name=/nonexistent/model"], "policy.model_name"),
    (["policy.model_name=./dup.yaml"], "policy.model_name: './dup.yaml' is a file, not a model "
                                       "folder"),
    (["data.name=nosuch"], "nosuch"),
    (["checkpointing.keep_top_k=0"], "checkpointing.keep_top_k"),
    (["grpo.normalize_rewards=maybe"], "normalize_rewards"),
    (["policy.optimizer.lr=-1"], "policy.optimizer.lr"),
    (["grpo.reuse_generation_logprobs=true", "policy.generation.backend=nope"], "nope"),
    (["missing.yaml"], "config file not found"),
    (["bad-utf8.yaml"], "not UTF-8"),
    (["list.yaml"], "mapping"),
    (["broken.yaml"], "not valid YAML"),
    (["data.name=math", "data.dataset_name=garbage.json"], "garbage.json"),
    (["--run-dir", "x", "--resume", "y"], "either --run-dir or --resume"),
    (["--resume", "not-a-run"], "not a run directory"),
    # LoRA: a target the model lacks (close names listed), a module peft cannot wrap
    (["policy.lora.enabled=true", "policy.lora.match_all_linear=false",
      "policy.lora.target_modules=[q_prj]"], "has no module 'q_prj' (did you mean 'q_proj'"),
    (["policy.lora.enabled=true", "policy.lora.exclude_modules=[mlpp]"],
     "policy.lora.exclude_modules: LlamaForCausalLM has no module 'mlpp' (did you mean 'mlp'"),
    (["policy.lora.enabled=true", "policy.lora.match_all_linear=false",
      "policy.lora.target_modules=[input_layernorm]"], "peft cannot add LoRA adapters"),
    (["policy.lora.enabled=true", "policy.lora.match_all_linear=false",
      "policy.lora.target_modules=[embed_tokens]"], "rlnb adapts linear layers"),
    (["policy.lora.enabled=true", "policy.lora.target_modules=[q_proj]"],
     "set match_all_linear: false"),
    (["policy.lora.enabled=true", "policy.lora.quantize=4bit"], "lora.quantize=4bit"),
    (["policy.lora.enabled=true", "policy.lora.quantize=8bit"], "policy.lora.quantize"),
    (["policy.lora.dim=0"], "policy.lora.dim"),
    (["policy.lora.dropout=1"], "policy.lora.dropout"),
    # a key given twice: in rlnb's YAML, in a NeMo-RL file's parent, in an override's value
    (["dup.yaml"], "config file dup.yaml: key 'grpo.seed' appears twice, at lines 2 and 4"),
    (["nemo_child.yaml"], "config file nemo_parent.yaml: key 'grpo.seed' appears twice, at "
                          "lines 2 and 3"),
    (["grpo.adv_estimator={name: grpo, name: gdpo}"], "key 'name' appears twice, on line 1"),
    # a folder where a file belongs, a file where a run directory belongs
    (["a_folder"], "config file a_folder is a directory, not a file"),
    (["--resume", "dup.yaml"], "cannot resume: dup.yaml is a file, not a run directory"),
    (["data.name=math", "data.dataset_name=a_folder.json"],
     "data file 'a_folder.json' is a directory, not a .json file"),
    # nothing to train: refused before a run directory exists (it would hold no checkpoint)
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["grpo.max_num_steps=0"], "grpo.max_num_steps=0: nothing to train"),
]


@pytest.mark.parametrize(("args", "fragment"), TRAIN_ROWS, ids=lambda x: str(x)[:40])
def test_rlnb_train_bad_input_exits_2_names_it_and_writes_nothing(args, fragment, tmp_path,
                                                                   capsys):
    write("bad-utf8.yaml", b"grpo:\n  seed: \xff\xfe\n")
    write("list.yaml", "- 1\n- 2\n")
    write("broken.yaml", "grpo: [1,\n")
    write("garbage.json", "{not json")
    write("dup.yaml", "grpo:\n  seed: 1\n  max_num_steps: 4\n  seed: 2\n")
    write("nemo_child.yaml", "defaults: nemo_parent.yaml\n")
    write("nemo_parent.yaml", "grpo:\n  seed: 1\n  seed: 2\n")
    for folder in ("a_folder", "a_folder.json"):
        Path(folder).mkdir()
    before = files(tmp_path)
    config = args[:1] if not args[0].startswith("-") and "=" not in args[0] else []
    code = main(["train", *config, "--no-progress", *SMALL, *args[len(config):]])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err, out.err
    assert "Traceback" not in out.err + out.out
    assert len(out.err.strip().splitlines()) <= 3, out.err  # one line (a config error lists keys)
    assert files(tmp_path) == before  # nothing written, not even runs/


# --- rlnb train --resume on damaged run directories
def damage_config(run):
    write(run / "config.yaml", b"\xff\x00 not yaml")


def damage_state_empty(run):
    for p in run.glob("checkpoints/step_*/trainer_state.json"):
        p.write_text("{}")


def damage_state_not_json(run):
    for p in run.glob("checkpoints/step_*/trainer_state.json"):
        p.write_text("{not json")


def damage_state_types(run):
    for p in run.glob("checkpoints/step_*/trainer_state.json"):
        state = json.loads(p.read_text())
        state["current_step"] = "four"
        p.write_text(json.dumps(state))


def damage_weights_truncated(run):
    p = next(run.glob("checkpoints/step_000004/model/*.safetensors"))
    p.write_bytes(p.read_bytes()[:200])


def damage_weights_garbage(run):
    p = next(run.glob("checkpoints/step_000004/model/*.safetensors"))
    p.write_bytes(b"garbage" * 10)


def damage_optimizer(run):
    (run / "checkpoints/step_000004/optimizer.pt").write_bytes(b"not a torch file")


def damage_rng_missing(run):
    (run / "checkpoints/step_000004/rng_state.pt").unlink()


def damage_no_model(run):
    shutil.rmtree(run / "checkpoints/step_000004/model")


def damage_no_checkpoints(run):
    shutil.rmtree(run / "checkpoints")


def damage_config_repeated_key(run):
    p = run / "config.yaml"
    p.write_text(p.read_text() + "grpo:\n  seed: 3\n")  # a second grpo: section, by hand


def damage_no_config(run):
    (run / "config.yaml").unlink()


def damage_metrics_garbage(run):
    p = run / "metrics.jsonl"
    p.write_bytes(p.read_bytes() + b"\xff\xfe garbage\n")


def damage_metrics_no_step(run):
    p = run / "metrics.jsonl"
    p.write_text(p.read_text() + '{"train/loss": 1.0}\n')


def damage_rollouts_truncated(run):
    p = run / "rollouts" / "steps_000001.parquet"
    p.write_bytes(p.read_bytes()[:300])


def damage_rollouts_garbage(run):
    p = run / "rollouts" / "steps_000001.parquet"
    p.write_bytes(bytes(range(256)) * 8)


RESUME_ROWS = [
    (damage_config, [], "config.yaml"),
    (damage_no_config, [], "no config.yaml"),
    (damage_state_empty, [], "trainer_state.json"),
    (damage_state_not_json, [], "not JSON"),
    (damage_state_types, [], "integers"),
    (damage_weights_truncated, [], "step_000004 is corrupt"),
    (damage_weights_garbage, [], "the latest intact one is step_000002"),
    (damage_optimizer, [], "optimizer.pt"),
    (damage_rng_missing, [], "rng_state.pt is missing"),
    (damage_no_model, [], "model/ folder is missing"),
    (damage_no_checkpoints, [], "no checkpoint"),
    (damage_no_checkpoints, [], "config.yaml --run-dir NEW_DIR"),  # the way out
    (damage_config_repeated_key, [], "config.yaml: key 'grpo' appears twice"),
    (damage_metrics_garbage, [], "metrics.jsonl:6 is not UTF-8 text"),
    (damage_metrics_no_step, [], "metrics.jsonl:6 is not a metrics record"),
    # a damaged rollout chunk: named, with the way out (the resume stops before writing)
    (damage_rollouts_truncated, [], "steps_000001.parquet is damaged and cannot be read"),
    (damage_rollouts_garbage, [], "move it out of rollouts/"),
    (None, ["grpo.seed=3"], "grpo.seed"),
    (None, ["policy.tiny.hidden_size=64"], "change the numerics"),
]


@pytest.mark.parametrize(("damage", "extra", "fragment"), RESUME_ROWS,
                         ids=lambda x: getattr(x, "__name__", str(x))[:30])
def test_resume_of_a_damaged_run_names_the_file_and_exits_2(damage, extra, fragment, a_run,
                                                            tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    if damage is not None:
        damage(run)
    code = main(["train", "--resume", str(run), "--no-progress", *extra])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err and "Traceback" not in out.err + out.out, out.err


def test_resume_alone_continues_a_run_started_with_overrides(a_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    assert main(["train", "--resume", str(run), "--no-progress", "grpo.max_num_steps=6"]) == 0
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5, 6]


def test_an_existing_run_dir_without_resume_is_refused(a_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    before = (run / "metrics.jsonl").read_text()
    assert main(["train", "--run-dir", str(run), "--no-progress", *SMALL]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (run / "metrics.jsonl").read_text() == before  # nothing appended


# --- a run directory with no checkpoint (a run stopped early) and a finished one, resumed
def stopped_in_its_first_step(run):
    """What a run stopped in its first step leaves: its config and step-0 record, no checkpoint."""
    for folder in ("checkpoints", "rollouts"):
        shutil.rmtree(run / folder)
        (run / folder).mkdir()
    metrics = run / "metrics.jsonl"
    metrics.write_text(metrics.read_text().splitlines(keepends=True)[0])


def logged(run):
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def snapshot(run):
    return {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}


def test_a_run_stopped_in_its_first_step_starts_again_on_resume(a_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    stopped_in_its_first_step(run)
    step_0 = logged(run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 0
    assert "holds no checkpoint and trained no step: starting it again from step 0" in \
        capsys.readouterr().out
    records = logged(run)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]  # step 0 once: measured again
    assert records[0] == step_0[0]  # the same config, the same warm start: the same record
    assert (run / "checkpoints" / "step_000004").is_dir()


def test_a_run_dir_that_trained_no_step_is_reused_without_a_second_step_0(a_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    stopped_in_its_first_step(run)
    assert main(["train", "--run-dir", str(run), "--no-progress", *SMALL]) == 0
    assert [r["step"] for r in logged(run)] == [0, 1, 2, 3, 4]


def test_a_run_stopped_before_its_first_checkpoint_names_the_way_out(a_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    damage_no_checkpoints(run)  # steps 1-4 logged, no checkpoint
    before = snapshot(run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert f"cannot resume {run}: no checkpoint in {run / 'checkpoints'}, though it logged " \
           "steps up to 4" in err
    assert snapshot(run) == before  # nothing written, nothing lost
    way_out = err.split("rlnb train ")[-1].split()  # [RUN/config.yaml, --run-dir, NEW_DIR]
    assert way_out == [str(run / "config.yaml"), "--run-dir", "NEW_DIR"], err
    again = tmp_path / "again"  # and it works
    assert main(["train", way_out[0], "--run-dir", str(again), "--no-progress"]) == 0
    assert [r["step"] for r in logged(again)] == [0, 1, 2, 3, 4]


def test_resuming_a_finished_run_says_there_is_nothing_to_train(a_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    before = snapshot(run)
    assert main(["train", "--resume", str(run), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        f"rlnb train: {run} has trained its 4 steps (grpo.max_num_steps=4): nothing to train; "
        "raise it (grpo.max_num_steps=N) or pass --steps N to go on"]
    assert snapshot(run) == before


def test_a_failure_after_start_up_leaves_error_txt(tmp_path, monkeypatch, capsys):
    from rlnb.engine.trainers.grpo import GRPOTrainer

    def broken(self):
        raise ValueError("the environment returned nonsense")

    monkeypatch.setattr(GRPOTrainer, "step", broken)
    assert main(["train", "--run-dir", "r", "--no-progress", *SMALL, "sft.enabled=false"]) == 2
    assert "nonsense" in capsys.readouterr().err
    assert "failed at step 1" in (tmp_path / "r" / "error.txt").read_text()


def test_a_killed_save_leaves_no_temp_folder_after_the_next_start(a_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(a_run, run)
    (run / "checkpoints" / ".step_000006.x1y2.tmp").mkdir()
    assert main(["train", "--resume", str(run), "--no-progress", "grpo.max_num_steps=5"]) == 0
    assert not list((run / "checkpoints").glob(".step_*"))


# --- PPO (configs/ppo_tiny.yaml): its own sections, and resume of a run with a critic
PPO = str(ROOT / "configs" / "ppo_tiny.yaml")
PPO_SMALL = [
    "policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
    "policy.max_total_sequence_length=20", "policy.generation.max_new_tokens=4",
    "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
    "value.train_micro_batch_size=8", "value.train_global_batch_size=16",
    "ppo.num_prompts_per_step=4", "ppo.num_generations_per_prompt=4", "data.num_val=16",
    "ppo.val_period=2", "ppo.max_val_samples=16", "ppo.max_num_steps=4",
    "ppo.policy_training_start_step=0", "sft.max_steps=10", "sft.stop_at_accuracy=null",
    "checkpointing.save_period=2",
]  # fmt: skip

PPO_ROWS = [
    (["ppo.ppo_epochs=0"], "ppo.ppo_epochs"),
    (["ppo.ppo_epochs=1.5"], "ppo.ppo_epochs"),
    (["ppo.adv_estimator.name=grpo"], "'grpo' is an estimator of GRPO's loop"),
    (["ppo.adv_estimator.name=nope"], "nope"),
    (["ppo.adv_estimator.gae_lambda=1.5"], "ppo.adv_estimator.gae_lambda"),
    (["ppo.policy_training_start_step=9"], "ppo.policy_training_start_step=9 is beyond "
                                           "ppo.max_num_steps=4"),
    (["ppo.ppo_epoch=2"], "ppo.ppo_epoch: unknown key"),
    (["value.nosuch=1"], "value.nosuch: unknown key"),
    (["value.model_name=gpt2"], "value.model_name='gpt2'"),
    (["value.train_global_batch_size=0"], "value.train_global_batch_size"),
    (["value.optimizer.lr=0"], "value.optimizer.lr"),
    (["value.max_grad_norm=-1"], "value.max_grad_norm"),  # was accepted: it flips gradients
    (["value_loss_fn.scale=abc"], "value_loss_fn.scale"),
    (["value_loss_fn.cliprange=-1"], "value_loss_fn.cliprange"),
    (["value_loss_fn.clip=0.2"], "value_loss_fn.clip: unknown key"),
    (["grpo.seed=1"], "grpo: a section of algorithm 'grpo', but algorithm is 'ppo'"),
    (["loss_fn.reference_policy_kl_penalty=0.01"], "reference_policy_kl_penalty"),
    (["algorithm=nosuch"], "unknown training loop"),
]


@pytest.mark.parametrize(("args", "fragment"), PPO_ROWS, ids=lambda x: str(x)[:40])
def test_rlnb_train_bad_ppo_input_exits_2_names_it_and_writes_nothing(args, fragment, tmp_path,
                                                                      capsys):
    before = files(tmp_path)
    code = main(["train", PPO, "--no-progress", *PPO_SMALL, *args])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err, out.err
    assert "Traceback" not in out.err + out.out
    assert len(out.err.strip().splitlines()) <= 3, out.err
    assert files(tmp_path) == before


@pytest.fixture(scope="module")
def a_ppo_run(tmp_path_factory):
    """A finished 4-step PPO run with checkpoints (policy and critic) at steps 2 and 4."""
    root = tmp_path_factory.mktemp("a_ppo_run")
    TrainingRun(PPO, overrides=PPO_SMALL, run_dir=root / "run", progress=False,
                log=lambda *a: None).train()
    assert (root / "run/checkpoints/step_000004/value/model.safetensors").is_file()
    return root / "run"


def damage_critic_truncated(run):
    p = run / "checkpoints/step_000004/value/model.safetensors"
    p.write_bytes(p.read_bytes()[:100])


def damage_critic_optimizer(run):
    (run / "checkpoints/step_000004/value_optimizer.pt").write_bytes(b"not a torch file")


def damage_critic_optimizer_missing(run):
    (run / "checkpoints/step_000004/value_optimizer.pt").unlink()


def damage_critic_folder_missing(run):
    shutil.rmtree(run / "checkpoints/step_000004/value")


def damage_critic_of_another_shape(run):
    """A critic whose head was saved with another width (a checkpoint of another run)."""
    from safetensors.torch import load_file, save_file

    p = run / "checkpoints/step_000004/value/model.safetensors"
    state = load_file(p)
    name = next(k for k in state if k.endswith("weight") and state[k].ndim == 2)
    state[name] = torch.zeros(state[name].shape[0] + 1, state[name].shape[1])
    save_file(state, p)


PPO_RESUME_ROWS = [
    (damage_critic_truncated, [], "value/model.safetensors is unreadable or truncated"),
    (damage_critic_truncated, [], "the latest intact one is step_000002"),
    (damage_critic_optimizer, [], "value_optimizer.pt is unreadable"),
    (damage_critic_optimizer_missing, [], "value_optimizer.pt is missing"),
    (damage_critic_folder_missing, [], "holds no 'value'"),
    (damage_critic_of_another_shape, [], "shape mismatch"),
    (damage_rng_missing, [], "rng_state.pt is missing"),
    (None, ["ppo.ppo_epochs=3"], "ppo.ppo_epochs"),
    (None, ["value.optimizer.lr=0.1"], "value.optimizer.lr"),
]


@pytest.mark.parametrize(("damage", "extra", "fragment"), PPO_RESUME_ROWS,
                         ids=lambda x: getattr(x, "__name__", str(x))[:30])
def test_resume_of_a_damaged_ppo_run_names_the_file_and_exits_2(damage, extra, fragment,
                                                                a_ppo_run, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(a_ppo_run, run)
    if damage is not None:
        damage(run)
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    code = main(["train", "--resume", str(run), "--no-progress", *extra])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err and "Traceback" not in out.err + out.out, out.err
    after = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    assert after == before  # nothing written, nothing dropped


# --- DPO (configs/dpo_tiny.yaml): its section, its pairs, its reference
DPO = str(ROOT / "configs" / "dpo_tiny.yaml")
DPO_SMALL = [
    "policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
    "policy.max_total_sequence_length=20", "policy.generation.max_new_tokens=4",
    "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
    "dpo.num_prompts_per_step=4", "dpo.num_generations_per_prompt=4", "data.num_val=16",
    "dpo.val_period=2", "dpo.max_val_samples=16", "dpo.max_num_steps=4", "sft.max_steps=10",
    "sft.stop_at_accuracy=null", "checkpointing.save_period=2",
]  # fmt: skip
ON_DATASET = ["dpo.pairs.source=dataset"]

DPO_ROWS = [
    (["dpo.use_dynamic_sampling=true"], "dpo: 'use_dynamic_sampling' is not a DPO key"),
    (["dpo.reward_shaping.enabled=true"], "'reward_shaping' is not a DPO key"),
    (["dpo.adv_estimator.name=grpo"], "'adv_estimator' is not a DPO key"),
    (["dpo.skip_reference_policy_logprobs_calculation=true"], "always keeps its reference"),
    (["dpo.val_batches=4"], "'val_batches' is not a DPO key"),
    (["dpo.max_num_epochs=1"], "max_num_epochs=1"),
    (["dpo.reference_policy_kl_penalty=0"], "dpo.reference_policy_kl_penalty"),
    (["dpo.sft_average_log_probs=true"], "sft_average_log_probs=true is not read"),
    (["dpo.num_generations_per_prompt=1"], "dpo.num_generations_per_prompt"),
    (["dpo.pairs.source=nosuch"], "dpo.pairs.source"),
    (["dpo.pairs.pool_prompts=8"], "pool_prompts=8 is not read with source='on_policy'"),
    (["dpo.pairs.seed=1"], "dpo.pairs.seed: unknown key"),
    (["loss_fn.reference_policy_kl_penalty=0.1"], "DPO does not read loss_fn"),
    (["policy.train_global_batch_size=15"], "must be even under DPO"),
    (["env.name=retry"], "rlnb's DPO loop pairs single-turn responses"),
    (["grpo.seed=1"], "grpo: a section of algorithm 'grpo', but algorithm is 'dpo'"),
    ([*ON_DATASET], "dpo.pairs.source=dataset needs pairs"),
    ([*ON_DATASET, "dpo.pairs.dataset=missing.jsonl"], "dpo.pairs.dataset: no file at"),
    ([*ON_DATASET, "dpo.pairs.dataset=no_rejected.jsonl"],
     "dpo.pairs.dataset: row 1 has no 'rejected' column"),
    ([*ON_DATASET, "dpo.pairs.dataset=same.jsonl"],
     "dpo.pairs.dataset: row 0 has identical chosen and rejected responses"),
    ([*ON_DATASET, "dpo.pairs.dataset=garbage.jsonl"], "could not be read"),
    ([*ON_DATASET, "dpo.pairs.dataset=long.jsonl"], "longer than policy.max_total_sequence_length"),
    ([*ON_DATASET, "dpo.pairs.dataset=pairs_folder.jsonl"],
     "dpo.pairs.dataset: a directory, not a file, at 'pairs_folder.jsonl'"),
]


@pytest.mark.parametrize(("args", "fragment"), DPO_ROWS, ids=lambda x: str(x)[:40])
def test_rlnb_train_bad_dpo_input_exits_2_names_it_and_writes_nothing(args, fragment, tmp_path,
                                                                      capsys):
    good = {"prompt": "1+2=", "chosen": "3", "rejected": "4"}
    write("no_rejected.jsonl", json.dumps(good) + "\n" + json.dumps({"prompt": "1+1=",
                                                                     "chosen": "2"}))
    write("same.jsonl", json.dumps({**good, "rejected": "3"}))
    write("garbage.jsonl", "{not json\n")
    write("long.jsonl", json.dumps({**good, "prompt": "1+" * 20 + "=", }))
    Path("pairs_folder.jsonl").mkdir()
    before = files(tmp_path)
    code = main(["train", DPO, "--no-progress", *DPO_SMALL, *args])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err, out.err
    assert "Traceback" not in out.err + out.out
    assert len(out.err.strip().splitlines()) <= 3, out.err
    assert files(tmp_path) == before


def test_preflight_memory_names_a_folder_given_as_its_config(capsys):
    Path("a_folder").mkdir()
    assert main(["preflight", "--memory", "a_folder"]) == 2
    assert capsys.readouterr().err == \
        "rlnb preflight: config file a_folder is a directory, not a file\n"  # not "not found"


# --- rlnb verify
VERIFY_ROWS = [
    (["not-a-run"], "not a run directory"),
    (["RUN", "--from-step", "3"], "no checkpoint at that step"),
    (["RUN", "--from-step", "2", "--steps", "9"], "nothing to compare"),
    (["RUN", "--steps", "0"], "--steps must be at least 1, got 0"),
    (["RUN", "--from-step", "-1"], "--from-step must be at least 0, got -1"),
    (["a_file"], "a_file is a file, not a run directory"),
]


@pytest.mark.parametrize(("args", "fragment"), VERIFY_ROWS, ids=lambda x: str(x)[:30])
def test_rlnb_verify_bad_input(args, fragment, a_run, capsys):
    args = [str(a_run) if a == "RUN" else a for a in args]
    write("a_file", "not a run")
    assert main(["verify", *args]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err, err


# --- rlnb run / sweep / launch (nothing written for bad arguments)
NOTEBOOK_ROWS = [
    (["run", "README.md"], "not a notebook"),
    (["run", "fake.json.ipynb"], "not a Jupyter notebook"),
    (["run", "missing.ipynb"], "no notebook"),
    (["run", "FAKE", "-p", "nosuch", "1"], "has no parameter nosuch"),
    (["run", "FAKE", "-p", "overrides", "grpo.seed=1"], "list of 'dotted.key=value'"),
    (["run", "FAKE", "-p", "run_dir", "x"], "run_dir is set by the command"),
    (["run", "FAKE", "--run-dir", "full"], "not empty"),
    (["run", "FAKE", "--kernel", "nosuch-kernel"], "no Jupyter kernel"),
    (["sweep", "FAKE", "-p", "seed", "0,1", "-p", "nosuch", "1"], "nosuch"),
    (["launch", "--num-processes", "0", "FAKE"], "num_processes"),
    # values checked against the parameters cell's defaults and the config schema
    (["run", "FAKE", "-p", "seed", "abc"], "-p seed: 'abc' is not an int (the default in "
                                           "fake_metrics.ipynb's parameters cell is 0)"),
    (["run", "FAKE", "-p", "fast", "3"], "-p fast: 3 is not a bool"),
    (["run", "FAKE", "-p", "loss_fn.ratio_clip_mx", "0.28"],
     "-p loss_fn.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'?"),
    (["run", "FAKE", "-p", "loss_fn.ratio_clip_max", "abc"],
     "-p loss_fn.ratio_clip_max: Input should be a valid number"),
    (["run", "FAKE", "-p", "overrides", "[grpo.sed=1]"], "-p overrides: grpo.sed: unknown key"),
    (["sweep", "FAKE", "-p", "seed", "0,x"], "-p seed: 'x' is not an int"),
    (["sweep", "FAKE", "-p", "loss_fn.ratio_clip_max", "0.2,big"],
     "-p loss_fn.ratio_clip_max: Input should be a valid number"),
    (["launch", "--num-processes", "1", "FAKE", "-p", "seed", "abc"],
     "-p seed: 'abc' is not an int"),
    (["run", "FAKE", "-p", "seed", "{a: 1, a: 2}"], "key 'a' appears twice"),
    # a folder where the notebook belongs, a file where a folder belongs
    (["run", "full"], "full is a directory, not a notebook: give the .ipynb file"),
    (["sweep", "full"], "full is a directory, not a notebook"),
    (["launch", "--num-processes", "1", "full"], "full is a directory, not a notebook"),
    (["run", "FAKE", "--run-dir", "README.md"], "README.md is a file, not a directory"),
    (["sweep", "FAKE", "-p", "seed", "0,1", "--root", "README.md"],
     "--root README.md is a file, not a directory"),
    # numbers that must be positive
    (["sweep", "FAKE", "--jobs", "0"], "--jobs must be at least 1, got 0"),
    (["sweep", "FAKE", "--cpus-per-run", "0"], "--cpus-per-run must be at least 1"),
    (["launch", "--num-processes", "1", "--num-machines", "0", "FAKE"],
     "--num-machines must be at least 1"),
]


@pytest.mark.parametrize(("args", "fragment"), NOTEBOOK_ROWS, ids=lambda x: str(x)[:40])
def test_notebook_commands_bad_input_exit_2_and_write_nothing(args, fragment, tmp_path, capsys):
    pytest.importorskip("papermill")
    shutil.copy(ROOT / "README.md", "README.md")
    write("fake.json.ipynb", '{"not": "a notebook"}')
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    before = files(tmp_path)
    code = main([str(FAKE_NB) if a == "FAKE" else a for a in args])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err and "Traceback" not in out.err + out.out, out.err
    assert len(out.err.splitlines()) == 1, out.err
    assert files(tmp_path) == before


# --- a user's reward functions and data (reward_funcs, data.name=dataset)
USER_ROWS_DATA = [{"question": f"{a}+{b}=", "solution": str(a + b)}
                  for a in range(6) for b in range(6)]
USER = ["data.name=dataset", "data.path=rows.jsonl", "data.prompt_key=question",
        "data.num_val=4", "sft.enabled=false"]


def user_module(tmp_path, body: str) -> str:
    """A reward module with a unique name (in-process runs share sys.modules); its name."""
    import hashlib

    name = "rw_" + hashlib.sha1(f"{tmp_path}{body}".encode()).hexdigest()[:10]
    (tmp_path / f"{name}.py").write_text("import math\n\n\ndef good(completions, **kw):\n"
                                         "    return [0.0] * len(completions)\n\n\n"
                                         "def narrow(completions, solution):\n"
                                         "    return [0.0] * len(completions)\n\n\n" + body)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in USER_ROWS_DATA))
    return name


# rows that fail when the run starts: exit 2, one line, nothing written
USER_START_ROWS = [
    (["reward_funcs=[MOD:good]", "data.prompt_key=prompt"],
     "has no 'prompt' column (columns: ['question', 'solution'])"),
    (["reward_funcs=[no_such_module_q:good]"], "reward_funcs[0]: cannot import 'no_such_module_q'"),
    (["reward_funcs=[MOD:nope]"], "has no function 'nope'"),
    (["reward_funcs=[not a reference]"], "is not 'module:function'"),
    (["reward_funcs=[MOD:good]", "data.correct_reward=nope"], "data.correct_reward='nope'"),
    (["reward_funcs=[MOD:good]", "data.path=missing.jsonl"], "missing.jsonl"),
    ([], "has no reward of its own"),
    (["reward_funcs=[MOD:good, MOD:good]"], "two functions are called 'good'"),
    (["reward_funcs=[MOD:good]", "data.prompt_key=question", "sft.enabled=true"],
     "has no 'answer' column"),
    # refused when the functions are resolved, not at the first step's call
    (["reward_funcs=[MOD:narrow]"], "reward_funcs[0] (narrow) cannot take TRL's keyword "
                                    "arguments: it has no 'prompts' parameter and no **kwargs"),
    # a folder where a module or a data file belongs
    (["reward_funcs=[a_folder:good]"], "reward_funcs[0]: 'a_folder' is a directory"),
    (["reward_funcs=[MOD:good]", "imports=[a_folder]"], "imports: 'a_folder' is a directory"),
    (["reward_funcs=[MOD:good]", "data.path=rows_folder.jsonl"],
     "data file 'rows_folder.jsonl' is a directory, not a .jsonl file"),
    (["reward_funcs=[MOD:good, {func: MOD:good, name: g2}]", "grpo.adv_estimator.name=gdpo",
      "grpo.adv_estimator.reward_weights=[1.0]"],
     "grpo.adv_estimator.reward_weights has 1 entries for 2 reward components"),
]


@pytest.mark.parametrize(("args", "fragment"), USER_START_ROWS, ids=lambda x: str(x)[:40])
def test_a_users_bad_functions_or_data_at_start_exit_2_and_write_nothing(args, fragment,
                                                                        tmp_path, capsys):
    mod = user_module(tmp_path, "")
    for folder in ("a_folder", "rows_folder.jsonl"):
        (tmp_path / folder).mkdir()
    before = files(tmp_path)
    code = main(["train", "--no-progress", *SMALL, *USER,
                 *[a.replace("MOD", mod) for a in args]])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err and "Traceback" not in out.err + out.out, out.err
    assert len(out.err.strip().splitlines()) <= 3, out.err
    assert files(tmp_path) - {"__pycache__"} - {p for p in files(tmp_path)
                                                if "__pycache__" in p} == before


# functions that misbehave at the third step: exit 2 at the point of failure, one line naming
# the function (and the row and prompt), the steps before it kept with error.txt beside them
WHEN = "    if kw['trainer_state'].global_step < 2:\n        return [0.0] * len(completions)\n"
USER_STEP_ROWS = [
    ("    return [1 / (int(s) * 0) for s in solution]\n",
     "reward function 'bad' raised ZeroDivisionError: division by zero"),
    ("    return [0.0] * (len(completions) - 1)\n", "returned 15 scores for 16 completions"),
    ("    return ['x'] * len(completions)\n", "returned 'x' (str) at row 0 (prompt '"),
    ("    return [math.nan] * len(completions)\n", "returned nan at row 0"),
    ("    return [math.inf] * len(completions)\n", "returned inf at row 0"),
    ("    return 1.0\n", "returned a float, not a list of 16 scores"),
]


@pytest.mark.parametrize(("body", "fragment"), USER_STEP_ROWS, ids=lambda x: str(x)[:30])
def test_a_reward_function_failing_mid_run_keeps_the_steps_before_it(body, fragment, tmp_path,
                                                                    capsys):
    mod = user_module(tmp_path, "def bad(completions, solution, **kw):\n" + WHEN + body)
    code = main(["train", "--run-dir", "r", "--no-progress", *SMALL, *USER,
                 f"reward_funcs=[{mod}:bad]", "grpo.val_period=0"])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert fragment in out.err and "Traceback" not in out.err + out.out, out.err
    assert len(out.err.strip().splitlines()) == 1, out.err
    if "raised" in fragment:
        assert "at row" in out.err and "(prompt '" in out.err and f"[{mod}.py:" in out.err
    steps = [json.loads(x)["step"] for x in (tmp_path / "r/metrics.jsonl").read_text()
             .splitlines()]
    assert steps == [1, 2]  # the steps before the failure
    assert (tmp_path / "r/checkpoints/step_000002").is_dir()
    assert "failed at step 3" in (tmp_path / "r/error.txt").read_text()


# --- the Python API
def tiny_trainer():
    return rlnb.GRPOTrainer(rlnb.load_config(None, preset="fast"))


def ppo_trainer():
    return rlnb.PPOTrainer(rlnb.load_config(PPO, ["sft.enabled=false"], preset="fast"))


def dpo_trainer(*extra):
    return rlnb.DPOTrainer(rlnb.load_config(DPO, ["sft.enabled=false", *extra], preset="fast"))


def dpo_dataset_trainer(rows):
    return rlnb.DPOTrainer(rlnb.load_config(DPO, ["sft.enabled=false", *ON_DATASET],
                                            preset="fast"), pairs=rows)


def uncopyable_policy():
    """A policy built without a reference copy, whose model holds what deepcopy cannot copy
    (a user's model object with a lock, an open handle, ...)."""
    import threading

    from rlnb.engine.models.policy import Policy

    config = rlnb.load_config(DPO, ["sft.enabled=false"], preset="fast")
    policy = Policy(config.policy, need_reference=False)
    policy.model.lock = threading.Lock()
    return lambda: rlnb.DPOTrainer(config, policy=policy)


def grpo_advantage_batch():
    t = tiny_trainer()
    return t.compute_advantages(t.rollout())


def ppo_advantages(estimator):
    t = ppo_trainer()
    batch = t.rollout()
    return t.compute_advantages(batch, t.compute_values(batch), estimator)


def loss_call(**change):
    B, T = 2, 3
    args = dict(logprobs=torch.full((B, T), -1.0), prev_logprobs=torch.full((B, T), -1.0),
                generation_logprobs=torch.full((B, T), -1.0), advantages=torch.ones(B, T),
                token_mask=torch.ones(B, T), sample_mask=torch.ones(B))
    kwargs = dict(global_valid_seqs=B, global_valid_toks=B * T, reference_policy_kl_penalty=0.0)
    for k, v in change.items():
        (args if k in args else kwargs)[k] = v
    return lambda: rlnb.clipped_pg_loss(*args.values(), **kwargs)


API_ROWS = [
    (lambda: rlnb.GRPOTrainer(42), TypeError, "load_config"),
    (lambda: rlnb.load_config(None, "grpo.seed=1"), ValueError, "list"),
    (lambda: rlnb.load_config(None, preset="nosuch"), ValueError, "unknown config preset"),
    (lambda: rlnb.load_config(42), ValueError, "a config is"),
    (loss_call(advantages=torch.full((2, 3), float("nan"))), ValueError, "advantages"),
    (loss_call(global_valid_toks=0), ValueError, "global_valid_toks"),
    (loss_call(logprobs=torch.full((2, 3), 0.5)), ValueError, "logprobs"),
    (loss_call(logprobs=torch.zeros(0, 3), prev_logprobs=torch.zeros(0, 3),
               generation_logprobs=torch.zeros(0, 3), advantages=torch.zeros(0, 3),
               token_mask=torch.zeros(0, 3), sample_mask=torch.zeros(0)), ValueError, "empty"),
    (loss_call(reference_policy_kl_type="k4", reference_policy_kl_penalty=0.1,
               reference_logprobs=torch.full((2, 3), -1.0)), ValueError, "k4"),
    (lambda: rlnb.grpo_advantages(torch.tensor([[0], [0]]), torch.tensor([1.0, float("nan")])),
     ValueError, "rewards"),
    (lambda: tiny_trainer().policy.logprobs(torch.tensor([[1, 999]]), torch.ones(1, 2)),
     ValueError, "outside the vocabulary"),
    (lambda: tiny_trainer().policy.optimizer_step(None, None), ValueError, "optimizer_step"),
    (lambda: tiny_trainer().reconfigure({"policy.train_global_batch_size": 8}), ValueError,
     "cannot change between steps"),
    (lambda: tiny_trainer().reconfigure({"loss_fn.reference_policy_kl_penalty": 0.1}),
     ValueError, "reference model"),
    (lambda: list(tiny_trainer().train(-1)), ValueError, "num_steps"),
    (lambda: rlnb.PPOTrainer(42), TypeError, "load_config"),
    (lambda: rlnb.PPOTrainer(rlnb.load_config(None, preset="fast")), ValueError,
     "PPOTrainer needs a config with algorithm: ppo"),
    (lambda: rlnb.GRPOTrainer(rlnb.load_config(PPO, preset="fast")), ValueError,
     "GRPOTrainer needs a config with algorithm: grpo; this one has algorithm: 'ppo'"),
    (lambda: ppo_advantages({"name": "grpo"}), ValueError, "'grpo' is an estimator of GRPO's loop"),
    (lambda: ppo_advantages({"gae_lambda": 2.0}), ValueError, "gae_lambda"),
    (lambda: tiny_trainer().compute_advantages(None), TypeError,
     "GRPOTrainer.compute_advantages takes the RolloutBatch"),
    (lambda: tiny_trainer().update(None), TypeError, "GRPOTrainer.update takes the AdvantageBatch"),
    (lambda: ppo_trainer().compute_values({"input_ids": None}), TypeError,
     "PPOTrainer.compute_values takes the RolloutBatch"),
    (lambda: ppo_trainer().update_critic(None), TypeError, "PPOTrainer.update_critic"),
    (lambda: ppo_trainer().update_policy(None), TypeError, "PPOTrainer.update_policy"),
    (lambda: ppo_trainer().update(grpo_advantage_batch()), TypeError,  # a GRPO stage's batch
     "PPOTrainer.update takes the PPOAdvantageBatch that the stage before it returns, got "
     "AdvantageBatch"),
    (lambda: rlnb.DPOTrainer(42), TypeError, "load_config"),
    (lambda: rlnb.DPOTrainer(rlnb.load_config(None, preset="fast")), ValueError,
     "DPOTrainer needs a config with algorithm: dpo; this one has algorithm: 'grpo'"),
    (uncopyable_policy(), ValueError, "DPO cannot build its reference policy"),
    (lambda: dpo_trainer().update(None), TypeError,
     "DPOTrainer.update takes the PreferenceBatch that the stage before it returns, got "
     "NoneType"),
    (lambda: dpo_trainer().update(grpo_advantage_batch()), TypeError,
     "DPOTrainer.update takes the PreferenceBatch"),
    (lambda: (lambda t: t.update(t.pairs()))(dpo_trainer()), ValueError,
     r"run trainer.reference_logprobs\(batch\) first"),
    (lambda: (lambda t: t.compute_loss(t.pairs()))(dpo_trainer()), ValueError,
     r"run trainer.reference_logprobs\(batch\) first"),
    (lambda: dpo_trainer("dpo.pairs.source=warm_start", "dpo.pairs.pool_prompts=8").pairs(),
     ValueError, "no pair in 8 prompts x 4 samples"),  # an untrained policy: always wrong
    (lambda: dpo_dataset_trainer([{"prompt": "1+1=", "chosen": "2", "rejected": "3"}])
     .pairs([{"prompt": "1+1="}]), ValueError, r"pairs\(rows=...\) samples pairs"),
    (lambda: rlnb.DPOTrainer(rlnb.load_config(DPO, ["sft.enabled=false"], preset="fast"),
                             pairs=[]), ValueError, "pairs= is read with dpo.pairs.source=dataset"),
    (lambda: dpo_dataset_trainer([{"prompt": "1+1=", "chosen": "2", "rejected": "2"}]),
     ValueError, "pairs: row 0 has identical chosen and rejected"),
    (lambda: dpo_dataset_trainer([{"prompt": "1+1=", "chosen": "2"}]), ValueError,
     "pairs: row 0 has no 'rejected' column"),
    (lambda: dpo_dataset_trainer([]), ValueError, "pairs: no rows"),
    (lambda: dpo_dataset_trainer("nope.jsonl"), ValueError, "pairs: no file at 'nope.jsonl'"),
    (lambda: rlnb.preference_pairs(torch.ones(3), 1), ValueError, "rewards"),
    (lambda: rlnb.preference_pairs(torch.ones(2, 3), 0), ValueError, "pairs_per_prompt"),
]


# ids from the row, never from the lambda (whose repr holds a memory address): parallel workers
# must collect the same names
@pytest.mark.parametrize(("call", "error", "fragment"), API_ROWS,
                         ids=[f"{i}-{error.__name__}-{fragment[:30]}"
                              for i, (_, error, fragment) in enumerate(API_ROWS)])
def test_python_api_bad_input_raises_a_clear_error(call, error, fragment):
    with pytest.raises(error, match=fragment):
        call()


def test_the_cli_prints_no_traceback_in_a_real_process(tmp_path):
    """Three rows through a real `rlnb` process: stderr holds one line, no traceback."""
    for args in (["train", "policy.precision=bogus"], ["train", "grpo.seed=[1,"],
                 ["run", str(ROOT / "README.md")]):
        proc = subprocess.run([sys.executable, "-m", "rlnb.cli", *args], capture_output=True,
                              text=True, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert list(tmp_path.iterdir()) == []


def test_the_table_has_at_least_60_rows():
    rows = (TRAIN_ROWS + RESUME_ROWS + PPO_ROWS + PPO_RESUME_ROWS + DPO_ROWS + VERIFY_ROWS
            + NOTEBOOK_ROWS + API_ROWS + USER_START_ROWS + USER_STEP_ROWS)
    assert len(rows) >= 60, len(rows)


# --- machine faults: a full disk


@pytest.fixture
def small_disk(tmp_path):
    """A real 2 MiB filesystem (tmpfs): a checkpoint of the tiny model does not fit."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot mount a 2 MiB tmpfs here: {made.stderr.strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_a_full_disk_is_named_with_its_folder_and_the_space(small_disk, capsys):
    run = small_disk / "run"
    code = main(["train", "--run-dir", str(run), "--no-progress", *SMALL,
                 "policy.tiny.hidden_size=128"])
    err = capsys.readouterr().err
    assert code == 1, err  # a machine fault, not a user's mistake
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"no space left on the device of {run / 'checkpoints'}: checkpoint step_000002 " \
           "needs about" in err and "MiB free" in err, err
    # what was written before is intact: the steps logged, and error.txt names the step whose
    # save failed (step 2, not 3)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]
    assert (run / "error.txt").read_text().startswith("failed at step 2 (DiskFull): no space")
    assert not list((run / "checkpoints").glob("step_*"))  # no half-written checkpoint


def test_a_warm_start_cache_on_a_full_disk_costs_time_not_the_run(small_disk, tmp_path,
                                                                   monkeypatch, capsys):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(small_disk))
    code = main(["train", "--run-dir", str(tmp_path / "run"), "--no-progress", *SMALL,
                 "policy.tiny.hidden_size=256", "sft.enabled=true", "grpo.max_num_steps=1",
                 "checkpointing.enabled=false"])
    out = capsys.readouterr()
    assert code == 0, out.err
    said = [x for x in out.out.splitlines() if x.startswith("warm start: not cached at")]
    assert len(said) == 1 and "No space left on device" in said[0], out.out
    assert not list(small_disk.glob("warm_start/*"))  # nothing half-written left in the cache
