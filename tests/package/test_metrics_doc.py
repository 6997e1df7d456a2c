"""Every metric key an emitter returns has a backticked row in docs/metrics.md."""

import dataclasses
import re

import pytest
import torch
from metrics_doc import DOC, is_documented

from rlnb.algorithms import (
    ClippedPGLossFn,
    DPOLossFn,
    DynamicSamplingState,
    MseValueLossFn,
    NLLLoss,
    OnPolicyDistillationAdvantageEstimator,
    PreferenceLoss,
    ReplayBuffer,
    SampledGroups,
    dynamic_sampling,
    explained_variance,
    global_valid_counts,
    seq_logprob_error_mask,
)
from rlnb.algorithms.policy_loss import METRIC_KEYS

B, S, V = 4, 6, 11  # two chosen/rejected pairs for the preference losses


def _batch() -> dict[str, torch.Tensor]:
    """A small stored-layout batch ([B, S], index t = token t) with one masked row."""
    g = torch.Generator().manual_seed(0)

    def logprobs():
        return -2.0 + 0.1 * torch.randn(B, S, generator=g)

    return {
        "input_ids": torch.randint(0, V, (B, S), generator=g),
        "logits": torch.randn(B, S, V, generator=g),
        "advantages": torch.randn(B, S, generator=g),
        "prev_logprobs": logprobs(),
        "generation_logprobs": logprobs(),
        "reference_policy_logprobs": logprobs(),
        "token_mask": torch.tensor([[0, 0, 1, 1, 1, 0]] * B),
        "sample_mask": torch.tensor([1.0, 1.0, 1.0, 0.0]),
        "rewards": torch.tensor([1.0, 0.0, 1.0, 0.0]),
    }


def _counts(data):
    return global_valid_counts(data["token_mask"][:, 1:], data["sample_mask"])


def clipped_pg(cfg):
    data = _batch()
    _, metrics = ClippedPGLossFn(cfg)(data["logits"], data, *_counts(data))
    return metrics


def nll():
    data = _batch()
    return NLLLoss()(data["logits"], data, *_counts(data))[1]


def preference():
    data = _batch()
    scores = torch.tensor([[0.5], [-0.2], [0.1], [0.3]])
    return PreferenceLoss()(scores, data, _counts(data)[0])[1]


def dpo():
    data = _batch()
    return DPOLossFn({"sft_loss_weight": 0.5})(data["logits"], data, _counts(data)[0])[1]


def value_loss():
    data = _batch()
    g = torch.Generator().manual_seed(1)
    critic = {
        "returns": torch.randn(B, S, generator=g),
        "values": torch.randn(B, S, generator=g),
        "token_mask": data["token_mask"],
        "sample_mask": data["sample_mask"],
    }
    _, metrics = MseValueLossFn({"cliprange": 0.2})(
        torch.randn(B, S, generator=g), critic, *_counts(data)
    )
    return metrics


def opd():
    data = _batch()
    estimator = OnPolicyDistillationAdvantageEstimator({"name": "opd"})
    estimator.compute_advantage(
        torch.zeros(B, 1, dtype=torch.long),
        data["rewards"],
        data["token_mask"],
        logprobs_policy=data["prev_logprobs"],
        teacher_logprobs=data["reference_policy_logprobs"],
    )
    return estimator.last_metrics


def dynamic_sampling_metrics():
    """Two generation batches, so both the incomplete and the complete call report."""
    metrics = {}
    state = DynamicSamplingState()
    for _ in range(2):
        rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
        batch = {"total_reward": rewards, "input_ids": torch.arange(8).reshape(4, 2)}
        result = dynamic_sampling(
            batch,
            std=torch.tensor([0.7, 0.7, 0.0, 0.0]),
            baseline=torch.tensor([0.5, 0.5, 1.0, 1.0]),
            state=state,
            train_size=3,
        )
        metrics.update(result.metrics)
        state = result.state
    assert result.is_complete
    return metrics


