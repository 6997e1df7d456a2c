"""Warm start: a short supervised run (NLL on the task's answers) before GRPO, cached on disk.

    L_SFT = -Σ_t log π(answer_t | prompt, answer_<t) / N_tok

GRPO learns only from groups whose rewards differ, so a freshly initialised model (reward 0 on
every sample) gives it nothing to learn from. The warm start teaches the answer format and a
little of the task; GRPO then does the rest.

Implementation choices:
1) The run stops at ``max_steps`` or as soon as sampled accuracy on probe rows (a training
   stream with another seed, never the validation set) reaches ``stop_at_accuracy``: how
   much the SFT run learns varies steeply with its length, and GRPO needs a policy that is
   right sometimes, not one that is already right.
2) Its own AdamW (SFT takes a larger learning rate than RL); the policy's optimizer is untouched.
3) The result is cached under ``$RLNB_CACHE_DIR`` (default ``~/.cache/rlnb``) keyed by a hash of
   the model, task and SFT configs and the seed, so later runs start from it at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import torch
from pydantic import Field

from rlnb.algorithms.preference import nll_loss
from rlnb.config import Config
from rlnb.engine.generation import tokenize_prompts


class SFTConfig(Config):
    """``sft``: the supervised warm start run before GRPO."""

    enabled: bool = Field(True, description="Warm-start with supervised NLL before GRPO.")
    max_steps: int = Field(1500, ge=0, description="Upper bound on SFT steps.")
    batch_size: int = Field(64, ge=1, description="Rows per SFT step.")
    lr: float = Field(3e-3, gt=0, description="SFT learning rate (AdamW).")
    stop_at_accuracy: float | None = Field(
        0.25, ge=0, le=1, description="Stop once sampled accuracy reaches this (None: never)."
    )
    eval_every: int = Field(50, ge=1, description="Steps between accuracy checks.")
    eval_prompts: int = Field(128, ge=1, description="Rows per accuracy check.")
    cache: bool = Field(True, description="Reuse a cached warm start with the same settings.")


def cache_key(*parts) -> str:
    blob = json.dumps(
        [p.model_dump(mode="json") if hasattr(p, "model_dump") else p for p in parts],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def cache_dir() -> Path:
    return Path(os.environ.get("RLNB_CACHE_DIR", Path.home() / ".cache" / "rlnb"))


def supervised_batch(tokenizer, rows: list[dict]) -> dict[str, torch.Tensor]:
    """``prompt + answer + EOS`` rows (prompt left-padded) with token_mask on answer tokens."""
    prompt_ids, prompt_mask = tokenize_prompts(tokenizer, [r["prompt"] for r in rows])
    answers = [
        tokenizer(r["answer"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for r in rows
    ]
    width = max(map(len, answers))
    ans = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    ans_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, a in enumerate(answers):
        ans[i, : len(a)] = torch.tensor(a)
        ans_mask[i, : len(a)] = 1
    return {
        "input_ids": torch.cat([prompt_ids, ans], 1),
        "attention_mask": torch.cat([prompt_mask, ans_mask], 1),
        "token_mask": torch.cat([torch.zeros_like(prompt_mask), ans_mask], 1).float(),
        "sample_mask": torch.ones(len(rows)),
    }


def sampled_accuracy(trainer, rows: list[dict]) -> float:
    """Mean reward of one sampled response per row (the GRPO generation settings)."""
    return float(trainer.generate_and_score(rows, 1, 0).rewards.mean())


def warm_start(trainer, cfg: SFTConfig, *, progress: bool = False, log=print) -> dict:
    """Run (or load from the cache) the supervised warm start on ``trainer.policy``.

    It runs on its own random state, seeded with ``grpo.seed``, and leaves the caller's alone:
    what follows is the same whether the warm start ran or came from the cache.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(trainer.config.grpo.seed)
        return _warm_start(trainer, cfg, progress=progress, log=log)


def _warm_start(trainer, cfg: SFTConfig, *, progress: bool, log) -> dict:
    policy, task = trainer.policy, trainer.task
    key = cache_key(
        trainer.config.policy.model_name,
        trainer.config.policy.tiny,
        trainer.config.data,
        cfg,
        trainer.config.grpo.seed,
    )
    path = cache_dir() / "warm_start" / key
    if cfg.cache and (path / "model.safetensors").exists():
        from safetensors.torch import load_file

        policy.model.load_state_dict(load_file(path / "model.safetensors"), strict=False)
        if policy.reference_model is not None:
            policy.reference_model.load_state_dict(policy.model.state_dict())
        info = json.loads((path / "info.json").read_text())
        log(f"warm start: loaded from cache {path} ({info['steps']} SFT steps)")
        return {**info, "cached": True}
    seed = trainer.config.grpo.seed
    probe = task.train_rows(10**6 + cfg.eval_prompts, seed + 1)[-cfg.eval_prompts :]
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.lr)
    rows = task.train_rows(cfg.max_steps * cfg.batch_size, seed + 2)
    start, steps, accuracy = time.perf_counter(), 0, 0.0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cfg.max_steps, desc="warm start (SFT)", unit="step")
    for steps in range(1, cfg.max_steps + 1):
        batch = supervised_batch(
            policy.tokenizer, rows[(steps - 1) * cfg.batch_size : steps * cfg.batch_size]
        )
        policy.model.train()
        logprobs = policy.forward_logprobs(
            policy.model,
            batch["input_ids"].to(policy.device),
            batch["attention_mask"].to(policy.device),
        )
        loss, _ = nll_loss(
            logprobs[:, 1:],
            batch["token_mask"][:, 1:].to(policy.device),
            batch["sample_mask"].to(policy.device),
            global_valid_toks=batch["token_mask"][:, 1:].sum(),
        )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss.item():.3f}", acc=f"{accuracy:.2f}")
        if cfg.stop_at_accuracy is not None and steps % cfg.eval_every == 0:
            accuracy = sampled_accuracy(trainer, probe)
            if accuracy >= cfg.stop_at_accuracy:
                break
    if bar is not None:
        bar.close()
    if policy.reference_model is not None:  # the KL anchor is the warm-started policy
        policy.reference_model.load_state_dict(policy.model.state_dict())
    info = {
        "steps": steps,
        "final_loss": loss.item(),
        "probe_accuracy": accuracy,
        "seconds": time.perf_counter() - start,
    }
    if cfg.cache and trainer.dist.is_main:
        from safetensors.torch import save_file

        from rlnb.run.atomic import atomic_dir

        with atomic_dir(path) as tmp:
            state = {k: v.detach().cpu().contiguous() for k, v in policy.model.state_dict().items()}
            # tied embeddings share storage: save each tensor once
            seen, unique = set(), {}
            for k, v in state.items():
                if v.data_ptr() not in seen:
                    seen.add(v.data_ptr())
                    unique[k] = v
            save_file(unique, tmp / "model.safetensors")
            (tmp / "info.json").write_text(json.dumps(info))
    log(
        f"warm start: {steps} SFT steps in {info['seconds']:.1f}s, loss {info['final_loss']:.3f}, "
        f"probe accuracy {accuracy:.2f}"
    )
    return {**info, "cached": False}
