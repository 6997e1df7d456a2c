"""NeMo-RL's ``nemo_rl.algorithms.loss_functions`` (the module the loss classes lived in before
NeMo-RL moved them to ``nemo_rl.algorithms.loss``): the same names as ``rlnb.nemo.loss``.

    from rlnb.nemo.loss_functions import ClippedPGLossFn, ClippedPGLossConfig
"""

from rlnb.nemo.loss import *  # noqa: F403  (the whole public surface, re-exported)
from rlnb.nemo.loss import __all__, __getattr__  # noqa: F401
