"""policy.compile: a few GRPO steps compiled give the eager numbers on Llama-, GPT-2- and
Qwen2-shaped models; new lengths do not recompile; a model that cannot be compiled runs eager
after one line; a second process loads the compiled code from disk; the default AdamW form is
the per-parameter loop bit for bit."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path

import pytest
import torch
from paths import SUPPORT
from tiny_config import TINY, with_rewards
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

import rlnb
from rlnb.engine.models.policy import Policy
from rlnb.engine.models.sampler import COMPILED_DECODE
from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama
from rlnb.engine.trainers.grpo import GRPOTrainer

# Eager and compiled float32 differ by reordered sums: inductor fuses a norm or a log-softmax
# into one loop and accumulates in another order, a few ulps (1e-7 relative) per op, about 1e-6
# on a log-prob after a layer. Three Adam steps of lr 5e-4 keep that below 1e-5 in every metric
# and weight; a wrong graph (a missing mask, a shifted position, a dropped gradient) is off by
# 1e-2 or more.
RTOL, ATOL = 1e-4, 1e-5
STEPS = 3


@pytest.fixture(autouse=True)
def compile_cache(tmp_path_factory, monkeypatch):
    """One compile cache for the module (its tests share compiled code), away from ~/.cache; and
    Dynamo's in-memory code forgotten, so each test counts its graphs as a fresh run would (a
    model compiled earlier in the process leaves cache entries and guards on transformers'
    globals that the next model's first calls fail, which count as recompiles)."""
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "rlnb_cache"))
    torch._dynamo.reset()


def gpt2():
    torch.manual_seed(3)
    return GPT2LMHeadModel(GPT2Config(
        vocab_size=len(build_char_tokenizer()), n_embd=32, n_layer=1, n_head=2, n_positions=64,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))  # dropout would draw other masks


def qwen2():
    # the model only: AutoTokenizer would turn a qwen2 char tokenizer into Qwen2Tokenizer, which
    # drops spaces; the char tokenizer is used as it is
    torch.manual_seed(4)
    return Qwen2ForCausalLM(Qwen2Config(
        vocab_size=len(build_char_tokenizer()), hidden_size=32, intermediate_size=64,
        num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=64))


BUILDERS = {"llama": None, "gpt2": gpt2, "qwen2": qwen2}  # None: the config's tiny Llama


def make_trainer(arch: str, *overrides: str) -> GRPOTrainer:
    config = rlnb.load_config(None, [*TINY, "sft.enabled=false", "grpo.val_period=0",
                                     "checkpointing.enabled=false", *overrides])
    policy = None
    if BUILDERS[arch] is not None:
        policy = Policy(config.policy, seed=config.grpo.seed, model=BUILDERS[arch](),
                        tokenizer=build_char_tokenizer())
    return with_rewards(GRPOTrainer(config, policy=policy))


def numeric(metrics) -> dict[str, float]:
    return {k: float(v) for k, v in metrics.items()
            if isinstance(v, (int, float))
            and not k.startswith(("timing/", "compile/", "memory/"))}  # memory: eager only


def run_steps(trainer):
    steps = []
    for _ in range(STEPS):
        m = trainer.step()
        steps.append((m.rollout.input_ids.clone(), numeric(m), m))
    return steps


@pytest.mark.slow
@pytest.mark.parametrize("arch", list(BUILDERS))
def test_compiled_steps_give_the_eager_numbers(arch, capfd):
    # one after the other: a trainer seeds torch's global generator when it is built
    eager = make_trainer(arch)
    steps_e = run_steps(eager)
    assert eager.policy.compile_metrics() == {}
    compiled = make_trainer(arch, "policy.compile.enabled=true")
    before = [p.detach().clone() for p in compiled.policy.model.parameters()]
    steps_c = run_steps(compiled)
    for (ids_e, m_e, _), (ids_c, m_c, _) in zip(steps_e, steps_c):
        assert torch.equal(ids_e, ids_c)  # sampling stays eager: the same tokens for the seed
        assert m_e.keys() == m_c.keys()
        for key in m_e:
            assert m_c[key] == pytest.approx(m_e[key], rel=RTOL, abs=ATOL), key
    raw = steps_c[-1][2]
    # the KV cache grew at every decode step (3 calls per rollout, cache lengths L+1 to L+3), yet
    # each path (update, decode step) compiled at most once: its varying dimensions are dynamic
    # from the first call (unmarked, Dynamo would recompile the decode step at its second call)
    assert raw["compile/graphs"] <= 2 and raw["compile/recompiles"] == 0
    assert raw["compile/eager"] == 0
    # the rewards gave a signal: a gradient (the loss itself may be exactly 0: one optimizer
    # step a rollout puts the ratio at 1, and equal-length responses cancel a group's ±A)
    assert raw["train/grad_norm"] > 0
    for p_e, p_c in zip(eager.policy.model.parameters(), compiled.policy.model.parameters()):
        torch.testing.assert_close(p_c, p_e, rtol=RTOL, atol=ATOL)
    assert any(not torch.equal(p, p0) for p, p0 in
               zip(compiled.policy.model.parameters(), before))
    assert capfd.readouterr().err == ""  # the compiled path prints nothing


