"""vLLM's engine for the vLLM backend: its config, its start, and the process state it touches.

    llm = start_engine(*model_folder(model, tokenizer)[:2], engine_args(model, gen, L, cpu, p))

Split from ``vllm_backend.py`` (which samples and refits) so each reads in one sitting; the
choices they implement are listed there. ``vllm`` is imported on first use only.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
from contextlib import contextmanager
from typing import Literal

import torch
from pydantic import Field

from rlnb.config import Config
from rlnb.engine.models.lora import has_adapters, save_merged

INSTALL_HINT = (
    "install it with the `vllm` extra on a GPU machine (pip install -c constraints.txt -e "
    "'.[vllm]'), or on CPU in its own venv as docs/vllm.md describes (bash tests/run_vllm_tier.sh "
    "builds one)"
)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.6  # NeMo-RL's GRPO configs: room for the colocated policy
DEFAULT_CPU_KV_CACHE_GIB = 1
KEY = "policy.generation.vllm"


class VLLMConfig(Config):
    """``policy.generation.vllm``: the engine of ``policy.generation.backend=vllm``."""

    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1,
        description="GPU: share of GPU memory vLLM may take (weights + KV cache); None = 0.6, "
        "leaving room for training. Refused on CPU (use kv_cache_space_gib).",
    )
    kv_cache_space_gib: float | None = Field(
        None, gt=0,
        description="KV cache size in GiB (vLLM's kv_cache_memory_bytes). None: on CPU "
        "VLLM_CPU_KVCACHE_SPACE if set, else 1; on GPU sized by gpu_memory_utilization.",
    )
    enable_sleep_mode: bool = Field(
        False,
        description="GPU only: free the engine's weights and KV cache between generations, so "
        "training has the memory (weights are reloaded from the policy on wake-up).",
    )
    max_model_len: int | None = Field(
        None, ge=2,
        description="Longest prompt + response the engine accepts; None = "
        "policy.max_total_sequence_length.",
    )
    enforce_eager: bool | None = Field(
        None,
        description="Skip torch.compile and CUDA graphs; None = True on CPU (compiling costs "
        "about a minute at start), False on GPU.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Engine weights; auto = the policy's dtype (policy.precision)."
    )


def exact_logprobs_mode(temperature: float, top_p: float, top_k: int | None) -> str | None:
    """vLLM's ``logprobs_mode`` whose sampled-token log-prob is exactly rlnb's
    log_softmax(logits / temperature) over the full vocabulary, or None if none is."""
    truncated = top_p < 1 or top_k is not None
    if not truncated:
        return "processed_logprobs"  # after temperature, and nothing else applied
    if temperature == 1:
        return "raw_logprobs"  # the raw logits are the temperature-1 logits
    return None


def engine_args(model, gen, max_prompt_length: int | None, on_cpu: bool, platform) -> dict:
    """``vllm.LLM`` keyword arguments from the config; refuses what the engine would ignore."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        world = max(world, torch.distributed.get_world_size())
    if world > 1:
        raise ValueError(
            f"policy.generation.backend=vllm runs one in-process engine and does not support "
            f"multi-process training yet (world size {world}); use backend=hf"
        )
    cfg = gen.vllm
    needed = (
        max_prompt_length + (1 if gen.fill_context else gen.max_new_tokens)
        if max_prompt_length is not None else None
    )
    max_model_len = cfg.max_model_len or needed
    if cfg.max_model_len is not None and needed is not None and cfg.max_model_len < needed:
        raise ValueError(
            f"{KEY}.max_model_len={cfg.max_model_len} is shorter than the longest prompt "
            f"plus response ({max_prompt_length} + {gen.max_new_tokens} = {needed}, "
            "policy.max_total_sequence_length); raise it or leave it unset"
        )
    if cfg.enable_sleep_mode and not platform.is_sleep_mode_available():
        raise ValueError(
            f"{KEY}.enable_sleep_mode=true needs a GPU; vLLM's {platform.device_type} "
            "backend has no sleep mode (set it to false)"
        )
    args: dict = {}
    if on_cpu:
        if cfg.gpu_memory_utilization is not None:
            raise ValueError(
                f"{KEY}.gpu_memory_utilization applies on GPU only; on CPU size the KV cache "
                f"with {KEY}.kv_cache_space_gib"
            )
        env = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "")
        if cfg.kv_cache_space_gib is not None and env and float(env) != cfg.kv_cache_space_gib:
            raise ValueError(
                f"{KEY}.kv_cache_space_gib={cfg.kv_cache_space_gib} disagrees with "
                f"VLLM_CPU_KVCACHE_SPACE={env} (vLLM would use the variable): unset one"
            )
        gib = cfg.kv_cache_space_gib or (float(env) if env else DEFAULT_CPU_KV_CACHE_GIB)
        args["kv_cache_memory_bytes"] = int(gib * 2**30)
        check_cpu_head_size(model)
    else:
        if cfg.kv_cache_space_gib is not None and cfg.gpu_memory_utilization is not None:
            raise ValueError(
                f"{KEY}.kv_cache_space_gib and {KEY}.gpu_memory_utilization both size the KV "
                "cache (vLLM would ignore gpu_memory_utilization): set one"
            )
        if cfg.kv_cache_space_gib is not None:
            args["kv_cache_memory_bytes"] = int(cfg.kv_cache_space_gib * 2**30)
        args["gpu_memory_utilization"] = (
            cfg.gpu_memory_utilization or DEFAULT_GPU_MEMORY_UTILIZATION
        )
    policy_dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    mode = exact_logprobs_mode(gen.temperature, gen.top_p, gen.top_k)
    args.update(
        dtype=policy_dtype if cfg.dtype == "auto" else cfg.dtype,
        max_model_len=max_model_len,
        enforce_eager=on_cpu if cfg.enforce_eager is None else cfg.enforce_eager,
        enable_sleep_mode=cfg.enable_sleep_mode,
        logprobs_mode=mode or "processed_logprobs",
        generation_config="vllm",  # choice 6
    )
    return args

