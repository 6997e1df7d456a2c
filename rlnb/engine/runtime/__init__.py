"""What every loop runs on, whatever it computes.

- ``distributed``: the few collective operations a trainer needs, with or without accelerate;
- ``timing``: stage timers (``timing/train/...`` metrics);
- ``progress``: progress bars that end, in a terminal and in a notebook.
- ``memory``: a stage's measured memory peak (armed by a run's probes).
"""
