"""Where does one GRPO step spend its time, and how close is it to bare PyTorch / transformers?

For the embedded default (configs/tiny.yaml, ~0.3 M parameters) and a ~20 M-parameter version of
the same character-level Llama, this prints the median time of each stage (rollout: generation,
reward, log-probs; compute_advantages; update), tokens per second, the peak memory each stage
adds (measured afterwards in a fresh process, see ``Meter``), and two ratios measured on the same
batches in the same run (median of the per-repeat ratios; min/min is printed beside it, as a
check when other processes share the cores):

    update()   / a bare forward + backward + AdamW loop on the same tokens       (target <= 1.2x)
    update()   / its arithmetic floor                                           (target <= 1.3x)
    generation / a bare ``model.generate(do_sample=True)`` on the same prompts  (target <= 1/1.5)

The arithmetic floor of a stage is its FLOPs (2 per weight of every linear layer per token plus
attention's two S x S products; x3 for forward + backward) divided by the matmul throughput
measured here, now, on the model's own layer shapes at the stage's row count: the time the
stage would take if it did nothing but its matmuls at the speed this machine gives them.

The bare update uses the same input_ids / attention_mask, micro-batch size and model, a plain
masked ``-(logprobs * advantages).sum()`` loss and its own AdamW. The untrained model scores 0
everywhere (zero advantages), so the update runs on random per-sequence advantages. The KL
penalty stays at the config's value (0: no reference model). Trainer and bare calls alternate in
each repeat, which run in turn after one warm-up. A ratio that misses its target is followed by a
torch.profiler breakdown of the trainer's own functions (wrapped here, not edited).

    python benchmarks/bench_grpo_step.py [--configs tiny 20m] [--repeats 3]
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import json
import math
import re
import statistics
import subprocess
import sys
import time

import torch
from harness import busy, machine_line

import rlnb.engine.models.hf_backend as hf_backend
import rlnb.engine.models.policy as policy
import rlnb.engine.trainers.grpo as grpo
from rlnb.engine.models.backend import response_mask_and_truncation, tokenize_prompts
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.run.config.master_config import load_config
from rlnb.run.training.warm_trainer import trainer_with_warm_start

BASE = ["grpo.val_period=0", "sft.enabled=false"]
CONFIGS = {
    "tiny": [],
    "20m": [
        "policy.tiny.hidden_size=512",
        "policy.tiny.num_hidden_layers=6",
        "policy.tiny.num_attention_heads=8",
        "policy.tiny.intermediate_size=1536",  # 3x hidden (the default 2x gives 15.8 M)
    ],
}
TARGET = 1.2
SAMPLER_SPEEDUP = 1.5  # the aim: the sampler at least 1.5x faster than model.generate
FLOOR_TARGET = 1.3  # the aim: update() within 1.3x of its FLOPs / matmul throughput
_MISSING = object()


# ---------------------------------------------------------------------------- measuring
class Meter:
    """Wall time and the peak memory one call adds above what was resident when it started.

    CPU: the kernel's high-water RSS (VmHWM, i.e. ``ru_maxrss``), reset before each call through
    ``/proc/self/clear_refs`` so every call gets its own peak (without that, the process-wide
    high-water mark). RSS follows live tensors only if glibc hands freed memory back, so the
    memory pass runs in a fresh process (``--memory-pass``) that first calls ``exact()``: every
    allocation of 64 KiB or more gets its own mapping (slower, hence not during the timings)
    and the heap is trimmed before each call. CUDA: ``torch.cuda.max_memory_allocated``.
    """

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.libc = None
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.resettable = True
        except OSError:
            self.resettable = False

    def exact(self) -> None:
        try:
            self.libc = ctypes.CDLL(ctypes.util.find_library("c"))
            self.libc.mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD (also stops its auto-growth)
        except (OSError, AttributeError):
            self.libc = None

    def _status_kib(self, field: str) -> int:
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\s+(\d+)", f.read()).group(1))

    def __call__(self, fn, *args, **kwargs):
        """``(result, seconds, peak MiB added)``."""
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            start_mem = torch.cuda.memory_allocated()
        else:
            gc.collect()
            if self.libc is not None:
                self.libc.malloc_trim(0)
            if self.resettable:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
            start_mem = self._status_kib("VmRSS") * 1024
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if self.cuda:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        if self.cuda:
            peak = torch.cuda.max_memory_allocated()
        else:
            peak = self._status_kib("VmHWM") * 1024  # = ru_maxrss, without exited threads'
        return out, seconds, max(0, peak - start_mem) / 2**20


# ---------------------------------------------------------------------------- bare baselines
@torch.no_grad()
def bare_generate(trainer: GRPOTrainer, prompt_ids, prompt_mask):
    """``model.generate`` with the trainer's sampling settings; returns the generated ids."""
    cfg, tok = trainer.config.policy.generation, trainer.policy.tokenizer
    model = trainer.policy.model
    model.eval()
    out = model.generate(
        input_ids=prompt_ids,
        attention_mask=prompt_mask,
        do_sample=True,
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        top_k=cfg.top_k or 0,
        max_new_tokens=cfg.max_new_tokens,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model.train()
    return out[:, prompt_ids.shape[1] :]


def bare_update(model, optimizer, data: dict[str, torch.Tensor], gbs: int, mbs: int) -> None:
    """Forward + backward per micro-batch, one AdamW step per global batch; plain masked loss."""
    model.train()
    B = data["input_ids"].shape[0]
    for g0 in range(0, B, gbs):
        optimizer.zero_grad(set_to_none=True)
        for m0 in range(g0, min(g0 + gbs, B), mbs):
            rows = slice(m0, min(m0 + mbs, g0 + gbs, B))
            ids, mask = data["input_ids"][rows], data["attention_mask"][rows]
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)
            weight = data["advantages"][rows, 1:] * data["token_mask"][rows, 1:]
            (-(logprobs * weight).sum()).backward()
        optimizer.step()


