"""A trainer with its warm start: what every place that trains from a config starts with.

The library's run (``TrainingRun``), ``rlnb verify``, the ablations, the teaching helpers and the
benchmarks all build their trainer here, so they all start from the same weights: the config's
loop trainer (``make_trainer``), then, when ``sft.enabled``, the supervised warm start, loaded
from the on-disk cache when an entry built by this code exists (``cached_warm_start``).

The warm start draws on its own random state seeded by the loop's seed
(``rlnb.engine.trainers.warm_start``): building here leaves the caller's random state as it was.
"""

from __future__ import annotations

from typing import Any

from rlnb.engine.trainers.loops import make_trainer
from rlnb.run.store.warm_start_cache import cached_warm_start


def _quiet(*_args, **_kwargs) -> None:
    pass


def trainer_with_warm_start(config, *, progress: bool = False, log=_quiet, write: bool = True,
                 **trainer_kwargs: Any) -> tuple[Any, dict | None]:
    """``(trainer, warm_start_info)`` for ``config``: ``make_trainer(config, **trainer_kwargs)``
    (a user's rewards and datasets, an accelerator), warm-started when ``config.sft.enabled``.

    ``warm_start_info`` is ``cached_warm_start``'s dict (``steps``, ``probe_accuracy``,
    ``cached``, ``path``, ...), or None when the config has no warm start. ``write=False`` reads
    the cache but never writes it (the non-main ranks of a distributed run). If the warm start
    fails, the trainer is closed before the error propagates."""
    trainer = make_trainer(config, **trainer_kwargs)
    if not config.sft.enabled:
        return trainer, None
    try:
        info = cached_warm_start(trainer, config.sft, progress=progress, log=log, write=write)
    except BaseException:
        trainer.close()
        raise
    return trainer, info