def model_folder(model, tokenizer) -> tuple[str, str, tempfile.TemporaryDirectory | None]:
    """Where vLLM reads the config and tokenizer (and first weights) from (choice 2), and
    the temporary folder written for a model that has none (the caller cleans it up)."""
    model_src = getattr(model, "name_or_path", "") or ""
    tok_src = getattr(tokenizer, "name_or_path", "") or ""
    if model_src and tok_src:
        return model_src, tok_src, None
    folder = tempfile.TemporaryDirectory(prefix="rlnb-vllm-")
    if has_adapters(model):  # the plain model's names and weights, not peft's
        save_merged(model, folder.name)
    else:
        model.save_pretrained(folder.name)
    tokenizer.save_pretrained(folder.name)
    return folder.name, folder.name, folder

def start_engine(source: str, tokenizer_source: str, engine_args: dict):
    from vllm import LLM

    # In-process engine (choice 1). vLLM reads the switch when the engine is built (and
    # caches every VLLM_* variable after its first engine); the caller's value comes back.
    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    set_num_threads = torch.set_num_threads
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # vLLM sizes itself from the free memory at start
    try:
        with preserved_rng():  # vLLM seeds python/numpy/torch globally in its worker
            llm = LLM(model=source, tokenizer=tokenizer_source, **engine_args)
    except Exception as err:
        first = (str(err).strip().splitlines() or [""])[0]
        raise ValueError(
            f"policy.generation.backend=vllm: the engine did not start for {source!r} "
            f"({type(err).__name__}: {first}); check {KEY} and policy.model_name"
        ) from err
    finally:
        if previous is None:
            os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous
        # vLLM's CPU worker turns torch.set_num_threads into a no-op for the whole process
        torch.set_num_threads = set_num_threads
    if not hasattr(llm.llm_engine, "model_executor"):
        raise ValueError(
            "policy.generation.backend=vllm: the engine started in a separate process (vLLM "
            "had already cached VLLM_ENABLE_V1_MULTIPROCESSING=1 in this process), so weights "
            "cannot be loaded in-process; restart Python"
        )
    return llm


def parameter_versions(model: torch.nn.Module) -> tuple:
    """Each parameter's identity and in-place version counter: any optimizer step or
    ``load_state_dict`` changes it (choice 3)."""
    return tuple((id(p), p._version) for p in model.parameters())


def check_cpu_head_size(model) -> None:
    """vLLM's CPU attention supports a fixed set of head sizes and only fails at the first
    forward; check before starting the engine."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:  # another vLLM layout: let the engine decide
        return
    cfg = model.config
    head = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head not in supported:
        raise ValueError(
            f"policy.generation.backend=vllm: vLLM's CPU attention supports head sizes "
            f"{supported}, this model's is {head} (hidden_size / num_attention_heads; for the "
            "tiny model set policy.tiny.hidden_size / policy.tiny.num_attention_heads)"
        )


@contextmanager
def quiet_rotary_reload():
    """Drop vLLM's "RotaryEmbedding: Failed to load weights" warning during a reload: the rotary
    cache is computed, never in a checkpoint, and vLLM keeps it (the warning comes every refit).
    The same warning for any other layer still shows: it would mean names did not match."""

    def keep(record: logging.LogRecord) -> bool:
        return record.getMessage() != "RotaryEmbedding: Failed to load weights"

    logger = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextmanager
def preserved_rng():
    """Keep the caller's python, numpy and torch (CPU and CUDA) random states."""
    import numpy as np

    py, npy = random.getstate(), np.random.get_state()
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        try:
            yield
        finally:
            random.setstate(py)
            np.random.set_state(npy)