def seq_error():
    data = _batch()
    _, metrics = seq_logprob_error_mask(
        data["prev_logprobs"],
        data["generation_logprobs"],
        data["token_mask"],
        data["sample_mask"],
        data["rewards"],
        seq_logprob_error_threshold=1.05,
    )
    return metrics


def replay_buffer():
    """The scalar fields of ``SampledGroups`` (the async trainer logs them) and ``buffer_size``."""
    buffer = ReplayBuffer(max_size=4)
    buffer.add({"x": torch.zeros(2)}, weight_version=0, target_weight_version=1)
    sampled = buffer.sample(1, current_weight_version=1, max_age_steps=1)
    assert isinstance(sampled, SampledGroups)
    skip = {"groups", "weight_versions"}
    metrics = {f.name: getattr(sampled, f.name) for f in dataclasses.fields(sampled)}
    metrics = {k: v for k, v in metrics.items() if k not in skip}
    metrics["buffer_size"] = len(buffer)
    return metrics


EMITTERS = {
    "clipped_pg": lambda: clipped_pg({}),
    "clipped_pg_tis_vapo": lambda: clipped_pg(
        {
            "use_importance_sampling_correction": True,
            "truncated_importance_sampling_type": "tis",
            "truncated_importance_sampling_ratio": 2.0,
            "positive_example_nll_weight": 0.1,
        }
    ),
    "clipped_pg_gspo_icepop": lambda: clipped_pg(
        {
            "token_level_loss": False,
            "sequence_level_importance_ratios": True,
            "use_importance_sampling_correction": True,
            "truncated_importance_sampling_type": "icepop",
            "truncated_importance_sampling_ratio": 2.0,
            "truncated_importance_sampling_ratio_min": 0.5,
        }
    ),
    "nll": nll,
    "preference": preference,
    "dpo": dpo,
    "value_loss": value_loss,
    "opd": opd,
    "dynamic_sampling": dynamic_sampling_metrics,
    "seq_logprob_error_mask": seq_error,
    "replay_buffer": replay_buffer,
}


@pytest.mark.parametrize("name", list(EMITTERS))
def test_every_emitted_key_is_documented(name):
    metrics = EMITTERS[name]()
    assert metrics, f"{name} emitted no metrics"
    missing = [k for k in metrics if not is_documented(k)]
    assert not missing, f"{name} emits keys not documented in docs/metrics.md: {missing}"


def test_tis_run_reports_is_oob_ratio():
    assert "is_oob_ratio" not in EMITTERS["clipped_pg"]()
    assert "is_oob_ratio" in EMITTERS["clipped_pg_tis_vapo"]()


def test_explained_variance_is_documented_under_its_key():
    ev = explained_variance({f"critic/{k}": v for k, v in value_loss().items()}, prefix="critic/")
    assert isinstance(ev, float)
    assert is_documented("explained_var") and "`critic/explained_var`" in DOC


def _first_column(section_title: str) -> list[str]:
    """The backticked keys in the first column of the table under ``## <section_title>``."""
    section = DOC.split(f"## {section_title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE)


def test_clipped_pg_table_lists_metric_keys_in_order():
    assert tuple(_first_column("ClippedPGLossFn / clipped_pg_loss")) == METRIC_KEYS


def test_every_trainer_metric_has_a_row():
    from tiny_config import TINY

    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.run.config.master_config import load_config

    small = [*TINY, "grpo.val_period=1", "grpo.val_num_generations_per_prompt=2",
             "sft.enabled=false", "loss_fn.reference_policy_kl_penalty=0.01"]
    keys = {k for record in GRPOTrainer(load_config(None, small)).train(1) for k in record}
    assert "train/reward/correct" in keys  # the validation record and the step's
    # loss metrics are documented once, without the train/ prefix the trainer logs them under
    missing = [k for k in sorted(keys) if k != "step" and not is_documented(k)
               and not (k.startswith("train/") and is_documented(k.removeprefix("train/")))]
    assert not missing, f"metrics without a row in docs/metrics.md: {missing}"
