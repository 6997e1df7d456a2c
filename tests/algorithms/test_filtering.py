"""Overlong filtering, seq-level logprob-error masking, advantage clipping against loop references."""

import math

import pytest
import torch

from rlnb.algorithms.filtering import (
    clip_advantages,
    overlong_filter,
    seq_logprob_error_mask,
    seq_mult_prob_error,
)

# --- slow references, written straight from the formulas


def ref_seq_error(prev, gen, token_mask, sample_mask):
    B, S = prev.shape
    out = []
    for b in range(B):
        num, den = 0.0, 0.0
        for t in range(1, S):  # stored layout: index 0 is a prompt position
            m = float(token_mask[b, t]) * float(sample_mask[b])
            if m:
                num += math.exp(abs(float(gen[b, t]) - float(prev[b, t])))
                den += 1
        out.append(num / den if den > 0 else 0.0)
    return out


def ref_mask_and_metrics(prev, gen, token_mask, sample_mask, rewards, tau):
    err = ref_seq_error(prev, gen, token_mask, sample_mask)
    B = len(err)
    has = [
        sum(float(token_mask[b, t]) * float(sample_mask[b]) for t in range(1, prev.shape[1])) > 0
        for b in range(B)
    ]
    new = []
    for b in range(B):
        keep = tau is None or not has[b] or err[b] <= tau
        new.append(float(sample_mask[b]) if keep else 0.0)
    masked = [b for b in range(B) if float(sample_mask[b]) == 1 and new[b] == 0]

    def stats(rows, suffix):
        vals = [err[b] for b in rows]
        if not vals:
            return {f"{k}_seq_mult_prob_error{suffix}": 0.0 for k in ("max", "mean", "min")}
        return {
            f"max_seq_mult_prob_error{suffix}": max(vals),
            f"mean_seq_mult_prob_error{suffix}": sum(vals) / len(vals),
            f"min_seq_mult_prob_error{suffix}": min(vals),
        }

    m = stats([b for b in range(B) if has[b]], "")
    m["num_masked_seqs_by_logprob_error"] = len(masked)
    n_correct = sum(1 for b in masked if float(rewards[b]) == 1.0)
    m["masked_correct_pct"] = n_correct / len(masked) if masked else 0.0
    m.update(stats([b for b in range(B) if has[b] and new[b] > 0], "_after_mask"))
    return new, m


def random_batch(seed, B=9, S=7):
    g = torch.Generator().manual_seed(seed)
    prev = -torch.rand(B, S, generator=g) * 3
    gen = prev + torch.randn(B, S, generator=g) * 0.5
    token_mask = (torch.rand(B, S, generator=g) > 0.4).float()
    token_mask[0, 1:] = 0  # one row without response tokens
    sample_mask = (torch.rand(B, generator=g) > 0.2).float()
    rewards = torch.randint(0, 2, (B,), generator=g).float()
    return prev, gen, token_mask, sample_mask, rewards


# --- overlong filtering


def test_overlong_filter_zeroes_truncated_rows():
    sm = torch.tensor([1.0, 1.0, 0.0, 1.0])
    tr = torch.tensor([False, True, True, False])
    out = overlong_filter(sm, tr)
    assert out.tolist() == [1.0, 0.0, 0.0, 1.0] and out.dtype == torch.float32
    assert sm.tolist() == [1.0, 1.0, 0.0, 1.0]  # input untouched


def test_overlong_filter_matches_loop():
    g = torch.Generator().manual_seed(0)
    sm = torch.randint(0, 2, (50,), generator=g)
    tr = torch.randint(0, 2, (50,), generator=g).bool()
    want = [float(s) if not t else 0.0 for s, t in zip(sm.tolist(), tr.tolist(), strict=True)]
    assert overlong_filter(sm, tr).tolist() == want


def test_overlong_filter_bad_input():
    with pytest.raises(ValueError, match="batch sizes disagree"):
        overlong_filter(torch.ones(3), torch.zeros(2))
    with pytest.raises(ValueError, match="sample_mask must contain only 0 and 1"):
        overlong_filter(torch.tensor([0.5, 1.0]), torch.zeros(2))
    with pytest.raises(ValueError, match=r"truncated must have shape \[\*\]"):
        overlong_filter(torch.ones(2), torch.zeros(2, 1))


