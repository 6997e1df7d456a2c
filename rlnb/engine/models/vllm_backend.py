"""The vLLM generation backend: a ``vllm.LLM`` engine beside the policy, refit every step.

    responses, log π_gen(y_t | x, y_<t)  ←  vLLM(θ_k)      then after the update:   θ_k+1 → vLLM

NeMo-RL samples GRPO rollouts with vLLM and pushes the trained weights into the engine after
every step (``refit_policy_generation``). This backend does the same inside the training process.

Implementation choices:
1) The engine runs in-process (vLLM's ``VLLM_ENABLE_V1_MULTIPROCESSING=0``): engine core, executor
   and worker live in this Python process, so a refit hands the policy's own tensors to the
   worker's ``reload_weights`` (vLLM's in-place reload: it maps Hugging Face names onto vLLM's
   fused layers and redoes the kernel-format packing the CPU backend needs). No checkpoint is
   written and no copy crosses a process boundary.
2) vLLM starts from a model folder: the one the policy was loaded from when there is one (hub id
   or local path), otherwise (the embedded tiny model) ``save_pretrained`` into a temporary folder,
   once. Construction then loads the policy's in-memory weights, so the engine starts from
   exactly the policy's weights, in the policy's dtype.
3) ``weight_version`` counts refits (0 = the construction weights) and is vLLM's own per-token
   weight label, so every batch says which weights sampled it. Generating after the policy's
   tensors changed without a refit (a warm start, a loaded checkpoint, a notebook edit) refits
   first: the engine never samples from stale weights. (Changes are seen through each
   parameter's in-place version counter; a write through ``param.data`` is not.)
4) Log-probs are log_softmax(logits / temperature) at the sampled token over the full
   vocabulary, as the policy computes them. vLLM's default ``raw_logprobs`` ignores the
   temperature, so the engine uses ``processed_logprobs`` (exact while top-k/top-p are off), or
   ``raw_logprobs`` when temperature is 1 and top-k/top-p are on; temperature != 1 with
   top-k/top-p has no exact mode (vLLM then reports the truncated distribution's; docs/vllm.md).
5) ``shares_policy_weights = False``: vLLM's kernels give slightly different log-probs from the
   policy's forward, so the trainer recomputes ``prev_logprobs`` with the policy and the
   difference feeds the importance-sampling correction and ``token_mult_prob_error``.
6) As in the HF backend, responses end at the tokenizer's EOS or after a stop string, both
   kept; ``truncated`` is ``finish_reason == "length"``. ``generation_config="vllm"``: the
   model's generation_config.json adds no stop tokens and changes no sampling defaults.
7) Sleep mode (GPU only): after each generation the engine sleeps at level 2 (weights and KV
   cache freed), so training has the memory; the next refit or generation wakes the weights and
   loads the policy's current ones, then the KV cache.

This module is longer than the ~400 lines per module the project aims for: the engine's
lifecycle (start, refit, sleep/wake, the RNG and thread state vLLM changes in this process) and
its sampling translation belong together, and split apart they would each need the other's
internals.

``vllm`` is imported on first use only (``import rlnb`` works without it). The backend has
``generation.GenerationBackend``'s interface without subclassing it: ``generation.py`` imports
``VLLMConfig`` from here, so importing ``generation`` at load time would be circular.
"""

from __future__ import annotations

import logging
import os
import random
import tempfile
import warnings
from contextlib import contextmanager
from typing import Literal

import torch
from pydantic import Field

from rlnb.config import Config

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


