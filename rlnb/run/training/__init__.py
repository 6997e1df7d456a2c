"""A training run, from a config to a run directory.

- ``session``: ``TrainingRun``: a trainer, its run directory, loggers, checkpoints and resume;
- ``accelerator``: ``auto_accelerator`` (several processes), and which rank died;
- ``verify``: ``rlnb verify``: reload a checkpoint, replay the next steps, compare;
- ``warm_trainer``: ``trainer_with_warm_start``, a trainer with its (cached) warm start,
  as every training path builds it;
- ``timed``: ``train_for``: a wall-time budget, held-out accuracy measured off the clock;
- ``probes``: what a run measures on a loop's stages from outside (the funnel, memory peaks);
- ``funnel``: ``step_funnel``: a logged step's sample funnel, printed from a run directory.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
