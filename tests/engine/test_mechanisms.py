"""The mechanisms of the published findings on frozen hand-made batches: per-token gradient
weights of each aggregation, the tokens clip-higher frees and their entropy effect, the rows
dynamic sampling drops, the KL estimators against the exact KL, the groups with signal at each
group size, and a stale batch's importance weights; numbers derived by hand."""

import math

import pytest
import torch

import rlnb
from rlnb.algorithms.entropy_change import entropy_change_per_push
from rlnb.algorithms.kl_exact import kl_estimator_moments
from rlnb.algorithms.token_weights import policy_gradient_weights, reduction_coefficients
from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch
from rlnb.engine.inspection.mechanisms import (
    DAPO,
    DR_GRPO,
    GRPO,
    clip_higher,
    dynamic_sampling_drop,
    group_size_signal,
    kl_estimators,
    length_bias,
)
from rlnb.engine.inspection.staleness import staleness

# 2 groups x 2 responses of lengths 2 and 6 (one prompt token, then up to 6 response tokens):
# group 0 = (short right, long wrong), group 1 = (long right, short wrong)
LENGTHS, REWARDS, GROUPS = [2, 6, 6, 2], [1.0, 0.0, 1.0, 0.0], [0, 0, 1, 1]


def hand_batch(lengths=LENGTHS, rewards=REWARDS, groups=GROUPS, prev=None) -> RolloutBatch:
    B, S = len(lengths), 1 + max(lengths)
    token_mask = torch.zeros(B, S)
    for i, n in enumerate(lengths):
        token_mask[i, 1:1 + n] = 1
    prev = torch.full((B, S), math.log(0.5)) * token_mask if prev is None else prev
    group = torch.tensor(groups)
    return RolloutBatch(
        step=0, rows=[{"prompt": f"p{g}"} for g in groups], prompts=[f"p{g}" for g in groups],
        responses=["x" * n for n in lengths], group=group, prompt_ids=(group + 10)[:, None],
        input_ids=torch.arange(B * S).reshape(B, S) % 5, attention_mask=torch.ones(B, S),
        token_mask=token_mask, sample_mask=torch.ones(B), generation_logprobs=prev.clone(),
        prev_logprobs=prev, reference_logprobs=None, rewards=torch.tensor(rewards),
        reward_components={}, correct=torch.tensor(rewards) > 0,
        truncated=torch.zeros(B, dtype=torch.bool), response_lengths=torch.tensor(lengths))


# ---------------------------------------------------------------------------------- 1 length
def test_reduction_coefficients_by_hand():
    tm = hand_batch().token_mask
    sm = torch.ones(4)
    seq = reduction_coefficients(tm, sm, reduction="sequence_mean")
    # N_seq = 4: a token of a 2-token response weighs 1/8, of a 6-token one 1/24
    assert seq[0, 1].item() == pytest.approx(1 / 8) and seq[1, 1].item() == pytest.approx(1 / 24)
    assert seq.sum().item() == pytest.approx(1.0)  # each response sums to 1/N_seq
    tok = reduction_coefficients(tm, sm, reduction="token_mean")
    assert tok[tm > 0].tolist() == pytest.approx([1 / 16] * 16)  # N_tok = 2 + 6 + 6 + 2
    const = reduction_coefficients(tm, sm, reduction="token_sum", constant=24)
    assert const[tm > 0].tolist() == pytest.approx([1 / 24] * 16)
    assert (seq[tm == 0] == 0).all() and (tok[tm == 0] == 0).all()
    with pytest.raises(ValueError, match="constant"):
        reduction_coefficients(tm, sm, reduction="token_sum")
    with pytest.raises(ValueError, match="sequence_mean"):
        reduction_coefficients(tm, sm, reduction="sequence-mean")


@pytest.mark.parametrize("token_level", [False, True])
def test_weights_are_minus_the_gradient_of_the_real_loss_at_ratio_one(token_level):
    batch = hand_batch()
    A = torch.tensor([1.0, -1.0, 0.5, -2.0])[:, None].expand(4, 7).contiguous()
    logprobs = batch.prev_logprobs.clone().requires_grad_()
    n_seq, n_tok = rlnb.global_valid_counts(batch.token_mask, batch.sample_mask)
    loss, _ = rlnb.clipped_pg_loss(
        logprobs, batch.prev_logprobs, batch.generation_logprobs, A, batch.token_mask,
        batch.sample_mask, global_valid_seqs=n_seq, global_valid_toks=n_tok,
        token_level_loss=token_level, reference_policy_kl_penalty=0.0)
    loss.backward()
    w = policy_gradient_weights(A, batch.token_mask, batch.sample_mask,
                                reduction="token_mean" if token_level else "sequence_mean")
    assert torch.allclose(-logprobs.grad, w, atol=1e-7)


