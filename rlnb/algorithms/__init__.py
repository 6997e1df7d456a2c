"""The algorithm layer: pure tensor functions and thin NeMo-RL-style wrappers.

Every name here is also importable from ``rlnb``. The numerical contract is NeMo-RL's: each
module's docstring gives the formula, papers and implementation choices, and
docs/algorithms.md explains every concept, with the NeMo-RL quirks rlnb keeps or fixes.

The modules:

- ``advantages``: GRPO's advantage and the estimators' call contract; ``advantage_config``: what
  the estimators are configured by (and the KL in the reward); ``estimators``: their registry;
- ``baselines``: per-prompt baseline and std; ``reinforce_plus_plus``, ``gdpo``, ``opd``, ``gae``:
  the other estimators (PPO's GAE and raw reward);
- ``policy_loss``, ``policy_loss_config``: the clipped policy-gradient loss and its options;
  ``surrogate``: its pieces (ratio, clip, dual clip, CISPO); ``reduction``: token- or
  sequence-level; ``token_weights``: each token's push; ``entropy_change``: its effect on entropy;
- ``kl``: k1, k2, k3; ``kl_exact``: the exact KL per position; ``importance_sampling``: trainer
  against inference-engine weights; ``logprobs``: logits to log-probs; ``masked``: masked means;
- ``value_loss``: the critic's loss; ``preference``, ``preference_pairs``: DPO and its pairs;
- ``rewards``: reward scaling and overlong shaping; ``filtering``: the loop's filters;
  ``dynamic_sampling``: DAPO's; ``replay_buffer``: async GRPO's;
- ``checks``: input checks; ``packing``: padding-free sequences; ``fused``: a loss and its
  gradient in one compiled pass.
"""

from rlnb.algorithms.advantage_config import AdvEstimatorConfig
from rlnb.algorithms.advantages import GRPOAdvantageEstimator, grpo_advantages
from rlnb.algorithms.baselines import (
    calculate_baseline_and_std_per_prompt,
    comparison_sums,
    group_ids,
)
from rlnb.algorithms.dynamic_sampling import (
    DynamicSamplingResult,
    DynamicSamplingState,
    dynamic_sampling,
    select_nonzero_std,
)
from rlnb.algorithms.entropy_change import entropy_change_per_push
from rlnb.algorithms.estimators import (
    ADVANTAGE_ESTIMATORS,
    estimator_names,
    make_advantage_estimator,
    make_estimator,
    make_ppo_advantage_estimator,
    register_estimator,
)
from rlnb.algorithms.filtering import (
    clip_advantages,
    overlong_filter,
    seq_logprob_error_mask,
    seq_mult_prob_error,
)
from rlnb.algorithms.gae import (
    GeneralizedAdvantageEstimator,
    PPOAdvEstimatorConfig,
    RawRewardAdvantageEstimator,
    gae_advantages,
    gae_recursion,
    raw_reward_advantages,
    shift_values,
    token_level_rewards,
)
from rlnb.algorithms.gdpo import GDPOAdvantageEstimator, gdpo_advantages, gdpo_reward_components
from rlnb.algorithms.importance_sampling import (
    train_inference_diagnostics,
    truncated_importance_weights,
)
from rlnb.algorithms.kl import (
    KL_ESTIMATORS,
    calculate_kl,
    k1,
    k2,
    k3,
    kl_in_reward,
    kl_penalty_term,
)
from rlnb.algorithms.kl_exact import kl_estimator_moments
from rlnb.algorithms.logprobs import next_token_logprobs, token_entropy, token_logprobs
from rlnb.algorithms.masked import masked_mean, masked_var
from rlnb.algorithms.opd import (
    OnPolicyDistillationAdvantageEstimator,
    on_policy_distillation_advantages,
)
from rlnb.algorithms.packing import SequencePackingLossWrapper, pack_sequences
from rlnb.algorithms.policy_loss import ClippedPGLossFn, clipped_pg_loss
from rlnb.algorithms.policy_loss_config import ClippedPGLossConfig, loss_config
from rlnb.algorithms.preference import (
    DPOLossConfig,
    DPOLossFn,
    NLLLoss,
    PreferenceLoss,
    dpo_loss,
    nll_loss,
    per_row_nll,
    preference_loss,
)
from rlnb.algorithms.preference_pairs import preference_pairs
from rlnb.algorithms.reduction import global_valid_counts, reduce_loss, sum_partial_metrics
from rlnb.algorithms.reinforce_plus_plus import (
    ReinforcePlusPlusAdvantageEstimator,
    reinforce_plus_plus_advantages,
)
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
from rlnb.algorithms.surrogate import clipped_surrogate, positive_example_nll, probability_ratio
from rlnb.algorithms.token_weights import (
    REDUCTIONS,
    policy_gradient_weights,
    reduction_coefficients,
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
    "make_advantage_estimator", "make_estimator", "estimator_names", "register_estimator",
    "on_policy_distillation_advantages",
    "reinforce_plus_plus_advantages", "gdpo_reward_components",
    "calculate_baseline_and_std_per_prompt", "comparison_sums", "group_ids",
    "GeneralizedAdvantageEstimator", "PPOAdvEstimatorConfig",
    "RawRewardAdvantageEstimator", "gae_advantages", "gae_recursion",
    "make_ppo_advantage_estimator", "raw_reward_advantages", "shift_values", "token_level_rewards",
    "KL_ESTIMATORS", "calculate_kl", "k1", "k2", "k3", "kl_penalty_term",
    "train_inference_diagnostics", "truncated_importance_weights",
    "next_token_logprobs", "token_logprobs", "token_entropy", "masked_mean", "masked_var",
    "SequencePackingLossWrapper", "pack_sequences",
    "ClippedPGLossConfig", "ClippedPGLossFn", "clipped_pg_loss", "loss_config",
    "probability_ratio", "clipped_surrogate", "positive_example_nll",
    "DPOLossConfig", "DPOLossFn", "NLLLoss", "PreferenceLoss", "dpo_loss", "nll_loss",
    "per_row_nll", "preference_loss", "preference_pairs",
    "global_valid_counts", "reduce_loss", "sum_partial_metrics",
    "MseValueLossFn", "ValueLossConfig", "clipped_value_loss", "explained_variance",
    "DynamicSamplingResult", "DynamicSamplingState", "dynamic_sampling", "select_nonzero_std",
    "clip_advantages", "overlong_filter", "seq_logprob_error_mask", "seq_mult_prob_error",
    "AddStatus", "AsyncGRPOConfig", "ReplayBuffer", "ReplayEntry", "SampledGroups",
    "concatenate_groups", "replay_buffer_capacity",
    "RewardScalingConfig", "RewardShapingConfig", "dapo_overlong_penalty", "scale_batch_rewards",
    "scale_rewards", "shape_rewards",
    "REDUCTIONS", "reduction_coefficients", "policy_gradient_weights", "entropy_change_per_push",
    "kl_estimator_moments",
]
