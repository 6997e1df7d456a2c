"""NeMo-RL's call shapes: every estimator takes NeMo-RL's loop call, refuses unknown keywords."""

import pytest
import torch

from rlnb import (
    GDPOAdvantageEstimator,
    GeneralizedAdvantageEstimator,
    GRPOAdvantageEstimator,
    NLLLoss,
    OnPolicyDistillationAdvantageEstimator,
    RawRewardAdvantageEstimator,
    ReinforcePlusPlusAdvantageEstimator,
    make_advantage_estimator,
)

B, S = 4, 5
PROMPTS = torch.tensor([[0], [0], [1], [1]])
REWARDS = torch.tensor([1.0, 0.0, 0.5, 0.0])
MASK = torch.tensor([[0.0, 1, 1, 1, 0], [0, 1, 1, 0, 0], [0, 1, 1, 1, 1], [0, 1, 0, 0, 0]])
PREV = torch.full((B, S), -1.0)
REF = torch.full((B, S), -1.5)
GRPO_FAMILY = ["grpo", "gdpo", "reinforce_plus_plus", "opd"]


def nemo_grpo_loop_call(estimator):
    """What NeMo-RL's GRPO loop passes to whichever estimator is configured (all keywords)."""
    return estimator.compute_advantage(
        prompt_ids=PROMPTS,
        rewards=REWARDS,
        mask=MASK,
        repeated_batch={"total_reward": REWARDS, "reward/a": REWARDS, "reward/b": 1 - REWARDS},
        logprobs_policy=PREV,
        logprobs_reference=REF,
        teacher_logprobs=PREV + 0.25,
        prev_logprobs=PREV,
        generation_logprobs=PREV,
        sample_mask=torch.ones(B),
    )


@pytest.mark.parametrize("name", GRPO_FAMILY)
def test_every_grpo_family_estimator_takes_nemo_rl_loop_call(name):
    est = make_advantage_estimator({"name": name})
    a = nemo_grpo_loop_call(est)
    assert a.shape == (B, S) and torch.isfinite(a).all()


@pytest.mark.parametrize("name", GRPO_FAMILY)
@pytest.mark.parametrize("typo", ["logprob_policy", "reference_logprobs", "values", "kl_penalty"])
def test_every_grpo_family_estimator_refuses_unknown_keywords(name, typo):
    est = make_advantage_estimator({"name": name})
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{typo}'"):
        est.compute_advantage(PROMPTS, REWARDS, MASK, **{typo: PREV})


@pytest.mark.parametrize("cls", [GeneralizedAdvantageEstimator, RawRewardAdvantageEstimator])
@pytest.mark.parametrize("typo", ["logprobs_polcy", "repeated_batch", "teacher_logprobs"])
def test_every_ppo_estimator_refuses_unknown_keywords(cls, typo):
    with pytest.raises(TypeError, match=f"unexpected keyword argument '{typo}'"):
        cls().compute_advantage(PROMPTS, REWARDS, MASK, torch.zeros(B, S), **{typo: PREV})


def test_gae_takes_nemo_rl_ppo_loop_call_and_its_positional_order():
    # A hand-checked case: reward 0, values 0, log π_old = -1, log π_ref = -2, β = 0.5, k3,
    # γ = λ = 1, no whitening: -β·k3(-1) = -0.18394 per token, summed right to left.
    est = GeneralizedAdvantageEstimator(
        {"normalize_advantages": False, "gae_lambda": 1.0, "gae_gamma": 1.0},
        {"use_kl_in_reward": True, "reference_policy_kl_penalty": 0.5,
         "reference_policy_kl_type": "k3"},
    )
    args = (None, torch.tensor([0.0]), torch.ones(1, 3))
    values, ref, logp = torch.zeros(1, 3), torch.full((1, 3), -2.0), torch.full((1, 3), -1.0)
    want = torch.tensor([[-0.55182, -0.36788, -0.18394]])
    by_keyword, _ = est.compute_advantage(*args, values=values, reference_logprobs=ref, logprobs=logp)
    positional, _ = est.compute_advantage(*args, values, ref, logp)  # NeMo-RL: reference first
    old_names, _ = est.compute_advantage(*args, values, logprobs_policy=logp, logprobs_reference=ref)
    for got in (by_keyword, positional, old_names):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
    with pytest.raises(TypeError, match="logprobs and logprobs_policy name the same input"):
        est.compute_advantage(*args, values, ref, logp, logprobs_policy=logp - 1)


def test_raw_reward_takes_nemo_rl_ppo_loop_call():
    est = RawRewardAdvantageEstimator({"name": "raw_reward", "normalize_advantages": False})
    adv, returns = est.compute_advantage(
        prompt_ids=PROMPTS, rewards=REWARDS, mask=MASK, reference_logprobs=REF, logprobs=PREV,
        values=torch.zeros(B, S),
    )
    assert returns is None and torch.equal(adv, REWARDS[:, None].expand(B, S))