def test_length_bias_per_token_and_per_response_by_hand():
    lb = length_bias(hand_batch(), leave_one_out=False, max_new_tokens=6)
    r = lb.responses
    # no leave-one-out: baseline 0.5, r - b = ±0.5, Bessel std of (1, 0) = 1/√2: A = ±0.7071068
    s = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert r["A (÷ std)"].tolist() == pytest.approx([s, -s, s, -s])
    assert r["A (no std)"].tolist() == pytest.approx([0.5, -0.5, 0.5, -0.5])
    # GRPO: A / (N_seq·|o|): the long wrong response's tokens are pushed down 3x less
    assert r[f"{GRPO}: per token"].tolist() == pytest.approx([s / 8, -s / 24, s / 24, -s / 8])
    assert r[f"{GRPO}: whole response"].tolist() == pytest.approx([s / 4, -s / 4, s / 4, -s / 4])
    # DAPO: A / N_tok for every token, so a long response carries 3x the total push
    assert r[f"{DAPO}: per token"].tolist() == pytest.approx([s / 16, -s / 16, s / 16, -s / 16])
    assert r[f"{DAPO}: whole response"].tolist() == pytest.approx(
        [2 * s / 16, -6 * s / 16, 6 * s / 16, -2 * s / 16])
    # Dr. GRPO: (r - b) / C, C = N_seq · max_new_tokens = 24, no ÷ std
    assert lb.constant == 24
    assert r[f"{DR_GRPO}: per token"].tolist() == pytest.approx([0.5 / 24, -0.5 / 24] * 2)
    wrong = lb.by_length[lb.by_length.outcome == "incorrect"].set_index("tokens")
    assert wrong.loc[2, f"{GRPO}: per token"] == pytest.approx(-s / 8)
    assert wrong.loc[6, f"{GRPO}: per token"] == pytest.approx(-s / 24)
    assert wrong.loc[2, f"{DAPO}: per token"] == pytest.approx(wrong.loc[6, f"{DAPO}: per token"])
    assert wrong.responses.tolist() == [1, 1]


def test_length_bias_gives_no_push_to_groups_without_signal():
    lb = length_bias(hand_batch(rewards=[1.0, 1.0, 0.0, 1.0]))
    # group 0 all right: A = 0; group 1 under leave-one-out: A = r_i - r_other = ∓1
    assert lb.responses[f"{GRPO}: whole response"].tolist()[:2] == [0.0, 0.0]
    assert set(lb.by_length.tokens) == {6, 2} and lb.by_length.responses.sum() == 2


# ---------------------------------------------------------------------------------- 2 clip-higher
def test_entropy_change_of_a_push_in_a_two_token_softmax():
    # two tokens with probabilities (q, 1 - q): pushing token y by a step along ∇ log π_y moves
    # the logit gap toward y by 2(1 - q_y), and dH/d(gap) = q(1 - q)·ln((1 - q)/q)
    logits = torch.log(torch.tensor([[[0.9, 0.1]]]))
    for y, q in ((1, 0.1), (0, 0.9)):
        by_hand = 2 * (1 - q) * q * (1 - q) * math.log((1 - q) / q)
        got = entropy_change_per_push(logits, torch.tensor([[y]])).item()
        assert got == pytest.approx(by_hand, rel=1e-6)
    assert by_hand < 0  # pushing the likely token lowers entropy, the rare one raises it


def test_entropy_change_is_the_dot_product_of_the_two_gradients():
    torch.manual_seed(0)
    z = torch.randn(2, 3, 7, dtype=torch.float64)
    targets = torch.randint(0, 7, (2, 3))
    tau = 0.7
    h = entropy_change_per_push(z, targets, tau)
    for b in range(2):
        for t in range(3):
            zz = z[b, t].clone().requires_grad_()
            logp = torch.log_softmax(zz / tau, -1)
            H = -(logp.exp() * logp).sum()
            gH, = torch.autograd.grad(H, zz)
            gy, = torch.autograd.grad(torch.log_softmax(zz / tau, -1)[targets[b, t]], zz)
            assert h[b, t].item() == pytest.approx(float(gH @ gy), rel=1e-5, abs=1e-7)


