"""Time to accuracy, rlnb's default recipe against Hugging Face TRL's ``GRPOTrainer``, per seed.

For each seed both sides start from the same weights, train on the same prompts with the same
reward, and are scored by the same held-out evaluation; the table gives the training seconds each
needed to gain +30 and +40 points of held-out accuracy, and their rollouts per second.

- Start: rlnb's default warm start for the seed (what ``rlnb train -p grpo.seed=S`` starts GRPO
  from: ``configs/tiny.yaml``'s supervised run on addition, loaded from rlnb's warm-start cache
  or built into it), saved once as an HF model folder that both sides load in float32.
- Prompts: the addition task's training stream for the seed (rlnb's ``train_rows(n, seed)``, the
  rows rlnb's loop takes in order); TRL gets them as a plain-text ``prompt`` column with BOS
  written in front, unshuffled. The script checks both saw the same prompts in the same order.
- Reward: rlnb's ``AdditionTask.score`` (exact match, 0 or 1); TRL's reward function calls it.
- rlnb: ``configs/tiny.yaml`` (16 prompts x 16 generations, 5 new tokens, temperature 1, lr 3e-4,
  two optimizer steps of 128 rows per rollout, no KL, and whichever of TRL's three choices the
  recipe takes: group baseline, shuffled rows, rollout-mean token normaliser) with the model
  folder, the warm start off (its result is the folder), checkpoints and inline validation off,
  and no run directory (the metrics and rollout files ``rlnb train`` writes are not written;
  TRL logs and saves nothing).
- TRL: ``GRPOConfig`` with TRL's documented GRPO defaults (``loss_type="dapo"``,
  ``scale_rewards="group"``, ``beta=0``, ``epsilon=0.2``), fp32 on CPU, and rlnb's recipe mapped
  field by field (``trl_mapping``: prompts x generations, rows per optimizer step, steps per
  generation, completion length, sampling, AdamW, constant lr, clipping); printed, with what
  could not be mapped.
- Evaluation: every ``--val-period`` rollouts each side's weights are saved (the clock paused);
  after the run the script scores every snapshot with rlnb's own ``Trainer.validate`` (200
  held-out problems never trained on, one answer each sampled at temperature 1, the random state
  fixed by the rollout count), so both curves come from one procedure and one random stream.
- Clock: training seconds from the first step, without setup and snapshot saving; one rollout is
  P x G completions and the optimizer steps over them (TRL's steps / steps per generation).

Each side runs in a fresh process with ``--threads`` threads, for ``--minutes`` of training or
``--max-steps`` rollouts, whichever comes first; the order alternates by seed; the load average
is printed around every run. ``--json`` dumps every curve; ``--svg`` writes the accuracy curves
(default ``docs/tta_vs_trl.svg``). ``--quick``: one seed, a few rollouts (a smoke run). The
defaults (seeds 0-4, up to 2500 rollouts or 10 training minutes a side) take at most 100 minutes
of training plus about a minute per run for start-up and scoring; rlnb's side stops at 2500
rollouts (about 5 minutes on a quiet 2-core machine). The README's figure is a shorter run:
``--minutes 4 --max-steps 1000 --val-period 10`` (about 35 minutes for the five seeds). The
target, printed with the verdict: TRL's seconds to +40 points over rlnb's at least 2x on the
median of seeds 0-4 and at least 1.5x on the worst of them.

    python benchmarks/bench_tta_trl.py [--seeds 0 1 2 3 4] [--minutes 10] [--val-period 25]
                                       [--threads 2] [--trl-venv .venv-trl] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_vs_trl import ensure_trl_venv, print_trl_config, trl_config_record
from harness import ROOT, busy, call_worker, load_text, machine_line, serve_worker, worker_env

sys.path.insert(0, str(ROOT / "tools"))  # tools/tta_svg.py draws the curves
from tta_svg import write_curves_svg  # noqa: E402

CONFIG = ROOT / "configs" / "tiny.yaml"
TARGET = 2.0  # TRL's seconds to +40 points / rlnb's: the median over TARGET_SEEDS
TARGET_WORST = 1.5  # ... and the worst seed of them
TARGET_SEEDS = (0, 1, 2, 3, 4)
GAINS = (30, 40)  # points of held-out accuracy over the start
CHECKED_ROLLOUTS = 4  # rollouts whose prompts are compared between the sides


# ---------------------------------------------------------------------------- both venvs
def save_snapshot(folder: str, model, rollouts: int, seconds: float, index: list) -> None:
    """The model's weights after ``rollouts`` rollouts and ``seconds`` of training, as a
    safetensors file (tied tensors copied apart so every name is stored)."""
    from safetensors.torch import save_file

    path = os.path.join(folder, f"r{rollouts:06d}.safetensors")
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}, path)
    index.append({"rollouts": rollouts, "seconds": seconds, "file": path})


def rlnb_overrides(spec: dict) -> list[str]:
    """configs/tiny.yaml as the rlnb side and the evaluator run it: the saved warm start, no warm
    start of its own, no checkpoints, no inline validation."""
    return [f"policy.model_name={spec['model_dir']}", f"grpo.seed={spec['seed']}",
            f"grpo.max_num_steps={spec['rollouts']}", "sft.enabled=false",
            "checkpointing.enabled=false", "grpo.val_period=0", "grpo.val_at_start=false",
            "grpo.val_at_end=false"]


# ---------------------------------------------------------------------------- workers
def worker_rlnb(spec: dict) -> dict:
    """(Main venv) rlnb's default recipe from the saved model, snapshots every K rollouts."""
    import torch

    torch.set_num_threads(spec["threads"])
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.run.config.master_config import load_config

    trainer = GRPOTrainer(load_config(str(CONFIG), rlnb_overrides(spec)))
    G, model, index, prompts, rewards = spec["G"], trainer.policy.model, [], [], []
    save_snapshot(spec["snap_dir"], model, 0, 0.0, index)
    start, paused = time.perf_counter(), 0.0
    while trainer.step_count < spec["rollouts"]:
        metrics = trainer.step()
        now = time.perf_counter()
        seconds = now - start - paused
        rewards.append(metrics["train/reward"])
        if trainer.step_count <= CHECKED_ROLLOUTS:
            prompts += metrics.rollout.prompts[::G]
        done = seconds >= spec["seconds"] or trainer.step_count == spec["rollouts"]
        if trainer.step_count % spec["val_period"] == 0 or done:
            save_snapshot(spec["snap_dir"], model, trainer.step_count, seconds, index)
            paused += time.perf_counter() - now
        if done:
            break
    return {"index": index, "prompts": prompts, "rewards": rewards,
            "threads": torch.get_num_threads(),
            "optimizer_steps": trainer.step_count * spec["steps_per_generation"]}