# --- sequence-level logprob error


def test_seq_error_hand_example_and_prompt_position_ignored():
    prev = torch.tensor([[0.0, -1.5, -2.0, 0.0], [-9.0, -1.0, -1.0, -1.0]])
    gen = torch.tensor([[0.0, -1.0, -2.0, 0.0], [0.0, -1.0, -1.0, -1.0]])
    # Row 1 has token_mask 1 at index 0 with a huge error there: the [:, 1:] slice must drop it.
    token_mask = torch.tensor([[0, 1, 1, 0], [1, 0, 0, 0]])
    err = seq_mult_prob_error(prev, gen, token_mask, torch.ones(2))
    torch.testing.assert_close(err, torch.tensor([(math.exp(0.5) + 1.0) / 2, 0.0]))


def test_seq_error_respects_sample_mask():
    prev = torch.zeros(2, 3)
    gen = torch.full((2, 3), -1.0)
    err = seq_mult_prob_error(prev, gen, torch.ones(2, 3), torch.tensor([1, 0]))
    torch.testing.assert_close(err, torch.tensor([math.e, 0.0]))


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("tau", [None, 1.2, 1.5, 0.5])
def test_seq_logprob_error_mask_matches_loop(seed, tau):
    prev, gen, tm, sm, rewards = random_batch(seed)
    new_sm, metrics = seq_logprob_error_mask(
        prev, gen, tm, sm, rewards, seq_logprob_error_threshold=tau
    )
    want_sm, want_metrics = ref_mask_and_metrics(prev, gen, tm, sm, rewards, tau)
    assert new_sm.tolist() == want_sm
    assert set(metrics) == set(want_metrics)
    for k, v in want_metrics.items():
        assert metrics[k] == pytest.approx(v, rel=1e-5), k
    torch.testing.assert_close(
        seq_mult_prob_error(prev, gen, tm, sm),
        torch.tensor(ref_seq_error(prev, gen, tm, sm)),
    )


def test_seq_mask_threshold_metrics_by_hand():
    S = 3
    prev = torch.zeros(4, S)
    gen = torch.zeros(4, S)
    gen[0, 1:] = -2.0  # e = e^2 ≈ 7.39, reward 1 -> masked, correct
    gen[1, 1:] = -1.0  # e = e ≈ 2.72, reward 0 -> masked
    gen[2, 1:] = -0.1  # e ≈ 1.105 -> kept
    tm = torch.ones(4, S)
    tm[3] = 0  # no valid tokens -> kept, not in stats
    sm = torch.ones(4)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0])
    new_sm, m = seq_logprob_error_mask(prev, gen, tm, sm, rewards, seq_logprob_error_threshold=2.0)
    assert new_sm.tolist() == [0.0, 0.0, 1.0, 1.0]
    assert m["num_masked_seqs_by_logprob_error"] == 2
    assert m["masked_correct_pct"] == pytest.approx(0.5)
    assert m["max_seq_mult_prob_error"] == pytest.approx(math.exp(2.0), rel=1e-6)
    assert m["min_seq_mult_prob_error"] == pytest.approx(math.exp(0.1), rel=1e-6)
    assert m["mean_seq_mult_prob_error"] == pytest.approx(
        (math.exp(2.0) + math.e + math.exp(0.1)) / 3, rel=1e-6
    )
    assert m["max_seq_mult_prob_error_after_mask"] == pytest.approx(math.exp(0.1), rel=1e-6)
    assert m["min_seq_mult_prob_error_after_mask"] == pytest.approx(math.exp(0.1), rel=1e-6)
    assert sm.tolist() == [1.0, 1.0, 1.0, 1.0]  # input untouched


