"""One whole GRPO step, rlnb against Hugging Face TRL's ``GRPOTrainer``, side by side in one run.

A step is what each library does between two optimizer steps: sample P prompts x G responses of
R new tokens, score them, compute the group advantages, then one forward + backward over the
P*G rows and one AdamW step (no reference model, no KL). Both sides get:

- the very same model: the embedded character-level Llama (``rlnb.engine.models.tiny``, random
  weights, about 0.3 M parameters), saved once to a temporary folder that both load offline
  (``HF_HUB_OFFLINE=1``), in float32;
- the very same prompts: rlnb's addition task stream (``"a+b="``, the rows ``GRPOTrainer`` takes
  step by step); TRL gets them as a plain-text ``prompt`` column (no chat template), in the same
  order (``shuffle_dataset=False``), with the BOS token written in front since rlnb prepends it
  (the script checks that both sides see the same prompt token ids);
- the same sampling: temperature 1, no top-k / top-p / min-p / repetition penalty, the same EOS
  (the untrained model rarely emits it, so almost every row runs all R tokens; the table shows
  the mean completion length each side actually generated);
- the same threads: ``torch.set_num_threads(--threads)`` and ``OMP_NUM_THREADS`` in each worker.

rlnb: ``GRPOTrainer(load_config("configs/tiny.yaml", ...))`` with P, G, R and batch sizes of P*G
rows (one micro-batch, one optimizer step), validation, SFT warm start and checkpoints off; each
``trainer.step()`` (rollout -> advantages -> update) is timed. tiny.yaml reuses the generation
log-probs as pi_old (``grpo.reuse_generation_logprobs``), so there is no second forward; TRL
skips it too when generation and optimizer steps line up (``old_per_token_logps = None``). The
default sampler (``policy.generation.sampler=loop``) is the rlnb row measured against the 1.5x
target; a row with ``sampler=generate`` (transformers' ``model.generate``) is printed beside it,
and with ``--compile`` one with ``policy.compile.enabled=true`` (docs/guide.md#compiled-steps).

TRL: ``GRPOTrainer`` (installed by this script into its own venv, ``--trl-venv``, with the main
venv's torch and transformers versions) configured fairly: ``use_cpu``, fp32 (``bf16=False,
fp16=False``), ``gradient_checkpointing=False``, ``per_device_train_batch_size=P*G``,
``num_generations=G``, ``gradient_accumulation_steps=1``, ``steps_per_generation=1`` (one
generation per optimizer step), ``num_iterations=1``, ``beta=0`` (no reference model),
``max_completion_length=R``, no vLLM, logging, saving and evaluation off; a constant reward
(rlnb uses its task's reward: the cost is negligible, and the untrained model scores 0 anyway,
so both sides train on all-zero advantages). Every non-default field of the ``GRPOConfig`` used
is printed (``--full-trl-config``: all of them). A ``TrainerCallback`` records
``on_step_begin`` / ``on_step_end``: generation, reward, advantages, loss, backward, clipping,
optimizer and scheduler step, without setup, the prompt fetch and logging (the step-end to
step-end period, which includes them, is printed too).

Each run is a fresh process of ``--steps`` steps whose first 2 are dropped (warm-up); the sides
alternate (rlnb, TRL, rlnb generate; then the other way round), ``--rounds`` times, so a change
of load hits all of them, and ``os.getloadavg()`` is printed around every run. Per size the table
shows the median and min seconds per step, the generation share, the mean completion length and
TRL's time over each rlnb row (median/median and min/min); rlnb's target is TRL / rlnb >= 1.5.

    python benchmarks/bench_vs_trl.py [--sizes 16x8x16 8x8x8] [--steps 12] [--threads 2]
                                      [--trl-venv .venv-trl] [--rounds 2]
                                      [--lora] [--model tiny|20m]

``--lora``: both sides train LoRA adapters instead of every weight, with one peft config: rank 8,
alpha 32, no dropout, every linear layer but the output one (rlnb: ``policy.lora.enabled=true
policy.lora.dim=8 policy.lora.alpha=32``; TRL: ``GRPOTrainer(peft_config=peft.LoraConfig(r=8,
lora_alpha=32, lora_dropout=0, target_modules="all-linear"))``, with peft installed into the TRL
venv at the main venv's version). ``--model 20m``: the ~20 M-parameter version of the tiny Llama
(``bench_grpo_step.py``'s ``20m``) instead of the ~0.3 M one.

The first run installs TRL (about a minute: ``python -m venv .venv-trl``, then torch and trl with
pip); ``.venv-trl/`` is git-ignored. Sizes are PxGxR: prompts x generations x new tokens.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import ROOT, busy, call_worker, load_text, machine_line, serve_worker, worker_env

TARGET = 1.5  # TRL seconds per step / rlnb seconds per step
WARMUP = 2  # steps dropped at the start of every run
# --lora: the same adapters on both sides (rlnb's overrides; peft.LoraConfig's arguments)
LORA_RLNB = ["policy.lora.enabled=true", "policy.lora.dim=8", "policy.lora.alpha=32",
             "policy.lora.dropout=0"]
LORA_PEFT = {"r": 8, "lora_alpha": 32, "lora_dropout": 0.0, "target_modules": "all-linear"}
# --model: build_tiny_llama's sizes (20m: bench_grpo_step.py's)
MODELS = {"tiny": {}, "20m": {"hidden_size": 512, "num_hidden_layers": 6,
                              "num_attention_heads": 8, "intermediate_size": 1536}}


def parse_size(text: str) -> tuple[int, int, int]:
    """``"16x8x16"`` -> (prompts P, generations G, new tokens R)."""
    try:
        p, g, r = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is PxGxR, e.g. 16x8x16, got {text!r}") from None
    if min(p, g, r) < 1 or g < 2:
        raise argparse.ArgumentTypeError(f"{text}: P, R >= 1 and G >= 2 (a group baseline)")
    return p, g, r


# ---------------------------------------------------------------------------- workers
def worker_rlnb(spec: dict) -> dict:
    """(Main venv) ``spec["steps"]`` rlnb GRPO steps on the saved model; per-step figures."""
    import torch

    torch.set_num_threads(spec["threads"])
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.run.config.master_config import load_config

    P, G, R = spec["P"], spec["G"], spec["R"]
    overrides = [
        f"policy.model_name={spec['model_dir']}",
        f"grpo.num_prompts_per_step={P}",
        f"grpo.num_generations_per_prompt={G}",
        f"policy.generation.max_new_tokens={R}",
        f"policy.generation.sampler={spec['sampler']}",
        *(["policy.compile.enabled=true"] if spec.get("compile") else []),
        f"policy.train_global_batch_size={P * G}",
        f"policy.train_micro_batch_size={P * G}",
        f"policy.logprob_batch_size={P * G}",
        f"policy.max_total_sequence_length={R + 64}",
        "sft.enabled=false",
        "grpo.val_period=0",
        "grpo.val_at_start=false",
        "grpo.val_at_end=false",
        "loss_fn.reference_policy_kl_penalty=0",
        "checkpointing.enabled=false",
        *(LORA_RLNB if spec.get("lora") else []),
    ]
    cfg = load_config(str(ROOT / "configs" / "tiny.yaml"), overrides)
    trainer = GRPOTrainer(cfg)
    model = trainer.policy.model
    out = {"overrides": overrides, "step_s": [], "end_s": [], "gen_s": [], "lengths": [],
           "prompts": [], "threads": torch.get_num_threads(),
           "dtype": str(next(model.parameters()).dtype),
           "params": sum(p.numel() for p in model.parameters()),
           "trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
           "reference_model": trainer.policy.reference_model is not None,
           "reuse_generation_logprobs": cfg.grpo.reuse_generation_logprobs}
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        m = trainer.step()
        t1 = time.perf_counter()
        out["step_s"].append(t1 - t0)
        out["end_s"].append(t1)
        out["gen_s"].append(m["timing/train/generation"])
        out["lengths"].append(m["train/mean_gen_tokens_per_sample"])
        out["prompts"] += m.rollout.prompts[::G]
        if "prompt_ids" not in out:
            b = m.rollout
            width = b.prompt_ids.shape[1]
            out["prompt_ids"] = b.input_ids[0, :width][b.attention_mask[0, :width].bool()].tolist()
    return out


def worker_trl(spec: dict) -> dict:
    """(TRL venv) ``spec["steps"]`` TRL GRPO steps on the saved model; per-step figures."""
    import torch

    torch.set_num_threads(spec["threads"])
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    P, G, R = spec["P"], spec["G"], spec["R"]
    tok = AutoTokenizer.from_pretrained(spec["model_dir"])
    attn = {"attn_implementation": spec["trl_attn"]} if spec.get("trl_attn") else {}
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32, **attn)
    # rlnb prepends BOS to every prompt; this tokenizer adds none itself, so write it in
    prefix = "" if tok("1")["input_ids"][:1] == [tok.bos_token_id] else tok.bos_token
    texts = [prefix + p for p in spec["prompts"]]
    dataset = Dataset.from_dict({"prompt": texts})

    def constant_reward(completions, **kwargs):
        return [0.0] * len(completions)

    outdir = tempfile.mkdtemp(prefix="bench_vs_trl_")
    kwargs = dict(
        output_dir=outdir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=P * G, gradient_accumulation_steps=1, num_generations=G,
        steps_per_generation=1, num_iterations=1, max_completion_length=R, max_steps=spec["steps"],
        temperature=1.0, top_p=1.0, top_k=0, min_p=None, repetition_penalty=1.0, beta=0.0,
        loss_type="dapo", use_vllm=False, shuffle_dataset=False, seed=0,
        report_to="none", save_strategy="no", logging_strategy="no", eval_strategy="no",
        log_completions=False, disable_tqdm=True, dataloader_num_workers=0,
    )
    args = GRPOConfig(**kwargs)

    class StepClock(TrainerCallback):
        def __init__(self):
            self.begin, self.end, self.threads, self.lengths = [], [], [], []
            self.trainer = None

        def on_step_begin(self, args, state, control, **kw):
            self.threads.append(torch.get_num_threads())
            self.begin.append(time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            self.end.append(time.perf_counter())
            # (logging clears these metrics; logging is off, but train() logs once at the end)
            self.lengths.append(self.trainer._metrics["train"]["completions/mean_length"][-1])

    gen_s: list[float] = []

    class TimedGRPOTrainer(GRPOTrainer):
        """Times ``_generate`` (tokenize, ``model.generate``, decode): rlnb's generation stage."""

        def _generate(self, prompts):
            t0 = time.perf_counter()
            result = super()._generate(prompts)
            gen_s.append(time.perf_counter() - t0)
            return result

    clock = StepClock()
    extra = {}
    if spec.get("lora"):
        from peft import LoraConfig

        extra["peft_config"] = LoraConfig(**LORA_PEFT, task_type="CAUSAL_LM")
    trainer = TimedGRPOTrainer(model=model, reward_funcs=constant_reward, args=args,
                               train_dataset=dataset, processing_class=tok, callbacks=[clock],
                               **extra)
    clock.trainer = trainer
    trainer.train()

    import accelerate
    import transformers
    import trl

    tm = trainer.model
    checkpointing = getattr(tm, "is_activation_checkpointing",
                            getattr(tm, "is_gradient_checkpointing", None))
    out = {
        "step_s": [e - b for b, e in zip(clock.begin, clock.end)], "end_s": clock.end,
        "gen_s": gen_s, "lengths": clock.lengths,
        "threads": min(clock.threads), "dtype": str(next(tm.parameters()).dtype),
        "params": sum(p.numel() for p in tm.parameters()),
        "trainable": sum(p.numel() for p in tm.parameters() if p.requires_grad),
        "mixed_precision": str(trainer.accelerator.mixed_precision),
        "gradient_checkpointing": checkpointing,
        "reference_model": trainer.ref_model is not None,
        "prompt_ids": tok(texts[:1])["input_ids"][0],
        "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                     "accelerate": accelerate.__version__, "torch": torch.__version__},
    }
    record = trl_config_record(GRPOConfig, args, kwargs)
    shutil.rmtree(outdir, ignore_errors=True)  # (nothing is saved there: save_strategy="no")
    return {**out, **record}


