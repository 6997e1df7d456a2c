"""NeMo-RL's configs as it ships them: the keys its shipped files use beyond the
grpo_math_1B shape keep NeMo-RL's meaning (the Megatron optimizer, the two leave-one-out flags,
the response budget, the scheduler's cadence, val_period -1, oc.env, DAPO's verifier, stop token
ids, DPO), and the five loops the docs name train a few steps on a tiny model."""

import json
import subprocess
import sys

import pytest
import torch
from nemo_shaped_configs import (  # noqa: F401 (offline: an autouse fixture)
    dpo_shaped,
    gdpo_shaped,
    grpo_shaped,
    load_written,
    megatron,
    nemo_assets,
    offline,
    ppo_shaped,
    prorl_shaped,
    write_yaml,
)
from paths import ROOT

import rlnb
from rlnb.engine.environments.dapo_verify import dapo_correct, normalise
from rlnb.engine.models.backend import Generations, response_mask_and_truncation
from rlnb.engine.models.context_budget import capped_to_context
from rlnb.run.config.master_config import read_yaml
from rlnb.run.config.nemo.reader import resolve_interpolations, unset_env_keys


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    return nemo_assets(tmp_path_factory.mktemp("nemo_shipped"))


load = load_written


# --------------------------------------------------------------------------- meaning


def test_the_megatron_back_end_trains_with_its_own_optimizer_and_schedule(assets):
    cfg = megatron(grpo_shaped(assets["model"], assets["data"]))
    cfg["policy"]["train_global_batch_size"] = 4  # two optimizer steps per step of 8 rows
    c = load(assets, cfg)
    o = c.policy.optimizer
    # Megatron's adam is AdamW; its betas and eps are adam_beta1/2 and adam_eps
    assert (o.lr, o.weight_decay, o.betas, o.eps) == (1e-3, 0.1, (0.9, 0.98), 1e-5)
    # lr_warmup_init 1e-4 -> lr 1e-3 over lr_warmup_iters 2: start factor 1e-4 / 1e-3
    assert (o.warmup_steps, o.warmup_start_factor) == (2, pytest.approx(0.1))
    assert o.warmup_counts == "training_steps"  # NeMo-RL ticks once per train() call
    assert c.policy.max_grad_norm == 0.5  # megatron_cfg.optimizer.clip_grad, not policy's 1.0


def test_warmup_counts_is_refused_where_it_would_change_nothing():
    """One global batch per step: one optimizer step per step, both cadences the same."""
    base = ["sft.enabled=false", "policy.optimizer.warmup_steps=4",
            "policy.optimizer.warmup_counts=training_steps", "grpo.num_prompts_per_step=4",
            "grpo.num_generations_per_prompt=4"]
    with pytest.raises(ValueError, match=r"warmup_counts=training_steps changes nothing here: "
                                         r"policy\.train_global_batch_size=16 holds all 16 rows"):
        rlnb.load_config(None, [*base, "policy.train_global_batch_size=16",
                                "policy.train_micro_batch_size=16"])
    c = rlnb.load_config(None, [*base, "policy.train_global_batch_size=8",
                                "policy.train_micro_batch_size=8"])
    assert c.policy.optimizer.warmup_counts == "training_steps"


def test_megatron_weight_decay_is_its_constant_end_value(assets):
    cfg = megatron(grpo_shaped(assets["model"], assets["data"]))
    cfg["policy"]["megatron_cfg"]["scheduler"].update(start_weight_decay=0.05,
                                                      end_weight_decay=0.05)
    assert load(assets, cfg).policy.optimizer.weight_decay == 0.05  # what Megatron applies
    cfg["policy"]["megatron_cfg"]["scheduler"].update(end_weight_decay=0.2,
                                                      weight_decay_incr_style="linear")
    with pytest.raises(ValueError, match=r"weight_decay_incr_style: 'linear' from 0\.05 to 0\.2"):
        load(assets, cfg)