def worker_trl(spec: dict) -> dict:
    """(TRL venv) TRL's GRPOTrainer from the saved model with rlnb's reward, snapshots every K
    rollouts from a callback that pauses the clock."""
    import torch

    torch.set_num_threads(spec["threads"])
    sys.path.insert(0, str(ROOT))  # rlnb's scorer (it needs only torch)
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlnb.engine.environments.generated import AdditionTask

    tok = AutoTokenizer.from_pretrained(spec["model_dir"])
    model = AutoModelForCausalLM.from_pretrained(spec["model_dir"], dtype=torch.float32)
    rows = json.loads(Path(spec["rows_file"]).read_text())
    # rlnb prepends BOS to every prompt; this tokenizer adds none itself, so write it in
    prefix = "" if tok("1")["input_ids"][:1] == [tok.bos_token_id] else tok.bos_token
    dataset = Dataset.from_dict({"prompt": [prefix + r["prompt"] for r in rows],
                                 "task_prompt": [r["prompt"] for r in rows],
                                 "answer": [r["answer"] for r in rows]})
    task = AdditionTask(**spec["task"])
    G, spg, seen, rewards = spec["G"], spec["steps_per_generation"], [], []

    def addition_reward(completions, task_prompt, answer, **kwargs):
        """rlnb's AdditionTask.score on TRL's completions: 1.0 for an exact answer, else 0.0."""
        if len(seen) < CHECKED_ROLLOUTS * len(completions) // G:
            seen.extend(task_prompt[::G])
        problems = [{"prompt": p, "answer": a} for p, a in zip(task_prompt, answer)]
        total = task.score(task_prompt, completions, problems).total
        rewards.append(float(total.mean()))  # (called once per rollout, on all its rows)
        return total.tolist()

    outdir = tempfile.mkdtemp(prefix="bench_tta_trl_")
    kwargs = dict(
        output_dir=outdir, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        **spec["mapped"], max_steps=spec["rollouts"] * spg, seed=spec["seed"],
        shuffle_dataset=False, use_vllm=False, report_to="none", save_strategy="no",
        logging_strategy="no", eval_strategy="no", log_completions=False, disable_tqdm=True,
        dataloader_num_workers=0,
    )
    args = GRPOConfig(**kwargs)
    index: list[dict] = []

    class Clock(TrainerCallback):
        """Training seconds since the first step, snapshot saving excluded; stops at a rollout
        boundary once the budget is spent."""

        def __init__(self):
            self.start, self.paused, self.trainer = None, 0.0, None

        def on_train_begin(self, args, state, control, **kw):
            save_snapshot(spec["snap_dir"], self.trainer.model, 0, 0.0, index)
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            now = time.perf_counter()
            seconds = now - self.start - self.paused
            if state.global_step % spg:
                return
            rollouts = state.global_step // spg
            done = seconds >= spec["seconds"] or rollouts == spec["rollouts"]
            if rollouts % spec["val_period"] == 0 or done:
                save_snapshot(spec["snap_dir"], self.trainer.model, rollouts, seconds, index)
                self.paused += time.perf_counter() - now
            control.should_training_stop = done

    clock = Clock()
    trainer = GRPOTrainer(model=model, reward_funcs=addition_reward, args=args,
                          train_dataset=dataset, processing_class=tok, callbacks=[clock])
    clock.trainer = trainer
    trainer.train()

    import accelerate
    import transformers
    import trl

    out = {"index": index, "prompts": seen, "rewards": rewards,
           "threads": torch.get_num_threads(),
           "optimizer_steps": trainer.state.global_step,
           "mixed_precision": str(trainer.accelerator.mixed_precision),
           "gradient_checkpointing": getattr(trainer.model, "is_gradient_checkpointing", None),
           "reference_model": trainer.ref_model is not None,
           "dtype": str(next(trainer.model.parameters()).dtype),
           "versions": {"trl": trl.__version__, "transformers": transformers.__version__,
                        "accelerate": accelerate.__version__, "torch": torch.__version__}}
    record = trl_config_record(GRPOConfig, args, kwargs)
    shutil.rmtree(outdir, ignore_errors=True)  # (nothing is saved there: save_strategy="no")
    return {**out, **record}