def train_data(B: int, S: int, vocab: int, seed: int) -> dict[str, torch.Tensor]:
    """A batch for ``optimizer_step``: half the rows left-padded, responses in the second half."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, S, dtype=torch.long)
    mask[: B // 2, :2] = 0
    token_mask = mask.float()
    token_mask[:, : S // 2] = 0
    logprobs = -torch.rand(B, S, generator=g)
    return {"input_ids": torch.randint(4, vocab, (B, S), generator=g), "attention_mask": mask,
            "token_mask": token_mask, "sample_mask": torch.ones(B),
            "advantages": torch.randn(B, S, generator=g), "prev_logprobs": logprobs,
            "generation_logprobs": logprobs}


@pytest.mark.slow
def test_new_shapes_do_not_recompile():
    trainer = make_trainer("llama", "policy.compile.enabled=true",
                           "policy.train_micro_batch_size=64", "policy.train_global_batch_size=64")
    policy, vocab = trainer.policy, trainer.policy.model.config.vocab_size
    # rows and sequence length both change in every call: a path whose shapes were static would
    # recompile at each new pair (Dynamo's automatic dynamic shapes: once, at the second)
    for i, (B, S) in enumerate([(16, 12), (12, 17), (6, 9), (10, 20)]):
        policy.optimizer_step(train_data(B, S, vocab, i), trainer.loss_fn)
    g = torch.Generator().manual_seed(0)
    for B, L in [(8, 5), (6, 9), (12, 3)]:  # the decode step: rows, and the cache L + t grows
        trainer.generator.generate_ids(torch.randint(4, vocab, (B, L), generator=g),
                                       torch.ones(B, L, dtype=torch.long), max_new_tokens=6)
    metrics = policy.compile_metrics()
    assert metrics["compile/graphs"] <= 2 and metrics["compile/recompiles"] == 0, metrics
    # a new temperature is a new constant in the update's graph: exactly one counted recompile
    trainer.reconfigure({"policy.generation.temperature": 0.7})
    policy.optimizer_step(train_data(16, 12, vocab, 9), trainer.loss_fn)
    assert policy.compile_metrics()["compile/recompiles"] == 1


def test_the_registered_decode_step_does_not_keep_the_model_alive():
    trainer = make_trainer("llama", "policy.compile.enabled=true")
    model = weakref.ref(trainer.policy.model)
    assert COMPILED_DECODE[model()] is trainer.policy.compiled.decode
    del trainer
    gc.collect()
    assert model() is None  # (and so its entry left the registry)


class BranchingLlama(LlamaForCausalLM):
    """A real model class whose forward branches in Python on a tensor's value: Dynamo cannot
    trace that into one graph, so compiling it with fullgraph=True fails."""

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, cache=None,
                **kwargs):
        if input_ids.sum() < 0:  # data-dependent control flow (never true: ids are >= 0)
            input_ids = input_ids + 1
        return super().forward(input_ids=input_ids, attention_mask=attention_mask,
                               position_ids=position_ids, cache=cache, **kwargs)


def branching_llama():
    tiny = build_tiny_llama(len(build_char_tokenizer()), hidden_size=32, num_hidden_layers=1,
                            seed=5)
    model = BranchingLlama(tiny.config)
    model.load_state_dict(tiny.state_dict())
    return model


# A fresh process each: what a user's run prints on stderr (pytest's log capture would hide it)
# and what it loads from the compile cache on disk.
RUN = textwrap.dedent("""
    import json, sys
    sys.path[:0] = [{root!r}, {support!r}]
    import test_compile as t
    from torch._dynamo.utils import counters
    t.BUILDERS["branching"] = t.branching_llama
    trainer = t.make_trainer({arch!r}, *{overrides!r})
    steps = [t.numeric(m) for *_, m in t.run_steps(trainer)]
    print(json.dumps({{"steps": steps, "inductor": dict(counters["inductor"]),
                      "aot": dict(counters["aot_autograd"]), **trainer.policy.compile_metrics()}}))