def test_the_two_leave_one_out_flags_keep_their_own_meaning(assets):
    """NeMo-RL's loop flag feeds the per-prompt std of dynamic sampling and the metrics, the
    estimator's the advantages: for rewards [1, 0, 0] the first answer's std differs."""
    c = load(assets, prorl_shaped(assets["model"], assets["data"]))
    assert c.grpo.leave_one_out is True  # grpo.use_leave_one_out_baseline
    assert c.grpo.adv_estimator.use_leave_one_out_baseline is False
    prompts, rewards = torch.zeros(3, 1, dtype=torch.long), torch.tensor([1.0, 0.0, 0.0])
    _, loo = rlnb.calculate_baseline_and_std_per_prompt(prompts, rewards, leave_one_out=True)
    _, full = rlnb.calculate_baseline_and_std_per_prompt(prompts, rewards, leave_one_out=False)
    assert loo[0] == 0.0  # the others, [0, 0], agree
    assert full[0] == pytest.approx(3 ** -0.5)  # Bessel std of [1, 0, 0]
    # given alone, the loop's flag sets both (NeMo-RL's files interpolate it into the estimator)
    alone = rlnb.load_config({"grpo": {"use_leave_one_out_baseline": False}})
    assert alone.grpo.leave_one_out is False
    assert alone.grpo.adv_estimator.use_leave_one_out_baseline is False


def test_the_trainer_reads_the_loops_flag_for_its_std(assets):
    c = rlnb.load_config(None, ["sft.enabled=false", "grpo.num_prompts_per_step=4",
                                "grpo.num_generations_per_prompt=4", "grpo.val_at_start=false",
                                "grpo.adv_estimator.use_leave_one_out_baseline=false"])
    c = rlnb.load_config(c.model_dump(mode="json") | {
        "grpo": {**c.grpo.model_dump(mode="json"), "use_leave_one_out_baseline": True}})
    trainer = rlnb.GRPOTrainer(c)
    batch = trainer.rollout()
    batch.rewards = torch.tensor([1.0, 0.0, 0.0, 0.0]).repeat(4)  # one right answer per group
    adv = trainer.compute_advantages(batch)
    # the right answer's others all agree: std 0 with leave-one-out, 0.5 without
    assert adv.std.view(4, 4)[:, 0].tolist() == [0.0] * 4  # the loop's flag (True)
    assert adv.std.view(4, 4)[:, 1].tolist() == pytest.approx([0.5774] * 4, abs=1e-4)


def test_val_period_minus_one_turns_validation_off(assets):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["grpo"]["val_period"] = -1  # NeMo-RL: never
    assert load(assets, cfg).grpo.val_period == 0  # rlnb's never


def test_oc_env_reads_the_environment_with_its_default(monkeypatch):
    monkeypatch.setenv("RLNB_TEST_DIR", "/data/run")
    data = resolve_interpolations({"a": "${oc.env:RLNB_TEST_DIR}", "b": "${oc.env:NOPE_X,logs}",
                                   "c": "${oc.env:NOPE_X,${d}}", "d": 3, "e": "x/${oc.env:NOPE_X,y}"})
    # OmegaConf's oc.env gives a string, its default too (null stays None): "3", not 3
    assert data == {"a": "/data/run", "b": "logs", "c": "3", "d": 3, "e": "x/y"}
    assert resolve_interpolations({"a": "${oc.env:NOPE_X,null}"}) == {"a": None}
    # unset without a default: kept as its text, as OmegaConf resolves lazily (an ignored key
    # may hold it); a key rlnb uses is refused, naming the variable
    unset = resolve_interpolations({"a": "${oc.env:NOPE_X}", "b": "${oc.env:NOPE_X}/venvs"})
    assert unset == {"a": "${oc.env:NOPE_X}", "b": "${oc.env:NOPE_X}/venvs"}
    assert unset["a"].variable == "NOPE_X"
    assert unset_env_keys({"x": unset, "y": [1, unset["b"]]}) == {
        "x.a": "${oc.env:NOPE_X}", "x.b": "${oc.env:NOPE_X}/venvs", "y.1": "${oc.env:NOPE_X}/venvs"}


def test_an_unset_variable_blocks_only_a_key_rlnb_uses(assets, monkeypatch):
    monkeypatch.delenv("NOPE_X", raising=False)
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["logger"]["log_dir"] = "${oc.env:NOPE_X}/logs"  # ignored: loads
    load(assets, cfg)
    cfg["policy"]["model_name"] = "${oc.env:NOPE_X}"
    with pytest.raises(ValueError, match=r"policy.model_name.*'\$\{oc.env:NOPE_X\}' needs an "
                       "environment variable that is not set"):
        load(assets, cfg, "unset.yaml")


