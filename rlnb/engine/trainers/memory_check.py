"""The memory plan of a run's config (``models/memory_plan.py``) and the measured peaks beside it.

    memory/<stage>_plan_gib  vs  memory/<stage>_peak_gib,   stage in generation, logprobs, update

Implementation choices:
1) The plan reads the loop's section for P, G and the log-prob reuse, and whether a reference
   is kept; P is this process's share of the prompts, as each process generates its own. A
   config is read by ``plan_for`` (``rlnb preflight --memory``), a built trainer by
   ``loop_plan`` with what it holds.
2) The peaks are measured on the second step a trainer takes (``MEASURED_STEP``; a resumed
   run's too), the first in the state the plan describes: from the first update on, gradients
   and AdamW's moments stay allocated through every stage (``memory_plan.py``, choice 2). One
   step only: the CPU measure counts every operator's outputs in Python (``runtime/memory.py``).
   Like timings, the peaks measure the machine: comparisons of runs (``rlnb verify``) skip them.
   The run arms the measure from outside the step (``rlnb.run.training.probes.MemoryCheck``).
"""

from __future__ import annotations

from rlnb.engine.models.memory_plan import GIB, MemoryPlan, ModelShape, plan_memory
from rlnb.engine.trainers.loop_config import needs_reference
from rlnb.engine.trainers.loops import trainer_class

MEASURED_STEP = 2  # choice 2: the first step with gradients and moments allocated
STAGES = ("generation", "logprobs", "update")


def plan_for(config, *, world_size: int = 1, model=None, prompt_length: int | None = None
             ) -> MemoryPlan:
    """The plan of ``config`` (a loaded GRPO config) per process; ``model``: the built policy
    model (exact shape), else the shape comes from the config alone; ``prompt_length``: the
    prompts' width (default: all the context leaves them)."""
    cls = trainer_class(config)
    if "memory" not in cls.measures:  # the loops that declare the memory check (synchronous GRPO)
        raise ValueError(f"the memory plan covers the loops that declare it (synchronous GRPO), "
                         f"not algorithm: {getattr(config, 'algorithm', 'grpo')} "
                         f"({cls.__name__})")
    return loop_plan(config.policy, config.loop_config, world_size=world_size,
                     reference=needs_reference(config), model=model,
                     prompt_length=prompt_length)


def loop_plan(policy_config, loop, *, world_size: int, reference: bool, model=None,
              prompt_length: int | None = None) -> MemoryPlan:
    """The plan of a GRPO loop section ``loop`` on ``policy_config``, per process (choice 1):
    what ``plan_for`` reads from a config and a trainer holds already."""
    if loop.num_prompts_per_step % world_size:
        raise ValueError(f"grpo.num_prompts_per_step ({loop.num_prompts_per_step}) is not "
                         f"divisible by {world_size} processes")
    return plan_memory(
        policy_config, prompts=loop.num_prompts_per_step // world_size,
        generations=loop.num_generations_per_prompt, reference=reference,
        reuse_generation_logprobs=loop.reuse_generation_logprobs is True,
        shape=ModelShape.of(model) if model is not None else None, prompt_length=prompt_length)


def plan_applies(trainer) -> bool:
    """Whether a trainer's step is measured and planned: a loop that declares the memory check
    (``measures``: synchronous GRPO) with the ``hf`` backend, on a Hugging Face model whose
    config gives the shapes, and no ``policy.compile`` (a compiled step's fused kernels are not
    the operators the CPU measure counts)."""
    return ("memory" in trainer.measures
            and trainer.config.policy.generation.backend == "hf"
            and trainer.policy.compiled is None and hf_shaped(trainer.policy.model))


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