# ---------------------------------------------------------------------------- the recipe
def trl_mapping(cfg) -> tuple[dict, list[tuple[str, str]], list[str]]:
    """rlnb's recipe as ``GRPOConfig`` fields, the (rlnb key, TRL field) pairs, and what TRL
    cannot express."""
    p, opt, loss, grpo = cfg.policy, cfg.policy.optimizer, cfg.loss_fn, cfg.grpo
    rows = grpo.num_prompts_per_step * grpo.num_generations_per_prompt
    spg = rows // p.train_global_batch_size  # optimizer steps per rollout
    if spg * p.train_global_batch_size != rows or opt.warmup_steps:
        raise SystemExit("this recipe's batch sizes or warm-up have no TRL mapping here")
    g = p.generation
    mapped = {
        "num_generations": grpo.num_generations_per_prompt,
        "per_device_train_batch_size": p.train_global_batch_size,
        "gradient_accumulation_steps": 1, "steps_per_generation": spg, "num_iterations": 1,
        "max_completion_length": g.max_new_tokens, "temperature": g.temperature,
        "top_p": g.top_p, "top_k": g.top_k or 0, "min_p": None, "repetition_penalty": 1.0,
        "learning_rate": opt.lr, "lr_scheduler_type": "constant", "warmup_steps": 0,
        "weight_decay": opt.weight_decay, "adam_beta1": opt.betas[0],
        "adam_beta2": opt.betas[1], "adam_epsilon": opt.eps, "max_grad_norm": p.max_grad_norm,
        "beta": loss.reference_policy_kl_penalty, "epsilon": loss.ratio_clip_min,
        "epsilon_high": loss.ratio_clip_max,
        # TRL's documented GRPO defaults, stated: token sums over the optimizer step's tokens
        # (rlnb's token_level_loss), group mean and std for the advantage
        "loss_type": "dapo", "scale_rewards": "group",
        "mask_truncated_completions": grpo.overlong_filtering,
    }
    pairs = [
        ("grpo.num_prompts_per_step x num_generations_per_prompt = "
         f"{grpo.num_prompts_per_step}x{grpo.num_generations_per_prompt}",
         f"generation_batch_size {rows} (per_device_train_batch_size x steps_per_generation), "
         f"num_generations {grpo.num_generations_per_prompt}"),
        (f"policy.train_global_batch_size={p.train_global_batch_size}",
         f"per_device_train_batch_size={p.train_global_batch_size}, steps_per_generation={spg}"),
        (f"policy.generation.max_new_tokens={g.max_new_tokens}, temperature={g.temperature}, "
         f"top_p={g.top_p}, top_k={g.top_k}",
         f"max_completion_length={g.max_new_tokens}, temperature={g.temperature}, "
         f"top_p={g.top_p}, top_k={g.top_k or 0}"),
        (f"policy.optimizer: AdamW lr={opt.lr} betas={tuple(opt.betas)} eps={opt.eps} "
         f"weight_decay={opt.weight_decay}, no scheduler",
         "learning_rate, adam_beta1/2, adam_epsilon, weight_decay; lr_scheduler_type=constant"),
        (f"policy.max_grad_norm={p.max_grad_norm}", f"max_grad_norm={p.max_grad_norm}"),
        (f"loss_fn.reference_policy_kl_penalty={loss.reference_policy_kl_penalty}",
         f"beta={loss.reference_policy_kl_penalty} (no reference model)"),
        (f"loss_fn.ratio_clip_min/max={loss.ratio_clip_min}/{loss.ratio_clip_max}",
         f"epsilon={loss.ratio_clip_min}, epsilon_high={loss.ratio_clip_max}"),
        (f"loss_fn.token_level_loss={loss.token_level_loss}",
         "loss_type=dapo (TRL's default: a token sum over a token count)"),
    ]
    loo = grpo.leave_one_out  # the loop's flag where set, else the estimator's
    if loo:
        unmapped = ["advantage baseline: rlnb's leave-one-out mean and std of the other G-1 "
                    "rewards (grpo.use_leave_one_out_baseline=true); TRL's scale_rewards='group' "
                    "uses the whole group's, the sample in them"]
    else:
        pairs.append(("grpo.use_leave_one_out_baseline=false (the group's mean and Bessel std)",
                      "scale_rewards=group (TRL's default; its std epsilon 1e-4 against 1e-6)"))
        unmapped = []
    if grpo.update_rows == "shuffled":
        pairs.append(("grpo.update_rows=shuffled", "the generation batch shuffled across prompts "
                      "before it splits into optimizer steps (TRL's own)"))
    else:
        unmapped.append("within a rollout TRL shuffles the rows before splitting them into "
                        "optimizer steps; rlnb takes them in order (grpo.update_rows=in_order)")
    if grpo.token_normalizer == "rollout_mean":
        pairs.append(("grpo.token_normalizer=rollout_mean", "loss_type=dapo's divisor: the "
                      "generation batch's tokens / steps_per_generation"))
    else:
        unmapped.append("the token normaliser: rlnb divides each optimizer step by its own "
                        "tokens (grpo.token_normalizer=global_batch); TRL's dapo by the "
                        "generation batch's tokens / steps_per_generation")
    unmapped += [
        "pi_old: rlnb reuses the sampler's log-probs (reuse_generation_logprobs); TRL computes "
        "them with an extra forward pass when steps_per_generation > 1",
        "the optimizer: TRL's default optim (printed below) vs rlnb's torch.optim.AdamW",
    ]
    return mapped, pairs, unmapped


