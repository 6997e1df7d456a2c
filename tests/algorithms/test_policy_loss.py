"""Clipped policy-gradient loss: loop reference, hand numbers, gradients, micro-batches, bad input."""

import itertools
import math

import pytest
import torch

import rlnb
from rlnb import ClippedPGLossConfig, ClippedPGLossFn, clipped_pg_loss, next_token_logprobs
from rlnb.algorithms.kl import kl_penalty_term
from rlnb.algorithms.policy_loss import METRIC_KEYS
from rlnb.algorithms.surrogate import clipped_surrogate, probability_ratio


def reference(c, p, q, ref, A, tm, sm, n_seq, n_tok, cfg):
    """Per-token Python-float loop of NeMo-RL's formulas (loss value and the ratio range)."""
    B, T = len(c), len(c[0])
    beta = 0.0 if cfg.get("use_kl_in_reward") else cfg.get("reference_policy_kl_penalty", 0.01)
    lo_c, hi_c = cfg.get("ratio_clip_min", 0.2), cfg.get("ratio_clip_max", 0.2)
    C = cfg.get("ratio_clip_c")
    token_level = cfg.get("token_level_loss", True)
    seq_ratio = cfg.get("sequence_level_importance_ratios", False)
    kind, hi = cfg.get("truncated_importance_sampling_type"), cfg.get("truncated_importance_sampling_ratio")
    lo = cfg.get("truncated_importance_sampling_ratio_min")
    use_is = cfg.get("use_importance_sampling_correction", False)
    if cfg.get("force_on_policy_ratio"):
        p = c

    def k3(ell):
        ell = max(-20.0, min(20.0, ell))
        return math.exp(ell) - 1 - ell

    actor_rows, kl_rows, actor_tok, kl_tok = [], [], 0.0, 0.0
    ratios = []
    for b in range(B):
        nt = sum(tm[b])
        s_b = sum((c[b][t] - p[b][t]) * tm[b][t] for t in range(T)) / (nt + 1e-8)
        w_seq = math.exp(sum((p[b][t] - q[b][t]) * tm[b][t] * sm[b] for t in range(T)))
        gmean = math.exp(sum((p[b][t] - q[b][t]) * tm[b][t] for t in range(T)) / (nt + 1e-8))
        row_a = row_k = 0.0
        for t in range(T):
            if cfg.get("force_on_policy_ratio"):
                rho, rho_c = 1.0, 1.0
            elif cfg.get("disable_ppo_ratio"):
                rho = rho_c = c[b][t]
            else:
                rho = math.exp(s_b) if seq_ratio else math.exp(c[b][t] - p[b][t])
                rho_c = min(max(rho, 1 - lo_c), 1 + hi_c)
            a = A[b][t]
            if cfg.get("use_cispo"):
                ell = -a * rho_c * c[b][t]
            else:
                ell = max(-a * rho, -a * rho_c)
            if C is not None and a < 0:
                ell = min(ell, -a * C)
            w = w_seq if seq_ratio else math.exp(p[b][t] - q[b][t])
            if kind == "tis":
                w = min(max(w, lo or 0.0), hi)
            elif kind == "icepop":
                w = w if lo <= w <= hi else 0.0
            elif kind == "seq-mask-tis":
                w = w if lo <= gmean <= hi else 0.0
            if use_is:
                ell *= w
            kl = beta * max(-10.0, min(10.0, k3(ref[b][t] - c[b][t]))) if beta else 0.0
            m = tm[b][t] * sm[b]
            actor_tok += ell * m
            kl_tok += kl * m
            row_a += ell * tm[b][t]
            row_k += kl * tm[b][t]
            if m:
                ratios.append(rho)
        actor_rows.append(sm[b] * row_a / (nt + 1e-8))
        kl_rows.append(sm[b] * row_k / (nt + 1e-8))
    if token_level:
        loss = (actor_tok + kl_tok) / (n_tok + 1e-8)
    else:
        loss = (sum(actor_rows) + sum(kl_rows)) / (n_seq + 1e-8)
    return loss, ratios


