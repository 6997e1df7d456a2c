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
   exactly the policy's weights, in the policy's dtype. A policy with LoRA adapters refits
   its merged weights, under the base model's names.
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

The engine's config and start-up are in ``vllm_engine.py``. ``vllm`` is imported on first use
only (``import rlnb`` works without it).
"""

from __future__ import annotations

import warnings

import torch

from rlnb.engine.models.backend import GenerationBackend, Generations, tokenize_prompts
from rlnb.engine.models.lora import has_adapters, merged_state_dict
from rlnb.engine.models.vllm_engine import (
    INSTALL_HINT,
    engine_args,
    exact_logprobs_mode,
    model_folder,
    parameter_versions,
    quiet_rotary_reload,
    start_engine,
)

__all__ = ["VLLMGenerationBackend", "exact_logprobs_mode"]


class VLLMGenerationBackend(GenerationBackend):
    """Sampling with a colocated, in-process ``vllm.LLM``; ``refit`` loads the policy's
    weights into it."""

    shares_policy_weights = False  # vLLM's log-probs differ slightly: recompute prev_logprobs
    can_refit = True  # the engine holds its own weights; refit loads new ones

    def __init__(self, model, tokenizer, config, max_prompt_length=None):
        self.tokenizer, self.config = tokenizer, config
        self.max_prompt_length = max_prompt_length
        self.weight_version = 0
        self._model = model  # the policy's module: the weights to sample from
        self._synced: tuple | None = None  # parameter versions at the last load
        self._asleep = False  # sleep mode: the KV cache is freed (since the last generation)
        self._weights_resident = True  # sleep mode: False while the engine's weights are freed
        self._warned: set[str] = set()
        try:
            import vllm  # noqa: F401
        except ImportError as err:
            raise ValueError(
                f"policy.generation.backend=vllm: the vllm package is not installed "
                f"({err}); {INSTALL_HINT}"
            ) from None
        from vllm.platforms import current_platform

        args = engine_args(model, config, max_prompt_length, current_platform.is_cpu(),
                           current_platform)
        self._sleep_mode = args["enable_sleep_mode"]  # fixed with the engine
        self.logprobs_mode = args["logprobs_mode"]
        source, tokenizer_source, self._folder = model_folder(model, tokenizer)
        self.llm = start_engine(source, tokenizer_source, args)
        self._load_weights(model)  # the policy's weights, not the folder's (choice 2)

    # ------------------------------------------------------------------ weights
    def refit(self, model: torch.nn.Module) -> None:
        """Load the policy's current weights into the engine (after every optimizer step)."""
        self._model = model
        self.weight_version += 1
        self._load_weights(model)

    def _load_weights(self, model: torch.nn.Module) -> None:
        if not self._weights_resident:
            self.llm.wake_up(tags=["weights"])  # level 2 freed them: reallocate, then fill
        # the policy's own tensors, no copy; the worker copies them into its kernel layout. LoRA
        # adapters: W + (α / r) B A computed into new tensors (lora.merged_state_dict)
        weights = list((merged_state_dict(model) if has_adapters(model)
                        else model.state_dict()).items())
        with quiet_rotary_reload():
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # cached prompt KV was computed with the old weights
        self.llm.llm_engine.set_weight_version(str(self.weight_version))
        self._synced = parameter_versions(model)
        self._weights_resident = True

    def _sync(self) -> None:
        """Before sampling: refit if the policy changed since the last load (choice 3), and
        wake the engine if it sleeps (choice 7)."""
        if parameter_versions(self._model) != self._synced:
            self.refit(self._model)
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
            stop_token_ids=cfg.stop_token_ids or None,  # kept in the output, as EOS is
            include_stop_str_in_output=True,  # the stop string is part of the response
            detokenize=bool(cfg.stop_strings),  # only stop strings need vLLM's text
            logprobs=0,  # the sampled token's log-prob only
        )

    def generate(self, prompts: list[str]):
        """Sample one response per prompt (repeat prompts for a group)."""
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
