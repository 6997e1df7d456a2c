"""Where runs' processes run, and how they share the machine.

- ``executors``: a sweep point as a process of its own; the local pool, ``jobs`` at a time;
- ``ray_pool``: sweep points as Ray tasks (``rlnb sweep --ray``);
- ``choice``: ``make_executor``: the pool the flags ask for, checked;
- ``machine``: the machine's cores and GPUs, and each run's share of them;
- ``launch``: ``rlnb launch``: one notebook on N ranks, on one machine or several.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
