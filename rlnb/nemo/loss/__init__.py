"""NeMo-RL's ``nemo_rl.algorithms.loss``: the loss classes, their configs and input preparation,
as thin adapters over rlnb's losses (``rlnb.algorithms.policy_loss``, ``preference``,
``value_loss``, ``packing``). See ``loss_functions.py`` for the call forms.

- ``loss_functions``: NeMo-RL's loss classes; ``interfaces``: the loss protocol and its enums;
- ``utils``: a model's logits turned into a loss's input; ``wrapper``: a loss over packed
  sequences."""

from rlnb.nemo.loss.interfaces import LossFunction, LossInputType, LossType, MetricNormalizer
from rlnb.nemo.loss.loss_functions import (
    ABSENT,
    ClippedPGLossConfig,
    ClippedPGLossDataDict,
    ClippedPGLossFn,
    DPOLossConfig,
    DPOLossDataDict,
    DPOLossFn,
    MseValueLossConfig,
    MseValueLossFn,
    NLLLossFn,
    PreferenceLossDataDict,
    PreferenceLossFn,
)
from rlnb.nemo.loss.utils import prepare_loss_input, prepare_packed_loss_input
from rlnb.nemo.loss.wrapper import (
    SequencePackingFusionLossWrapper,
    SequencePackingLossWrapper,
    wrap_loss_fn_with_input_preparation,
)

__all__ = [
    "ClippedPGLossConfig", "ClippedPGLossDataDict", "ClippedPGLossFn", "DPOLossConfig",
    "DPOLossDataDict", "DPOLossFn", "LossFunction", "LossInputType", "LossType",
    "MetricNormalizer", "MseValueLossConfig", "MseValueLossFn", "NLLLossFn",
    "PreferenceLossDataDict", "PreferenceLossFn", "SequencePackingFusionLossWrapper",
    "SequencePackingLossWrapper", "prepare_loss_input", "prepare_packed_loss_input",
    "wrap_loss_fn_with_input_preparation",
]


def __getattr__(name: str):
    if name in ABSENT:
        raise ImportError(f"rlnb.nemo has no {name}: {ABSENT[name]} (docs/nemo_rl_names.md)")
    if name == "DraftLossWrapper":
        raise ImportError("rlnb.nemo has no DraftLossWrapper: rlnb trains no draft model "
                          "(docs/nemo_rl_names.md)")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