def test_gdpo_positional_repeated_batch_as_in_nemo_rl():
    est = GDPOAdvantageEstimator({"name": "gdpo"})
    batch = {"reward/a": REWARDS, "reward/b": 1 - REWARDS}
    a = est.compute_advantage(PROMPTS, REWARDS, MASK, batch)
    assert torch.equal(a, est.compute_advantage(PROMPTS, REWARDS, MASK, repeated_batch=batch))


def test_reinforce_plus_plus_positional_logprobs_fail_loudly():
    # NeMo-RL's Reinforce++ takes logprobs_policy 4th; rlnb's shared order has repeated_batch
    # there, so a positional tensor is refused instead of silently dropping the KL.
    est = ReinforcePlusPlusAdvantageEstimator({"name": "reinforce_plus_plus"}, {"use_kl_in_reward": True})
    with pytest.raises(TypeError, match="repeated_batch must be a mapping"):
        est.compute_advantage(PROMPTS, REWARDS, MASK, PREV, REF)
    kl = est.compute_advantage(PROMPTS, REWARDS, MASK, logprobs_policy=PREV, logprobs_reference=REF)
    no_kl = ReinforcePlusPlusAdvantageEstimator({"name": "reinforce_plus_plus"}).compute_advantage(
        PROMPTS, REWARDS, MASK, logprobs_policy=PREV, logprobs_reference=REF
    )
    torch.testing.assert_close(kl, no_kl)  # a constant KL per token: whitening removes it
    varying = REF.clone()
    varying[:, 2] = -3.0
    kl = est.compute_advantage(PROMPTS, REWARDS, MASK, logprobs_policy=PREV, logprobs_reference=varying)
    assert (kl - no_kl).abs().max() > 1e-3


def test_opd_reads_nemo_rl_prev_logprobs_or_the_alias():
    est = OnPolicyDistillationAdvantageEstimator({"name": "opd"})
    teacher = PREV + 0.25
    for student in ({"prev_logprobs": PREV}, {"logprobs_policy": PREV},
                    {"prev_logprobs": PREV, "logprobs_policy": PREV}):
        a = est.compute_advantage(PROMPTS, REWARDS, MASK, teacher_logprobs=teacher, **student)
        torch.testing.assert_close(a, 0.25 * MASK)
    with pytest.raises(TypeError, match="logprobs_policy and prev_logprobs name the same input"):
        est.compute_advantage(PROMPTS, REWARDS, MASK, teacher_logprobs=teacher,
                              prev_logprobs=PREV, logprobs_policy=PREV - 1)
    with pytest.raises(ValueError, match="OPD needs teacher_logprobs"):
        est.compute_advantage(PROMPTS, REWARDS, MASK, prev_logprobs=PREV)


@pytest.mark.parametrize("cls", [GRPOAdvantageEstimator, GDPOAdvantageEstimator,
                                 OnPolicyDistillationAdvantageEstimator])
def test_kl_in_reward_with_an_estimator_that_has_none_is_refused(cls):
    # NeMo-RL would zero the loss's β and never add the KL anywhere: no KL at all.
    with pytest.raises(ValueError, match="use_kl_in_reward=True, but .* has no KL-in-reward"):
        cls({}, {"use_kl_in_reward": True})
    cls({}, {"use_kl_in_reward": False})


def test_nll_loss_dpo_arguments_mean_what_they_mean_in_nemo_rl():
    # dpo_loss=True: the per-row NLL -Σ_t log π·mask ([B]), averaged per row with
    # dpo_average_log_probs; the default is the token mean over N_tok.
    logits = torch.zeros(2, 4, 2)  # uniform over 2 tokens: every log-prob is log ½
    logits[1, :, 1] = 10.0  # row 1 puts almost all mass on token 1
    data = {
        "input_ids": torch.tensor([[0, 1, 1, 0], [0, 1, 1, 1]]),
        "token_mask": torch.tensor([[0, 1, 1, 1], [0, 1, 1, 0]]),
        "sample_mask": torch.tensor([1.0, 1.0]),
    }
    log_half, log_p1 = torch.log(torch.tensor(0.5)), torch.log_softmax(torch.tensor([0.0, 10.0]), 0)[1]
    mean_loss, m = NLLLoss()(logits, data, 2, 5)
    torch.testing.assert_close(mean_loss, -(3 * log_half + 2 * log_p1) / 5)
    rows, m = NLLLoss()(logits, data, 2, 5, dpo_loss=True)
    torch.testing.assert_close(rows, torch.stack([-3 * log_half, -2 * log_p1]))
    assert m["num_unmasked_tokens"] == 5 and m["num_valid_samples"] == 2
    torch.testing.assert_close(m["loss"], rows.detach())
    averaged, _ = NLLLoss()(logits, data, 2, None, dpo_loss=True, dpo_average_log_probs=True)
    torch.testing.assert_close(averaged, torch.stack([-log_half, -log_p1]))
