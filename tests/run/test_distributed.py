"""Two real ranks (accelerate launch over gloo on CPU): sharding, synced weights, rlnb train, agent
tasks, configs."""

import json

import pytest
import torch
import yaml
from launching import launch
from paths import ROOT, SUPPORT
from tiny_config import TINY

from rlnb.engine.environments.tasks import build_task
from rlnb.run.config.master_config import load_config

pytestmark = pytest.mark.distributed

ACCELERATE_CONFIGS = ROOT / "configs" / "accelerate"
STEPS = 3
SMALL = [*TINY, "grpo.val_period=0", "sft.enabled=false"]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    out = tmp / "out"
    proc = launch([str(SUPPORT / "dist_train_script.py"), str(out), str(STEPS)], ROOT, tmp / "cache")
    assert proc.returncode == 0, proc.stderr[-4000:]
    infos = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    final = [torch.load(out / f"rank{r}.pt") for r in (0, 1)]
    start = [torch.load(out / f"start_rank{r}.pt") for r in (0, 1)]
    return infos, final, start


@pytest.mark.slow
def test_two_processes_really_ran_as_two_ranks(two_ranks):
    infos, final, _ = two_ranks
    assert sorted(i["rank"] for i in infos) == [0, 1]
    assert all(i["world_size"] == 2 and i["torch_world_size"] == 2 for i in infos)
    assert all(len(i["metrics"]) == STEPS for i in infos) and len(final) == 2


@pytest.mark.slow
def test_ranks_end_with_identical_weights_that_training_changed(two_ranks):
    _, (w0, w1), (s0, s1) = two_ranks
    assert w0.keys() == w1.keys() == s0.keys() and len(w0) > 0
    for name in w0:
        assert torch.equal(w0[name], w1[name]), name
        assert torch.equal(s0[name], s1[name]), name
    moved = [n for n in w0 if not torch.equal(w0[n], s0[n])]
    assert len(moved) == len(w0), f"unchanged by GRPO: {sorted(set(w0) - set(moved))}"


