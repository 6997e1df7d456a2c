"""Many runs compared: sweeps, ablations and the statistics over their seeds.

- ``sweep``: ``rlnb sweep``: one notebook run per point of a grid, resumable;
- ``sweep_summary``: a sweep's table, per-setting summary and report notebook;
- ``stats``: mean ± sd, intervals for differences over seeds, the power of a paired design;
- ``ablation``: ``rlnb.ablate``: arms of overrides over paired seeds, run through the pools;
- ``effects``: an ablation's table: reductions, paired intervals, detectable effects;
- ``run_diff``: two runs side by side (``rlnb diff``); ``diagnosis``: a run's diagnosis card
  (``rlnb doctor``); ``proxy``: the training reward against the held-out metric;
- ``findings``: published findings as ablations (what their knobs do to one batch:
  ``rlnb.engine.inspection.mechanisms``).
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
