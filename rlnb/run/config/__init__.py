"""The whole run's config.

- ``master_config``: ``MasterConfig`` (every section) and ``load_config`` (YAML, presets,
  dotted overrides, plug-in imports);
- ``nemo/``: NeMo-RL's YAML configs, read as NeMo-RL reads them and translated into rlnb's.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
