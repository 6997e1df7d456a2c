"""NeMo-RL's YAML configs as rlnb configs (``load_config`` hands them to ``translate``).

- ``reader``: a NeMo-RL YAML file read as NeMo-RL reads it, with OmegaConf (``defaults:``,
  ``${...}`` interpolations);
- ``translate``: the translation: every key used, ignored (listed) or refused (named);
- ``loop_sections``: the translation of the loop sections (and ``dpo``, ``logger``), with
  NeMo-RL's loop defaults;
- ``model_sections``: of the policy's and critic's model, optimizer, schedule and generation;
- ``data_sections``: of the data set and its verifier;
- ``report``: its bookkeeping: each leaf key marked, the ignored ones summarised.
"""

from rlnb.run import lazy_modules

__getattr__ = lazy_modules(__name__)  # its modules load on first use (PEP 562)