# ---------------------------------------------------------------------------- the driver
def run_worker(python: Path, side: str, spec: dict) -> tuple[dict, tuple, tuple]:
    """One side's run in a fresh process; the load average around it."""
    run = call_worker(__file__, [side], spec, label=f"{side} (seed {spec['seed']})",
                      python=python, env=worker_env(spec["threads"]))
    return run.result, run.load_before, run.load_after


def prepare_start(seed: int, folder: str, log) -> dict:
    """rlnb's default warm start for ``seed`` (cached), saved to ``folder``; its accuracy as the
    warm-started trainer itself measures it (``Trainer.validate`` at step 0)."""
    from rlnb.engine.models.tiny import save_tiny
    from rlnb.run.config.master_config import load_config
    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    cfg = load_config(str(CONFIG), [f"grpo.seed={seed}"])
    trainer, info = trainer_with_warm_start(cfg, log=log)
    save_tiny(trainer.policy.model, trainer.policy.tokenizer, folder)
    return {"warm_start": {k: info.get(k) for k in ("steps", "probe_accuracy", "cached", "path")},
            "accuracy": trainer.validate()["validation/accuracy"]}


def score_snapshots(spec: dict, index: list[dict]) -> list[tuple[int, float, float]]:
    """(rollouts, training seconds, held-out accuracy) of every snapshot, with rlnb's
    ``Trainer.validate`` at the snapshot's rollout count (the same random stream for both sides)."""
    from safetensors.torch import load_file

    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.run.config.master_config import load_config

    trainer = GRPOTrainer(load_config(str(CONFIG), rlnb_overrides(spec)))
    curve = []
    for point in index:
        trainer.policy.model.load_state_dict(load_file(point["file"]))
        trainer.step_count = point["rollouts"]
        curve.append((point["rollouts"], point["seconds"],
                      trainer.validate()["validation/accuracy"]))
        os.remove(point["file"])
    return curve


