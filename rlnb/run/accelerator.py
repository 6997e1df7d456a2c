"""Several processes: the ``accelerate.Accelerator`` a launcher asks for, or None for one process.

    run = TrainingRun(config, accelerator=auto_accelerator())

Implementation choices:
1) The Accelerator is built only when a launcher started several processes (``WORLD_SIZE`` > 1,
   as under ``accelerate launch``, ``torchrun`` or ``rlnb launch``); on a machine without GPUs it
   is built with ``cpu=True``, else every launched process would be rank 0 of 1.
2) Collectives time out after ``RLNB_DIST_TIMEOUT`` seconds (default 60, torch's is 30
   minutes): when one rank dies, the others fail with a timeout within a minute instead of
   hanging, and the launcher then names the rank that exited first.
"""

from __future__ import annotations

import os

import torch


def auto_accelerator():
    """An ``accelerate.Accelerator`` when a launcher started several processes, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from datetime import timedelta

    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    timeout = timedelta(seconds=float(os.environ.get("RLNB_DIST_TIMEOUT", "60")))
    return Accelerator(cpu=not torch.cuda.is_available(),
                       kwargs_handlers=[InitProcessGroupKwargs(timeout=timeout)])
