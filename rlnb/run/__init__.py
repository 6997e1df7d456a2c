"""Run plumbing: everything between a trainer and the person running it, one job per folder.

The folders, each importing only the ones before it (``tests/package/test_layers.py`` checks):

- ``store/``: what a run leaves on disk: its run directory, rollouts, checkpoints, metric
  loggers, crash-safe writes, the warm-start cache;
- ``config/``: the whole run's config (``MasterConfig``, ``load_config``) and, in ``nemo/``,
  NeMo-RL's YAML files read and translated;
- ``training/``: a training run (``TrainingRun``), its processes (``auto_accelerator``),
  ``rlnb verify``, a wall-time budget (``train_for``);
- ``notebooks/``: one notebook run headless through papermill (``rlnb run``), its ``-p``
  parameters, the HTML export's offline MathJax;
- ``pools/``: where runs' processes run: a sweep's points in local processes or Ray tasks, each
  with its share of the machine, and ``rlnb launch``'s ranks;
- ``experiments/``: many runs compared: sweeps and their report, ablations over paired seeds,
  their effects and statistics, published findings.

Each folder's ``__init__.py`` lists its modules. What one frozen batch shows (published knobs'
mechanisms, token statistics) is the engine's: ``rlnb.engine.inspection``.
"""


def lazy_modules(package: str):
    """A module-level ``__getattr__`` (PEP 562) for ``package``: its modules and folders load on
    first use, so ``rlnb.run.experiments.sweep.sweep(...)`` works after a bare ``import rlnb``
    and ``import rlnb`` itself loads none of them."""

    def __getattr__(name: str):
        import importlib
        import importlib.util

        if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}"):
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__getattr__ = lazy_modules(__name__)
