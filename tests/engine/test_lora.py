"""LoRA adapters (policy.lora) on the tiny local Llama: what trains, the reference, merging, the warm
start, checkpoints holding the adapters alone, resume and `rlnb verify` bit for bit, PPO's critic."""

import gc
import json
import shutil
import warnings
import weakref

import pytest
import torch
from tiny_config import TINY, with_rewards

from rlnb.cli import main
from rlnb.engine.models.lora import (
    adapters_disabled,
    base_state_dict,
    merged_state_dict,
    save_merged,
)
from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama, save_tiny
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.engine.trainers.warm_start import warm_start_key
from rlnb.run.config.master_config import load_config
from rlnb.run.training.session import TrainingRun

# the fast preset's model: 1 layer, hidden 32, MLP 64; every linear layer but the output one
LORA = ["policy.lora.enabled=true", "policy.lora.dim=4", "policy.lora.alpha=16"]
RUN = [*TINY, *LORA, "grpo.val_period=2", "grpo.max_val_samples=16", "grpo.max_num_steps=4",
       "sft.max_steps=10", "sft.stop_at_accuracy=null", "checkpointing.save_period=2",
       "loss_fn.reference_policy_kl_penalty=0.01"]


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def trainer(*extra, kl=0.01):
    cfg = load_config(None, [*LORA, f"loss_fn.reference_policy_kl_penalty={kl}", *extra],
                      preset="fast")
    return with_rewards(GRPOTrainer(cfg))


def adapter_params(model):
    return {n: p for n, p in model.named_parameters() if ".lora_" in n}


def test_only_the_adapters_have_gradients_and_optimizer_state():
    t = trainer()
    model, opt = t.policy.model, t.policy.optimizer
    # r (in + out) per adapted layer, r = 4: q k v o (32 -> 32), gate up (32 -> 64), down (64 -> 32)
    expected = 4 * (4 * (32 + 32) + 2 * (32 + 64) + (64 + 32))
    assert expected == 2176
    trainable = [p for p in model.parameters() if p.requires_grad]
    assert sum(p.numel() for p in trainable) == expected
    assert len(trainable) == 14  # an A and a B for each of the 7 layers
    assert {id(p) for p in opt.param_groups[0]["params"]} == {id(p) for p in trainable}
    t.step()
    assert {id(p) for p in opt.state} == {id(p) for p in adapter_params(model).values()}
    frozen = [p for p in model.parameters() if not p.requires_grad]
    assert all(p.grad is None for p in frozen)  # no gradient memory for the base either


@pytest.mark.smoke
def test_a_few_grpo_steps_change_only_the_adapters():
    t = trainer()
    base0 = {k: v.clone() for k, v in base_state_dict(t.policy.model).items()}
    adapters0 = {k: v.detach().clone() for k, v in adapter_params(t.policy.model).items()}
    assert all(float(v.abs().sum()) == 0 for k, v in adapters0.items() if "lora_B" in k)
    for _ in range(3):
        metrics = t.step()
        assert torch.isfinite(torch.tensor(metrics["train/loss"]))
    base1 = base_state_dict(t.policy.model)
    assert base0.keys() == base1.keys() and all(torch.equal(base0[k], base1[k]) for k in base0)
    moved = [k for k, v in adapter_params(t.policy.model).items()
             if not torch.equal(v, adapters0[k])]
    assert sorted(moved) == sorted(adapters0)  # every A and every B


