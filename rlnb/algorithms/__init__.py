"""The algorithm layer: pure tensor functions and thin seed-style wrappers.

Every name here is also importable from ``rlnb``. The numerical contract is NeMo-RL's (see
each module's docstring for the formula, papers and implementation choices).
"""

from rlnb.algorithms.advantages import (
    ADVANTAGE_ESTIMATORS,
    AdvEstimatorConfig,
    GDPOAdvantageEstimator,
    GRPOAdvantageEstimator,
    OnPolicyDistillationAdvantageEstimator,
    ReinforcePlusPlusAdvantageEstimator,
    gdpo_advantages,
    grpo_advantages,
    kl_in_reward,
    make_advantage_estimator,
    on_policy_distillation_advantages,
    reinforce_plus_plus_advantages,
)
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt, group_ids
from rlnb.algorithms.dynamic_sampling import (
    DynamicSamplingResult,
    DynamicSamplingState,
    dynamic_sampling,
    select_nonzero_std,
)
from rlnb.algorithms.filtering import (
    clip_advantages,
    overlong_filter,
    seq_logprob_error_mask,
    seq_mult_prob_error,
)
from rlnb.algorithms.gae import (
    PPO_ADVANTAGE_ESTIMATORS,
    GeneralizedAdvantageEstimator,
    PPOAdvEstimatorConfig,
    RawRewardAdvantageEstimator,
    gae_advantages,
    gae_recursion,
    make_ppo_advantage_estimator,
    raw_reward_advantages,
    shift_values,
    token_level_rewards,
)
from rlnb.algorithms.kl import KL_ESTIMATORS, calculate_kl, k1, k2, k3
from rlnb.algorithms.logprobs import next_token_logprobs
from rlnb.algorithms.masked import masked_mean, masked_var
from rlnb.algorithms.packing import SequencePackingLossWrapper, pack_sequences
from rlnb.algorithms.policy_loss import ClippedPGLossConfig, ClippedPGLossFn, clipped_pg_loss
from rlnb.algorithms.preference import (
    DPOLossConfig,
    DPOLossFn,
    NLLLoss,
    PreferenceLoss,
    dpo_loss,
    nll_loss,
    preference_loss,
)
from rlnb.algorithms.reduction import global_valid_counts, reduce_loss
from rlnb.algorithms.replay_buffer import (
    AddStatus,
    AsyncGRPOConfig,
    ReplayBuffer,
    ReplayEntry,
    SampledGroups,
    concatenate_groups,
    replay_buffer_capacity,
)
from rlnb.algorithms.rewards import (
    RewardScalingConfig,
    RewardShapingConfig,
    dapo_overlong_penalty,
    scale_batch_rewards,
    scale_rewards,
    shape_rewards,
)
from rlnb.algorithms.value_loss import (
    MseValueLossFn,
    ValueLossConfig,
    clipped_value_loss,
    explained_variance,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS", "AdvEstimatorConfig", "GDPOAdvantageEstimator",
    "GRPOAdvantageEstimator", "OnPolicyDistillationAdvantageEstimator",
    "ReinforcePlusPlusAdvantageEstimator", "gdpo_advantages", "grpo_advantages", "kl_in_reward",
    "make_advantage_estimator", "on_policy_distillation_advantages",
    "reinforce_plus_plus_advantages",
    "calculate_baseline_and_std_per_prompt", "group_ids",
    "PPO_ADVANTAGE_ESTIMATORS", "GeneralizedAdvantageEstimator", "PPOAdvEstimatorConfig",
    "RawRewardAdvantageEstimator", "gae_advantages", "gae_recursion",
    "make_ppo_advantage_estimator", "raw_reward_advantages", "shift_values", "token_level_rewards",
    "KL_ESTIMATORS", "calculate_kl", "k1", "k2", "k3",
    "next_token_logprobs", "masked_mean", "masked_var",
    "SequencePackingLossWrapper", "pack_sequences",
    "ClippedPGLossConfig", "ClippedPGLossFn", "clipped_pg_loss",
    "DPOLossConfig", "DPOLossFn", "NLLLoss", "PreferenceLoss", "dpo_loss", "nll_loss",
    "preference_loss",
    "global_valid_counts", "reduce_loss",
    "MseValueLossFn", "ValueLossConfig", "clipped_value_loss", "explained_variance",
    "DynamicSamplingResult", "DynamicSamplingState", "dynamic_sampling", "select_nonzero_std",
    "clip_advantages", "overlong_filter", "seq_logprob_error_mask", "seq_mult_prob_error",
    "AddStatus", "AsyncGRPOConfig", "ReplayBuffer", "ReplayEntry", "SampledGroups",
    "concatenate_groups", "replay_buffer_capacity",
    "RewardScalingConfig", "RewardShapingConfig", "dapo_overlong_penalty", "scale_batch_rewards",
    "scale_rewards", "shape_rewards",
]