def test_seq_mask_everything_masked_gives_zero_after_stats_and_keeps_empty_rows():
    prev = torch.zeros(2, 3)
    gen = torch.full((2, 3), -0.3)
    tm = torch.tensor([[0, 1, 1], [0, 0, 0]])
    # τ < 1 masks every row with tokens (e ≥ 1); the row without tokens is kept anyway.
    new_sm, m = seq_logprob_error_mask(
        prev, gen, tm, torch.ones(2), torch.zeros(2), seq_logprob_error_threshold=0.5
    )
    assert new_sm.tolist() == [0.0, 1.0]
    assert m["num_masked_seqs_by_logprob_error"] == 1 and m["masked_correct_pct"] == 0.0
    for k in ("max", "mean", "min"):
        assert m[f"{k}_seq_mult_prob_error_after_mask"] == 0.0
    # rlnb keeps token-less rows for any τ (NeMo-RL's [e ≤ τ] would drop them when τ < 0).
    new_sm, _ = seq_logprob_error_mask(
        prev, gen, tm, torch.ones(2), torch.zeros(2), seq_logprob_error_threshold=-1.0
    )
    assert new_sm.tolist() == [0.0, 1.0]


def test_seq_mask_no_threshold_masks_nothing():
    prev, gen, tm, sm, rewards = random_batch(3)
    new_sm, m = seq_logprob_error_mask(prev, gen, tm, sm, rewards, seq_logprob_error_threshold=None)
    assert torch.equal(new_sm, sm) and new_sm is not sm
    assert m["num_masked_seqs_by_logprob_error"] == 0
    for k in ("max", "mean", "min"):
        assert m[f"{k}_seq_mult_prob_error_after_mask"] == m[f"{k}_seq_mult_prob_error"]


def test_seq_mask_empty_batch():
    new_sm, m = seq_logprob_error_mask(
        torch.zeros(0, 4),
        torch.zeros(0, 4),
        torch.zeros(0, 4),
        torch.zeros(0),
        torch.zeros(0),
        seq_logprob_error_threshold=1.0,
    )
    assert new_sm.shape == (0,) and m["max_seq_mult_prob_error"] == 0.0
    assert m["num_masked_seqs_by_logprob_error"] == 0


def test_seq_mask_bad_input():
    p = torch.zeros(2, 4)
    with pytest.raises(ValueError, match=r"generation_logprobs must have shape \[2, 4\]"):
        seq_mult_prob_error(p, torch.zeros(2, 3), torch.ones(2, 4), torch.ones(2))
    with pytest.raises(ValueError, match=r"sample_mask must have shape \[2\]"):
        seq_mult_prob_error(p, p, torch.ones(2, 4), torch.ones(3))
    with pytest.raises(ValueError, match="token_mask must contain only 0 and 1"):
        seq_mult_prob_error(p, p, torch.full((2, 4), 0.5), torch.ones(2))
    with pytest.raises(ValueError, match="prev_logprobs must be 2-D"):
        seq_mult_prob_error(torch.zeros(4), p, torch.ones(2, 4), torch.ones(2))
    with pytest.raises(ValueError, match="batch sizes disagree"):
        seq_logprob_error_mask(
            p, p, torch.ones(2, 4), torch.ones(2), torch.ones(3), seq_logprob_error_threshold=1.0
        )


# --- advantage clipping


def test_clip_advantages_bounds():
    a = torch.tensor([-3.0, -1.0, 0.0, 2.0, 5.0])
    assert clip_advantages(a, -2.0, 3.0).tolist() == [-2.0, -1.0, 0.0, 2.0, 3.0]
    assert clip_advantages(a, low=-2.0).tolist() == [-2.0, -1.0, 0.0, 2.0, 5.0]
    assert clip_advantages(a, high=1.0).tolist() == [-3.0, -1.0, 0.0, 1.0, 1.0]
    assert clip_advantages(a, 0.5, 0.5).tolist() == [0.5] * 5
    assert clip_advantages(a) is a
    assert a.tolist() == [-3.0, -1.0, 0.0, 2.0, 5.0]


def test_clip_advantages_on_broadcast_column():
    col = torch.tensor([[-4.0], [4.0]])
    adv = col.expand(2, 3)  # GRPO returns an expand of a [B, 1] column
    out = clip_advantages(adv, -1.0, 1.0)
    assert out.tolist() == [[-1.0] * 3, [1.0] * 3]
    assert col.tolist() == [[-4.0], [4.0]]


def test_clip_advantages_bad_input():
    with pytest.raises(ValueError, match=r"low \(2.0\) must be <= high \(1.0\)"):
        clip_advantages(torch.zeros(2), 2.0, 1.0)
    with pytest.raises(ValueError, match="advantages must be a floating-point"):
        clip_advantages(torch.zeros(2, dtype=torch.long), -1.0, 1.0)
