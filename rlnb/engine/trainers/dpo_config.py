"""``dpo``: the DPO loop's section (NeMo-RL's ``DPOConfig`` keys) and its rules with the others.

    algorithm: dpo
    dpo: {reference_policy_kl_penalty: 0.1, num_prompts_per_step: 32, pairs: {source: on_policy}}

Implementation choices:
1) Not a ``LoopConfig``: DPO trains on pairs and has no group advantages, so GRPO's and PPO's
   keys (dynamic sampling, reward scaling and shaping, estimators, log-prob reuse, multi-turn)
   are refused here with the reason, and ``check_loop_rules`` hands this section its own rules
   (``check_rules``). The keys the ``Trainer`` base reads (sizes, validation, seed) have the same
   names as in ``grpo``; the base reads ``max_rollout_turns`` and ``use_dynamic_sampling`` as
   fixed class attributes (1 and False).
2) The loss keys are NeMo-RL's ``dpo`` keys (``DPOLossConfig``); β must be > 0 (at β = 0 the
   loss is log 2 whatever the policy).
3) ``loss_fn`` (the clipped policy loss of GRPO and PPO) is not read by DPO: a value other than
   its default is refused, naming the key and DPO's own.
4) Rows are whole pairs: ``policy.train_global_batch_size`` and ``train_micro_batch_size``
   count rows (as in every rlnb loop; NeMo-RL's DPO counts pairs) and must be even, so a
   micro-batch never splits a pair.
5) A key that is read only by some sources of pairs (``pairs.dataset``, ``pairs.pool_prompts``,
   ``pairs.pairs_per_prompt``) is refused with the others.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from rlnb.algorithms.policy_loss_config import ClippedPGLossConfig
from rlnb.algorithms.preference import DPOLossConfig
from rlnb.config import Config, cross_field_rule

# GRPO's and PPO's keys a DPO section may hold by mistake, with why DPO has none (choice 1)
NOT_DPO_KEYS = {
    **dict.fromkeys(
        ("adv_estimator", "normalize_rewards", "use_leave_one_out_baseline",
         "advantage_clip_low", "advantage_clip_high", "use_dynamic_sampling",
         "dynamic_sampling_max_gen_batches", "batch_multiplier", "reward_scaling",
         "reward_shaping", "overlong_filtering", "seq_logprob_error_threshold"),
        "DPO trains on pairs and has no group advantages (estimators, dynamic sampling, reward "
        "scaling and shaping, the advantage filters are GRPO's and PPO's)"),
    **dict.fromkeys(
        ("skip_reference_policy_logprobs_calculation",),
        "DPO always keeps its reference policy: the implicit reward is measured against it"),
    **dict.fromkeys(
        ("reuse_generation_logprobs",),
        "DPO computes no π_old log-probs (only the reference's and the policy's own)"),
    **dict.fromkeys(("max_rollout_turns", "async_grpo", "ppo_epochs"),
                    "rlnb's DPO loop is synchronous and single-turn"),
    **dict.fromkeys(
        ("val_batches", "val_global_batch_size", "val_micro_batch_size"),
        "rlnb's DPO validates held-out task accuracy, like the other loops (dpo.max_val_samples),"
        " not a preference loss on validation pairs"),
}


class PairsConfig(Config):
    """``dpo.pairs``: where each step's preference pairs come from."""

    source: Literal["on_policy", "warm_start", "dataset"] = Field(
        "on_policy",
        description="on_policy: every step samples num_generations_per_prompt responses per "
        "prompt from the current policy and pairs a higher-reward one with a lower one (online "
        "DPO); warm_start: the same pairs, sampled once from the policy as training starts (the "
        "warm-started one) on pool_prompts prompts, then cycled through (offline DPO); "
        "dataset: rows with prompt/chosen/rejected (TRL's format) from `dataset` or "
        "DPOTrainer(config, pairs=...).")
    pairs_per_prompt: int = Field(
        2, ge=1, description="k: pairs made from one prompt's responses (largest reward gap "
        "first; 1 = best against worst; 2 trained as well per second as 4 on the embedded "
        "default, benchmarks/bench_dpo.py). Sampled sources only.")
    pool_prompts: int = Field(
        1024, ge=1, description="warm_start: prompts of the task sampled once for the pool.")
    dataset: str | None = Field(
        None, description="dataset: a .jsonl/.json/.parquet file (or a hub data set) of "
        "prompt/chosen/rejected rows.")

    @cross_field_rule
    def _read_by_the_source(self) -> PairsConfig:
        unread = {"dataset": self.source != "dataset",
                  "pool_prompts": self.source != "warm_start",
                  "pairs_per_prompt": self.source == "dataset"}
        for key, ignored in unread.items():
            if ignored and getattr(self, key) != type(self).model_fields[key].default:
                raise ValueError(f"{key}={getattr(self, key)!r} is not read with source="
                                 f"{self.source!r} (remove it, or pick a source that reads it)")
        return self