def test_the_reference_is_the_base_model_with_no_second_copy():
    from transformers import LlamaForCausalLM

    # models other tests left alive (module fixtures, caches) are not this test's concern
    before = weakref.WeakSet(o for o in gc.get_objects() if type(o) is LlamaForCausalLM)
    t = trainer()
    for _ in range(2):
        t.step()
    batch = t.rollout()
    ref = t.policy.logprobs(batch.input_ids, batch.attention_mask, reference=True)
    mine = t.policy.logprobs(batch.input_ids, batch.attention_mask)
    # the same weights in a model without adapters: the fast preset's tiny Llama, seed 0, never
    # warm-started, and the base frozen since
    cfg = t.config.policy
    plain = build_tiny_llama(len(t.policy.tokenizer), hidden_size=32, num_hidden_layers=1,
                             max_position_embeddings=max(256, cfg.max_total_sequence_length))
    t2 = GRPOTrainer(load_config(None, [], preset="fast"), policy=None)
    t2.policy.model.load_state_dict(plain.state_dict())
    expected = t2.policy.logprobs(batch.input_ids, batch.attention_mask)
    assert torch.equal(ref, expected)
    assert not torch.equal(mine, ref)  # the adapters do change the policy
    assert t.policy.reference_model is None and t.policy.lora
    del t2, plain
    gc.collect()
    models = [o for o in gc.get_objects() if type(o) is LlamaForCausalLM and o not in before]
    assert models == [t.policy.model]  # the generator samples with it too: one model in memory
    assert [p.requires_grad for p in t.policy.model.parameters()].count(True) == 14  # restored


def test_merged_weights_are_base_plus_scale_b_a_by_hand():
    t = trainer()
    for _ in range(2):
        t.step()
    model = t.policy.model
    layer = model.model.layers[0].self_attn.q_proj
    W = layer.base_layer.weight.detach()
    A, B = layer.lora_A["default"].weight.detach(), layer.lora_B["default"].weight.detach()
    assert A.shape == (4, 32) and B.shape == (32, 4) and float(B.abs().sum()) > 0
    by_hand = W + (16 / 4) * (B @ A)  # alpha / dim = 4, not alpha
    merged = merged_state_dict(model)
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"], by_hand,
                               rtol=0, atol=1e-7)
    # the plain model's names, and nothing was changed in the training module
    assert set(merged) == set(build_tiny_llama(len(t.policy.tokenizer), hidden_size=32,
                                               num_hidden_layers=1).state_dict())
    assert torch.equal(layer.base_layer.weight, W)
    ids = torch.tensor([[2, 20, 21, 22, 23]])
    with torch.no_grad():
        lora_logits = model(input_ids=ids).logits
        model2 = build_tiny_llama(len(t.policy.tokenizer), hidden_size=32, num_hidden_layers=1)
        model2.load_state_dict(merged)
        torch.testing.assert_close(model2(input_ids=ids).logits, lora_logits, rtol=1e-5,
                                   atol=1e-5)


