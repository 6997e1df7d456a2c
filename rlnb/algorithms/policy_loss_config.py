"""The options of the clipped policy-gradient loss, as one validated value.

    config = ClippedPGLossConfig(ratio_clip_max=0.28)       (or loss_config(config, **options))

``clipped_pg_loss`` and ``ClippedPGLossFn`` read every option from this one object, so the
option list is written once, here, each with its description. See
docs/algorithms.md#clipped-policy-gradient-loss for what each option does.

Implementation choices:
1) Strict keys and load-time checks (the ``Config`` base): an unknown key, a bad value or an
   impossible combination fails when the config is built, with the key's dotted path, not at
   the first loss call. Deliberate differences from NeMo-RL, which accepts these and then
   either asserts at call time or silently trains differently: ``ratio_clip_min >= 1``
   (disables the lower clip), ``truncated_importance_sampling_ratio`` without a type.
2) ``loss_config`` turns keyword options into a config for the pure function; an option that
   is not a field is a ``TypeError`` naming it, like a misspelt keyword argument.
3) ``loss_kl_penalty`` is the β the loss uses: 0 under ``use_kl_in_reward``, where the KL goes
   into the advantages instead (Reinforce++, GAE).
"""

from __future__ import annotations

from collections.abc import Mapping
from difflib import get_close_matches
from typing import Any

from pydantic import Field

from rlnb.algorithms.checks import choose
from rlnb.algorithms.importance_sampling import TRUNCATED_IS_TYPES
from rlnb.algorithms.kl import KL_ESTIMATORS
from rlnb.config import Config, cross_field_rule, parse_config