""")


def run_process(cache: Path, arch: str, *overrides: str) -> tuple[dict, str]:
    # this process's thread count: a compiled kernel's reductions may split by thread, and the
    # numbers are compared with this process's
    env = {"RLNB_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", "HOME": str(cache),
           "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": str(torch.get_num_threads()),
           # and this process's ATen kernels (ATEN_CPU_CAPABILITY=default picks other ones)
           **{k: os.environ[k] for k in ("ATEN_CPU_CAPABILITY",) if k in os.environ}}
    script = RUN.format(root=str(Path(__file__).parent), support=str(SUPPORT), arch=arch, overrides=overrides)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         timeout=900)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1]), out.stderr


@pytest.mark.slow
def test_a_model_that_cannot_compile_runs_eager_after_one_line(tmp_path):
    eager, err = run_process(tmp_path, "branching")
    assert err == ""
    compiled, err = run_process(tmp_path, "branching", "policy.compile.enabled=true")
    # the first path called (the decode step, in the first rollout) fails; both run eager
    assert err.count("\n") == 1 and err.startswith(
        "policy.compile: running eager: compiling the decode step failed: "), err
    assert compiled["compile/eager"] == 1 and compiled["compile/graphs"] == 0
    assert compiled["steps"] == eager["steps"]  # eager both: bit for bit


@pytest.mark.slow
def test_a_second_process_loads_the_compiled_code_from_disk(tmp_path):
    """A fresh process compiles the llama steps into an empty cache; a second fresh process then
    finds every graph on disk and computes the same numbers. Both are fresh: the compile caches'
    keys read process-wide state (torch's settings, what earlier compiles left in Dynamo and
    AOTAutograd), which the tests that ran before in a pytest worker vary from run to run."""
    cache = tmp_path / "rlnb_cache"
    first, err = run_process(cache, "llama", "policy.compile.enabled=true")
    assert err == "", err[-2000:]
    assert first["inductor"].get("fxgraph_cache_miss", 0) >= 3, first["inductor"]  # it compiled
    assert list((cache / "compile").iterdir())  # under $RLNB_CACHE_DIR/compile
    there, err = run_process(cache, "llama", "policy.compile.enabled=true")
    # (each message says what the second process saw: a failure in CI is read from its log)
    seen = f"inductor {there['inductor']}, aot {there['aot']}, stderr {err[-2000:]!r}"
    assert err == "", seen
    # the forward and backward of the update and the decode step (three graphs at least): the
    # second process generated none of them, it found every one on disk
    assert there["inductor"].get("fxgraph_cache_miss", 0) == 0, seen
    assert there["inductor"].get("fxgraph_cache_hit", 0) >= 3, seen
    assert there["aot"].get("autograd_cache_hit", 0) >= 1, seen
    differ = [(i, k, v, there["steps"][i].get(k)) for i, step in enumerate(first["steps"])
              for k, v in step.items() if there["steps"][i].get(k) != v]
    assert not differ, f"(step, metric, first, second) that differ: {differ[:10]}; {seen}"


def adamw_steps(**implementation) -> list[torch.Tensor]:
    model = build_tiny_llama(len(build_char_tokenizer()), hidden_size=32, num_hidden_layers=1,
                             seed=6)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01,
                                  **implementation)
    ids = torch.randint(4, 90, (8, 10), generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        optimizer.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        optimizer.step()
    return [p.detach() for p in model.parameters()]


def test_foreach_adamw_is_the_per_parameter_loop_bit_for_bit_and_fused_is_close():
    loop, foreach, fused = (adamw_steps(foreach=False), adamw_steps(foreach=True),
                            adamw_steps(fused=True))
    assert all(torch.equal(a, b) for a, b in zip(loop, foreach))
    for a, b in zip(loop, fused):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    policy = Policy(rlnb.load_config(None, TINY).policy)
    assert policy.optimizer.defaults["foreach"] is True
    fused_policy = Policy(rlnb.load_config(None, [*TINY, "policy.optimizer.fused=true"]).policy)
    assert fused_policy.optimizer.defaults["fused"] is True