def _clip_batch():
    # one group of 2 responses of 2 tokens: A = +1 on row 0, -1 on row 1; ratios set by hand
    batch = hand_batch(lengths=[2, 2], rewards=[1.0, 0.0], groups=[0, 0])
    ratios = torch.tensor([[1.0, 1.1, 1.25], [1.0, 1.3, 0.7]])  # position 0 is the prompt
    adv = torch.tensor([1.0, -1.0])[:, None].expand(2, 3).contiguous()
    advantages = AdvantageBatch(batch, "grpo", batch.rewards, torch.zeros(2), torch.zeros(2),
                                adv, torch.ones(2))
    return advantages, batch.prev_logprobs + ratios.log()


def test_clip_higher_frees_exactly_the_positive_tokens_between_the_two_clips():
    advantages, logprobs = _clip_batch()
    ch = clip_higher(advantages, logprobs)
    # row 0 (A > 0): ρ 1.1 flows at both, ρ 1.25 is freed; row 1 (A < 0): never freed
    assert ch.freed.tolist() == [[False, False, True], [False, False, False]]
    assert ch.summary["count"].tolist() == [1, 1, 0]
    assert ch.tokens[["row", "position"]].values.tolist() == [[0, 1]]
    assert ch.tokens["π_old"].tolist() == pytest.approx([0.5])
    assert ch.tokens["π"].tolist() == pytest.approx([0.625])
    # w = A·ρ/N_tok = 1.25/4
    assert ch.tokens["w"].tolist() == pytest.approx([1.25 / 4])
    # the same tokens by autograd: zero gradient at ε_high = 0.2, non-zero at 0.28
    grads = {}
    for eps in (0.2, 0.28):
        lp = logprobs.clone().requires_grad_()
        b = advantages.rollout
        loss, _ = rlnb.clipped_pg_loss(
            lp, b.prev_logprobs, b.generation_logprobs, advantages.advantages, b.token_mask,
            b.sample_mask, global_valid_seqs=2, global_valid_toks=4, ratio_clip_max=eps,
            reference_policy_kl_penalty=0.0)
        loss.backward()
        grads[eps] = lp.grad
    freed = (grads[0.2] == 0) & (grads[0.28] != 0) & (b.token_mask > 0)
    assert torch.equal(freed, ch.freed)
    assert -grads[0.28][0, 2].item() == pytest.approx(1.25 / 4)


def test_clip_higher_entropy_effect_of_the_freed_token():
    advantages, logprobs = _clip_batch()
    logits = torch.zeros(2, 3, 5)  # uniform over 5 tokens: pushing any token lowers entropy
    ch = clip_higher(advantages, logprobs, logits=logits)
    # uniform: H = ln 5, π_y (log π_y + H) = 0 and Σ π² (log π + H) = 0, so h = 0
    assert ch.tokens["h"].tolist() == pytest.approx([0.0], abs=1e-7)
    assert ch.tokens["H"].tolist() == pytest.approx([math.log(5)])
    assert set(ch.entropy) == {"Σ w·h, every pushed token, ε_high = 0.2",
                               "Σ w·h, every pushed token, ε_high = 0.28"}


# ---------------------------------------------------------------------------------- 3 dynamic
def _three_groups():
    return hand_batch(lengths=[1] * 9, rewards=[1.0, 1, 1, 0, 0, 0, 1, 0, 0],
                      groups=[0, 0, 0, 1, 1, 1, 2, 2, 2])


@pytest.mark.parametrize("loo, kept, batches", [(False, [6, 7, 8], 3.0), (True, [7, 8], 4.5)])
def test_dynamic_sampling_drop_by_hand(loo, kept, batches):
    # all right, all wrong, one right: without leave-one-out only the mixed group stays; with
    # it, the lone 1 is dropped too (its two others are equal), its 0s kept
    batch = _three_groups()
    ds = dynamic_sampling_drop(batch, leave_one_out=loo)
    assert ds.kept.nonzero().squeeze(-1).tolist() == kept
    assert ds.summary["share of rows dropped"] == pytest.approx(1 - len(kept) / 9)
    assert ds.summary["generation batches per train batch"] == pytest.approx(batches)
    assert ds.summary["groups dropped whole"] == 2 and ds.summary["groups with mixed rewards"] == 1
    # the library's own filter keeps the same rows
    baseline, std = rlnb.calculate_baseline_and_std_per_prompt(
        batch.prompt_ids, batch.rewards, leave_one_out=loo)
    picked = rlnb.select_nonzero_std({"total_reward": batch.rewards, "row": torch.arange(9)},
                                     std=std, baseline=baseline)
    assert picked["row"].tolist() == kept