# ---------------------------------------------------------------------------- arithmetic floors
def linear_shapes(model) -> list[tuple[int, int]]:
    """(in, out) of every matmul a token goes through: the model's ``nn.Linear`` layers (the
    attention projections, the MLP, the LM head)."""
    return [(m.in_features, m.out_features) for m in model.modules()
            if isinstance(m, torch.nn.Linear)]


def flops_per_token(model, seq_len: float) -> float:
    """Forward FLOPs per token: 2 per weight of every linear layer, plus attention's two
    [S x S] products (QK^T and AV: 4·S·hidden per layer and token, S the mean length attended).
    Backward costs twice the forward, so an update is 3x this per trained token."""
    linear = sum(2 * i * o for i, o in linear_shapes(model))
    cfg = model.config
    layers = getattr(cfg, "num_hidden_layers", 0) or getattr(cfg, "n_layer", 0)
    hidden = getattr(cfg, "hidden_size", 0) or getattr(cfg, "n_embd", 0)
    return linear + 4 * seq_len * hidden * layers


def matmul_gflops(model, tokens: int, device: torch.device, repeats: int = 20) -> float:
    """The matmul throughput this machine reaches on the model's own shapes at ``tokens`` rows:
    total FLOPs of one pass over every linear layer's shape divided by its best time."""
    shapes = linear_shapes(model)
    xs = [torch.randn(tokens, i, device=device) for i, _ in shapes]
    ws = [torch.randn(i, o, device=device) for i, o in shapes]
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for x, w in zip(xs, ws):
            x @ w
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return sum(2 * tokens * i * o for i, o in shapes) / best / 1e9


