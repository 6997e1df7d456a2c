"""What a run measures on a loop's stages without being the algorithm, hung on the trainer from
outside: the sample funnel of every step and the memory peaks of one step beside their plan.

    attach_probes(trainer)        # what TrainingRun does (and a dashboard that trains alone)
    trainer.probes                # [FunnelProbe(), MemoryCheck(trainer)] for GRPO

Implementation choices:
1) A probe has ``stage(name)``, a context manager the trainer enters around each stage's block
   (``Trainer.measured``: generation, logprobs, update), and ``step_metrics(metrics)``, what it
   adds to a step's record (``Trainer.record_step``). The step's own code only names its
   stages; with no probe attached none of this module runs (``tests/package/test_budgets.py``
   holds the step's reading path with and without).
2) A loop declares what may be measured on it (``Trainer.measures``): GRPO the funnel and the
   memory check, async GRPO the funnel; PPO and DPO nothing. ``attach_probes`` attaches those,
   once (a second call is a no-op), so every step of a run, of a dashboard's training and of a
   stage-by-stage stepper is recorded with the same keys.
3) The funnel (``engine/trainers/funnel.py``) reads the step's ``AdvantageBatch``: its rows'
   groups, raw rewards, truncation and ``format`` component, the sample mask after the filters
   and the advantages after clipping.
4) The memory check measures the second step the trainer takes after it is attached (a resumed
   run's too: its first step allocates the gradients; ``memory_check.MEASURED_STEP``): it
   wraps the trainer's ``step`` so that step runs armed (``runtime/memory.py``), and adds
   ``memory/<stage>_{plan,peak}_gib`` from the plan of what the trainer holds (its loop
   section, its reference, its model's shape, the step's prompt width).
"""

from __future__ import annotations

import contextlib

from rlnb.engine.data.batches import AdvantageBatch, StepMetrics
from rlnb.engine.runtime.memory import StageMemory
from rlnb.engine.trainers.funnel import sample_funnel
from rlnb.engine.trainers.memory_check import (
    MEASURED_STEP,
    loop_plan,
    memory_metrics,
    plan_applies,
    resident_tensors,
)


class Probe:
    """Measures nothing: the two hooks a probe may fill (choice 1)."""

    def stage(self, name: str):
        return contextlib.nullcontext()

    def step_metrics(self, metrics: StepMetrics) -> dict[str, float]:
        return {}


class FunnelProbe(Probe):
    """``funnel/*`` of each step, from its advantages (choice 3)."""

    def step_metrics(self, metrics: StepMetrics) -> dict[str, float]:
        adv = metrics.advantages
        if not isinstance(adv, AdvantageBatch):
            return {}
        batch = adv.rollout
        return sample_funnel(batch.group, batch.rewards, batch.truncated, batch.token_mask,
                             adv.sample_mask, adv.advantages,
                             batch.reward_components.get("format"))


class MemoryCheck(Probe):
    """The stages' memory peaks on the trainer's measured step, beside the plan (choice 4)."""

    def __init__(self, trainer):
        self.trainer, self.steps = trainer, 0
        self.meter = StageMemory(trainer.policy.device)
        self.step = trainer.step  # the loop's own
        trainer.step = self.measured_step  # (an instance attribute: the class's is untouched)

    def stage(self, name: str):
        return self.meter.stage(name)  # free unless the step is armed

    def measured_step(self) -> StepMetrics:
        t = self.trainer
        self.steps += 1
        if self.steps != MEASURED_STEP or not plan_applies(t):
            return self.step()
        with self.meter.armed_step(resident_tensors(t.policy)):
            metrics = self.step()
        plan = loop_plan(t.config.policy, t.loop_config, world_size=t.dist.world_size,
                         reference=t.need_reference, model=t.policy.model,
                         prompt_length=metrics.rollout.prompt_ids.shape[1])  # this step's
        metrics.update(memory_metrics(plan, self.meter.peaks))
        return metrics


PROBES = {"funnel": lambda trainer: FunnelProbe(), "memory": MemoryCheck}


def attach_probes(trainer) -> list[Probe]:
    """Attach the probes the trainer's loop declares (``measures``), once (choice 2)."""
    if not trainer.probes:
        trainer.probes.extend(PROBES[name](trainer) for name in trainer.measures)
    return trainer.probes