# ---------------------------------------------------------------------------------- 4 KL
def test_kl_moments_by_hand():
    p, q = [0.5, 0.5], [0.25, 0.75]
    m = kl_estimator_moments(torch.tensor(p).log()[None, None].double(),
                             torch.tensor(q).log()[None, None].double())
    ell = [math.log(q[v] / p[v]) for v in range(2)]
    kl = sum(p[v] * -ell[v] for v in range(2))  # 0.5 ln 2 + 0.5 ln(2/3) = 0.143841
    assert kl == pytest.approx(0.143841, abs=1e-6)
    assert m["exact"].item() == pytest.approx(kl)
    assert m["k1_mean"].item() == pytest.approx(kl) and m["k3_mean"].item() == pytest.approx(kl)
    k2 = [x * x / 2 for x in ell]
    k3 = [math.exp(x) - 1 - x for x in ell]
    assert m["k2_mean"].item() == pytest.approx(0.5 * sum(k2))  # biased: 0.161214 > KL
    assert m["k1_var"].item() == pytest.approx(0.5 * sum(x * x for x in ell) - kl**2)
    assert m["k3_var"].item() == pytest.approx(0.5 * sum(x * x for x in k3) - kl**2)
    assert m["k3_var"].item() < m["k1_var"].item() / 100  # 0.0024 against 0.30


def test_kl_estimators_table_on_a_hand_batch():
    # two responses of one token each; the policy is (0.5, 0.5), the reference (0.25, 0.75)
    batch = hand_batch(lengths=[1, 1], rewards=[1.0, 0.0], groups=[0, 0])
    batch.input_ids = torch.tensor([[0, 0], [0, 1]])  # the sampled tokens: 0, then 1
    logits = torch.zeros(2, 2, 2)
    reference = torch.log(torch.tensor([0.25, 0.75])).expand(2, 2, 2).contiguous()
    kl = kl_estimators(logits, reference, batch)
    ell = [math.log(0.5), math.log(1.5)]  # log π_ref - log π of token 0 and of token 1
    k1 = [-x for x in ell]
    assert kl.sampled["k1"].tolist() == pytest.approx(k1)
    assert kl.table.loc["k1", "mean on the sampled tokens"] == pytest.approx(sum(k1) / 2)
    assert kl.table.loc["k1", "share < 0"] == 0.5 and kl.table.loc["k3", "share < 0"] == 0
    exact = 0.5 * math.log(2) + 0.5 * math.log(2 / 3)
    assert kl.table.loc["k3", "exact KL (mean over positions)"] == pytest.approx(exact)
    assert kl.table.loc["k1", "expected bias E[k] − KL"] == pytest.approx(0, abs=1e-12)
    assert kl.table.loc["k2", "expected bias E[k] − KL"] == pytest.approx(
        0.25 * (ell[0] ** 2 + ell[1] ** 2) - exact)
    # the sampled estimates are calculate_kl's (no clamps) on the same tokens
    lp = torch.log(torch.tensor([[0.0, 0.5], [0.0, 0.5]])).nan_to_num(neginf=0.0)
    ref = torch.log(torch.tensor([[1.0, 0.25], [1.0, 0.75]]))
    for name in ("k1", "k2", "k3"):
        got = rlnb.calculate_kl(lp, ref, name, None, None)[batch.token_mask > 0]
        assert kl.sampled[name].tolist() == pytest.approx(got.tolist(), abs=1e-6)


