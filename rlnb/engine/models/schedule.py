"""The learning-rate schedule: linear warm-up, then a linear decay or a constant rate.

    lr(step) = lr · lr_factor(optimizer_config, step)          (torch's LambdaLR)

The warm-up starts at ``lr·(s+1)/W`` (or NeMo-RL's ``LinearLR(start_factor=f)``); the decay is
``LinearLR(1, e, D)`` after a milestone at ``W``, as NeMo-RL's schedulers list it
(docs/algorithms.md#learning-rate-schedule).
"""

from __future__ import annotations


def lr_factor(opt, step: int) -> float:
    """The multiplier of ``opt.lr`` (``opt``: an ``OptimizerConfig``) at scheduler step ``step``
    (0-based): the warm-up, then the decay."""
    warmup, start, decay = opt.warmup_steps, opt.warmup_start_factor, opt.decay_steps
    if decay and step >= warmup:  # LinearLR(1, e, D), its step 0 at the milestone W
        done = min(step - warmup, decay) / decay
        return 1.0 + (opt.decay_end_factor - 1.0) * done
    if not warmup:
        return 1.0
    if start is None:
        return min(1.0, (step + 1) / warmup)
    return start + (1.0 - start) * min(step, warmup) / warmup