def trl_config_record(config_class, args, kwargs: dict) -> dict:
    """(TRL venv) What ``print_trl_config`` shows of the ``GRPOConfig`` ``args`` built from
    ``kwargs``: the fields passed, those differing from the defaults, all, and the kept defaults
    that shape the work."""
    full = args.to_dict()
    # GRPOConfig's defaults as resolved on this machine (its bf16 default needs use_cpu on a
    # CPU); built last: a new config resets accelerate's state, which the trainer reads
    reference = config_class(output_dir=args.output_dir, use_cpu=True).to_dict()
    non_default = {k: v for k, v in full.items() if k in kwargs or str(v) != str(reference.get(k))}
    kept = ("optim", "learning_rate", "lr_scheduler_type", "weight_decay", "max_grad_norm",
            "scale_rewards", "epsilon", "top_entropy_quantile", "entropy_coef",
            "mask_truncated_completions", "importance_sampling_level", "torch_compile",
            "cast_lm_head_to_fp32", "use_transformers_continuous_batching")
    return {"config_passed": kwargs, "config_non_default": non_default,
            "config_full": full,
            "config_kept": {k: full[k] for k in kept if k in full and k not in kwargs}}


# ---------------------------------------------------------------------------- the driver
def ensure_trl_venv(venv: Path, lora: bool = False) -> Path:
    """The TRL venv's python; creates the venv and installs TRL there when it has none (and
    peft, at the main venv's version, for ``--lora``)."""
    python = venv / "bin" / "python"
    check = [str(python), "-c", "import trl, datasets, accelerate" + (", peft" if lora else "")]
    if python.exists() and subprocess.run(check, capture_output=True).returncode == 0:
        return python
    if lora and python.exists() and subprocess.run(check[:2] + ["import trl"],
                                                   capture_output=True).returncode == 0:
        import peft

        pin = "peft==" + peft.__version__
        print(f"installing {pin} into {venv} ...", flush=True)
        r = subprocess.run([str(python), "-m", "pip", "install", "-q", pin], capture_output=True,
                           text=True)
        if r.returncode or subprocess.run(check, capture_output=True).returncode:
            print(r.stdout[-2000:] + r.stderr[-2000:], file=sys.stderr)
            sys.exit(f"could not install {pin} into {venv}")
        return python
    import torch
    import transformers

    torch_pin = "torch==" + torch.__version__.split("+")[0]  # the same kernels on both sides
    tf_pin = "transformers==" + transformers.__version__
    print(f"installing TRL into {venv} ({torch_pin}, then trl with {tf_pin}) ...", flush=True)
    t0 = time.perf_counter()

    def run(cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            print("\n".join((r.stdout + r.stderr).splitlines()[-20:]), file=sys.stderr)
        return r.returncode == 0

    pip = [str(python), "-m", "pip", "install", "-q"]
    ok = run([sys.executable, "-m", "venv", str(venv)]) and run(pip + [torch_pin])
    extras = []
    if lora:
        import peft

        extras = ["peft==" + peft.__version__]
    if ok and not run(pip + ["trl", tf_pin, *extras]):
        print(f"  trl with {tf_pin} did not resolve: installing trl unpinned", flush=True)
        ok = run(pip + ["trl", *extras])
    if not ok or subprocess.run(check, capture_output=True).returncode:
        sys.exit(f"could not install TRL into {venv} (see pip's output above)")
    print(f"  TRL venv ready in {time.perf_counter() - t0:.0f} s", flush=True)
    return python


def run_worker(python: Path, side: str, spec: dict, label: str) -> dict:
    """One measured run in a fresh process; prints the load average around it."""
    run = call_worker(__file__, [side], spec, label=label, python=python,
                      env=worker_env(spec["threads"]))
    kept = run.result["step_s"][WARMUP:]
    print(f"  {label:<22} load {load_text(run.load_before)} -> {load_text(run.load_after)}; "
          f"{len(kept)} steps, median {statistics.median(kept):.3f} s "
          f"(process {run.seconds:.0f} s)", flush=True)
    return run.result


def summarize(runs: list[dict]) -> dict:
    """Pool the measured steps (warm-up dropped) of one side's runs."""
    steps, gen, lengths, periods = [], [], [], []
    for r in runs:
        steps += r["step_s"][WARMUP:]
        gen += [g / s for g, s in zip(r["gen_s"][WARMUP:], r["step_s"][WARMUP:])]
        lengths += r["lengths"][WARMUP:]
        ends = r["end_s"]
        periods += [b - a for a, b in zip(ends[WARMUP - 1:], ends[WARMUP:])]
    return {"median": statistics.median(steps), "min": min(steps), "n": len(steps),
            "gen_share": statistics.median(gen) if gen else float("nan"),
            "length": statistics.fmean(lengths) if lengths else float("nan"),
            "period": statistics.median(periods) if periods else float("nan")}


def print_trl_config(out: dict, full: bool) -> None:
    v = out["versions"]
    print(f"  TRL config (trl {v['trl']}, transformers {v['transformers']}, accelerate "
          f"{v['accelerate']}, torch {v['torch']}; mixed precision {out['mixed_precision']}, "
          f"gradient checkpointing {out['gradient_checkpointing']}, reference model "
          f"{out['reference_model']}):")
    print("    passed to GRPOConfig: " + ", ".join(f"{k}={v!r}"
                                                   for k, v in out["config_passed"].items()))
    print("    defaults kept that shape the work: " + ", ".join(
        f"{k}={v!r}" for k, v in out["config_kept"].items()))
    shown = out["config_full"] if full else out["config_non_default"]
    what = "every field" if full else "the fields passed and those differing from the defaults"
    print(f"    resulting GRPOConfig, {what}:")
    for k in sorted(shown):
        print(f"      {k} = {shown[k]!r}")


def bench_size(size: tuple[int, int, int], args, model_dir: str, trl_python: Path,
               sides: list[str], first: bool) -> None:
    from rlnb.engine.environments.tasks import build_task
    from rlnb.run.config.master_config import load_config

    P, G, R = size
    cfg = load_config(str(ROOT / "configs" / "tiny.yaml"))
    rows = build_task(cfg.data).train_rows(P * args.steps, cfg.grpo.seed)  # rlnb's stream
    prompts = [r["prompt"] for r in rows]
    base = {"model_dir": model_dir, "P": P, "G": G, "R": R, "steps": args.steps,
            "threads": args.threads, "lora": args.lora, "trl_attn": args.trl_attn}
    print(f"\n== {P} prompts x {G} generations x {R} new tokens ({P * G} rows per step), "
          f"{args.threads} threads, {args.steps} steps per run ({WARMUP} dropped), "
          f"{args.rounds} rounds")
    runs: dict[str, list[dict]] = {s: [] for s in sides}
    for rnd in range(args.rounds):
        for side in sides if rnd % 2 == 0 else sides[::-1]:
            if side == "trl":
                out = run_worker(trl_python, "trl", {**base, "prompts": prompts},
                                 f"TRL (round {rnd + 1})")
            else:
                what = side.split(":")[1]  # loop, generate or compiled (the loop sampler)
                sampler = "loop" if what == "compiled" else what
                out = run_worker(Path(sys.executable), "rlnb",
                                 {**base, "sampler": sampler, "compile": what == "compiled"},
                                 f"rlnb {what} (round {rnd + 1})")
            runs[side].append(out)

    names = {"rlnb:loop": "rlnb (sampler=loop)", "rlnb:generate": "rlnb (sampler=generate)",
             "rlnb:compiled": "rlnb (policy.compile)", "trl": "TRL GRPOTrainer"}
    stats = {s: summarize(runs[s]) for s in sides}
    trl = stats.get("trl")
    print(f"  {'side':<26}{'median s':>10}{'min s':>9}{'period s':>10}{'gen share':>11}"
          f"{'mean len':>10}{'TRL/this med':>14}{'min/min':>9}")
    for s in sides:
        st = stats[s]
        ratio = ""
        if trl is not None and s != "trl":
            ratio = f"{trl['median'] / st['median']:>13.2f}x{trl['min'] / st['min']:>8.2f}x"
        print(f"  {names[s]:<26}{st['median']:>10.3f}{st['min']:>9.3f}{st['period']:>10.3f}"
              f"{100 * st['gen_share']:>10.0f}%{st['length']:>10.2f}{ratio}")
    for side in ("rlnb:loop", "rlnb:compiled"):
        if trl is not None and side in stats:
            r_med = trl["median"] / stats[side]["median"]
            r_min = trl["min"] / stats[side]["min"]
            verdict = "MET" if r_med >= TARGET else "MISSED"
            print(f"  target TRL / {names[side]} >= {TARGET}x: {verdict} (median {r_med:.2f}x, "
                  f"min/min {r_min:.2f}x)")

    # checks that both sides did the same work
    if "trl" in runs and "rlnb:loop" in runs:
        t, r = runs["trl"][0], runs["rlnb:loop"][0]
        same_prompts = r["prompts"] == prompts[: len(r["prompts"])]
        print(f"  same prompts: {'yes' if same_prompts else 'NO'}; same prompt token ids "
              f"(first row): {'yes' if t['prompt_ids'] == r['prompt_ids'] else 'NO'} "
              f"({r['prompt_ids']}); threads rlnb {r['threads']} / TRL {t['threads']}; dtype "
              f"rlnb {r['dtype']} / TRL {t['dtype']}; parameters rlnb {r['params']:,} / TRL "
              f"{t['params']:,} (trainable {r['trainable']:,} / {t['trainable']:,}); "
              f"reference model rlnb {r['reference_model']} / TRL "
              f"{t['reference_model']}; rlnb reuses generation log-probs: "
              f"{r['reuse_generation_logprobs']}")
        print("  rlnb overrides of configs/tiny.yaml: " + " ".join(
            o if not o.startswith("policy.model_name=") else "policy.model_name=<saved model>"
            for o in r["overrides"]))
        if first or args.full_trl_config:
            print_trl_config(t, args.full_trl_config)
        else:
            diff = {k: v for k, v in t["config_passed"].items() if k in (
                "per_device_train_batch_size", "num_generations", "max_completion_length",
                "max_steps")}
            print(f"  TRL config as above except {diff}")
    print("  (median / min: seconds of one step, warm-up dropped, pooled over the rounds; "
          "period: step end to step end, with the loop around the step; gen share: generation "
          "time / step time; mean len: generated tokens per completion, EOS included)")


def save_model(folder: str, size: str = "tiny") -> None:
    import transformers

    from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama, save_tiny

    transformers.utils.logging.disable_progress_bar()
    tok = build_char_tokenizer()
    save_tiny(build_tiny_llama(len(tok), **MODELS[size]), tok, folder)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", type=parse_size,
                        default=[parse_size("16x8x16"), parse_size("8x8x8")],
                        help="PxGxR: prompts x generations x new tokens (default 16x8x16 8x8x8)")
    parser.add_argument("--steps", type=int, default=12,
                        help=f"steps per run, the first {WARMUP} dropped (default 12)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each side")
    parser.add_argument("--threads", type=int, default=2, help="torch threads on both sides")
    parser.add_argument("--trl-venv", default=".venv-trl", help="TRL's venv (made if missing)")
    parser.add_argument("--compile", action="store_true",
                        help="add a row with policy.compile.enabled=true (its first round fills "
                        "the compile cache; the first 2 steps of every run are dropped anyway)")
    parser.add_argument("--no-generate-row", action="store_true",
                        help="skip the rlnb policy.generation.sampler=generate row")
    parser.add_argument("--full-trl-config", action="store_true",
                        help="print every GRPOConfig field, not only the non-default ones")
    parser.add_argument("--lora", action="store_true",
                        help="both sides train LoRA adapters (rank 8, alpha 32, all linear)")
    parser.add_argument("--model", choices=list(MODELS), default="tiny",
                        help="the tiny Llama (~0.3 M parameters) or its ~20 M version")
    parser.add_argument("--trl-attn", choices=["eager", "sdpa"], default=None,
                        help="TRL's model's attention kernel (default: the model's own, SDPA; "
                        "rlnb runs configs/tiny.yaml's, eager)")
    parser.add_argument("--worker", choices=["rlnb", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fn = worker_rlnb if args.worker == "rlnb" else worker_trl
        serve_worker(fn, args.spec)
        return
    if args.steps <= WARMUP + 1:
        parser.error(f"--steps must exceed {WARMUP + 1} (the first {WARMUP} are warm-up)")

    from rlnb.engine.models.generation import GenerationConfig

    venv = Path(args.trl_venv)
    venv = venv if venv.is_absolute() else ROOT / venv
    trl_python = ensure_trl_venv(venv, args.lora)
    sides = ["rlnb:loop", "trl", *(["rlnb:compiled"] if args.compile else [])]
    if not args.no_generate_row:
        if "sampler" in GenerationConfig.model_fields:
            sides.append("rlnb:generate")
        else:
            print("this rlnb has no policy.generation.sampler: no sampler=generate row")
    what = "LoRA adapters (rank 8, alpha 32, all linear)" if args.lora else "every weight"
    print(f"training {what} of the {args.model} model ({MODELS[args.model] or 'defaults'}); "
          f"attention: rlnb configs/tiny.yaml's, TRL {args.trl_attn or 'the model default (SDPA)'}")
    print(f"GRPO step, rlnb vs TRL, on CPU, {args.threads} threads per worker ({machine_line()}); "
          f"rlnb: {sys.executable}; TRL: {trl_python}")
    if busy():
        print("  WARNING: other processes are running; both sides alternate, but with OpenMP "
              "threads competing for the cores small ops slow down many-fold, so the timings "
              "below are not reliable (--threads 1 is less affected)")
    with tempfile.TemporaryDirectory(prefix="bench_vs_trl_model_") as model_dir:
        save_model(model_dir, args.model)
        for i, size in enumerate(args.sizes):
            bench_size(size, args, model_dir, trl_python, sides, first=i == 0)


if __name__ == "__main__":
    main()
