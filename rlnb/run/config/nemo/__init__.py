"""NeMo-RL's YAML configs as rlnb configs (``load_config`` hands them to ``translate``).

- ``reader``: a NeMo-RL YAML file read as NeMo-RL does (``defaults:``, ``${...}`` interpolations);
- ``translate``: the translation: every key used, ignored (listed) or refused (named);
- ``sections``: the translation section by section, with NeMo-RL's loop defaults;
- ``report``: its bookkeeping: each leaf key marked, the ignored ones summarised.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