class DPOConfig(DPOLossConfig):
    """``dpo``: NeMo-RL's DPO keys (the loss's and the loop's), sizes for the CPU default."""

    reference_policy_kl_penalty: float = Field(
        0.05, gt=0, description="β: strength of the implicit KL to the reference (NeMo-RL's "
        "default 0.05; the DPO paper uses 0.1). Must be > 0.")
    num_prompts_per_step: int = Field(
        16, ge=1, strict=True, description="P: prompts per step (on_policy: each gives "
        "pairs_per_prompt pair slots); pairs per step from a pool or a dataset.")
    num_generations_per_prompt: int = Field(
        8, ge=2, strict=True, description="G: responses sampled per prompt to pair up "
        "(on_policy and warm_start; unused by a dataset).")
    max_num_steps: int = Field(150, ge=0, strict=True, description="Training steps.")
    max_num_epochs: int | None = Field(
        None, description="Passes over the pairs; rlnb cycles through a pool or a dataset "
        "(reshuffled each pass) for max_num_steps, so only null is accepted.")
    pairs: PairsConfig = Field(default_factory=PairsConfig)
    val_period: int = Field(25, ge=0, description="Validate every k steps (0: never).")
    val_at_start: bool = Field(True, description="Validate before the first step.")
    val_at_end: bool = Field(True, description="Validate after the last step.")
    val_num_generations_per_prompt: int = Field(1, ge=1, description="k for pass@k.")
    max_val_samples: int = Field(200, ge=1, description="Held-out prompts per validation.")
    seed: int = Field(0, description="Seeds model init, data order, sampling and pairing.")

    section: ClassVar[str] = "dpo"
    # read by the Trainer base (choice 1): DPO never runs them
    max_rollout_turns: ClassVar[int] = 1
    use_dynamic_sampling: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _no_grpo_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            key = next((k for k in data if k in NOT_DPO_KEYS), None)
            if key is not None:
                raise ValueError(f"{key!r} is not a DPO key: {NOT_DPO_KEYS[key]}")
        return data

    @cross_field_rule
    def _consistent(self) -> DPOConfig:
        if self.max_num_epochs is not None:
            raise ValueError(f"max_num_epochs={self.max_num_epochs}: rlnb cycles through the "
                             "pairs for dpo.max_num_steps (set it null)")
        if self.preference_loss_weight == 0 and self.sft_loss_weight == 0:
            raise ValueError("preference_loss_weight and sft_loss_weight are both 0: the loss "
                             "would be 0")
        if self.sft_average_log_probs and self.sft_loss_weight == 0:
            raise ValueError("sft_average_log_probs=true is not read with sft_loss_weight=0 (no "
                             "SFT term): set sft_loss_weight > 0 or leave it false")
        return self

    @property
    def loss_config(self) -> DPOLossConfig:
        """The loss keys alone (``DPOLossFn``'s config)."""
        return DPOLossConfig(**{k: getattr(self, k) for k in DPOLossConfig.model_fields})

    # ---------------------------------------------------------------- rules with other sections
    def check_rules(self, config) -> None:
        """The rules between ``dpo`` and the other sections (``check_loop_rules`` calls it)."""
        if config.env.name != "task":
            raise ValueError(f"env.name={config.env.name!r} is a multi-turn environment; rlnb's "
                             "DPO loop pairs single-turn responses (env.name: task)")
        changed = [k for k, v in config.loss_fn.model_dump().items()
                   if v != ClippedPGLossConfig.model_fields[k].default]
        if changed:  # choice 3
            key = changed[0]
            raise ValueError(
                f"loss_fn.{key}={getattr(config.loss_fn, key)!r}: DPO does not read loss_fn (the "
                "clipped policy loss of GRPO and PPO); DPO's loss keys are in the dpo section "
                "(β is dpo.reference_policy_kl_penalty)")
        p = config.policy
        for key in ("train_global_batch_size", "train_micro_batch_size"):
            if getattr(p, key) % 2:
                raise ValueError(f"policy.{key}={getattr(p, key)} must be even under DPO: it "
                                 "counts rows, and a batch holds whole chosen/rejected pairs")

    def needs_reference(self, config) -> bool:
        """DPO always keeps a frozen reference policy."""
        return True

    def logprob_source(self) -> str:
        """The line a run prints about log-probs."""
        return ("DPO: log π_ref from the frozen reference (the policy as training starts); "
                "no π_old log-probs")
