"""NeMo-RL's ``nemo_rl.algorithms.dpo`` names, each driving rlnb's DPO trainer.

    from rlnb.nemo.dpo import setup, dpo_train
    parts = setup(rlnb.load_config("configs/dpo_tiny.yaml"))  # policy, reference, pairs, ...
    dpo_train(parts)                                          # NeMo-RL: the DPO loop

| NeMo-RL                          | here                                                       |
|----------------------------------|------------------------------------------------------------|
| ``MasterConfig``                 | ``rlnb.run.config.master_config.MasterConfig``,            |
|                                  | ``algorithm: dpo``                                         |
| ``DPOConfig``                    | the ``dpo`` section (``engine/trainers/dpo_config.py``)     |
| ``DPOSaveState``                 | the TypedDict ``DPOTrainer.state()`` returns               |
| ``setup(master_config, ...)``    | a ``TrainingRun``: trainer, policy (with its reference),   |
|                                  | the pairs' source, loss ...                                |
| ``add_ref_logprobs_to_data``     | ``trainer.reference_logprobs(batch)`` for each batch       |
| ``dpo_train(...)``               | ``TrainingRun.train``: ``trainer.step()`` = pairs ->       |
|                                  | reference_logprobs -> compute_loss -> update               |
| ``validate(...)``                | ``trainer.validate()``: held-out accuracy on the task (not |
|                                  | NeMo-RL's preference loss on validation pairs)             |
| ``DPOLossFn``                    | ``rlnb.DPOLossFn`` (``trainer.loss_fn``)                   |

rlnb keeps NeMo-RL's meaning, not its signatures: ``setup`` returns the parts bundled
(``DPOSetup``) and the other functions take it. NeMo-RL's dataloaders are the ``dpo.pairs``
source: a prompt/chosen/rejected dataset, or pairs sampled from a task with a reward.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, NamedTuple, TypedDict

from rlnb.engine.trainers.dpo_config import DPOConfig
from rlnb.run.config.master_config import MasterConfig, load_config

__all__ = ["DPOConfig", "DPOSaveState", "DPOSetup", "MasterConfig", "add_ref_logprobs_to_data",
           "dpo_train", "setup", "validate"]


class DPOSaveState(TypedDict):
    """NeMo-RL's DPO save state (``epoch``, ``step``, ``total_steps``, ``consumed_samples``:
    pairs) with the fields every rlnb checkpoint holds: what ``DPOTrainer.state()`` returns and a
    checkpoint's ``trainer_state.json`` holds."""

    epoch: int
    step: int
    total_steps: int
    consumed_samples: int
    current_step: int
    current_epoch: int
    total_valid_tokens: int
    val_reward: float | None
    data_position: dict[str, Any]


class DPOSetup(NamedTuple):
    """What NeMo-RL's DPO ``setup`` returns, as rlnb's parts."""

    policy: Any  # rlnb.engine.models.policy.Policy (its reference_model is the reference)
    task: Any  # the task: validation, and the prompts and rewards of sampled pairs
    loss_fn: Any  # DPOLossFn
    run: Any  # TrainingRun: the logger and the checkpointer
    trainer: Any  # DPOTrainer: the stages
    dpo_save_state: DPOSaveState
    master_config: MasterConfig


def setup(master_config: MasterConfig | dict | str | None = None, *, run_dir=None,
          resume: bool = False, accelerator=None) -> DPOSetup:
    """NeMo-RL's DPO ``setup``: build the parts the loop needs (warm start included: the
    reference is the warm-started policy) and return them."""
    from rlnb.run.training.session import TrainingRun

    if isinstance(master_config, Mapping) and "algorithm" not in master_config:
        master_config = {"algorithm": "dpo", **master_config}
    config = load_config(master_config)
    if config.algorithm != "dpo":
        raise ValueError(f"rlnb.nemo.dpo.setup: the config's algorithm is "
                         f"{config.algorithm!r}; set algorithm: dpo")
    run = TrainingRun(config, run_dir=run_dir, resume=resume, accelerator=accelerator)
    t = run.trainer
    return DPOSetup(t.policy, t.task, t.loss_fn, run, t, t.state(), config)


def add_ref_logprobs_to_data(batches: Iterable, parts: DPOSetup) -> Iterator:
    """NeMo-RL's ``add_ref_logprobs_to_data``: each ``PreferenceBatch`` with its reference
    log-probs (rlnb stores them unrolled; ``batch.train_data()`` rolls them left by one as
    NeMo-RL's loss reads them)."""
    for batch in batches:
        yield parts.trainer.reference_logprobs(batch)


def dpo_train(parts: DPOSetup, num_steps: int | None = None) -> dict[str, Any]:
    """NeMo-RL's ``dpo_train``: the loop (per step pairs -> reference log-probs -> loss ->
    update, validation at ``dpo.val_period``, checkpoints at ``checkpointing.save_period``)."""
    return parts.run.train(num_steps)


def validate(parts: DPOSetup, step: int | None = None) -> dict[str, float]:
    """NeMo-RL's ``validate``: here held-out accuracy of the current policy on the task
    (``validation/*``), the same measure as the GRPO and PPO loops'."""
    return parts.trainer.validate()