# ---------------------------------------------------------------------------- profiling
@contextlib.contextmanager
def labelled(trainer: GRPOTrainer):
    """Wrap the trainer's functions in ``record_function`` ranges (``rlnb::name``) for a while."""
    patches = [  # (owner, attribute, label)
        (trainer, "next_prompt_rows", "grpo.next_prompt_rows"),
        (trainer, "format_prompt", "grpo.format_prompt (x B)"),
        (trainer.generator, "generate", "HFGenerationBackend.generate"),
        (hf_backend, "tokenize_prompts", "backend.tokenize_prompts"),
        (trainer.policy.model, "generate", "model.generate"),
        (hf_backend, "sample_tokens", "sampler.sample_tokens"),
        (hf_backend, "response_mask_and_truncation",
         "backend.response_mask_and_truncation"),
        (trainer.policy.tokenizer, "decode", "tokenizer.decode (x B)"),
        (trainer.task, "score", "task.score"),
        (grpo, "check_rewards", "environments.check_rewards"),
        (trainer.policy, "logprobs", "Policy.logprobs"),
        (trainer.policy, "forward_logprobs", "Policy.forward_logprobs"),
        (trainer.policy.model, "forward", "model.forward"),
        (trainer.policy, "train", "Policy.train"),
        (policy, "global_valid_counts", "reduction.global_valid_counts"),
        (trainer.loss_fn, "from_logprobs", "ClippedPGLossFn.from_logprobs"),
        (torch.autograd, "backward", "autograd.backward"),
        (torch.nn.utils, "clip_grad_norm_", "clip_grad_norm_"),
        (policy, "sum_partial_metrics", "reduction.sum_partial_metrics"),
        (trainer.policy.scheduler, "step", "scheduler.step"),
        (trainer.generator, "refit", "generator.refit"),
    ]
    saved = []
    for owner, name, label in patches:
        fn = getattr(owner, name, None)
        if fn is None:  # renamed or moved since this list was written: not profiled
            continue
        saved.append((owner, name, vars(owner).get(name, _MISSING)))  # instance/module attr

        def wrapped(*args, _fn=fn, _label=label, **kwargs):
            with torch.profiler.record_function("rlnb::" + _label):
                return _fn(*args, **kwargs)

        setattr(owner, name, functools.wraps(fn)(wrapped))
    try:
        yield
    finally:
        for owner, name, old in reversed(saved):
            if old is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, old)