class ClippedPGLossConfig(Config):
    """``loss_fn`` for GRPO/PPO: clipping, KL penalty, importance-sampling correction."""

    disable_ppo_ratio: bool = Field(False, description="REINFORCE/RLOO: ratio replaced by log π.")
    token_level_loss: bool = Field(
        True, description="Token-level (DAPO) vs sequence-level (GRPO paper) normalisation."
    )
    sequence_level_importance_ratios: bool = Field(
        False, description="GSPO sequence ratio; needs token_level_loss=False."
    )
    ratio_clip_min: float = Field(0.2, ge=0, description="ε_low < 1: clip ρ below at 1-ε_low.")
    ratio_clip_max: float = Field(
        0.2, ge=0, description="ε_high: clip ρ above at 1+ε_high (DAPO clip-higher: 0.28)."
    )
    ratio_clip_c: float | None = Field(None, description="Dual-clip C > 1 (paper: 3).")
    reference_policy_kl_penalty: float = Field(0.01, ge=0, description="β of the KL penalty.")
    reference_policy_kl_type: str = Field("k3", description="k1 | k2 | k3 (Schulman).")
    kl_input_clamp_value: float | None = Field(20.0, description="Clamp of the log-ratio.")
    kl_output_clamp_value: float | None = Field(10.0, description="Clamp of w·k.")
    use_kl_in_reward: bool = Field(
        False, description="Put β·KL into the reward (Reinforce++/GAE); the loss uses β=0."
    )
    use_importance_sampling_correction: bool = Field(
        False, description="Weight by π_train/π_gen (trainer vs inference engine mismatch)."
    )
    truncated_importance_sampling_type: str | None = Field(
        None, description="tis | icepop | seq-mask-tis (needs the IS correction)."
    )
    truncated_importance_sampling_ratio: float | None = Field(
        None, description="Upper bound of the IS weight (TIS: 2.0 is common)."
    )
    truncated_importance_sampling_ratio_min: float | None = Field(
        None, description="Lower bound (tis: default 0; required by icepop and seq-mask-tis)."
    )
    use_on_policy_kl_approximation: bool = Field(
        False, description="KL importance weight exp(log π - log π_gen)."
    )
    force_on_policy_ratio: bool = Field(False, description="ρ ≡ 1: ignore prev_logprobs.")
    use_cispo: bool = Field(False, description="CISPO: -A·sg(clip(ρ))·log π.")
    positive_example_nll_weight: float = Field(
        0.0, ge=0, description="VAPO μ: NLL on positive-reward samples (needs rewards)."
    )

    @cross_field_rule
    def _compatible(self) -> ClippedPGLossConfig:
        choose(KL_ESTIMATORS, self.reference_policy_kl_type, "reference_policy_kl_type")
        problems = []
        if self.ratio_clip_min > 1:
            problems.append(f"ratio_clip_min must be <= 1 (the lower clip 1 - ratio_clip_min "
                            f"would be below 0; 1 means no lower clip), got {self.ratio_clip_min}")
        if self.sequence_level_importance_ratios and self.token_level_loss:
            problems.append("sequence_level_importance_ratios needs token_level_loss=False")
        if self.use_cispo:
            for key in ("disable_ppo_ratio", "force_on_policy_ratio",
                        "sequence_level_importance_ratios"):
                if getattr(self, key):
                    problems.append(f"use_cispo is incompatible with {key}")
            if self.ratio_clip_c is not None:
                problems.append("use_cispo is incompatible with ratio_clip_c")
            if not self.token_level_loss:
                problems.append("use_cispo needs token_level_loss=True")
        if self.ratio_clip_c is not None and not self.ratio_clip_c > 1:
            problems.append(f"ratio_clip_c must be > 1, got {self.ratio_clip_c}")
        kind, hi = self.truncated_importance_sampling_type, self.truncated_importance_sampling_ratio
        lo = self.truncated_importance_sampling_ratio_min
        if kind is not None:
            choose(dict.fromkeys(TRUNCATED_IS_TYPES), kind, "truncated_importance_sampling_type")
            if not self.use_importance_sampling_correction:
                problems.append(f"truncated_importance_sampling_type={kind!r} needs "
                                "use_importance_sampling_correction=True")
            if hi is None or hi <= 0:
                problems.append(f"truncated_importance_sampling_type={kind!r} needs "
                                f"truncated_importance_sampling_ratio > 0, got {hi}")
            if kind in ("icepop", "seq-mask-tis") and lo is None:
                problems.append(f"{kind} needs truncated_importance_sampling_ratio_min")
            if kind == "seq-mask-tis" and self.sequence_level_importance_ratios:
                problems.append(
                    "seq-mask-tis is incompatible with sequence_level_importance_ratios"
                )
        elif hi is not None:
            problems.append("truncated_importance_sampling_ratio is set but "
                            "truncated_importance_sampling_type is None (tis|icepop|seq-mask-tis)")
        if lo is not None and hi is not None and lo > hi:
            problems.append(f"truncated_importance_sampling_ratio_min ({lo}) > ratio ({hi})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def loss_kl_penalty(self) -> float:
        """β used inside the loss: 0 when the KL goes into the reward instead."""
        return 0.0 if self.use_kl_in_reward else self.reference_policy_kl_penalty


def loss_config(
    config: ClippedPGLossConfig | Mapping[str, Any] | None = None, **options: Any
) -> ClippedPGLossConfig:
    """``config`` (a config, a dict or None for the defaults) with keyword ``options`` on top.

    An option that is not a ``ClippedPGLossConfig`` field is a ``TypeError`` naming it; bad
    values and impossible combinations are a ``ValueError`` (see the config's validator).
    """
    fields = ClippedPGLossConfig.model_fields
    unknown = [name for name in options if name not in fields]
    if unknown:
        close = get_close_matches(unknown[0], list(fields), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise TypeError(f"clipped_pg_loss() got an unexpected keyword argument {unknown[0]!r}"
                        f"{hint} (the options are the fields of ClippedPGLossConfig)")
    base = parse_config(ClippedPGLossConfig, config, "loss_fn")
    if not options:
        return base
    return parse_config(ClippedPGLossConfig, {**base.model_dump(), **options}, "loss_fn")