# ---------------------------------------------------------------------------------- 5 group size
def test_group_size_signal_cuts_the_same_rollouts_two_ways_by_hand():
    # 4 prompts x 4 answers: (1 1 1 1), (1 0 0 0), (0 1 1 0), (0 0 0 0); 8 rollouts either way
    rewards = [1.0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0]
    batch = hand_batch(lengths=[1] * 16, rewards=rewards, groups=[g for g in range(4)
                                                                  for _ in range(4)])
    gs = group_size_signal(batch, sizes=(4, 2), leave_one_out=False)
    g4, g2 = gs.table.loc[4], gs.table.loc[2]
    # G = 4: prompts 0 and 1 with all their answers: only prompt 1 is mixed (4 rows pushed)
    assert (g4["prompts"], g4["rollouts"], g4["groups with signal"]) == (2, 8, 1)
    assert g4["rows with A ≠ 0"] == 4
    # G = 2: the first 2 answers of all 4 prompts: (1 1), (1 0), (0 1), (0 0): two mixed pairs
    assert (g2["prompts"], g2["rollouts"], g2["groups with signal"]) == (4, 8, 2)
    assert g2["rows with A ≠ 0"] == 4 and g2["share of groups with signal"] == 0.5
    # each prompt's p over its 4 answers: 1, 1/4, 1/2, 0
    assert gs.prompts["share right"].tolist() == [1.0, 0.25, 0.5, 0.0]
    assert g2["predicted share, mean 1 − p^G − (1 − p)^G"] == pytest.approx(
        (0 + 2 * 0.25 * 0.75 + 2 * 0.5 * 0.5 + 0) / 4)
    # a pair (1, 0) without leave-one-out: mean 1/2, sample std 1/√2, so A = ±1/√2
    r = 0.5 ** 0.5
    assert gs.advantages[2].tolist()[2:6] == pytest.approx([r, -r, -r, r], rel=1e-5)
    with pytest.raises(ValueError, match="group size 8 at 8 rollouts"):
        group_size_signal(batch, sizes=(8, 2), rollouts=8)


# ---------------------------------------------------------------------------------- 6 staleness
def _stale_batch():
    # one group: rows 0, 2 right (A > 0), rows 1, 3 wrong (A < 0); 1 token each; π_v = 1/4
    prev = torch.full((4, 2), math.log(0.25)) * torch.tensor([0.0, 1.0])
    batch = hand_batch(lengths=[1, 1, 1, 1], rewards=[1.0, 0.0, 1.0, 0.0], groups=[0] * 4,
                       prev=prev)
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])[:, None].expand(4, 2).contiguous()
    advantages = AdvantageBatch(batch, "grpo", batch.rewards, torch.zeros(4), torch.zeros(4),
                                adv, torch.ones(4))
    # the policy now: π_θ = 3/8, 1/16, 3/4, 1/4, so w = 1.5, 0.25, 3 (truncated to 2), 1
    now = batch.generation_logprobs + torch.tensor([1.5, 0.25, 3.0, 1.0]).log()[:, None]
    return advantages, now * batch.token_mask


def test_staleness_weights_and_pushes_by_hand():
    advantages, now = _stale_batch()
    st = staleness(advantages, now, truncation=2.0)
    assert st.weights[:, 1].tolist() == pytest.approx([1.5, 0.25, 3.0, 1.0])
    assert st.truncated[:, 1].tolist() == pytest.approx([1.5, 0.25, 2.0, 1.0])
    # token mean over N_tok = 4: the push is A/4 without the correction, A·min(w, 2)/4 with it
    assert st.push["uncorrected"][:, 1].tolist() == pytest.approx([0.25, -0.25, 0.25, -0.25])
    assert st.push["corrected"][:, 1].tolist() == pytest.approx([0.375, -0.0625, 0.5, -0.25])
    pos, neg = st.summary.loc["A > 0"], st.summary.loc["A < 0"]
    assert (pos["count"], neg["count"]) == (2, 2)
    assert pos["mean w"] == pytest.approx(2.25) and neg["mean w"] == pytest.approx(0.625)
    assert pos["share truncated"] == 0.5 and neg["share w > 1"] == 0.0
    assert pos["push kept"] == pytest.approx((1.5 + 2) / 2)
    assert neg["push kept"] == pytest.approx((0.25 + 1) / 2)
    assert st.responses["geometric-mean w"].tolist() == pytest.approx([1.5, 0.25, 3.0, 1.0])


def test_staleness_pushes_are_minus_the_gradient_of_the_real_loss():
    advantages, now = _stale_batch()
    st = staleness(advantages, now, truncation=2.0)
    b = advantages.rollout
    for name, on in (("uncorrected", False), ("corrected", True)):
        lp = now.clone().requires_grad_()
        loss, _ = rlnb.clipped_pg_loss(
            lp, now, b.generation_logprobs, advantages.advantages, b.token_mask, b.sample_mask,
            global_valid_seqs=4, global_valid_toks=4, reference_policy_kl_penalty=0.0,
            use_importance_sampling_correction=on,
            truncated_importance_sampling_type="tis" if on else None,
            truncated_importance_sampling_ratio=2.0 if on else None)
        loss.backward()
        assert torch.allclose(-lp.grad, st.push[name], atol=1e-7), name
