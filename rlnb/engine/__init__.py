"""The engine: policy, generation backends, tasks/environments, warm start and trainers.

Imported lazily by the modules that need it (``import rlnb`` loads only the algorithm layer).
"""