def random_batch(B=5, T=7, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    c = torch.randn(B, T, generator=g, dtype=dtype) * 0.5 - 1.5
    p = c + 0.3 * torch.randn(B, T, generator=g, dtype=dtype)
    q = p + 0.1 * torch.randn(B, T, generator=g, dtype=dtype)
    ref = p + 0.4 * torch.randn(B, T, generator=g, dtype=dtype)
    # log-probs must be <= 0: shift all four together (ratios and KL see only differences)
    shift = torch.stack([x.max() for x in (c, p, q, ref)]).max().clamp(min=0) + 0.01
    c, p, q, ref = c - shift, p - shift, q - shift, ref - shift
    A = torch.randn(B, 1, generator=g, dtype=dtype).expand(B, T).contiguous()
    tm = (torch.rand(B, T, generator=g) > 0.25).to(dtype)
    tm[-1] = 0  # a row with no valid token
    sm = torch.ones(B, dtype=dtype)
    sm[1] = 0
    return c, p, q, ref, A, tm, sm


VARIANTS = [
    {},
    {"ratio_clip_max": 0.28, "ratio_clip_c": 3.0},
    {"token_level_loss": False},
    {"token_level_loss": False, "sequence_level_importance_ratios": True},
    {"disable_ppo_ratio": True, "reference_policy_kl_penalty": 0.0},
    {"use_cispo": True},
    {"force_on_policy_ratio": True},
    {"use_kl_in_reward": True},
    {"use_importance_sampling_correction": True},
    {"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "tis",
     "truncated_importance_sampling_ratio": 1.05},
    {"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "icepop",
     "truncated_importance_sampling_ratio": 1.1, "truncated_importance_sampling_ratio_min": 0.9},
    {"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "seq-mask-tis",
     "truncated_importance_sampling_ratio": 1.1, "truncated_importance_sampling_ratio_min": 0.95},
]


def run(cfg, c, p, q, ref, A, tm, sm, **extra):
    n_tok = (tm * sm[:, None]).sum()
    return clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=sm.sum(), global_valid_toks=n_tok,
                           reference_logprobs=ref, config=ClippedPGLossConfig(**cfg), **extra)


@pytest.mark.parametrize("cfg", VARIANTS, ids=lambda c: ",".join(c) or "default")
def test_matches_loop_reference(cfg):
    c, p, q, ref, A, tm, sm = random_batch(dtype=torch.float64)
    loss, metrics = run(cfg, c, p, q, ref, A, tm, sm)
    n_tok = float((tm * sm[:, None]).sum())
    want, ratios = reference(*(x.tolist() for x in (c, p, q, ref, A, tm, sm)), float(sm.sum()), n_tok, cfg)
    assert loss.item() == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert metrics["probs_ratio_min"] == pytest.approx(min(ratios))
    assert metrics["probs_ratio_max"] == pytest.approx(max(ratios))
    assert list(metrics) == [k for k in METRIC_KEYS if k != "is_oob_ratio" or "truncated_importance_sampling_type" in cfg]


# CISPO and force_on_policy_ratio stop gradients on purpose, which finite differences cannot see.
@pytest.mark.parametrize("cfg", [VARIANTS[1], VARIANTS[3], VARIANTS[4], VARIANTS[9]], ids=str)
def test_gradient_matches_finite_differences(cfg):
    c, p, q, ref, A, tm, sm = random_batch(B=3, T=4, seed=3, dtype=torch.float64)
    cfg = {**cfg, "reference_policy_kl_penalty": 0.0}  # KL's score term is invisible to FD
    f = lambda x: run(cfg, x, p, q, ref, A, tm, sm)[0]  # noqa: E731
    assert torch.autograd.gradcheck(f, (c.clone().requires_grad_(),))


def test_kl_gradient_carries_the_score_function_term():
    c, p, q, ref, A, tm, sm = random_batch(dtype=torch.float64)
    A = torch.zeros_like(A)  # isolate the KL term
    beta = 0.1
    x = c.clone().requires_grad_()
    loss, _ = run({"reference_policy_kl_penalty": beta}, x, p, q, ref, A, tm, sm)
    loss.backward()
    ell = ref - c
    k3 = torch.exp(ell) - 1 - ell
    M = tm * sm[:, None]
    want = beta * (k3 + 1 - torch.exp(ell)) * M / (M.sum() + 1e-8)  # k·∇logπ + ∂k/∂logπ
    torch.testing.assert_close(x.grad, want)


@pytest.mark.parametrize("cfg", [VARIANTS[0], VARIANTS[2], VARIANTS[3], VARIANTS[11]], ids=str)
def test_micro_batch_sums_equal_full_batch(cfg):
    c, p, q, ref, A, tm, sm = random_batch(B=6, seed=5)
    n_seq, n_tok = sm.sum(), (tm * sm[:, None]).sum()
    x = c.clone().requires_grad_()
    full, _ = run(cfg, x, p, q, ref, A, tm, sm)
    full.backward()
    xs = c.clone().requires_grad_()
    total = 0
    for rows in (slice(0, 2), slice(2, 3), slice(3, 6)):
        part, _ = clipped_pg_loss(xs[rows], p[rows], q[rows], A[rows], tm[rows], sm[rows],
                                  global_valid_seqs=n_seq, global_valid_toks=n_tok,
                                  reference_logprobs=ref[rows], **cfg)
        total = total + part
    total.backward()
    torch.testing.assert_close(total, full)
    torch.testing.assert_close(xs.grad, x.grad)