def test_the_response_budget_is_what_the_prompt_leaves():
    """NeMo-RL's ``max_new_tokens: ${policy.max_total_sequence_length}``: each response fills
    what its own prompt leaves of the total (vLLM's max_model_len stops it there)."""
    ids = torch.tensor([[5, 6, 7, 8, 9], [5, 6, 7, 8, 9], [5, 6, 3, 0, 0]])  # 3 = EOS, 0 = pad
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 0, 0]])
    gens = Generations(torch.zeros(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long),
                       ids, mask, mask.float() * -0.5, torch.tensor([True, False, False]),
                       ["a", "b", "c"])

    class Tok:
        pad_token_id = 0

        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(96 + i) for i in ids)

    room = torch.tensor([2, 4, 2])  # total - each prompt's length
    out = capped_to_context(gens, room, Tok())
    assert out.response_mask.tolist() == [[1, 1, 0, 0, 0], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert out.response_ids[0].tolist() == [5, 6, 0, 0, 0]
    assert out.truncated.tolist() == [True, False, True]  # row 2 lost its EOS to the cut
    assert out.texts == ["ef", "b", "ef"]  # cut rows decoded again
    assert out.generation_logprobs.sum().item() == pytest.approx(-0.5 * 7)


def test_fill_context_rollouts_end_at_the_total_length():
    c = rlnb.load_config(None, ["sft.enabled=false", "policy.max_total_sequence_length=14",
                                "policy.generation.max_new_tokens=14",
                                "policy.generation.fill_context=true",
                                "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=4"])
    batch = rlnb.GRPOTrainer(c).rollout()
    prompt = batch.prompt_ids.ne(0).sum(1)  # left-padded with 0
    total = prompt + batch.response_lengths
    assert int(total.max()) <= 14
    filled = total == 14  # an untrained model rarely stops: most rows fill their own room
    assert bool(filled.any()) and bool(batch.truncated[filled & (batch.response_lengths > 0)]
                                       .float().mean() > 0)
    assert len(set(prompt[filled].tolist())) > 1  # prompts of several lengths, each its room


def test_stop_token_ids_end_a_response_like_eos():
    ids = torch.tensor([[4, 9, 5, 5], [4, 4, 4, 4], [3, 9, 0, 0]])
    mask, truncated = response_mask_and_truncation(ids, [3, 9], 0)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]]
    assert truncated.tolist() == [False, True, False]
    c = rlnb.load_config(None, ["sft.enabled=false", "policy.generation.max_new_tokens=8",
                                "policy.generation.stop_token_ids=[6]"])
    trainer = rlnb.GRPOTrainer(c)
    batch = trainer.rollout()
    for row, n in zip(batch.input_ids[:, batch.prompt_ids.shape[1]:], batch.response_lengths):
        tokens = row[:n].tolist()
        assert 6 not in tokens[:-1]  # nothing after a stop id
    assert any(row[n - 1] == 6 for row, n in zip(
        batch.input_ids[:, batch.prompt_ids.shape[1]:], batch.response_lengths) if n > 0)


@pytest.mark.parametrize("response, reference, correct", [
    ("so it is 12.\nAnswer: $1,000$", "1000", True),         # $..$ and a number's commas
    ("Answer: \\frac12", "\\frac{1}{2}", True),              # TeX shorthand completed
    ("Answer: 0.5", "\\frac{1}{2}", False),                  # no symbolic equivalence
    ("Answer: 10 degrees", "10", True),                      # unit words dropped
    ("Answer: x = 7", "7", True),                            # the part after the last =
    ("answer : 7\nthen Answer: 8", "8", True),               # the last Answer: counts
    ("the sum is 7", "7", False),                            # no Answer: at all
    ("Answer: 7" + " " * 300, "7", False),                   # outside the last 300 characters
])
def test_dapo_verifier_matches_normalised_strings(response, reference, correct):
    assert dapo_correct(response, reference)[0] is correct
    assert normalise("\\boxed{10}") == "10" and normalise("\\text{(A)}") == "(A)"