def summarize(curve, out: dict, before, after) -> dict:
    start, seconds = curve[0][2], curve[-1][1]
    rollouts = curve[-1][0]

    def first(points):
        return next((t for _, t, a in curve if a - start >= points / 100 - 1e-9), None)

    return {"curve": curve, "start": start, "end": curve[-1][2],
            "best": max(a for _, _, a in curve), "seconds": seconds, "rollouts": rollouts,
            "optimizer_steps": out["optimizer_steps"],
            "rollouts_per_s": rollouts / seconds if seconds else float("nan"),
            "optimizer_steps_per_s": out["optimizer_steps"] / seconds if seconds else float("nan"),
            **{f"to{g}": first(g) for g in GAINS}, "load_before": before, "load_after": after,
            "threads": out["threads"]}


def bench_seed(seed: int, args, trl_python: Path, cfg, mapped: dict, first: bool) -> dict:
    from rlnb.engine.environments.tasks import build_task

    P, G = cfg.grpo.num_prompts_per_step, cfg.grpo.num_generations_per_prompt
    rollouts = args.max_steps or cfg.grpo.max_num_steps
    with tempfile.TemporaryDirectory(prefix="bench_tta_trl_") as tmp:
        model_dir, rows_file = os.path.join(tmp, "model"), os.path.join(tmp, "rows.json")
        start = prepare_start(seed, model_dir, log=lambda line: print(f"  {line}", flush=True))
        task = build_task(cfg.data)
        rows = task.train_rows(P * rollouts, seed)  # rlnb's stream for the seed, in order
        Path(rows_file).write_text(json.dumps(rows))
        spec = {"seed": seed, "model_dir": model_dir, "rows_file": rows_file, "G": G,
                "rollouts": rollouts, "seconds": 60 * args.minutes, "val_period": args.val_period,
                "threads": args.threads, "mapped": mapped,
                "steps_per_generation": mapped["steps_per_generation"],
                "task": {"max_operand": cfg.data.max_operand, "num_val": cfg.data.num_val,
                         "seed": cfg.data.seed}}
        results, outs = {}, {}
        for side in ("rlnb", "trl") if seed % 2 == 0 else ("trl", "rlnb"):
            snap_dir = os.path.join(tmp, f"snap_{side}")
            os.makedirs(snap_dir)
            python = trl_python if side == "trl" else Path(sys.executable)
            out, before, after = run_worker(python, side, {**spec, "snap_dir": snap_dir})
            curve = score_snapshots(spec, out["index"])
            results[side], outs[side] = summarize(curve, out, before, after), out
            r = results[side]
            print(f"  seed {seed} {side:<5} load {load_text(before)} -> {load_text(after)}; "
                  f"{r['rollouts']} rollouts in {r['seconds']:.0f} s; accuracy "
                  f"{100 * r['start']:.1f}% -> {100 * r['end']:.1f}%", flush=True)
    expected = [r["prompt"] for r in rows[: CHECKED_ROLLOUTS * P]]
    same = {s: o["prompts"] == expected[: len(o["prompts"])] and len(o["prompts"]) > 0
            for s, o in outs.items()}
    same_start = results["rlnb"]["start"] == results["trl"]["start"] == start["accuracy"]
    first_rewards = {s: o["rewards"][:CHECKED_ROLLOUTS] or [float("nan")] for s, o in outs.items()}
    reward = {s: sum(r) / len(r) for s, r in first_rewards.items()}
    print(f"  seed {seed}: warm start {start['warm_start']}; same prompts in order (first "
          f"{CHECKED_ROLLOUTS} rollouts): rlnb {same['rlnb']}, TRL {same['trl']}; the saved "
          f"model reproduces the warm start's accuracy on both sides: {same_start}; mean "
          f"training reward over those rollouts rlnb {reward['rlnb']:.3f} / TRL "
          f"{reward['trl']:.3f} (sampled: close, not equal); threads "
          f"rlnb {outs['rlnb']['threads']} / TRL {outs['trl']['threads']}", flush=True)
    if first:
        print_trl_config(outs["trl"], args.full_trl_config)
    return {"warm_start": start, "same_prompts": same, "same_start": same_start, **results}