def test_fused_compiled_path_matches_eager():
    c, p, q, ref, A, tm, sm = random_batch(B=8, T=9, seed=7)
    cfg = {"ratio_clip_c": 3.0, "use_importance_sampling_correction": True,
           "truncated_importance_sampling_type": "tis", "truncated_importance_sampling_ratio": 1.2}
    outs = []
    for compile in (False, True):
        x = c.clone().requires_grad_()
        loss, metrics = run(cfg, x, p, q, ref, A, tm, sm, compile=compile)
        (2 * loss).backward()
        outs.append((loss.detach(), x.grad, metrics))
    torch.testing.assert_close(outs[1][0], outs[0][0])
    torch.testing.assert_close(outs[1][1], outs[0][1])
    for k, v in outs[0][2].items():
        assert outs[1][2][k] == pytest.approx(v, rel=1e-5, abs=1e-6), k
    # the input checks ride in the compiled pass too
    A[1, 2] = float("nan")
    with pytest.raises(ValueError, match="advantages must be finite"):
        run(cfg, c.clone().requires_grad_(), p, q, ref, A, tm, sm, compile=True)


def test_loss_makes_one_device_sync(monkeypatch):
    # Metrics and input checks come back in a single .tolist(): count every host read.
    c, p, q, ref, A, tm, sm = random_batch()
    syncs = []
    for name in ("tolist", "item", "__bool__", "__float__", "__int__"):
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _original=original, _name=name):
            syncs.append(_name)
            return _original(self, *args)

        monkeypatch.setattr(torch.Tensor, name, counted)
    cfg = ClippedPGLossConfig(use_importance_sampling_correction=True,
                              truncated_importance_sampling_type="tis",
                              truncated_importance_sampling_ratio=2.0)
    clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=sm.sum(), global_valid_toks=torch.tensor(10.0),
                    reference_logprobs=ref, config=cfg)
    assert syncs == ["tolist"]


def test_all_zero_mask_gives_zero_loss_and_inf_sentinels():
    # A micro-batch without valid tokens (the global batch has some): loss 0, sentinels ±inf.
    c, p, q, ref, A, tm, sm = random_batch()
    loss, m = clipped_pg_loss(c, p, q, A, torch.zeros_like(tm), sm, global_valid_seqs=4,
                              global_valid_toks=10, reference_logprobs=ref)
    assert loss.item() == 0.0
    assert m["probs_ratio_min"] == math.inf and m["probs_ratio_max"] == -math.inf
    assert m["probs_ratio"] == 0.0 and m["approx_entropy"] == 0.0 and m["kl_penalty"] == 0


def test_kl_penalty_metric_is_unscaled_and_integer_zero_when_kl_is_zero():
    c, p, q, ref, A, tm, sm = random_batch()
    _, m = run({"reference_policy_kl_penalty": 0.5}, c, p, q, c, A, tm, sm)  # ref == policy
    assert m["kl_penalty"] == 0 and isinstance(m["kl_penalty"], int)
    _, m1 = run({"reference_policy_kl_penalty": 0.5}, c, p, q, ref, A, tm, sm)
    _, m2 = run({"reference_policy_kl_penalty": 0.05}, c, p, q, ref, A, tm, sm)
    assert m1["kl_penalty"] == pytest.approx(m2["kl_penalty"], rel=1e-5) and m1["kl_penalty"] > 0


def test_diagnostic_metrics_formulas():
    p = torch.tensor([[-1.0, -2.0]])
    q = torch.tensor([[-1.5, -2.0]])
    c = p.clone()
    ones = torch.ones(1, 2)
    _, m = clipped_pg_loss(c, p, q, torch.zeros(1, 2), ones, torch.ones(1), global_valid_seqs=1,
                           global_valid_toks=2, reference_policy_kl_penalty=0.0)
    assert m["token_mult_prob_error"] == pytest.approx((math.exp(0.5) + 1) / 2)
    assert m["gen_kl_error"] == pytest.approx((math.exp(0.5) - 1 - 0.5) / 2)  # k3(ℓ = p - q)
    assert m["policy_kl_error"] == pytest.approx((math.exp(-0.5) - 1 + 0.5) / 2)
    mix = math.log(0.5 * math.exp(-1.0) + 0.5 * math.exp(-1.5))
    a, b = -1.0 - mix, -1.5 - mix
    js = 0.5 * ((math.exp(a) - a - 1) + (math.exp(b) - b - 1))
    assert m["js_divergence_error"] == pytest.approx(js / 2, rel=1e-5)
    assert m["approx_entropy"] == pytest.approx(-(math.exp(0.5) * -1.0 + 1 * -2.0) / 2, rel=1e-6)
    assert m["sampling_importance_ratio"] == pytest.approx((math.exp(0.5) + 1) / 2)