def test_dapo_math_verify_scores_with_dapos_verifier(assets, tmp_path):
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["env"]["math"]["math_verify_impl"] = "dapo_math_verify"
    c = load(assets, cfg)
    assert c.data.verifier == "dapo"  # the math task's setting
    from rlnb.engine.environments.math_task import MathTask

    task = MathTask(assets["data"], prompt_key="problem", answer_key="expected_answer",
                    num_val=2, verifier="dapo")
    rows = [{"answer": "7"}, {"answer": "7"}]
    r = task.score(["q", "q"], ["Answer: 7", "7"], rows)
    assert r.total.tolist() == [1.0, 0.0]  # math_verify would accept the bare 7
    assert r.components["format"].tolist() == [1.0, 0.0]


def test_a_dpo_yaml_loads_into_rlnbs_dpo_loop(assets):
    c = load(assets, dpo_shaped(assets["model"], assets["pairs"]), "dpo.yaml")
    assert c.algorithm == "dpo" and c.dpo.reference_policy_kl_penalty == 0.05
    # NeMo-RL counts pairs, rlnb rows: 4 pairs per step are 8 rows
    assert c.dpo.num_prompts_per_step == 4 and c.policy.train_global_batch_size == 8
    assert c.policy.train_micro_batch_size == 4
    assert (c.dpo.pairs.source, c.dpo.pairs.dataset) == ("dataset", assets["pairs"])
    assert (c.dpo.val_period, c.dpo.val_at_start, c.dpo.max_num_steps) == (0, False, 2)


# --------------------------------------------------------------------------- they train


def train(path, tmp_path, *overrides, steps):
    run = tmp_path / "run"
    out = subprocess.run([sys.executable, "-m", "rlnb.cli", "train", path, *overrides,
                          "--ignore-unsupported", "--run-dir", str(run), "--no-progress"],
                         capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "train/loss" in m] == list(range(1, steps + 1))
    return metrics, read_yaml(run / "config.yaml")


@pytest.mark.slow
def test_a_prorl_v2_shaped_config_trains(assets, tmp_path):
    # one-digit answers: an untrained model is sometimes right, so dynamic sampling finds groups
    # whose rewards differ
    data = tmp_path / "digits.jsonl"
    data.write_text("".join(json.dumps({"problem": f"{a}+0", "expected_answer": str(a % 3)})
                            + "\n" for a in range(24)))
    path = write_yaml(tmp_path / "prorlv2.yaml", prorl_shaped(assets["model"], str(data)))
    # coefficient 1: truncated answers keep their reward (0 would zero nearly every untrained one)
    metrics, written = train(path, tmp_path, "grpo.max_num_steps=2",
                             "grpo.reward_shaping.stop_properly_penalty_coef=1.0",
                             "grpo.num_generations_per_prompt=8", steps=2)
    assert written["grpo"]["use_dynamic_sampling"] is True
    assert written["grpo"]["adv_estimator"]["name"] == "reinforce_plus_plus"
    assert written["grpo"]["use_leave_one_out_baseline"] is True
    assert written["loss_fn"]["reference_policy_kl_type"] == "k2"


@pytest.mark.slow
def test_a_gdpo_shaped_config_trains(assets, tmp_path):
    path = write_yaml(tmp_path / "gdpo.yaml", gdpo_shaped(assets["model"], assets["data"]))
    _, written = train(path, tmp_path, "grpo.max_num_steps=2", steps=2)
    assert written["grpo"]["adv_estimator"]["name"] == "gdpo"


@pytest.mark.slow
def test_a_dpo_yaml_trains(assets, tmp_path):
    path = write_yaml(tmp_path / "dpo.yaml", dpo_shaped(assets["model"], assets["pairs"]))
    _, written = train(path, tmp_path, steps=2)
    assert written["algorithm"] == "dpo"


@pytest.mark.slow
def test_the_megatron_schedule_ticks_once_per_step(assets, tmp_path):
    """Two global batches per step (train_global_batch_size 4 of 8 rows): NeMo-RL's worker
    ticks the warm-up once per train() call, so both use the step's rate."""
    cfg = megatron(grpo_shaped(assets["model"], assets["data"]), lr=5e-4)
    cfg["policy"]["train_global_batch_size"] = 4
    cfg["policy"]["train_micro_batch_size"] = 2
    path = write_yaml(tmp_path / "grpo_math_1B_megatron.yaml", cfg)
    metrics, _ = train(path, tmp_path, steps=3)
    # lr_warmup_init 5e-5 -> 5e-4 over 2 ticks: 5e-5, 2.75e-4, then 5e-4
    assert [m["train/lr"] for m in metrics] == pytest.approx([5e-5, 2.75e-4, 5e-4])