def fmt_s(x) -> str:
    return "-" if x is None else f"{x:.0f} s"


def report(runs: dict, args) -> None:
    print(f"\n{'seed':>4} {'side':<5}{'start':>8}{'end':>8}{'best':>8}"
          + "".join(f"{'to +' + str(g):>9}" for g in GAINS)
          + f"{'rollouts':>10}{'train s':>9}{'rollouts/s':>12}{'opt steps/s':>13}{'load':>12}")
    for seed, r in runs.items():
        for side in ("rlnb", "trl"):
            x = r[side]
            print(f"{seed:>4} {side:<5}{100 * x['start']:>7.1f}%{100 * x['end']:>7.1f}%"
                  f"{100 * x['best']:>7.1f}%" + "".join(f"{fmt_s(x[f'to{g}']):>9}" for g in GAINS)
                  + f"{x['rollouts']:>10}{x['seconds']:>9.0f}{x['rollouts_per_s']:>12.2f}"
                  f"{x['optimizer_steps_per_s']:>13.2f}{x['load_after'][0]:>12.2f}")
    print("(to +N: training seconds to the first snapshot N points above the start, '-': not "
          f"reached within the run; snapshots every {args.val_period} rollouts; a rollout is "
          "P x G completions and the optimizer steps over them)")
    ratios = {}  # seed -> TRL / rlnb at +40 (a lower bound where TRL did not get there)
    for seed, r in runs.items():
        for g in GAINS:
            ours, theirs = r["rlnb"][f"to{g}"], r["trl"][f"to{g}"]
            if ours is None:
                text, ratio = "rlnb did not reach it", 0.0
            elif theirs is None:
                ratio = r["trl"]["seconds"] / ours
                text = f"TRL did not reach it in {r['trl']['seconds']:.0f} s: ratio > {ratio:.2f}x"
            else:
                ratio = theirs / ours
                text = f"TRL {theirs:.0f} s / rlnb {ours:.0f} s = {ratio:.2f}x"
            print(f"  seed {seed}, time to +{g}: {text}")
            if g == 40:
                ratios[seed] = ratio
    if ratios:
        median, worst = statistics.median(ratios.values()), min(ratios.values())
        print(f"time to +40, TRL / rlnb over seeds {', '.join(map(str, ratios))}: median "
              f"{median:.2f}x, worst {worst:.2f}x (seed {min(ratios, key=ratios.get)})")
    missing = [s for s in TARGET_SEEDS if s not in runs]
    if missing:
        verdict = f"NOT MEASURED on seeds {missing}"
    else:
        kept = [ratios[s] for s in TARGET_SEEDS]
        ok = statistics.median(kept) >= TARGET and min(kept) >= TARGET_WORST
        verdict = "MET" if ok else "MISSED"
    print(f"target: time to +40 held-out points at least {TARGET}x shorter than TRL's on the "
          f"median of seeds {', '.join(map(str, TARGET_SEEDS))} and {TARGET_WORST}x on the worst: "
          f"{verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(TARGET_SEEDS))
    parser.add_argument("--minutes", type=float, default=10.0,
                        help="training minutes per side and seed (default 10)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="rollouts per side and seed (default: tiny.yaml's max_num_steps)")
    parser.add_argument("--val-period", type=int, default=25, help="rollouts between snapshots")
    parser.add_argument("--threads", type=int, default=2, help="torch threads on both sides")
    parser.add_argument("--trl-venv", default=".venv-trl", help="TRL's venv (made if missing)")
    parser.add_argument("--json", help="write every curve and figure to this file")
    parser.add_argument("--svg", help="the curve plot (default docs/tta_vs_trl.svg; --quick: "
                        "a temporary file)")
    parser.add_argument("--full-trl-config", action="store_true",
                        help="print every GRPOConfig field, not only the non-default ones")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: seed 0, 4 rollouts, snapshots every 2")
    parser.add_argument("--worker", choices=["rlnb", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fn = worker_rlnb if args.worker == "rlnb" else worker_trl
        serve_worker(fn, args.spec)
        return
    if args.quick:
        args.seeds, args.max_steps, args.val_period = [0], 4, 2
    if min(args.val_period, args.max_steps or 1) < 1 or args.minutes <= 0:
        parser.error("--val-period and --max-steps must be >= 1 and --minutes > 0")
    svg = args.svg or (os.path.join(tempfile.gettempdir(), "tta_vs_trl_quick.svg")
                       if args.quick else str(ROOT / "docs" / "tta_vs_trl.svg"))

    import torch
    import transformers

    from rlnb.run.config.master_config import load_config

    torch.set_num_threads(args.threads)
    transformers.utils.logging.disable_progress_bar()  # saving and loading the tiny model
    venv = Path(args.trl_venv)
    trl_python = ensure_trl_venv(venv if venv.is_absolute() else ROOT / venv)
    cfg = load_config(str(CONFIG))
    mapped, pairs, unmapped = trl_mapping(cfg)
    print(f"time to accuracy, rlnb (configs/tiny.yaml) vs TRL GRPOTrainer, CPU, {args.threads} "
          f"threads per side ({machine_line()}); seeds {args.seeds}; up to {args.minutes:g} "
          f"training minutes or {args.max_steps or cfg.grpo.max_num_steps} rollouts per side; "
          f"rlnb: {sys.executable}; TRL: {trl_python}")
    if busy():
        print("  WARNING: other processes are running: the seconds below are not reliable")
    print("rlnb's recipe in TRL's terms:")
    for ours, theirs in pairs:
        print(f"  {ours}  ->  {theirs}")
    print("not mapped (TRL has no field for it):")
    for line in unmapped:
        print(f"  - {line}")
    runs = {}
    for i, seed in enumerate(args.seeds):
        print(f"\n== seed {seed}", flush=True)
        runs[seed] = bench_seed(seed, args, trl_python, cfg, mapped, first=i == 0)
    report(runs, args)
    series = [(f"{'rlnb' if side == 'rlnb' else 'TRL'} seed {seed}", side, i,
               [(t, 100 * a) for _, t, a in runs[seed][side]["curve"]])
              for i, seed in enumerate(runs) for side in ("rlnb", "trl")]
    write_curves_svg(svg, series, title="Held-out accuracy vs training time (addition, tiny "
                     "Llama, CPU): rlnb default recipe vs TRL GRPOTrainer")
    print(f"curves: {svg}")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"args": vars(args), "mapped": mapped, "unmapped": unmapped, "runs": runs},
            indent=1, default=str))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
