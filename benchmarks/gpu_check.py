"""The GPU check: one script that installs what the GPU machine lacks, runs the GPU tier and
times GRPO on a Qwen3-0.6B-shaped model beside TRL's GRPOTrainer, in one call of under ten
minutes, writing every figure to one JSON file.

    python benchmarks/gpu_check.py --wheels wheels/ --out gpu_check.json     # on the GPU machine
    python benchmarks/gpu_check.py --cpu --out /tmp/gpu_check.json           # the suite's rehearsal

A GPU machine is lent now and then, for minutes, with no network: so each stage below runs on
its own, its failure recorded in the JSON (``stages.<name>.error``) while the next still runs,
and the script always writes its file. Stages:

1. ``install``: ``pip install --no-index --no-deps`` of every wheel in ``--wheels`` (built on a
   machine with network by ``tools/gpu_wheels.sh``); rlnb runs from this checkout (on the path).
2. ``versions``: Python, torch (and its CUDA), transformers, accelerate, peft, triton, trl, rlnb,
   and the card.
3. ``gpu_tests``: ``pytest -m gpu`` (the policy in bf16, the sampler, LoRA, compile, DPO and PPO
   steps on CUDA: tests/engine/test_gpu.py), with its pass/fail counts.
4. ``rlnb_grpo``: ``--steps`` GRPO steps (after a warm-up step and the step that measures the
   stages' memory) of ``configs/qwen3_0.6b.yaml``
   (``policy.model_name: random``: the architecture at its size, random weights, no download)
   at G = ``--generations`` and ``--new-tokens`` new tokens: seconds per step, generation and
   training tokens per second, the peak memory of each stage (``memory/*``), and the training
   MFU, 6 · N · trained tokens / training seconds over the card's dense bf16 peak (H100 and H200:
   989 TFLOP/s; another card: none). With ``--lora``, again with LoRA adapters.
5. ``trl_grpo``: the same model (saved to a folder), prompts, G, new tokens, batch and steps
   through TRL's ``GRPOTrainer`` (no vLLM on either side), seconds per step from its own
   callback; and the ratio.

``--cpu`` is the rehearsal the suite runs (tests/run/test_gpu_check.py): a 2-layer model of the
same architecture, a few tokens, one step, no install, no TRL unless it is importable; it runs
every stage's code so the script cannot rot between GPU visits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # rlnb from this checkout, installed or not
PEAK_BF16 = {"H100": 989.4e12, "H200": 989.4e12}  # dense bf16 FLOP/s (NVIDIA's data sheets)
TINY_SHAPE = ["policy.random_init.hidden_size=64", "policy.random_init.num_hidden_layers=2",
              "policy.random_init.num_attention_heads=4",
              "policy.random_init.num_key_value_heads=2", "policy.random_init.head_dim=16",
              "policy.random_init.intermediate_size=128", "policy.random_init.vocab_size=512",
              "policy.precision=float32"]


def stage(results: dict, name: str):
    """Run the decorated function as stage ``name``: its result or its error in ``results``."""

    def run(fn):
        start = time.perf_counter()
        print(f"== {name}", flush=True)
        try:
            out = fn()
            results[name] = {"ok": True, **(out or {})}
        except Exception as err:  # noqa: BLE001 - a GPU visit is rare: record it, go on
            results[name] = {"ok": False, "error": f"{type(err).__name__}: {err}",
                             "traceback": traceback.format_exc()[-4000:]}
            print(f"   failed: {type(err).__name__}: {err}", flush=True)
        results[name]["seconds"] = round(time.perf_counter() - start, 2)
        return fn

    return run


def installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def card() -> dict:
    import torch

    if not torch.cuda.is_available():
        return {"name": None, "memory_gib": None}
    props = torch.cuda.get_device_properties(0)
    return {"name": props.name, "memory_gib": round(props.total_memory / 2**30, 1)}


def peak_flops(name: str | None) -> float | None:
    return next((v for k, v in PEAK_BF16.items() if name and k in name), None)


def config_overrides(args) -> list[str]:
    sizes = [f"grpo.num_generations_per_prompt={args.generations}",
             f"grpo.num_prompts_per_step={args.prompts}",
             f"policy.generation.max_new_tokens={args.new_tokens}",
             f"policy.max_total_sequence_length={args.new_tokens + 64}",
             f"policy.train_global_batch_size={args.prompts * args.generations}",
             "grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
             "sft.enabled=false", "checkpointing.enabled=false"]
    return [*sizes, *(TINY_SHAPE if args.cpu else [])]


def rlnb_grpo(args, extra: list[str]) -> dict:
    """Stage 4: the rlnb steps, timed from the step's own metrics."""
    import torch

    from rlnb.engine.trainers.loops import make_trainer
    from rlnb.run.config.master_config import load_config
    from rlnb.run.training.probes import attach_probes

    config = load_config(ROOT / "configs" / "qwen3_0.6b.yaml", [*config_overrides(args), *extra])
    trainer = make_trainer(config)
    attach_probes(trainer)  # what a run measures: the funnel, the memory peaks of step 2
    params = sum(p.numel() for p in trainer.policy.model.parameters())
    trainer.step()  # warm-up: allocator, kernels, compile caches
    measured = dict(trainer.step())  # the second step measures each stage's peak memory
    steps = []
    for _ in range(args.steps):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        start = time.perf_counter()
        metrics = dict(trainer.step())
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        metrics["wall"] = time.perf_counter() - start
        steps.append(metrics)

    def median(key):
        values = [m[key] for m in steps if key in m]
        return statistics.median(values) if values else None

    gen_s, train_s = median("timing/train/generation"), median("timing/train/policy_training")
    gen_tokens, trained = median("funnel/generated_tokens"), median("train/total_num_tokens")
    peak = peak_flops(card()["name"])
    out = {
        "device": str(trainer.policy.device), "parameters": params,
        "seconds_per_step": median("wall"),
        "generation_tokens_per_s": gen_tokens / gen_s if gen_s else None,
        "training_tokens_per_s": trained / train_s if train_s else None,
        "mfu_training": (6 * params * trained / train_s / peak) if peak and train_s else None,
        "memory": {k: v for k, v in measured.items() if k.startswith("memory/")},
        "steps": [{k: v for k, v in m.items() if k.startswith(("timing/", "memory/", "funnel/"))
                   or k == "wall"} for m in steps],
    }
    print(f"   {out['seconds_per_step']:.2f} s/step on {out['device']}", flush=True)
    return out


