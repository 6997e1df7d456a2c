"""The memory plan of a run's config (``models/memory_plan.py``) and the measured peaks beside it.

    memory/<stage>_plan_gib  vs  memory/<stage>_peak_gib,   stage in generation, logprobs, update

Implementation choices:
1) The plan reads the loop's section for P, G, the KL penalty and the log-prob reuse; P is this
   process's share of the prompts, as each process generates its own.
2) The peaks are measured on the second step a trainer takes (``MEASURED_STEP``; a resumed
   run's too), the first in the state the plan describes: from the first update on, gradients
   and AdamW's moments stay allocated through every stage (``memory_plan.py``, choice 2). One
   step only: the CPU measure counts every operator's outputs in Python (``runtime/memory.py``).
   Like timings, the peaks measure the machine: comparisons of runs (``rlnb verify``) skip them.
"""

from __future__ import annotations

from rlnb.engine.models.memory_plan import GIB, MemoryPlan, ModelShape, plan_memory
from rlnb.engine.trainers.loop_config import needs_reference

MEASURED_STEP = 2  # choice 2: the first step with gradients and moments allocated
STAGES = ("generation", "logprobs", "update")


def plan_for(config, *, world_size: int = 1, model=None, prompt_length: int | None = None
             ) -> MemoryPlan:
    """The plan of ``config`` (a loaded GRPO config) per process; ``model``: the built policy
    model (exact shape), else the shape comes from the config alone; ``prompt_length``: the
    prompts' width (default: all the context leaves them)."""
    algorithm = getattr(config, "algorithm", "grpo")
    loop = getattr(config, "grpo", None)
    if algorithm != "grpo" or loop is None or loop.async_grpo.enabled:
        raise ValueError(f"the memory plan covers the synchronous GRPO loop, not algorithm: "
                         f"{algorithm}{' (async)' if loop is not None else ''}")
    if loop.num_prompts_per_step % world_size:
        raise ValueError(f"grpo.num_prompts_per_step ({loop.num_prompts_per_step}) is not "
                         f"divisible by {world_size} processes")
    return plan_memory(
        config.policy, prompts=loop.num_prompts_per_step // world_size,
        generations=loop.num_generations_per_prompt, reference=needs_reference(config),
        reuse_generation_logprobs=loop.reuse_generation_logprobs is True,
        shape=ModelShape.of(model) if model is not None else None, prompt_length=prompt_length)


def plan_applies(config, policy) -> bool:
    """Whether a run's step is measured and planned: the synchronous GRPO loop with the ``hf``
    backend, on a Hugging Face model whose config gives the shapes, and no ``policy.compile``
    (a compiled step's fused kernels are not the operators the CPU measure counts)."""
    loop = getattr(config, "grpo", None)
    return (getattr(config, "algorithm", "grpo") == "grpo" and loop is not None
            and not loop.async_grpo.enabled and config.policy.generation.backend == "hf"
            and policy.compiled is None and hf_shaped(policy.model))


def hf_shaped(model) -> bool:
    """A causal LM whose config names the shapes the plan reads (``ModelShape.of``)."""
    c = getattr(model, "config", None)
    return all(hasattr(c, k) for k in ("num_attention_heads", "num_hidden_layers", "hidden_size",
                                       "intermediate_size")) and \
        model.get_output_embeddings() is not None


def memory_metrics(plan: MemoryPlan, peaks: dict[str, int]) -> dict[str, float]:
    """``memory/<stage>_plan_gib`` for every stage and ``memory/<stage>_peak_gib`` for the
    measured ones (docs/metrics.md)."""
    out = {}
    for stage in STAGES:
        out[f"memory/{stage}_plan_gib"] = plan.stages[stage] / GIB
        if stage in peaks:
            out[f"memory/{stage}_peak_gib"] = peaks[stage] / GIB
    return out


def resident_tensors(policy) -> list:
    """The tensors alive before a step that the CPU measure must count: the policy's and the
    reference's parameters and buffers, the gradients, the optimizer state."""
    models = [policy.model] + ([policy.reference_model] if policy.reference_model else [])
    found = [t for m in models for t in (*m.parameters(), *m.buffers())]
    found += [p.grad for m in models for p in m.parameters() if p.grad is not None]
    found += [v for s in policy.optimizer.state.values() for v in s.values()
              if hasattr(v, "untyped_storage")]
    return found