def test_gspo_sampling_importance_ratio_is_the_mean_not_nemo_b_times():
    # Deliberate difference from NeMo-RL (policy_loss.py choice 7): NeMo reports B x the mean.
    c, p, q, ref, A, tm, sm = random_batch(B=4, seed=11)
    sm = torch.ones(4)
    _, m = run(VARIANTS[3], c, p, q, ref, A, tm, sm)
    w = torch.exp(((p - q) * tm).sum(-1))
    assert m["sampling_importance_ratio"] == pytest.approx(w.mean().item(), rel=1e-5)


def test_is_truncation_metrics():
    p = torch.log(torch.tensor([[0.5, 0.5, 0.5]]))
    q = torch.log(torch.tensor([[0.25, 0.5, 0.9]]))  # w = 2, 1, 0.556
    args = (p.clone(), p, q, torch.ones(1, 3), torch.ones(1, 3), torch.ones(1))
    kw = dict(global_valid_seqs=1, global_valid_toks=3, reference_policy_kl_penalty=0.0,
              use_importance_sampling_correction=True, truncated_importance_sampling_ratio=1.5)
    _, tis = clipped_pg_loss(*args, truncated_importance_sampling_type="tis", **kw)
    assert tis["is_oob_ratio"] == pytest.approx(1 / 3)
    assert tis["sampling_importance_ratio"] == pytest.approx((1.5 + 1 + 0.5 / 0.9) / 3)
    _, ice = clipped_pg_loss(*args, truncated_importance_sampling_type="icepop",
                             truncated_importance_sampling_ratio_min=0.6, **kw)
    assert ice["is_oob_ratio"] == pytest.approx(2 / 3)
    assert ice["sampling_importance_ratio"] == pytest.approx(1 / 3)


def test_vapo_positive_example_nll_is_locally_normalised():
    c, p, q, ref, A, tm, sm = random_batch()
    rewards = torch.tensor([1.0, 1.0, 0.0, 0.5, 1.0])
    base, _ = run({}, c, p, q, ref, A, tm, sm)
    loss, m = run({"positive_example_nll_weight": 0.3}, c, p, q, ref, A, tm, sm, rewards=rewards)
    Mc = tm * sm[:, None] * (rewards > 0).float()[:, None]
    nll = (-c * Mc).sum() / (Mc.sum() + 1e-8)
    assert m["positive_nll_loss"] == pytest.approx(nll.item(), rel=1e-6)
    assert loss.item() == pytest.approx(base.item() + 0.3 * nll.item(), rel=1e-6)


