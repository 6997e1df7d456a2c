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
3) It runs on its own random state, seeded with the loop's seed, and leaves the caller's alone:
   what follows is the same whether the warm start ran or its result was loaded.
4) Caching the result on disk is the run layer's job (``rlnb.run.store.warm_start_cache``); this
   module only trains, and names what a cached result depends on: the settings (``warm_start_key``),
   and the code and packages that computed it (``build_stamp``).
5) The settings are every config value the warm start reads (model, precision, sampling, task,
   SFT settings, seed, device type), not the RL loop's own (its optimizer and batch sizes), so
   GRPO and PPO runs of one model share a warm start.
6) The code is a hash of the source of the modules in ``WEIGHT_CODE``: those whose functions
   run while the model is built and warm-started, the sampler included (sampled accuracy
   decides when the run stops). ``tests/run/test_warm_start_cache.py`` traces a warm start and
   fails when a module runs that the list neither holds nor exempts. Package versions cover
   the libraries that compute the numbers (``package_versions``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch
from pydantic import Field

from rlnb.algorithms.preference import nll_loss
from rlnb.config import Config
from rlnb.engine.environments.base import row_demonstration
from rlnb.engine.environments.prompts import format_prompt
from rlnb.engine.models.backend import tokenize_prompts
from rlnb.engine.models.lora import base_training
from rlnb.engine.trainers.rollout import sample_and_score


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
    cache: bool = Field(True, description="Reuse a cached warm start with the same settings, "
                        "built by the same code and package versions.")


def warm_start_key(trainer, cfg: SFTConfig) -> str:
    """A hash of every setting the warm start's result depends on (choice 5): two runs with the
    same key and the same ``build_stamp`` start GRPO from the same weights."""
    config, loop = trainer.config, trainer.loop_config
    turns = getattr(loop, "max_rollout_turns", 1)
    policy = config.policy.model_dump(mode="json", exclude={
        "optimizer", "train_global_batch_size", "train_micro_batch_size",
        "logprob_batch_size", "max_grad_norm", "lora",
        "device",  # where the model lives: its type is below (auto and cuda on a GPU agree)
        "share_prompt_prefix",  # the RL update's and log-prob passes' split, never the SFT's
        *(() if config.policy.compile.enabled else ("compile",))})
    for key, off in (("fill_context", False), ("stop_token_ids", None)):
        if policy["generation"].get(key) == off:  # off, as before the option: caches stay valid
            del policy["generation"][key]
    if policy.get("attn_implementation") is None:  # the model's own kernel: keys as before
        policy.pop("attn_implementation", None)
    if not policy["tiny"].get("chat_template", True):  # the same: the tiny template while off
        del policy["tiny"]["chat_template"]
    if config.policy.model_name != "random":  # read only then: caches from before it stay valid
        del policy["random_init"]
    parts = [
        # the RL loop's optimizer and batch sizes never touch the warm start
        # nor do LoRA adapters: the warm start trains the base with them off (lora.py)
        # policy.compile counts only when on (its decode step samples the probe): off, the key
        # is the one a run had before the option existed, so those caches stay valid
        # as are the sampling options added since (fill_context, stop_token_ids) while off
        policy,
        config.data, cfg.model_copy(update={"cache": True}), loop.seed,
        trainer.policy.device.type,  # CPU and GPU kernels round differently
        # probe accuracy goes through the environment only in multi-turn rollouts
        [turns, config.env.model_dump(mode="json") if getattr(config, "env", None) else None]
        if turns > 1 else None,
    ]
    data = getattr(trainer.task, "fingerprint", None)
    if data is not None:  # a user's rows and reward functions: not all of them are in the config
        parts.append(data)
    blob = json.dumps(
        [p.model_dump(mode="json") if hasattr(p, "model_dump") else p for p in parts],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# The modules whose code computes the warm-started weights (choice 6): a change to any of them
# can change the weights, so it makes a cached warm start stale.
WEIGHT_CODE = (
    "rlnb.engine.trainers.warm_start",  # the SFT loop, its batches and its stop rule
    "rlnb.engine.trainers.base",  # builds the policy and the generator, formats prompts
    "rlnb.engine.trainers.rollout",  # sample_and_score: the probe accuracy
    "rlnb.engine.trainers.loop_config",  # the loop's rules, checked when the trainer is built
    "rlnb.engine.trainers.grpo",  # the loop the warm start's trainer is
    "rlnb.engine.trainers.grpo_config",  # its config section, checked when it is built
    "rlnb.engine.trainers.setup",  # the trainer's config checked, its task built
    "rlnb.engine.runtime.timing",  # the probe's stage timers
    "rlnb.engine.models.tiny",  # the embedded model's tokenizer and initial weights
    "rlnb.engine.models.policy",  # forward_logprobs, sync_reference
    "rlnb.engine.models.policy_config",  # the policy's config, its rules checked when built
    "rlnb.engine.models.schedule",  # the learning-rate schedule the policy's optimizer ticks
    "rlnb.engine.models.shared_prefix",  # imported by the policy (the SFT's pass is the full one)
    "rlnb.engine.models.loading",  # the model and tokenizer loaded (or the tiny one built)
    "rlnb.engine.models.random_init",  # policy.model_name=random: its initial weights
    "rlnb.engine.models.lora",  # LoRA runs: the adapters switched off while the base trains
    "rlnb.engine.models.generation",  # the generation backends by name
    "rlnb.engine.models.backend",  # prompt tokenisation, response masks
    "rlnb.engine.models.hf_backend",  # the hf backend
    "rlnb.engine.models.hf_generate",  # its sampler: generate path
    "rlnb.engine.models.sampler",  # the lean sampler the hf backend draws with
    "rlnb.engine.models.compiled",  # its decode step under policy.compile
    "rlnb.engine.models.vllm_backend",  # the sampler under policy.generation.backend=vllm
    "rlnb.engine.models.vllm_engine",  # its engine's settings
    "rlnb.engine.environments.base",  # reward checks
    "rlnb.engine.environments.task_settings",  # a task's settings' defaults, given when left out
    "rlnb.engine.environments.tasks",  # the task registry, prompts
    "rlnb.engine.environments.generated",  # addition: its rows and scoring
    "rlnb.engine.environments.reverse",  # data.name=reverse
    "rlnb.engine.environments.addition_think",  # data.name=addition_think
    "rlnb.engine.environments.math_task",  # data.name=math
    "rlnb.engine.environments.prompts",  # prompts as text, chat messages through a template
    "rlnb.engine.environments.run_task",  # which rows and reward functions the run has
    "rlnb.engine.environments.user_data",  # data.name=dataset: a user's rows
    "rlnb.engine.environments.reasoning_gym_task",  # data.name=reasoning_gym: rows, scoring
    "rlnb.engine.environments.verifiers_task",  # data.name=verifiers: rows, scoring
    "rlnb.engine.environments.reward_funcs",  # a user's reward functions (the probe accuracy)
    "rlnb.engine.environments.reward_task",  # their weighted sum and notion of correct
    "rlnb.engine.environments.multiturn",  # probe rollouts with max_rollout_turns > 1
    "rlnb.engine.environments.calculator",  # data.name=calculator: rows, demonstrations, agent
    "rlnb.engine.agents.templates",  # an agent task's chat template checks and rendering
    "rlnb.engine.agents.tool_calls",  # its tool calls read back
    "rlnb.engine.agents.sampler",  # its completions sampled
    "rlnb.engine.agents.episode",  # its prompts stitched token for token
    "rlnb.engine.agents.client",  # the in-process client its agent code calls
    "rlnb.engine.agents.parameters",  # what the client does with each create parameter
    "rlnb.engine.agents.replies",  # the replies its agent code reads
    "rlnb.engine.agents.rollouts",  # its episodes batched (the probe accuracy)
    "rlnb.algorithms.preference",  # nll_loss
    "rlnb.algorithms.logprobs",  # token log-probs of the loss and the sampler
    "rlnb.algorithms.masked",  # nll_loss's masked means
)

# The libraries that compute the numbers: torch (kernels), transformers (the model and its
# attention), tokenizers (the token ids), numpy (a hub model's tokenizer may use it), vllm (the
# sampler under backend=vllm: asked only then, so an unused install does not matter).
NUMERIC_PACKAGES = ("torch", "transformers", "tokenizers", "numpy")


def source_hash(modules) -> str:
    """sha256 (16 hex digits) over the named modules' source files, read from disk without
    importing them; a module that cannot be found hashes as missing."""
    h = hashlib.sha256()
    for name in modules:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        source = Path(origin).read_bytes() if origin and origin.endswith(".py") else b"missing"
        h.update(name.encode() + b"\0" + source + b"\0")
    return h.hexdigest()[:16]


@functools.cache
def code_hash() -> str:
    """``source_hash(WEIGHT_CODE)``, computed once per process (at its first warm-start lookup):
    a process runs the code it imported, whatever is edited on disk later, and must not stamp
    its results with the edited code's hash."""
    return source_hash(WEIGHT_CODE)


def package_versions(backend: str = "hf") -> dict[str, str]:
    """Installed versions of ``NUMERIC_PACKAGES`` (``vllm`` too with ``backend="vllm"``) and
    Python's ``major.minor`` (``random`` draws the task's rows); ``"none"`` when absent."""
    names = NUMERIC_PACKAGES + (("vllm",) if backend == "vllm" else ())
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "none"
    versions["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    return versions


def build_stamp(trainer) -> dict:
    """What computed a warm start besides its settings: ``{"code": code_hash(), "packages":
    package_versions(...)}``. A cached result built under another stamp is stale."""
    return {"code": code_hash(),
            "packages": package_versions(trainer.config.policy.generation.backend)}


def supervised_batch(tokenizer, rows: list[dict], demonstration=None
                     ) -> dict[str, torch.Tensor]:
    """``prompt + answer + EOS`` rows (prompt left-padded) with token_mask on answer tokens;
    ``demonstration(row)`` is the answer (default: a row's ``sft_target``, when it has one
    (``addition_think``), else its ``answer``; a task's own: ``Task.demonstration``). A prompt
    of chat messages goes through the tokenizer's chat template."""
    demonstration = demonstration or row_demonstration
    prompt_ids, prompt_mask = tokenize_prompts(
        tokenizer, [format_prompt(r, tokenizer, False) for r in rows])
    answers = [
        tokenizer(demonstration(r), add_special_tokens=False)["input_ids"]
        + [tokenizer.eos_token_id]
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
    """Share correct of one sampled response per row (the generation settings of the loop);
    the mean reward for a task with no notion of correct."""
    batch = sample_and_score(trainer.rollout_inputs(), trainer.generator, rows, 1, 0)
    return float((batch.correct if trainer.task.defines_correct else batch.rewards).float().mean())


def warm_start(trainer, cfg: SFTConfig, *, progress: bool = False, log=print) -> dict:
    """Run the supervised warm start on ``trainer.policy`` (choice 3: on its own random state).
    Returns ``{"steps", "final_loss", "probe_accuracy", "seconds"}``."""
    # a LoRA policy trains its base weights here, its adapters off (lora.base_training)
    with torch.random.fork_rng(devices=[]), base_training(trainer.policy.model) as params:
        torch.manual_seed(trainer.loop_config.seed)
        return _warm_start(trainer, cfg, params, progress=progress, log=log)


def _warm_start(trainer, cfg: SFTConfig, params, *, progress: bool, log) -> dict:
    policy, task = trainer.policy, trainer.task
    seed = trainer.loop_config.seed
    probe = task.train_rows(10**6 + cfg.eval_prompts, seed + 1)[-cfg.eval_prompts :]
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, foreach=True)  # = the loop, bit for bit
    rows = task.train_rows(cfg.max_steps * cfg.batch_size, seed + 2)
    start, steps, accuracy = time.perf_counter(), 0, 0.0
    bar = None
    if progress:
        from rlnb.engine.runtime.progress import progress_bar

        bar = progress_bar(total=cfg.max_steps, desc="warm start (SFT)")
    for steps in range(1, cfg.max_steps + 1):
        batch = supervised_batch(
            policy.tokenizer, rows[(steps - 1) * cfg.batch_size : steps * cfg.batch_size],
            task.demonstration)
        policy.model.train()
        logprobs = policy.forward_logprobs(
            policy.model,
            batch["input_ids"].to(policy.device),
            batch["attention_mask"].to(policy.device),
        )  # [B, S]
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
    policy.sync_reference()  # the KL anchor is the warm-started policy
    info = {
        "steps": steps,
        "final_loss": loss.item(),
        "probe_accuracy": accuracy,
        "seconds": time.perf_counter() - start,
    }
    probed = (f"probe accuracy {accuracy:.2f}" if cfg.stop_at_accuracy is not None
              else "no probe (sft.stop_at_accuracy: null)")
    log(f"warm start: {steps} SFT steps in {info['seconds']:.1f}s, loss {info['final_loss']:.3f}, "
        f"{probed}")
    return info