def test_save_merged_reloads_with_from_pretrained_and_gives_the_same_logits(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t = trainer()
    for _ in range(2):
        t.step()
    path = save_merged(t.policy, tmp_path / "merged")  # one call
    loaded = AutoModelForCausalLM.from_pretrained(path)
    assert not any("lora" in k or "base_layer" in k for k in loaded.state_dict())
    tok = AutoTokenizer.from_pretrained(path)
    ids = torch.tensor([tok("12+34=")["input_ids"]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits,
                                   t.policy.model(input_ids=ids).logits, rtol=1e-5, atol=1e-5)


def test_the_vllm_folder_of_a_lora_policy_is_a_plain_merged_model(tmp_path):
    """vLLM starts from this folder, then its refit loads ``merged_state_dict`` (no vllm here)."""
    from transformers import AutoModelForCausalLM

    from rlnb.engine.models.vllm_engine import model_folder

    t = trainer()
    t.step()
    source, _, folder = model_folder(t.policy.model, t.policy.tokenizer)
    try:
        loaded = AutoModelForCausalLM.from_pretrained(source).state_dict()
        merged = merged_state_dict(t.policy.model)
        assert set(loaded) == set(merged)
        assert all(torch.equal(loaded[k], merged[k]) for k in loaded)
    finally:
        folder.cleanup()


def test_target_modules_and_dropout_reach_peft():
    t = trainer("policy.lora.match_all_linear=false", "policy.lora.target_modules=[q_proj,v_proj]",
                "policy.lora.dropout=0.5")
    names = {n.split(".lora_")[0] for n in adapter_params(t.policy.model)}
    assert names == {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.v_proj"}
    layer = t.policy.model.model.layers[0].self_attn.q_proj
    assert layer.lora_dropout["default"].p == 0.5 and layer.scaling["default"] == 4.0
    t = trainer("policy.lora.exclude_modules=[down_proj]")
    assert not any("down_proj" in n for n in adapter_params(t.policy.model))


def test_wildcards_match_full_module_names_as_automodel_does():
    """NeMo-RL's YAMLs write Automodel's wildcards ('*out_proj*', '*_proj'): over full names."""
    t = trainer("policy.lora.match_all_linear=false", "policy.lora.target_modules=['*self_attn.*_proj']")
    names = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in adapter_params(t.policy.model)}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj"}
    t = trainer("policy.lora.exclude_modules=['*mlp*']")  # all linear layers but the MLP's
    names = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n in adapter_params(t.policy.model)}
    assert names == {"q_proj", "k_proj", "v_proj", "o_proj"}
    t = trainer("policy.lora.exclude_modules=['*out_proj*']")  # matches nothing: all adapted
    assert len(adapter_params(t.policy.model)) == 14
    with pytest.raises(ValueError, match=r"policy.lora.target_modules: the pattern '\*qkv\*' "
                       "matches no module of LlamaForCausalLM"):
        trainer("policy.lora.match_all_linear=false", "policy.lora.target_modules=['*qkv*']")


def test_xavier_start_of_a_is_normal_with_glorots_spread():
    """lora_A_init: xavier draws A ~ N(0, 2 / (in + r)); kaiming (peft's) is uniform on
    ±sqrt(6 / ((1 + 5) in)) = ±1/sqrt(in). B starts at 0 either way."""
    def a_weights(init):
        model = trainer(f"policy.lora.lora_A_init={init}", "policy.lora.dim=16").policy.model
        return {n: p.detach() for n, p in model.named_parameters() if ".lora_A." in n}, model

    xavier, model = a_weights("xavier")
    kaiming, _ = a_weights("kaiming")
    assert all(float(p.detach().abs().sum()) == 0 for n, p in model.named_parameters()
               if ".lora_B." in n)
    down = next(n for n in xavier if "down_proj" in n)  # in 64, r 16
    assert xavier[down].std().item() == pytest.approx((2 / (64 + 16)) ** 0.5, rel=0.1)
    assert kaiming[down].abs().max().item() <= 64 ** -0.5
    assert xavier[down].abs().max().item() > 64 ** -0.5  # a normal's tails pass the bound
    assert all(not torch.equal(xavier[n], kaiming[n]) for n in xavier)


def test_warm_start_trains_the_base_and_shares_the_plain_runs_cache_entry():
    sft = ["sft.enabled=true", "sft.max_steps=8", "sft.stop_at_accuracy=null", "sft.cache=false"]
    plain = GRPOTrainer(load_config(None, sft, preset="fast"))
    lora = GRPOTrainer(load_config(None, [*sft, *LORA], preset="fast"))
    assert warm_start_key(plain, plain.config.sft) == warm_start_key(lora, lora.config.sft)
    # the key of a run without adapters is the one it had before LoRA existed (d3f64f5bc56facdc,
    # computed on main before the LoRA merge), with data holding the task's own settings only
    # since tasks own them (the same key with the data section of every task's keys); the
    # recipe's attention kernel joins the key only when set, so without it the key is that one
    own_kernel = GRPOTrainer(load_config(None, [*sft, "policy.attn_implementation=null"],
                                         preset="fast"))
    assert warm_start_key(own_kernel, own_kernel.config.sft) == "053899c2edb32142"
    assert warm_start_key(plain, plain.config.sft) == "96d2be7b4d3373d6"  # eager: its own weights
    from rlnb.run.store.warm_start_cache import cached_warm_start

    for t in (plain, lora):
        cached_warm_start(t, t.config.sft, log=lambda *a: None)
    a, b = plain.policy.model.state_dict(), base_state_dict(lora.policy.model)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["model.embed_tokens.weight"],
                           build_tiny_llama(len(plain.policy.tokenizer), hidden_size=32,
                                            num_hidden_layers=1).state_dict()[
                                                "model.embed_tokens.weight"])  # it did train
    # the adapters did not: B is still 0 and trainable again after the warm start
    params = adapter_params(lora.policy.model)
    assert all(float(p.detach().abs().sum()) == 0 for n, p in params.items() if "lora_B" in n)
    assert all(p.requires_grad for p in params.values())
    assert sum(p.requires_grad for p in lora.policy.model.parameters()) == 14
    # and no gradient of the warm start is left on the base (the RL step's norm would count it)
    assert all(p.grad is None for p in lora.policy.model.parameters())