def test_seed_class_slices_stored_tensors_and_matches_the_pure_function():
    torch.manual_seed(0)
    B, S, V = 3, 6, 11
    logits = torch.randn(B, S, V, requires_grad=True)
    ids = torch.randint(0, V, (B, S))
    stored = {k: torch.randn(B, S) - 2 for k in ("prev_logprobs", "generation_logprobs", "reference_policy_logprobs")}
    tm = torch.zeros(B, S)
    tm[:, 3:] = 1
    data = {"input_ids": ids, "advantages": torch.randn(B, 1).expand(B, S), "token_mask": tm, "sample_mask": torch.ones(B), **stored}
    loss, _ = ClippedPGLossFn({"ratio_clip_max": 0.28})(logits, data, 3.0, float(tm[:, 1:].sum()))
    lp = torch.log_softmax(logits.float(), -1)[:, :-1].gather(-1, ids[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(next_token_logprobs(logits, ids), lp)
    want, _ = clipped_pg_loss(lp, stored["prev_logprobs"][:, 1:], stored["generation_logprobs"][:, 1:],
                              data["advantages"][:, 1:], tm[:, 1:], torch.ones(B), global_valid_seqs=3.0,
                              global_valid_toks=float(tm[:, 1:].sum()), ratio_clip_max=0.28,
                              reference_logprobs=stored["reference_policy_logprobs"][:, 1:])
    torch.testing.assert_close(loss, want)
    with pytest.raises(ValueError, match="reference_policy_logprobs"):
        ClippedPGLossFn()(logits, {k: v for k, v in data.items() if k != "reference_policy_logprobs"}, 3.0, 9.0)
    # use_kl_in_reward: the loss's β is 0, so no reference log-probs are needed.
    ClippedPGLossFn({"use_kl_in_reward": True})(logits, {k: v for k, v in data.items() if k != "reference_policy_logprobs"}, 3.0, 9.0)


@pytest.mark.parametrize(
    "cfg, message",
    [
        ({"sequence_level_importance_ratios": True}, "needs token_level_loss=False"),
        ({"use_cispo": True, "disable_ppo_ratio": True}, "incompatible with disable_ppo_ratio"),
        ({"use_cispo": True, "force_on_policy_ratio": True}, "incompatible with force_on_policy_ratio"),
        ({"use_cispo": True, "ratio_clip_c": 3.0}, "incompatible with ratio_clip_c"),
        ({"use_cispo": True, "token_level_loss": False}, "needs token_level_loss=True"),
        ({"use_cispo": True, "token_level_loss": False, "sequence_level_importance_ratios": True}, "sequence_level_importance_ratios"),
        ({"truncated_importance_sampling_type": "tis", "truncated_importance_sampling_ratio": 2.0}, "needs use_importance_sampling_correction"),
        ({"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "tis"}, "truncated_importance_sampling_ratio > 0"),
        ({"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "icepop", "truncated_importance_sampling_ratio": 2.0}, "icepop needs truncated_importance_sampling_ratio_min"),
        ({"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "seq-mask-tis", "truncated_importance_sampling_ratio": 2.0, "truncated_importance_sampling_ratio_min": 0.5, "token_level_loss": False, "sequence_level_importance_ratios": True}, "seq-mask-tis is incompatible"),
        ({"truncated_importance_sampling_ratio": 2.0}, "truncated_importance_sampling_type is None"),
        ({"use_importance_sampling_correction": True, "truncated_importance_sampling_type": "tis", "truncated_importance_sampling_ratio": 1.0, "truncated_importance_sampling_ratio_min": 2.0}, r"ratio_min \(2.0\) > ratio"),
        ({"ratio_clip_c": 1.0}, "ratio_clip_c must be > 1"),
        ({"reference_policy_kl_type": "k5"}, "valid: 'k1', 'k2', 'k3'"),
        ({"truncated_importance_sampling_type": "tls"}, "did you mean 'tis'"),
        ({"ratio_clip_mx": 0.3}, r"loss_fn\.ratio_clip_mx: unknown key; did you mean 'ratio_clip_max'"),
    ],
)
def test_invalid_option_combinations_fail_at_construction(cfg, message):
    with pytest.raises(ValueError, match=message):
        ClippedPGLossFn(cfg)


def test_bad_tensors_fail_with_the_argument_name():
    c, p, q, ref, A, tm, sm = random_batch()
    kw = dict(global_valid_seqs=1, global_valid_toks=1, reference_logprobs=ref)
    with pytest.raises(ValueError, match=r"advantages must have shape \[5, 7\]"):
        clipped_pg_loss(c, p, q, A[:, :3], tm, sm, **kw)
    with pytest.raises(ValueError, match="token_mask must contain only 0 and 1"):
        clipped_pg_loss(c, p, q, A, tm * 2, sm, **kw)
    with pytest.raises(ValueError, match=r"sample_mask must have shape \[5\]"):
        clipped_pg_loss(c, p, q, A, tm, sm[:3], **kw)
    with pytest.raises(ValueError, match="prev_logprobs must be a floating-point"):
        clipped_pg_loss(c, p.long(), q, A, tm, sm, **kw)
    with pytest.raises(ValueError, match="reference_logprobs is required"):
        clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=1, global_valid_toks=1)
    with pytest.raises(ValueError, match="ratio_clip_c must be > 1"):
        clipped_pg_loss(c, p, q, A, tm, sm, ratio_clip_c=0.5, **kw)


@pytest.mark.parametrize("where", [(0, 0), (4, 6)], ids=["valid token", "masked row"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_advantages_raise_even_where_masked(where, bad):
    # NaN·0 is NaN: one bad advantage anywhere poisons the loss, so it is refused anywhere.
    c, p, q, ref, A, tm, sm = random_batch()
    A[where] = bad
    with pytest.raises(ValueError, match=rf"advantages must be finite, got 1 NaN/inf.*index \({where[0]}, {where[1]}\)"):
        run({}, c, p, q, ref, A, tm, sm)


@pytest.mark.parametrize("name", ["logprobs", "prev_logprobs", "generation_logprobs", "reference_logprobs"])
def test_positive_or_nan_logprobs_raise_naming_the_tensor(name):
    batch = dict(zip(("logprobs", "prev_logprobs", "generation_logprobs", "reference_logprobs"),
                     random_batch()[:4]))
    *_, A, tm, sm = random_batch()

    def call(**override):
        t = {**batch, **override}
        return clipped_pg_loss(t["logprobs"], t["prev_logprobs"], t["generation_logprobs"], A, tm, sm,
                               global_valid_seqs=4, global_valid_toks=10,
                               reference_logprobs=t["reference_logprobs"])

    bumped = batch[name].clone()
    bumped[2, 3] = 0.5
    with pytest.raises(ValueError, match=rf"{name} must be log-probabilities \(<= 0\), got a maximum of 0.5"):
        call(**{name: bumped})
    bumped[2, 3] = float("nan")
    with pytest.raises(ValueError, match=f"{name} contains NaN"):
        call(**{name: bumped})
    bumped[2, 3] = 1e-4  # float rounding of a log-softmax near 0 is tolerated
    call(**{name: bumped})


def test_reference_logprobs_are_not_read_without_a_kl_term():
    c, p, q, ref, A, tm, sm = random_batch()
    loss, _ = clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=4, global_valid_toks=10,
                              reference_logprobs=ref + 5, reference_policy_kl_penalty=0.0)
    assert torch.isfinite(loss)


@pytest.mark.parametrize("n_tok", [0, 0.0, -1.0, torch.tensor(0.0)])
def test_non_positive_global_token_count_raises(n_tok):
    c, p, q, ref, A, tm, sm = random_batch()
    with pytest.raises(ValueError, match="global_valid_toks must be > 0"):
        clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=4, global_valid_toks=n_tok,
                        reference_logprobs=ref)
    with pytest.raises(ValueError, match="global_valid_seqs must be > 0"):
        clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=torch.tensor(0.0),
                        global_valid_toks=10, reference_logprobs=ref)


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
def test_empty_batch_raises(shape):
    x = torch.zeros(shape)
    with pytest.raises(ValueError, match=r"logprobs must not be empty.*B = 0 or T = 0"):
        clipped_pg_loss(x, x, x, x, x, torch.ones(shape[0]), global_valid_seqs=1,
                        global_valid_toks=1, reference_policy_kl_penalty=0.0)


def test_unknown_kl_type_and_lower_clip_above_one_are_refused():
    c, p, q, ref, A, tm, sm = random_batch()
    with pytest.raises(ValueError, match="unknown reference_policy_kl_type 'k4'"):
        run({"reference_policy_kl_type": "k4"}, c, p, q, ref, A, tm, sm)
    with pytest.raises(ValueError, match="unknown reference_policy_kl_type 'k4'"):
        clipped_pg_loss(c, p, q, A, tm, sm, global_valid_seqs=4, global_valid_toks=10,
                        reference_logprobs=ref, reference_policy_kl_type="k4")
    # ratio_clip_min > 1 would put the lower clip 1 - ε below 0 (a typo, never a setting)
    for eps in (1.5, 2.0):
        with pytest.raises(ValueError, match=rf"ratio_clip_min must be <= 1.*got {eps}"):
            ClippedPGLossConfig(ratio_clip_min=eps)
        with pytest.raises(ValueError, match="loss_fn: ratio_clip_min must be <= 1"):
            ClippedPGLossFn({"ratio_clip_min": eps})


def test_lower_clip_of_one_means_none_as_in_cispo_recipes():
    """ε_lo = 1 (NeMo-RL's CISPO recipe): the weight sg(clamp(ρ, 0, 1 + ε_hi)) keeps every ratio
    below 1 as it is; only the upper clip binds."""
    c, p, q, ref, A, tm, sm = random_batch(dtype=torch.float64)
    cfg = {"use_cispo": True, "ratio_clip_min": 1.0, "ratio_clip_max": 0.1,
           "reference_policy_kl_penalty": 0.0}
    loss, _ = run(cfg, c, p, q, ref, A, tm, sm)
    rho = torch.exp(c - p)
    assert (rho < 0.5).any()  # ratios the default lower clip (0.8) would have lifted
    M = tm * sm[:, None]
    want = (-A * rho.clamp(max=1.1) * c * M).sum() / M.sum()
    torch.testing.assert_close(loss, want)


def test_reinforce_without_ratio_is_minus_advantage_times_logprob():
    c, p, q, ref, A, tm, sm = random_batch()
    loss, _ = run({"disable_ppo_ratio": True, "reference_policy_kl_penalty": 0.0}, c, p, q, ref, A, tm, sm)
    M = tm * sm[:, None]
    torch.testing.assert_close(loss, (-A * c * M).sum() / (M.sum() + 1e-8))


# --- one hand-checked batch for the option grid: 2 rows x 2 tokens, row 1 has one valid token.
#   log π      = [[-0.5, -1.0], [-0.2, -2.0]]      log π_old = log π_gen = [[-1.0, -1.0], [-1.0, -2.5]]
#   log π_ref  = [[-1.0, -1.5], [-1.0, -2.0]]      A = [[1, 1], [-1, -1]]   token_mask [[1, 1], [1, 0]]
# Token ratios e^(log π - log π_old): e^0.5, 1, e^0.8; clipped to [0.8, 1.2]: 1.2, 1, 1.2.
# Per-token surrogate max(-Aρ, -A·clip ρ): -1.2, -1, e^0.8 = 2.22554; dual clip C = 2 caps the
# last (A < 0) at 2. GSPO ratios: row 0 e^((0.5 + 0)/2) = 1.28403 -> -1.2 on both tokens,
# row 1 e^0.8 (one token) -> 2.22554 (or 2 with C = 2).
# KL with ℓ = log π_ref - log π = -0.5, -0.5, -0.8: k1 = -ℓ, k2 = ℓ²/2, k3 = e^ℓ - 1 - ℓ.
GRID_C = torch.tensor([[-0.5, -1.0], [-0.2, -2.0]])
GRID_P = torch.tensor([[-1.0, -1.0], [-1.0, -2.5]])
GRID_REF = torch.tensor([[-1.0, -1.5], [-1.0, -2.0]])
GRID_A = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
GRID_TM = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
E08 = math.exp(0.8)
GRID_SURROGATE = {  # (sequence-level ratio, dual clip) -> per valid token (row 0 t0, t1, row 1 t0)
    (False, None): (-1.2, -1.0, E08), (False, 2.0): (-1.2, -1.0, 2.0),
    (True, None): (-1.2, -1.2, E08), (True, 2.0): (-1.2, -1.2, 2.0),
}
GRID_KL = {
    "k1": (0.5, 0.5, 0.8),
    "k2": (0.125, 0.125, 0.32),
    "k3": (math.exp(-0.5) - 0.5, math.exp(-0.5) - 0.5, math.exp(-0.8) - 0.2),
}


@pytest.mark.parametrize("seq, clip_c, kl_type",
                         list(itertools.product((False, True), (None, 2.0), ("k1", "k2", "k3"))))
def test_options_grid_hand_numbers(seq, clip_c, kl_type):
    beta = 0.1
    loss, m = clipped_pg_loss(
        GRID_C, GRID_P, GRID_P, GRID_A, GRID_TM, torch.ones(2), global_valid_seqs=2,
        global_valid_toks=3, reference_logprobs=GRID_REF, token_level_loss=not seq,
        sequence_level_importance_ratios=seq, ratio_clip_c=clip_c,
        reference_policy_kl_type=kl_type, reference_policy_kl_penalty=beta,
    )

    def reduce(x):  # token-level: Σ / N_tok; sequence-level: mean of row means over N_seq
        return ((x[0] + x[1]) / 2 + x[2]) / 2 if seq else sum(x) / 3

    actor = reduce(GRID_SURROGATE[seq, clip_c])
    kl = reduce(GRID_KL[kl_type])
    assert loss.item() == pytest.approx(actor + beta * kl, rel=1e-5)
    assert m["kl_penalty"] == pytest.approx(kl, rel=1e-5)  # reported without β
    assert m["probs_ratio_max"] == pytest.approx(E08, rel=1e-6)
    assert m["probs_ratio_min"] == pytest.approx(math.exp(0.25) if seq else 1.0, rel=1e-6)
    assert m["probs_ratio_clamped_max"] == pytest.approx(1.2) and m["probs_ratio_clamped_min"] == pytest.approx(1.0 if not seq else 1.2)


def test_options_as_a_config_value_or_keywords():
    c, p, q, ref, A, tm, sm = random_batch()
    cfg = ClippedPGLossConfig(ratio_clip_max=0.28, ratio_clip_c=3.0, reference_policy_kl_penalty=0.05)
    kw = dict(global_valid_seqs=4, global_valid_toks=10, reference_logprobs=ref)
    by_config, m1 = clipped_pg_loss(c, p, q, A, tm, sm, config=cfg, **kw)
    by_keywords, m2 = clipped_pg_loss(c, p, q, A, tm, sm, ratio_clip_max=0.28, ratio_clip_c=3.0,
                                      reference_policy_kl_penalty=0.05, **kw)
    by_dict, _ = clipped_pg_loss(c, p, q, A, tm, sm, config=cfg.model_dump(), **kw)
    assert by_config.item() == by_keywords.item() == by_dict.item() and m1 == m2
    # keywords override the config; use_kl_in_reward sets the loss's β to 0
    no_kl, _ = clipped_pg_loss(c, p, q, A, tm, sm, config=cfg, reference_policy_kl_penalty=0.0, **kw)
    in_reward, _ = clipped_pg_loss(c, p, q, A, tm, sm, config=cfg, use_kl_in_reward=True, **kw)
    assert no_kl.item() == in_reward.item() != by_config.item()
    with pytest.raises(TypeError, match="unexpected keyword argument 'ratio_clip_mx'; did you mean 'ratio_clip_max'"):
        clipped_pg_loss(c, p, q, A, tm, sm, ratio_clip_mx=0.3, **kw)
    with pytest.raises(TypeError, match="'betta'"):
        clipped_pg_loss(c, p, q, A, tm, sm, config=cfg, betta=0.3, **kw)


def test_readme_example_runs():
    B, T = 6, 5
    prompt_ids = torch.tensor([[0], [0], [0], [1], [1], [1]])
    advantages = rlnb.grpo_advantages(prompt_ids, torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0]))
    logprobs = torch.full((B, T), -1.0, requires_grad=True)
    old = torch.full((B, T), -1.1)
    loss, metrics = rlnb.clipped_pg_loss(
        logprobs, old, old, advantages[:, None].expand(B, T), torch.ones(B, T), torch.ones(B),
        global_valid_seqs=B, global_valid_toks=B * T,
        ratio_clip_max=0.28, reference_policy_kl_penalty=0.0,
    )
    loss.backward()
    assert metrics["probs_ratio"] == pytest.approx(math.exp(0.1), rel=1e-6)
    assert metrics["probs_ratio_clamped"] == pytest.approx(math.exp(0.1), rel=1e-6)
    assert logprobs.grad is not None


def test_loss_pieces_on_their_own():
    c, p = torch.tensor([[-0.5, -1.0]]), torch.tensor([[-1.0, -1.0]])
    ratio, clipped = probability_ratio(c, p, torch.ones(1, 2), ratio_clip_min=0.2, ratio_clip_max=0.1)
    torch.testing.assert_close(ratio, torch.tensor([[math.exp(0.5), 1.0]]))
    torch.testing.assert_close(clipped, torch.tensor([[1.1, 1.0]]))
    seq, _ = probability_ratio(c, p, torch.ones(1, 2), sequence_level=True)
    torch.testing.assert_close(seq, torch.full((1, 2), math.exp(0.25)))
    x = c.clone().requires_grad_()
    forced, forced_clip = probability_ratio(x, None, torch.ones(1, 2), force_on_policy=True)
    assert forced.tolist() == [[1.0, 1.0]] and forced_clip is forced
    A = torch.tensor([[1.0, -1.0]])
    torch.testing.assert_close(clipped_surrogate(A, ratio, clipped, c), torch.tensor([[-1.1, 1.0]]))
    big = torch.tensor([[1.0, 5.0]])  # A < 0 and ρ = 5: -Aρ = 5, capped at -A·C = 3
    dual = clipped_surrogate(A, big, big.clamp(0.8, 1.2), c, ratio_clip_c=3.0)
    torch.testing.assert_close(dual, torch.tensor([[-1.0, 3.0]]))
    cispo = clipped_surrogate(A, ratio, clipped, c, use_cispo=True)  # -A·sg(clip ρ)·log π
    torch.testing.assert_close(cispo, torch.tensor([[-1.1 * -0.5, 1.0 * -1.0]]))
    kl = kl_penalty_term(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), beta=0.5)
    assert kl.item() == pytest.approx(0.5 * (math.exp(-0.5) - 0.5))


@pytest.mark.parametrize(("options", "expected"), [
    ({}, math.exp(-4) - 1 + 4),  # k3(ℓ = ref - c = -4) = 3.0183, inside both clamps
    ({"kl_input_clamp_value": 2.0}, math.exp(-2) - 1 + 2),  # ℓ clamped to -2 first: 1.1353
    ({"kl_output_clamp_value": 1.0}, 1.0),  # then w·k clamped to ±1
    ({"use_on_policy_kl_approximation": True},  # w = exp(c - q) = e^0.5 multiplies k3
     math.exp(0.5) * (math.exp(-4) - 1 + 4)),
    ({"reference_policy_kl_type": "k1"}, 4.0),  # k1 = -ℓ
    ({"reference_policy_kl_type": "k2"}, 8.0),  # k2 = ℓ²/2
])
def test_kl_clamps_and_on_policy_weight_by_hand(options, expected):
    """One token, advantage 0: the loss is β·KL alone; every KL option changes it as derived."""
    one = torch.ones(1, 1)
    loss, metrics = clipped_pg_loss(
        -1.0 * one, -1.0 * one, -1.5 * one, 0 * one, one, torch.ones(1),
        global_valid_seqs=1, global_valid_toks=1, reference_logprobs=-5.0 * one,
        reference_policy_kl_penalty=1.0, **options)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert metrics["kl_penalty"] == pytest.approx(expected, rel=1e-5)