@pytest.mark.slow
def test_prompts_are_sharded_by_rank(two_ranks):
    infos, _, _ = two_ranks
    cfg = load_config(None, infos[0]["overrides"])
    P = cfg.grpo.num_prompts_per_step
    stream = [r["prompt"] for r in build_task(cfg.data).train_rows(P * STEPS, cfg.grpo.seed)]
    for step in range(STEPS):
        mine = [set(i["prompts"][step]) for i in infos]
        assert len(mine[0]) == len(mine[1]) == P // 2
        assert not mine[0] & mine[1], f"step {step}: both ranks trained on {mine[0] & mine[1]}"
        rows = stream[step * P : (step + 1) * P]  # the single-process step, split in order
        assert mine[0] == set(rows[: P // 2]) and mine[1] == set(rows[P // 2 :])
    # each rank's rows had signal at some step, so the ranks' gradients really differed
    assert any(sum(i["rows_with_nonzero_advantage"]) for i in infos)


@pytest.mark.slow
def test_ddp_gradient_equals_the_one_process_gradient_of_all_rows(two_ranks):
    infos, _, _ = two_ranks
    for info in infos:
        g = info["gradient_check"]
        assert g["rows_total"] == 2 * g["rows_per_rank"] and g["grad_norm"] > 0
        assert g["rel_diff"] < 1e-5, g  # without loss x world_size it would be 0.5


@pytest.mark.slow
def test_reduced_metrics_agree_across_ranks(two_ranks):
    infos, _, _ = two_ranks
    for m0, m1 in zip(infos[0]["metrics"], infos[1]["metrics"]):
        for key in ("step", "train/reward", "train/loss", "train/grad_norm", "train/global_valid_toks"):
            assert m0[key] == pytest.approx(m1[key], rel=1e-6), key


@pytest.mark.slow
def test_rlnb_train_under_the_launcher_writes_one_run_dir_from_rank_0(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    proc = launch(
        ["-m", "rlnb.cli", "train", *SMALL, "--run-dir", "run", "--steps", "2", "--no-progress"],
        work,
        tmp_path / "cache",
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("rlnb train: done") == 1, proc.stdout  # the summary from rank 0 only
    assert sorted(p.name for p in work.iterdir()) == ["run"]
    run = work / "run"
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]  # each step logged once, not once per rank
    assert (run / "config.yaml").exists()
    assert sorted(p.name for p in (run / "rollouts").iterdir()) == ["steps_000001.parquet"]  # sealed
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step_000002"]
    state = json.loads((run / "checkpoints" / "step_000002" / "trainer_state.json").read_text())
    assert state["current_step"] == 2 and state["data_position"]["consumed_prompts"] == 8


# ---------------------------------------------------------------- agent tasks
@pytest.mark.slow
def test_agent_tasks_train_on_two_ranks_with_their_episodes_counted_over_both(tmp_path):
    """An AgentTask whose ranks make different numbers of generation calls (one rank's episodes
    take two turns, the other's one) and count different broken episodes; a verifiers tool
    environment (tests/support/dist_agent_script.py)."""
    out = tmp_path / "out"
    proc = launch([str(SUPPORT / "dist_agent_script.py"), str(out)], ROOT, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-4000:]
    infos = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [i["world_size"] for i in infos] == [2, 2]
    assert infos[0]["digest"] == infos[1]["digest"]  # the ranks' weights agree
    turns = [[2 if k != "one" else 1 for k in step] for step in infos[0]["kinds"]], \
        [[2 if k != "one" else 1 for k in step] for step in infos[1]["kinds"]]
    assert any(max(a) != max(b) for a, b in zip(*turns)), "no step with unequal generation calls"
    for step in range(2):
        kinds = [k for info in infos for k in info["kinds"][step]]
        for info in infos:  # every rank logs the counts of both ranks' episodes
            m = info["metrics"][step]
            assert m["train/agent/broken_episodes"] == kinds.count("edit")
            assert m["train/global_valid_seqs"] == len(kinds) - kinds.count("edit")
            assert m["train/mean_turns"] == pytest.approx(
                sum(1 if k == "one" else 2 for k in kinds) / len(kinds))
    if "tool_digest" in infos[0]:  # verifiers installed: its tool environment on two ranks
        assert infos[0]["tool_digest"] == infos[1]["tool_digest"]
        assert infos[0]["tool_metrics"]["train/agent/failed_episodes"] == 0.0


@pytest.mark.slow
def test_rlnb_train_runs_the_calculator_recipe_on_two_ranks(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    recipe = ROOT / "configs" / "calculator_tiny.yaml"
    proc = launch(["-m", "rlnb.cli", "train", str(recipe), "sft.enabled=false",
                   "grpo.val_period=0", "grpo.num_prompts_per_step=4",
                   "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=16",
                   "policy.train_micro_batch_size=8", "--run-dir", "run", "--steps", "2",
                   "--no-progress"], work, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = (work / "run" / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["train/agent/failed_episodes"] == 0.0 and "train/mean_turns" in r
               for r in records)


# ---------------------------------------------------------------- accelerate config files
def launch_env(name: str):
    """The launcher's own parsing of a config file: its args, the env it gives each rank, and
    the option names it knows."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    parser = launch_command_parser()
    args = parser.parse_args(["--config_file", str(ACCELERATE_CONFIGS / name), "train.py"])
    args, _, _ = _validate_launch_command(args)
    return args, prepare_multi_gpu_env(args), {a.dest for a in parser._actions}


@pytest.mark.parametrize("name", ["ddp.yaml", "fsdp.yaml", "cpu_2proc.yaml"])
def test_accelerate_config_loads_through_accelerate(name):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file

    config = load_config_from_file(str(ACCELERATE_CONFIGS / name))  # rejects unknown keys
    assert isinstance(config, ClusterConfig)
    raw = yaml.safe_load((ACCELERATE_CONFIGS / name).read_text())
    assert raw["compute_environment"] == "LOCAL_MACHINE" and config.num_machines == 1
    args, env, dests = launch_env(name)
    unknown = [k for k in config.fsdp_config if (k if k.startswith("fsdp_") else f"fsdp_{k}") not in dests]
    assert not unknown, f"fsdp_config keys the launcher does not know: {unknown}"
    assert env["ACCELERATE_MIXED_PRECISION"] == config.mixed_precision
    if name == "cpu_2proc.yaml":  # starts 2 ranks (MULTI_CPU would start one)
        assert args.multi_gpu and not args.cpu and args.num_processes == 2
        assert config.mixed_precision == "no"
    else:
        assert args.num_processes == 8 and config.mixed_precision == "bf16"


def test_ddp_config_is_multi_gpu():
    from accelerate.utils import DistributedType

    args, env, _ = launch_env("ddp.yaml")
    assert args.multi_gpu and not args.use_fsdp and "ACCELERATE_USE_FSDP" not in env
    from accelerate.commands.config.config_args import load_config_from_file

    assert load_config_from_file(str(ACCELERATE_CONFIGS / "ddp.yaml")).distributed_type == DistributedType.MULTI_GPU


def test_fsdp_config_builds_accelerates_plugin(monkeypatch):
    from accelerate.utils import FullyShardedDataParallelPlugin

    args, env, _ = launch_env("fsdp.yaml")
    assert args.use_fsdp and env["ACCELERATE_USE_FSDP"] == "true"
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    plugin = FullyShardedDataParallelPlugin()  # reads and checks the FSDP_* env, as each rank does
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True  # = FULL_SHARD
    assert plugin.transformer_cls_names_to_wrap == ["LlamaDecoderLayer"]
    assert plugin.auto_wrap_policy.__name__ == "transformer_auto_wrap_policy"
    # the class to wrap is the tiny model's block
    from rlnb.engine.models.loading import load_model_and_tokenizer
    from rlnb.engine.models.policy_config import PolicyConfig

    model, _ = load_model_and_tokenizer(PolicyConfig(tiny={"hidden_size": 16, "num_hidden_layers": 1}))
    assert "LlamaDecoderLayer" in {type(m).__name__ for m in model.modules()}