def test_a_lora_run_loads_the_warm_start_a_plain_run_cached(tmp_path):
    from rlnb.run.store.warm_start_cache import cached_warm_start

    sft = ["sft.enabled=true", "sft.max_steps=8", "sft.stop_at_accuracy=null"]
    plain = GRPOTrainer(load_config(None, sft, preset="fast"))
    first = cached_warm_start(plain, plain.config.sft, log=lambda *a: None)
    lora = GRPOTrainer(load_config(None, [*sft, *LORA], preset="fast"))
    second = cached_warm_start(lora, lora.config.sft, log=lambda *a: None)
    assert not first["cached"] and second["cached"] and first["path"] == second["path"]
    a, b = plain.policy.model.state_dict(), base_state_dict(lora.policy.model)
    assert all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- runs on disk
@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A finished 4-step LoRA run (warm start, KL penalty) with checkpoints at steps 2 and 4."""
    root = tmp_path_factory.mktemp("lora_run")
    mp = pytest.MonkeyPatch()
    mp.setenv("RLNB_CACHE_DIR", str(root / "cache"))
    try:
        TrainingRun(None, overrides=RUN, run_dir=root / "run", progress=False,
                    log=lambda *a: None).train()
    finally:
        mp.undo()
    return root / "run"


def test_a_checkpoint_holds_the_adapters_only(lora_run, tmp_path):
    from safetensors.torch import load_file

    ckpt = lora_run / "checkpoints" / "step_000004"
    files = sorted(p.name for p in (ckpt / "model").iterdir())
    assert "adapter_model.safetensors" in files and "adapter_config.json" in files
    assert not any(f.startswith("model") and f.endswith(".safetensors") for f in files)
    saved = load_file(ckpt / "model" / "adapter_model.safetensors")
    assert len(saved) == 14 and all(".lora_A." in k or ".lora_B." in k for k in saved)
    assert sum(v.numel() for v in saved.values()) == 2176
    # 2176 float32 numbers plus the header, against a full model's 17,888 parameters
    size = (ckpt / "model" / "adapter_model.safetensors").stat().st_size
    assert 2176 * 4 < size < 2176 * 4 + 4096
    config = json.loads((ckpt / "model" / "adapter_config.json").read_text())
    assert config["r"] == 4 and config["lora_alpha"] == 16 and config["peft_type"] == "LORA"
    state = torch.load(ckpt / "optimizer.pt", weights_only=True)["optimizer"]["state"]
    assert len(state) == 14  # Adam's moments for the adapters alone


def test_peft_reads_the_checkpoint_adapters(lora_run):
    """The checkpoint's model/ folder is peft's layout: PeftModel.from_pretrained on the base."""
    from peft import PeftModel

    cfg = load_config(lora_run / "config.yaml")
    run = TrainingRun(cfg, run_dir=lora_run, resume=True, progress=False, log=lambda *a: None)
    policy = run.trainer.policy
    base = build_tiny_llama(len(policy.tokenizer), hidden_size=32, num_hidden_layers=1,
                            max_position_embeddings=256)
    base.load_state_dict(base_state_dict(policy.model))
    with warnings.catch_warnings():  # peft 0.21 reads transformers 5.24's deprecated
        warnings.simplefilter("ignore", FutureWarning)  # is_gradient_checkpointing itself
        peft_model = PeftModel.from_pretrained(base, lora_run / "checkpoints/step_000004/model")
    ids = torch.tensor([[2, 20, 21, 22, 23]])
    with torch.no_grad():
        torch.testing.assert_close(peft_model(input_ids=ids).logits,
                                   policy.model(input_ids=ids).logits, rtol=0, atol=1e-6)


def test_rlnb_verify_says_bit_exact_for_a_lora_run(lora_run, capsys):
    assert main(["verify", str(lora_run), "--from-step", "2"]) == 0
    out = capsys.readouterr().out
    assert "bit-exact" in out and "final weights" in out, out


def test_resume_repeats_the_run_bit_for_bit_even_with_the_warm_start_rebuilt(lora_run, tmp_path,
                                                                             monkeypatch):
    run = tmp_path / "run"
    cut = [*RUN]
    cut[cut.index("grpo.max_num_steps=4")] = "grpo.max_num_steps=2"
    TrainingRun(None, overrides=cut, run_dir=run, progress=False, log=lambda *a: None).train()
    shutil.rmtree(tmp_path / "cache")  # the warm start runs again: the same base from the config
    assert main(["train", "--resume", str(run), "--no-progress", "grpo.max_num_steps=4"]) == 0

    def steps(path):
        rows = [json.loads(x) for x in (path / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "memory/"))} for r in rows]

    assert steps(run) == steps(lora_run)
    from safetensors import safe_open

    name = "checkpoints/step_000004/model/adapter_model.safetensors"
    with safe_open(str(run / name), "pt") as a, safe_open(str(lora_run / name), "pt") as b:
        # (not the bytes: safetensors writes the header's metadata in no fixed order)
        assert a.metadata() == b.metadata() and sorted(a.keys()) == sorted(b.keys())
        assert all(torch.equal(a.get_tensor(k), b.get_tensor(k)) for k in a.keys())


def test_adapters_trained_on_another_base_are_refused(lora_run, tmp_path, capsys, monkeypatch):
    """The warm start rebuilt differently (here: its cache entry swapped for other weights)."""
    from safetensors.torch import load_file, save_file

    run = tmp_path / "run"
    shutil.copytree(lora_run, run)
    monkeypatch.setenv("RLNB_CACHE_DIR", str(lora_run.parent / "cache"))
    entry = next((lora_run.parent / "cache" / "warm_start").iterdir())
    other = tmp_path / "cache" / "warm_start" / entry.name
    shutil.copytree(entry, other)
    weights = load_file(other / "model.safetensors")
    weights["model.norm.weight"] = weights["model.norm.weight"] + 1
    save_file(weights, other / "model.safetensors")
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["train", "--resume", str(run), "--no-progress", "grpo.max_num_steps=6"]) == 2
    err = capsys.readouterr().err
    assert "trained on other base weights" in err and "Traceback" not in err, err


# --------------------------------------------------------------------------- PPO and QLoRA
def test_ppo_with_lora_gets_a_plain_critic_from_the_merged_policy():
    from rlnb.engine.trainers.ppo import PPOTrainer
    from rlnb.run.config.master_config import packaged_config

    cfg = load_config(packaged_config("ppo_tiny"), [*LORA, "sft.enabled=false",
                                                    "ppo.policy_training_start_step=0"],
                      preset="fast")
    t = with_rewards(PPOTrainer(cfg))
    with torch.no_grad():  # adapters as if trained: the critic (built on first use) merges them
        for name, p in adapter_params(t.policy.model).items():
            p.copy_(torch.randn(p.shape, generator=torch.Generator().manual_seed(len(name))))
    critic = t.critic.model
    assert not any("lora" in n or "base_layer" in n for n, _ in critic.named_parameters())
    assert all(p.requires_grad for p in critic.parameters())
    merged = merged_state_dict(t.policy.model)
    body = critic.body.state_dict()
    assert set(body) == {k.removeprefix("model.") for k in merged if k.startswith("model.")}
    assert all(torch.equal(body[k], merged["model." + k]) for k in body)
    assert not torch.equal(merged["model.layers.0.self_attn.q_proj.weight"],
                           base_state_dict(t.policy.model)["model.layers.0.self_attn.q_proj.weight"])
    t.step()
    base0 = {k: v.clone() for k, v in base_state_dict(t.policy.model).items()}
    t.step()
    assert all(torch.equal(v, base_state_dict(t.policy.model)[k]) for k, v in base0.items())


def bitsandbytes_problem() -> str | None:
    """Why QLoRA cannot run here (None: it can)."""
    from rlnb.engine.models.lora import check_quantization

    try:
        check_quantization(torch.device("cpu"))
    except ValueError as err:
        return str(err)
    return None


def saved_model(folder):
    tok = build_char_tokenizer()
    save_tiny(build_tiny_llama(len(tok), hidden_size=32, num_hidden_layers=1), tok, folder)
    return folder


def test_qlora_is_refused_where_bitsandbytes_cannot_run(tmp_path, capsys):
    if bitsandbytes_problem() is None:
        pytest.skip("bitsandbytes runs 4-bit kernels here: nothing to refuse")
    tok = build_char_tokenizer()
    save_tiny(build_tiny_llama(len(tok), hidden_size=32, num_hidden_layers=1), tok,
              tmp_path / "model")
    before = sorted(tmp_path.rglob("*"))
    capsys.readouterr()  # (save_pretrained's progress bar)
    code = main(["train", "--no-progress", "--run-dir", str(tmp_path / "r"), *TINY[1:],
                 f"policy.model_name={tmp_path / 'model'}", *LORA, "policy.lora.quantize=4bit",
                 "sft.enabled=false"])
    err = capsys.readouterr().err
    assert code == 2 and "policy.lora.quantize=4bit" in err and "bitsandbytes" in err, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert sorted(tmp_path.rglob("*")) == before


def test_adapters_disabled_restores_what_trains():
    t = trainer()
    model = t.policy.model
    with adapters_disabled(model):
        assert not any(p.requires_grad for p in model.parameters())
    assert [n for n, p in model.named_parameters() if p.requires_grad] == list(adapter_params(model))


@pytest.mark.skipif(bitsandbytes_problem() is not None,
                    reason="bitsandbytes is not installed or has no 4-bit kernels here")
def test_qlora_trains_adapters_on_a_4bit_base_and_merges_it_unpacked(tmp_path):
    """QLoRA where bitsandbytes runs (its 0.50 build has CPU kernels): only the adapters train,
    the packed base stays, the reference is the 4-bit base, and the merged model is plain."""
    import bitsandbytes.functional as bnb_functional
    from transformers import AutoModelForCausalLM

    folder = saved_model(tmp_path / "model")
    t = trainer(f"policy.model_name={folder}", "policy.lora.quantize=4bit")
    model = t.policy.model
    q = model.model.layers[0].self_attn.q_proj
    assert type(q.base_layer).__name__ == "Linear4bit" and q.base_layer.weight.dtype == torch.uint8
    assert sum(p.requires_grad for p in model.parameters()) == 14
    packed0 = {k: v.clone() for k, v in base_state_dict(model).items()}
    for _ in range(2):
        t.step()
    assert all(torch.equal(v, base_state_dict(model)[k]) for k, v in packed0.items())
    assert float(q.lora_B["default"].weight.detach().abs().sum()) > 0
    merged = merged_state_dict(model)
    assert not any(".weight." in k for k in merged)  # no absmax / quant_map left
    W = bnb_functional.dequantize_4bit(q.base_layer.weight.data, q.base_layer.weight.quant_state)
    by_hand = W + 4.0 * (q.lora_B["default"].weight @ q.lora_A["default"].weight)
    torch.testing.assert_close(merged["model.layers.0.self_attn.q_proj.weight"],
                               by_hand.detach(), rtol=0, atol=1e-6)
    path = save_merged(t.policy, tmp_path / "merged")
    loaded = AutoModelForCausalLM.from_pretrained(path)
    assert loaded.model.layers[0].self_attn.q_proj.weight.dtype == torch.float32
    ids = torch.tensor([[2, 20, 21, 22, 23]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model(input_ids=ids).logits,
                                   rtol=1e-4, atol=1e-4)