@pytest.mark.slow
def test_the_documented_command_trains(assets, tmp_path):
    """docs/nemo_rl_names.md's first command, with the stand-in YAML, model and data."""
    doc = (ROOT / "docs" / "nemo_rl_names.md").read_text()
    block = doc.split("## Loading a NeMo-RL YAML", 1)[1].split("\n\n", 2)[1]
    words = block.replace("\\\n", " ").split()
    assert words[:3] == ["rlnb", "train", "grpo_math_1B.yaml"], words
    swap = {"grpo_math_1B.yaml": write_yaml(tmp_path / "grpo_math_1B.yaml",
                                            grpo_shaped(assets["model"], assets["data"])),
            "policy.model_name=/models/qwen2.5-1.5b": f"policy.model_name={assets['model']}",
            "data.train.data_path=gsm8k.jsonl": f"data.train.data_path={assets['data']}",
            "data.train.input_key=question": "data.train.input_key=problem",
            "data.train.output_key=answer": "data.train.output_key=expected_answer"}
    args = [swap.get(w, w) for w in words[2:] if w != "--ignore-unsupported"]
    assert "--ignore-unsupported" in words
    train(args[0], tmp_path, *args[1:], "grpo.max_num_steps=1", steps=1)


@pytest.mark.slow
def test_the_ppo_shaped_config_with_a_megatron_critic_trains(assets, tmp_path):
    cfg = ppo_shaped(assets["model"], assets["data"])
    cfg["value"]["megatron_cfg"] = {"enabled": True, "optimizer": {
        "optimizer": "adam", "lr": 7e-4, "weight_decay": 0.0, "clip_grad": 0.3}}
    cfg["value"]["optimizer"] = None  # (its DTensor twin in ppo_shaped has lr 3e-4)
    path = write_yaml(tmp_path / "ppo_math_1B_megatron.yaml", cfg)
    metrics, written = train(path, tmp_path, "ppo.max_num_steps=1", steps=1)
    assert written["value"]["optimizer"]["lr"] == 7e-4
    assert written["value"]["max_grad_norm"] == 0.3


def test_the_measuring_script_counts_a_checkout(assets, tmp_path):
    """tools/nemo_configs.py on a stand-in checkout: two GRPO files (one loads, one refused
    for on-policy distillation), a DPO file, an SFT file (a one-line refusal, not counted)."""
    configs = tmp_path / "RL" / "examples" / "configs"
    configs.mkdir(parents=True)
    write_yaml(configs / "grpo_math_1B.yaml", grpo_shaped("tiny", assets["data"]))
    opd = grpo_shaped("tiny", assets["data"])
    opd["on_policy_distillation"] = {"enabled": True}
    write_yaml(configs / "grpo_opd.yaml", opd)
    write_yaml(configs / "dpo.yaml", dpo_shaped("tiny", assets["pairs"]))
    (configs / "sft.yaml").write_text("sft: {max_num_steps: 1}\npolicy: {model_name: m}\n")
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "nemo_configs.py"),
                          str(tmp_path / "RL"), "--markdown"],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "| grpo | 2 | 1 | 50.0% |" in out.stdout and "| dpo | 1 | 1 | 100.0% |" in out.stdout
    assert "| 1 | `on_policy_distillation` |" in out.stdout
    assert "sft 1" in out.stdout


def test_every_refusal_of_a_file_comes_in_one_message(assets):
    """The reader's refusals and rlnb's own checks of the rest, together: one run, one list."""
    cfg = grpo_shaped(assets["model"], assets["data"])
    cfg["loss_fn"]["ratio_clip_min"] = 1.5  # rlnb's own rule: a lower clip below 0
    cfg["policy"]["generation"]["bad_words"] = ["x"]  # the reader's refusal
    with pytest.raises(ValueError) as err:
        load(assets, cfg, "two.yaml")
    text = str(err.value)
    assert "policy.generation.bad_words: ['x']" in text
    assert "loss_fn: ratio_clip_min must be <= 1" in text