def trl_grpo(args, seconds_rlnb: float | None) -> dict:
    """Stage 5: TRL's GRPOTrainer on the same model, prompts, G, lengths, batch and steps."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlnb.engine.models.loading import load_model_and_tokenizer
    from rlnb.run.config.master_config import load_config

    config = load_config(ROOT / "configs" / "qwen3_0.6b.yaml", config_overrides(args))
    model, tokenizer = load_model_and_tokenizer(config.policy)
    folder = Path(tempfile.mkdtemp(prefix="rlnb-trl-"))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    del model
    cuda = torch.cuda.is_available()
    from rlnb.engine.environments.prompts import format_prompt
    from rlnb.engine.environments.run_task import build_run_task

    task = build_run_task(config, tokenizer)  # the same prompts as rlnb's steps
    prompts = [format_prompt(r, tokenizer, config.policy.chat_template)
               for r in task.train_rows(args.prompts * (args.steps + 1))]

    def reward(completions, **_):
        return [float(len(c)) / 100 for c in completions]

    marks: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            if cuda:
                torch.cuda.synchronize()
            marks.append(time.perf_counter())

    trl_config = GRPOConfig(
        output_dir=str(folder / "out"), per_device_train_batch_size=args.prompts * args.generations,
        num_generations=args.generations, max_completion_length=args.new_tokens,
        max_steps=args.steps + 1, learning_rate=1e-6, logging_steps=1, report_to=[],
        save_strategy="no", bf16=cuda and not args.cpu, fp16=False, use_cpu=not cuda,
        gradient_checkpointing=False, temperature=config.policy.generation.temperature, seed=0,
        beta=config.loss_fn.reference_policy_kl_penalty,  # a reference pass on both sides
        shuffle_dataset=False)
    trainer = GRPOTrainer(model=str(folder), reward_funcs=reward, args=trl_config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}),
                          processing_class=tokenizer, callbacks=[Clock()])
    trainer.train()
    per_step = [b - a for a, b in zip(marks, marks[1:])]  # the first step is the warm-up
    seconds = statistics.median(per_step) if per_step else None
    return {"seconds_per_step": seconds, "trl": installed("trl"),
            "rlnb_speedup": (seconds / seconds_rlnb) if seconds and seconds_rlnb else None}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="gpu_check.json", help="the JSON file written")
    p.add_argument("--wheels", default=None, help="a folder of wheels to install first")
    p.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up")
    p.add_argument("--generations", type=int, default=8, help="G, generations per prompt")
    p.add_argument("--prompts", type=int, default=8, help="prompts per step")
    p.add_argument("--new-tokens", type=int, default=256, help="new tokens per response")
    p.add_argument("--lora", action="store_true", help="time GRPO with LoRA adapters too")
    p.add_argument("--cpu", action="store_true", help="the rehearsal: a tiny shape on the CPU")
    p.add_argument("--skip-tests", action="store_true", help="leave out the GPU tier")
    p.add_argument("--skip-trl", action="store_true", help="leave out TRL's steps")
    args = p.parse_args(argv)
    if args.cpu:
        args.steps, args.generations, args.prompts = 1, 2, 2
        args.new_tokens = min(args.new_tokens, 8)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    results: dict = {"started": time.strftime("%Y-%m-%d %H:%M:%S"), "args": vars(args)}
    stages: dict = {}
    results["stages"] = stages
    out = Path(args.out)

    if args.wheels:
        @stage(stages, "install")
        def _install():
            wheels = sorted(str(w) for w in Path(args.wheels).glob("*.whl"))
            if not wheels:
                raise FileNotFoundError(f"no wheels in {args.wheels} (bash tools/gpu_wheels.sh)")
            pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps"]
            subprocess.run([*pip, *wheels], check=True)
            # rlnb itself: from this checkout, on the path (an install would need its build
            # backend, which an offline machine may lack); the GPU tier's pytest inherits it
            os.environ["PYTHONPATH"] = os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
            return {"wheels": [Path(w).name for w in wheels]}

    @stage(stages, "versions")
    def _versions():
        import torch

        names = ["torch", "transformers", "accelerate", "peft", "triton", "trl", "datasets",
                 "pydantic", "rlnb"]
        return {"python": platform.python_version(), "cuda": torch.version.cuda,
                "card": card(), **{n: installed(n) for n in names}}

    if not args.skip_tests and not args.cpu:
        @stage(stages, "gpu_tests")
        def _tests():
            done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p",
                                   "no:cacheprovider", "tests/engine/test_gpu.py"], cwd=ROOT,
                                  capture_output=True, text=True)
            tail = (done.stdout + done.stderr)[-3000:]
            print(tail, flush=True)
            if done.returncode not in (0, 5):
                raise RuntimeError(f"pytest exited {done.returncode}: {tail.splitlines()[-1]}")
            return {"summary": tail.strip().splitlines()[-1] if tail.strip() else ""}

    stage(stages, "rlnb_grpo")(lambda: rlnb_grpo(args, []))
    if args.lora:
        stage(stages, "rlnb_grpo_lora")(lambda: rlnb_grpo(args, ["policy.lora.enabled=true"]))
    if not args.skip_trl and installed("trl"):
        stage(stages, "trl_grpo")(
            lambda: trl_grpo(args, stages["rlnb_grpo"].get("seconds_per_step")))
    elif not args.skip_trl:
        stages["trl_grpo"] = {"ok": False, "error": "trl is not installed"}
    results["ended"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out.write_text(json.dumps(results, indent=2, default=str))
    failed = [k for k, v in stages.items() if not v.get("ok")]
    print(f"wrote {out}; stages failed: {failed or 'none'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