class VLLMGenerationBackend:
    """Sampling with a colocated, in-process ``vllm.LLM``; ``refresh_weights`` refits it.

    Same interface as ``generation.GenerationBackend``: ``generate``, ``generate_ids``,
    ``refresh_weights``, ``shares_policy_weights``.
    """

    shares_policy_weights = False  # vLLM's log-probs differ slightly: recompute prev_logprobs
    can_refit = True  # the engine holds its own weights; refresh_weights loads new ones

    def __init__(self, model, tokenizer, config, max_prompt_length=None):
        self.tokenizer, self.config = tokenizer, config
        self.max_prompt_length = max_prompt_length
        self.weight_version = 0
        self._model = model  # the policy's module: the weights to sample from
        self._synced: tuple | None = None  # parameter versions at the last load
        self._asleep = False  # sleep mode: the KV cache is freed (since the last generation)
        self._weights_resident = True  # sleep mode: False while the engine's weights are freed
        self._warned: set[str] = set()
        self._folder: tempfile.TemporaryDirectory | None = None
        cfg = config.vllm
        try:
            import vllm  # noqa: F401
        except ImportError as err:
            raise ValueError(
                f"policy.generation.backend=vllm: the vllm package is not installed "
                f"({err}); {INSTALL_HINT}"
            ) from None
        from vllm.platforms import current_platform

        engine_args = self._engine_args(model, cfg, current_platform.is_cpu(), current_platform)
        self._sleep_mode = engine_args["enable_sleep_mode"]  # fixed with the engine
        self.logprobs_mode = engine_args["logprobs_mode"]
        source, tokenizer_source = self._model_folder(model, tokenizer)
        self.llm = self._start_engine(source, tokenizer_source, engine_args)
        self._load_weights(model)  # the policy's weights, not the folder's (choice 2)

    # ------------------------------------------------------------------ construction
    def _engine_args(self, model, cfg: VLLMConfig, on_cpu: bool, platform) -> dict:
        """``vllm.LLM`` keyword arguments from the config; refuses what the engine would ignore."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            world = max(world, torch.distributed.get_world_size())
        if world > 1:
            raise ValueError(
                f"policy.generation.backend=vllm runs one in-process engine and does not support "
                f"multi-process training yet (world size {world}); use backend=hf"
            )
        gen = self.config
        needed = (
            self.max_prompt_length + gen.max_new_tokens
            if self.max_prompt_length is not None else None
        )
        max_model_len = cfg.max_model_len or needed
        if cfg.max_model_len is not None and needed is not None and cfg.max_model_len < needed:
            raise ValueError(
                f"{KEY}.max_model_len={cfg.max_model_len} is shorter than the longest prompt "
                f"plus response ({self.max_prompt_length} + {gen.max_new_tokens} = {needed}, "
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
            _check_cpu_head_size(model)
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

    def _model_folder(self, model, tokenizer) -> tuple[str, str]:
        """Where vLLM reads the config and tokenizer (and first weights) from (choice 2)."""
        model_src = getattr(model, "name_or_path", "") or ""
        tok_src = getattr(tokenizer, "name_or_path", "") or ""
        if model_src and tok_src:
            return model_src, tok_src
        self._folder = tempfile.TemporaryDirectory(prefix="rlnb-vllm-")
        model.save_pretrained(self._folder.name)
        tokenizer.save_pretrained(self._folder.name)
        return self._folder.name, self._folder.name

    def _start_engine(self, source: str, tokenizer_source: str, engine_args: dict):
        from vllm import LLM

        # In-process engine (choice 1). vLLM reads the switch when the engine is built (and
        # caches every VLLM_* variable after its first engine); the caller's value comes back.
        previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        set_num_threads = torch.set_num_threads
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # vLLM sizes itself from the free memory at start
        try:
            with _preserved_rng():  # vLLM seeds python/numpy/torch globally in its worker
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

    # ------------------------------------------------------------------ weights
    def refresh_weights(self, model: torch.nn.Module) -> None:
        """Load the policy's current weights into the engine (after every optimizer step)."""
        self._model = model
        self.weight_version += 1
        self._load_weights(model)

    def _load_weights(self, model: torch.nn.Module) -> None:
        if not self._weights_resident:
            self.llm.wake_up(tags=["weights"])  # level 2 freed them: reallocate, then fill
        # the policy's own tensors, no copy; the worker copies them into its kernel layout
        weights = list(model.state_dict().items())
        with _quiet_rotary_reload():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        self.llm.llm_engine.set_weight_version(str(self.weight_version))
        self._synced = _parameter_versions(model)
        self._weights_resident = True

    def _sync(self) -> None:
        """Before sampling: refit if the policy changed since the last load (choice 3), and
        wake the engine if it sleeps (choice 7)."""
        if _parameter_versions(self._model) != self._synced:
            self.refresh_weights(self._model)
        elif not self._weights_resident:
            self._load_weights(self._model)  # same weights, version unchanged
        if self._asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False

    def _sleep(self) -> None:
        if self._sleep_mode:
            self.llm.sleep(level=2)  # weights are reloaded from the policy on wake-up
            self._asleep, self._weights_resident = True, False

    # ------------------------------------------------------------------ sampling
    def sampling_params(self, max_new_tokens: int | None = None):
        """vLLM ``SamplingParams`` from ``policy.generation`` (read on every call, so a
        ``reconfigure`` of temperature / top-p / top-k applies to the next batch)."""
        from vllm import SamplingParams

        cfg = self.config
        mode = exact_logprobs_mode(cfg.temperature, cfg.top_p, cfg.top_k)
        if mode != self.logprobs_mode:
            self._warn_once(
                f"generation_logprobs are not exactly log_softmax(logits / temperature) with "
                f"temperature={cfg.temperature}, top_p={cfg.top_p}, top_k={cfg.top_k}: "
                + ("no vLLM logprobs mode gives that (see docs/vllm.md)" if mode is None else
                   f"the engine was built with logprobs_mode={self.logprobs_mode}, these settings "
                   f"need {mode} (rebuild the trainer)")
            )
        return SamplingParams(
            n=1,
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            top_k=cfg.top_k or 0,  # 0 disables
            max_tokens=max_new_tokens or cfg.max_new_tokens,
            stop=cfg.stop_strings or None,
            include_stop_str_in_output=True,  # the stop string is part of the response
            detokenize=bool(cfg.stop_strings),  # only stop strings need vLLM's text
            logprobs=0,  # the sampled token's log-prob only
        )

    def generate(self, prompts: list[str]):
        """Sample one response per prompt (repeat prompts for a group)."""
        from rlnb.engine.models.generation import tokenize_prompts

        prompt_ids, prompt_mask = tokenize_prompts(
            self.tokenizer, prompts, self.max_prompt_length
        )
        return self.generate_ids(prompt_ids, prompt_mask)

    def generate_ids(
        self, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
        max_new_tokens: int | None = None,
    ):
        """Sample from left-padded token ids ``[B, L]`` (multi-turn rollouts continue a
        conversation token for token)."""
        from vllm.inputs import TokensPrompt

        from rlnb.engine.models.generation import Generations

        tok = self.tokenizer
        params = self.sampling_params(max_new_tokens)
        requests = [
            TokensPrompt(prompt_token_ids=ids[m.bool()].tolist())
            for ids, m in zip(prompt_ids, prompt_mask)
        ]
        self._sync()
        try:
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        finally:
            self._sleep()
        completions = [out.outputs[0] for out in outputs]
        self._check_weight_labels(completions)
        B = len(completions)
        R = max(1, max(len(c.token_ids) for c in completions))
        response_ids = torch.full((B, R), tok.pad_token_id, dtype=torch.long)  # [B, R]
        mask = torch.zeros((B, R), dtype=torch.long)
        logprobs = torch.zeros((B, R), dtype=torch.float32)
        for b, c in enumerate(completions):
            n = len(c.token_ids)
            response_ids[b, :n] = torch.tensor(c.token_ids, dtype=torch.long)
            mask[b, :n] = 1
            # logprobs=0: one {token_id: Logprob} per position, holding the sampled token
            logprobs[b, :n] = torch.tensor(
                [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs)], dtype=torch.float32
            )
        truncated = torch.tensor([c.finish_reason == "length" for c in completions])  # [B]
        texts = [
            tok.decode(list(c.token_ids), skip_special_tokens=True) for c in completions
        ]  # decoded like the HF backend's, not vLLM's incremental detokenizer
        return Generations(
            prompt_ids=prompt_ids,
            prompt_mask=prompt_mask,
            response_ids=response_ids,
            response_mask=mask,
            generation_logprobs=logprobs,
            truncated=truncated,
            texts=texts,
            weight_version=self.weight_version,
        )

    def _check_weight_labels(self, completions) -> None:
        """vLLM labels each sampled token with the engine's weight version (choice 3)."""
        want = str(self.weight_version)
        for c in completions:
            for span in c.weight_versions or ():
                if span.version != want:
                    raise RuntimeError(
                        f"vLLM sampled tokens with weight version {span.version}, expected {want}"
                    )

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            warnings.warn(message, stacklevel=3)

    def close(self) -> None:
        """Shut the engine down and free its memory (the backend is unusable afterwards)."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
        if self._folder is not None:
            self._folder.cleanup()
            self._folder = None


def _parameter_versions(model: torch.nn.Module) -> tuple:
    """Each parameter's identity and in-place version counter: any optimizer step or
    ``load_state_dict`` changes it (choice 3)."""
    return tuple((id(p), p._version) for p in model.parameters())


def _check_cpu_head_size(model) -> None:
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
def _quiet_rotary_reload():
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
def _preserved_rng():
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