def profile_table(fn, top_ops: int = 6) -> str:
    """CPU time of the ``rlnb::`` ranges and of the heaviest aten ops during ``fn()``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn()
    events = prof.key_averages()
    ours = sorted(
        (e for e in events if e.key.startswith("rlnb::") or e.key.startswith("Optimizer.step")),
        key=lambda e: -e.cpu_time_total,
    )
    lines = [f"      {'range (inclusive CPU time)':<46}{'calls':>6}{'ms':>10}"]
    lines += [f"      {e.key:<46}{e.count:>6}{e.cpu_time_total / 1e3:>10.1f}" for e in ours]
    ops = sorted(
        (e for e in events if e.key.startswith("aten::")), key=lambda e: -e.self_cpu_time_total
    )[:top_ops]
    lines.append(f"      {'heaviest aten ops (self CPU time)':<46}{'calls':>6}{'ms':>10}")
    lines += [f"      {e.key:<46}{e.count:>6}{e.self_cpu_time_total / 1e3:>10.1f}" for e in ops]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- the benchmark
class StepBench:
    """One trainer and its bare twins; ``step`` runs every stage once, trainer and bare in turn."""

    def __init__(self, overrides: list[str], args, device: torch.device):
        base = [o for o in BASE if not (args.warm and o.startswith("sft."))]
        self.cfg = cfg = load_config(args.config, base + overrides + list(args.set))
        self.device = device
        # --warm: the warm-started policy (its answers end at EOS after a few tokens); else BASE
        # turns the warm start off
        self.t = t = trainer_with_warm_start(cfg)[0]
        t.policy.model.to(device)  # in place: optimizer, generator and reference keep the params
        self.n_params = sum(p.numel() for p in t.policy.model.parameters())
        opt = cfg.policy.optimizer
        self.bare_opt = torch.optim.AdamW(
            t.policy.model.parameters(), lr=opt.lr, betas=opt.betas, eps=opt.eps
        )
        self.meter = Meter(device)

    def bare_update(self, data: dict[str, torch.Tensor]) -> None:
        pc = self.cfg.policy
        gbs = min(pc.train_global_batch_size, data["input_ids"].shape[0])
        bare_update(self.t.policy.model, self.bare_opt, data, gbs, pc.train_micro_batch_size)

    def step(self, trainer_first: bool) -> dict:
        """Each stage once: ``{stage: (result, seconds, peak MiB)}`` plus the inputs used."""
        t, tok, meter, device = self.t, self.t.policy.tokenizer, self.meter, self.device
        rows = t.next_prompt_rows()
        G = self.cfg.grpo.num_generations_per_prompt
        prompts = [t.format_prompt(r) for r in rows for _ in range(G)]
        p_ids, p_mask = tokenize_prompts(tok, prompts, t.max_prompt_length)
        p_ids, p_mask = p_ids.to(device), p_mask.to(device)
        order = ("trainer", "bare") if trainer_first else ("bare", "trainer")
        out = {"rows": rows, "prompt_ids": p_ids, "prompt_mask": p_mask}
        for which in order:
            if which == "trainer":
                out["rollout"] = meter(t.rollout, rows)
            else:
                out["bare_gen"] = meter(bare_generate, t, p_ids, p_mask)
        b = out["rollout"][0]
        out["advantages"] = meter(t.compute_advantages, b)
        a = out["advantages"][0]
        a.advantages = torch.randn(len(b), 1).expand_as(a.advantages).contiguous()
        out["data"] = data = {k: v.to(device) for k, v in a.train_data().items()}
        for which in order:
            if which == "trainer":
                out["update"] = meter(t.update, a)
            else:
                out["bare_upd"] = meter(self.bare_update, data)
        return out


def bench(name: str, overrides: list[str], args, device: torch.device) -> None:
    """Time the stages (warm-up, then ``repeats`` alternating steps) and print the table."""
    sb = StepBench(overrides, args, device)
    t, cfg, tok = sb.t, sb.cfg, sb.t.policy.tokenizer
    pc, G = cfg.policy, cfg.grpo.num_generations_per_prompt
    for i in range(args.warmup):
        sb.step(trainer_first=i % 2 == 0)
    rec: dict[str, list[float]] = {}
    for i in range(args.repeats):
        out = sb.step(trainer_first=i % 2 == 0)
        b, t_roll, _ = out["rollout"]
        gen_ids, t_bgen, _ = out["bare_gen"]
        t_adv, t_upd, t_bupd = out["advantages"][1], out["update"][1], out["bare_upd"][1]
        m = b.metrics
        t_gen, t_rew = m["timing/train/generation"], m["timing/train/reward_calculation"]
        t_lp = m["timing/train/policy_and_reference_logprobs"]
        gen_tokens = float(b.response_lengths.sum())
        bare_tokens = float(
            response_mask_and_truncation(gen_ids.cpu(), tok.eos_token_id, tok.pad_token_id)[0].sum()
        )
        trained = float(b.attention_mask.sum())
        for key, value in {
            "rollout": t_roll, "generation": t_gen, "reward": t_rew, "logprobs": t_lp,
            "rollout_other": t_roll - t_gen - t_rew - t_lp, "bare_gen": t_bgen,
            "advantages": t_adv, "update": t_upd, "bare_upd": t_bupd,
            "gen_tok_s": gen_tokens / t_gen, "rollout_tok_s": gen_tokens / t_roll,
            "bare_gen_tok_s": bare_tokens / t_bgen, "upd_tok_s": trained / t_upd,
            "upd_loss_tok_s": float(b.token_mask.sum()) / t_upd, "bare_upd_tok_s": trained / t_bupd,
            "r_update": t_upd / t_bupd, "r_rollout": t_roll / t_bgen, "r_gen": t_gen / t_bgen,
            "r_no_lp": (t_roll - t_lp) / t_bgen, "gen_tokens": gen_tokens, "trained": trained,
        }.items():  # fmt: skip
            rec.setdefault(key, []).append(value)

    med = {k: statistics.median(v) for k, v in rec.items()}
    B, S = b.input_ids.shape
    print(
        f"\n== {name}: {sb.n_params / 1e6:.2f} M parameters; B={B} rows "
        f"({cfg.grpo.num_prompts_per_step} prompts x {G}), S={S} tokens, "
        f"max_new_tokens={pc.generation.max_new_tokens}, micro-batch {pc.train_micro_batch_size}, "
        f"KL penalty {cfg.loss_fn.reference_policy_kl_penalty}; median of {args.repeats} "
        f"after {args.warmup} warm-up"
    )
    model = t.policy.model
    gen_tok, trained_tok = statistics.median(rec["gen_tokens"]), statistics.median(rec["trained"])
    gflops_gen = matmul_gflops(model, int(B), device)  # decode: one token per row per step
    gflops_upd = matmul_gflops(model, int(trained_tok), device)
    floor = {  # seconds: the stage's FLOPs at the measured matmul throughput
        "generation": gen_tok * flops_per_token(model, S / 2) / gflops_gen / 1e9,
        "update": 3 * trained_tok * flops_per_token(model, S / 2) / gflops_upd / 1e9,
    }
    floor["bare_gen"], floor["bare_upd"] = floor["generation"], floor["update"]
    print(f"  matmul throughput on the model's shapes: {gflops_gen:.0f} GFLOP/s at {B} rows "
          f"(decode), {gflops_upd:.0f} GFLOP/s at {trained_tok:.0f} rows (update); floor = the "
          "stage's FLOPs at that rate")
    print(f"  {'stage':<34}{'ms':>10}{'tokens/s':>12}{'floor ms':>10}{'x floor':>9}")
    rows = [
        ("rollout()", "rollout", "rollout_tok_s"),
        ("  generation", "generation", "gen_tok_s"),
        ("  reward", "reward", None),
        ("  log-probs (policy; no reference)", "logprobs", None),
        ("  other (rows, prompts, metrics)", "rollout_other", None),
        ("bare model.generate", "bare_gen", "bare_gen_tok_s"),
        ("compute_advantages()", "advantages", None),
        ("update()", "update", "upd_tok_s"),
        ("bare fwd+bwd+AdamW loop", "bare_upd", "bare_upd_tok_s"),
    ]
    for label, tk, sk in rows:
        speed = f"{med[sk]:>12,.0f}" if sk else " " * 12
        fl = (f"{1e3 * floor[tk]:>10.1f}{med[tk] / floor[tk]:>8.2f}x" if tk in floor else "")
        print(f"  {label:<34}{1e3 * med[tk]:>10.1f}{speed}{fl}")
    print(
        "  (tokens/s: generated tokens for generation, all non-pad tokens forwarded for updates; "
        f"update() on response tokens only: {med['upd_loss_tok_s']:,.0f}/s)"
    )
    for key, num, den, what, target in (
        ("r_update", "update", "bare_upd", "update() / bare loop", TARGET),
        ("r_gen", "generation", "bare_gen", "generation / bare generate", 1 / SAMPLER_SPEEDUP),
    ):
        ok = "OK" if med[key] <= target else "MISSES"
        best = min(rec[num]) / min(rec[den])  # robust to other processes on the same cores
        spread = ", ".join(f"{x:.2f}" for x in rec[key])
        print(
            f"  ratio {what:<28}{med[key]:6.2f}x  target <= {target:.2f}x: {ok}  "
            f"(min/min {best:.2f}x; per run {spread})"
        )
    ratio = med["update"] / floor["update"]
    print(f"  update() / its arithmetic floor {ratio:6.2f}x  target <= {FLOOR_TARGET}x: "
          f"{'OK' if ratio <= FLOOR_TARGET else 'MISSES'}  (best run "
          f"{min(rec['update']) / floor['update']:.2f}x)")
    print(
        f"  (sampler speed-up over generate: {1 / med['r_gen']:.2f}x, target >= "
        f"{SAMPLER_SPEEDUP}x; rollout() / bare generate: {med['r_rollout']:.2f}x; rollout() "
        f"without the log-prob forward: {med['r_no_lp']:.2f}x)"
    )

    a, data = out["advantages"][0], out["data"]
    p_ids, p_mask, rows_ = out["prompt_ids"], out["prompt_mask"], t.next_prompt_rows()
    with labelled(t):
        if args.profile or med["r_gen"] > 1 / SAMPLER_SPEEDUP:
            print("  profile of one rollout():")
            print(profile_table(lambda: t.rollout(rows_)))
            print("  profile of one bare model.generate:")
            print(profile_table(lambda: bare_generate(t, p_ids, p_mask)))
        if args.profile or med["r_update"] > TARGET:
            print("  profile of one update():")
            print(profile_table(lambda: t.update(a)))
            print("  profile of one bare fwd+bwd+AdamW loop:")
            print(profile_table(lambda: sb.bare_update(data)))


def memory_pass(names: list[str], args, device: torch.device) -> None:
    """(Fresh process) one warm-up step, then one step whose per-call peaks are printed as JSON."""
    for name in names:
        sb = StepBench(CONFIGS[name], args, device)
        sb.meter.exact()
        sb.step(trainer_first=True)
        out = sb.step(trainer_first=False)
        labels = {"rollout": "rollout()", "bare_gen": "bare generate",
                  "advantages": "compute_advantages()", "update": "update()",
                  "bare_upd": "bare loop"}  # fmt: skip
        print(json.dumps({"config": name, **{v: out[k][2] for k, v in labels.items()}}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--config", default="configs/tiny.yaml")
    parser.add_argument("--repeats", type=int, default=None, help="default: tiny 7, 20m 5")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="extra config overrides for every configuration, e.g. "
                        "grpo.reuse_generation_logprobs=true")
    parser.add_argument("--profile", action="store_true", help="profile even when on target")
    parser.add_argument("--warm", action="store_true",
                        help="time the warm-started policy (default: untrained weights, which "
                             "rarely emit EOS, so every row runs all max_new_tokens)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--memory-pass", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.memory_pass:
        memory_pass(args.configs, args, device)
        return
    print(f"GRPO step benchmark on {device} ({machine_line()})")
    if device.type == "cpu" and busy():
        print(
            "  WARNING: other processes are running; with OpenMP threads competing for the same "
            "cores, small ops slow down many-fold and the timings below are not reliable"
        )
    for name in args.configs:
        run_args = argparse.Namespace(**vars(args))
        if args.repeats is None:
            run_args.repeats = 7 if name == "tiny" else 5
        torch.manual_seed(0)
        bench(name, CONFIGS[name], run_args, device)

    cmd = [sys.executable, __file__, "--memory-pass", "--config", args.config]
    cmd += ["--device", args.device, "--configs", *args.configs, "--set", *args.set]
    cmd += ["--warm"] if args.warm else []
    lines = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.splitlines()
    peaks = [json.loads(line) for line in lines if line.startswith("{")]
    unit = "CUDA max_memory_allocated" if device.type == "cuda" else "RSS, fresh process"
    print(f"\npeak memory each call adds above its start (MiB, {unit}; one call after warm-up):")
    print("  " + "".join(f"{k:>22}" if i else f"{k:<8}" for i, k in enumerate(peaks[0])))
    for p in peaks:
        print("  " + "".join(f"{v:>22.1f}" if i else f"{v:<8}" for i, v in enumerate(p.values())))


if __name__ == "__main__":
    main()
