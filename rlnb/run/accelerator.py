"""Several processes: the ``accelerate.Accelerator`` a launcher asks for, or None for one process.

    run = TrainingRun(config, accelerator=auto_accelerator())

Implementation choice: the Accelerator is built only when a launcher started several processes
(``WORLD_SIZE`` > 1, as under ``accelerate launch``, ``torchrun`` or ``rlnb launch``); on a machine
without GPUs it is built with ``cpu=True``, else every launched process would be rank 0 of 1.
"""

from __future__ import annotations

import os

import torch


def auto_accelerator():
    """An ``accelerate.Accelerator`` when a launcher started several processes, else None."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    from accelerate import Accelerator

    return Accelerator(cpu=not torch.cuda.is_available())
