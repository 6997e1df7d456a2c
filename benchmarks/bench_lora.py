"""LoRA adapters against full fine-tuning, side by side in one run: GRPO step time, peak memory,
what the optimizer holds, and checkpoint size.

For the embedded default (configs/tiny.yaml, ~0.3 M parameters) and the ~20 M-parameter version
of the same character-level Llama (``bench_grpo_step.py``'s ``20m``), each variant runs in a fresh
process: ``full`` (every weight trains) and ``lora`` (``policy.lora.enabled=true``: rank 8,
alpha 32, every linear layer but the output one). Both take the same GRPO steps (tiny.yaml's
16 prompts x 16 responses x 5 new tokens, one optimizer step each) with a KL penalty of 0.01, so
the reference policy is part of the picture: ``full`` keeps a frozen copy of the model, ``lora``
computes it with the adapters off. No warm start, no validation.

Per variant it prints: trainable / total parameters, the model state training holds
besides activations (weights + gradients + optimizer state + reference copy, in bytes of the
tensors), the optimizer's state (Adam's two moments and
its step counters, bytes of every tensor in ``optimizer.state``), the reference copy, the
checkpoint on disk (``model/`` plus ``optimizer.pt``, written by ``rlnb.run.store.checkpoint``), the
median and min seconds of ``trainer.step()`` and of its update stage
(``timing/train/policy_training``), and the process's peak resident memory (``ru_maxrss``: the
model, optimizer, reference and activations over the whole run). The variants alternate
(full, lora; then lora, full) for ``--rounds`` rounds so a change of load hits both, the first
step of each run is dropped, and the load average is printed around every run.

    python benchmarks/bench_lora.py [--configs tiny 20m] [--steps 6] [--rounds 2] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

from harness import ROOT, call_worker, load_text, machine_line, serve_worker, worker_env

WARMUP = 1
BASE = ["sft.enabled=false", "grpo.val_period=0", "grpo.val_at_start=false",
        "grpo.val_at_end=false", "checkpointing.enabled=false",
        "loss_fn.reference_policy_kl_penalty=0.01"]
SIZES = {
    "tiny": [],
    "20m": ["policy.tiny.hidden_size=512", "policy.tiny.num_hidden_layers=6",
            "policy.tiny.num_attention_heads=8", "policy.tiny.intermediate_size=1536"],
}
VARIANTS = {
    "full": [],
    "lora": ["policy.lora.enabled=true", "policy.lora.dim=8", "policy.lora.alpha=32"],
}


def worker(spec: dict) -> dict:
    import resource

    import torch

    torch.set_num_threads(spec["threads"])
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.run.config.master_config import load_config
    from rlnb.run.store.checkpoint import save_checkpoint

    cfg = load_config(str(ROOT / "configs" / "tiny.yaml"), spec["overrides"])
    trainer = GRPOTrainer(cfg)
    policy = trainer.policy
    rss_built = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    steps, updates = [], []
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        m = trainer.step()
        steps.append(time.perf_counter() - t0)
        updates.append(m["timing/train/policy_training"])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB -> MiB (Linux)

    def nbytes(tensors):
        return sum(t.numel() * t.element_size() for t in tensors)

    opt_state = nbytes(v for s in policy.optimizer.state.values() for v in s.values()
                       if isinstance(v, torch.Tensor))
    reference = (nbytes(policy.reference_model.parameters())
                 if policy.reference_model is not None else 0)
    with tempfile.TemporaryDirectory() as root:
        path = save_checkpoint(root, trainer.step_count, model=policy.model,
                               optimizer=policy.optimizer, scheduler=policy.scheduler,
                               trainer_state=trainer.state())
        model_bytes = sum(f.stat().st_size for f in (path / "model").iterdir())
        opt_bytes = (path / "optimizer.pt").stat().st_size
    params = list(policy.model.parameters())
    # what training holds besides activations: weights, gradients, optimizer state, reference
    model_state = (nbytes(params) + nbytes(p.grad for p in params if p.grad is not None)
                   + opt_state + reference)
    return {"model_state": model_state, "steps": steps, "updates": updates,
            "rss_built": rss_built, "peak": peak,
            "total": sum(p.numel() for p in params),
            "trainable": sum(p.numel() for p in params if p.requires_grad),
            "opt_state": opt_state, "reference": reference, "ckpt_model": model_bytes,
            "ckpt_opt": opt_bytes, "threads": torch.get_num_threads()}


def run_worker(spec: dict, label: str) -> dict:
    run = call_worker(__file__, [], spec, label=label, env=worker_env(spec["threads"]))
    print(f"  {label:<16} load {load_text(run.load_before)} -> {load_text(run.load_after)}; "
          f"median step {statistics.median(run.result['steps'][WARMUP:]):.3f} s (process "
          f"{run.seconds:.0f} s)", flush=True)
    return run.result


def mib(x: float) -> str:
    return f"{x / 2**20:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", choices=list(SIZES), default=list(SIZES))
    parser.add_argument("--steps", type=int, default=6, help=f"steps per run ({WARMUP} dropped)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        serve_worker(worker, args.spec)
        return
    if args.steps <= WARMUP:
        parser.error(f"--steps must exceed {WARMUP}")
    import peft

    print(f"LoRA vs full fine-tuning, GRPO steps on CPU, {args.threads} threads per worker "
          f"({machine_line()}); peft {peft.__version__}")
    for size in args.configs:
        print(f"\n== {size}: configs/tiny.yaml {' '.join(SIZES[size]) or '(as it is)'}; "
              f"{' '.join(BASE)}")
        runs: dict[str, list[dict]] = {v: [] for v in VARIANTS}
        for rnd in range(args.rounds):
            order = list(VARIANTS) if rnd % 2 == 0 else list(VARIANTS)[::-1]
            for v in order:
                spec = {"overrides": [*SIZES[size], *BASE, *VARIANTS[v]], "steps": args.steps,
                        "threads": args.threads}
                runs[v].append(run_worker(spec, f"{v} (round {rnd + 1})"))
        print(f"  {'variant':<8}{'trainable':>12}{'total':>12}{'state MiB':>11}{'optim MiB':>11}"
              f"{'ref MiB':>9}"
              f"{'ckpt MiB':>10}{'step med s':>12}{'step min s':>12}{'update med s':>14}"
              f"{'peak RSS MiB':>14}")
        stats = {}
        for v, rs in runs.items():
            steps = [s for r in rs for s in r["steps"][WARMUP:]]
            updates = [s for r in rs for s in r["updates"][WARMUP:]]
            r = rs[0]
            st = stats[v] = {"med": statistics.median(steps), "min": min(steps),
                             "upd": statistics.median(updates),
                             "peak": statistics.median(x["peak"] for x in rs),
                             "ckpt": r["ckpt_model"] + r["ckpt_opt"]}
            print(f"  {v:<8}{r['trainable']:>12,}{r['total']:>12,}{mib(r['model_state']):>11}"
                  f"{mib(r['opt_state']):>11}"
                  f"{mib(r['reference']):>9}{mib(st['ckpt']):>10}{st['med']:>12.3f}"
                  f"{st['min']:>12.3f}{st['upd']:>14.3f}{st['peak']:>14.0f}")
        f, lo = stats["full"], stats["lora"]
        state = runs["lora"][0]["model_state"] / runs["full"][0]["model_state"]
        print(f"  lora / full: model state {state:.3f}x, step {lo['med'] / f['med']:.2f}x (min/min "
              f"{lo['min'] / f['min']:.2f}x), update {lo['upd'] / f['upd']:.2f}x, peak RSS "
              f"{lo['peak'] / f['peak']:.2f}x, checkpoint {lo['ckpt'] / f['ckpt']:.4f}x")
    print("  (state: weights + gradients + optimizer state + reference copy; optim: bytes of the "
          "optimizer's state tensors; ref: the frozen reference copy; "
          "ckpt: model/ + optimizer.pt; peak RSS: the worker process's high-water mark, model "
          "and Python included)")


if __name__ == "__main__":
    main()
