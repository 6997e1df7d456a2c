"""rlnb.teach's checks: each rejects a student-style wrong implementation of every mistake it
names, with that mistake's message, and passes a right one written independently."""

import math
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

from rlnb import teach
from rlnb.teach import CheckFailed

# --- student-style implementations, written the way a student would (loops, torch.std, ...),
# independently of rlnb.teach's own mistake functions. For each exercise: the right one, then
# one per named mistake key.


def loo_right(rewards):
    P, G = rewards.shape
    baseline, std = torch.zeros(P, G), torch.zeros(P, G)
    for p in range(P):
        for i in range(G):
            others = [rewards[p, j].item() for j in range(G) if j != i]
            baseline[p, i] = sum(others) / len(others)
            if len(others) > 1:
                baseline_i = baseline[p, i].item()
                var = sum((x - baseline_i) ** 2 for x in others) / (len(others) - 1)
                std[p, i] = math.sqrt(var)
    return baseline, std


def _loo_with(baseline=None, std=None):
    def fn(rewards):
        b, s = loo_right(rewards)
        return (baseline(rewards) if baseline else b), (std(rewards) if std else s)
    return fn


def _std_others(rewards, correction):
    P, G = rewards.shape
    out = torch.zeros(P, G)
    for i in range(G):
        keep = [j for j in range(G) if j != i]
        with warnings.catch_warnings():  # the std of one value: NaN, which nan_pair is about
            warnings.simplefilter("ignore")
            out[:, i] = torch.std(rewards[:, keep], dim=1, correction=correction)
    return out


BASELINE_WRONG = {
    "whole_group_mean": _loo_with(baseline=lambda r: r.mean(dim=1, keepdim=True).repeat(1, r.shape[1])),
    "divide_by_G": _loo_with(baseline=lambda r: (r.sum(1, keepdim=True) - r) / r.shape[1]),
    "wrong_axis": _loo_with(baseline=lambda r: (r.sum(0, keepdim=True) - r) / (r.shape[0] - 1)),
    "whole_group_std": _loo_with(std=lambda r: torch.std(r, dim=1, keepdim=True).repeat(1, r.shape[1])),
    "population_std": _loo_with(std=lambda r: _std_others(r, 0) if r.shape[1] > 2 else torch.zeros_like(r)),
    "nan_pair": _loo_with(std=lambda r: _std_others(r, 1)),
}


def adv_right(rewards, eps=1e-6):
    b, s = loo_right(rewards)
    out = rewards - b
    out[s > 0] = out[s > 0] / (s[s > 0] + eps)
    return out


def _adv_zero_std(rewards, eps=1e-6):
    b, s = loo_right(rewards)
    return (rewards - b) / (s + eps)


def _adv_group_std(rewards, eps=1e-6):
    b, _ = loo_right(rewards)
    s = rewards.std(dim=1, keepdim=True).expand_as(rewards)
    out = rewards - b
    return torch.where(s > 0, out / (s + eps), out)


def _adv_plain_grpo(rewards, eps=1e-6):
    mean, s = rewards.mean(1, keepdim=True), rewards.std(1, keepdim=True)
    out = (rewards - mean).clone()
    nonzero = (s > 0).expand_as(out)
    out[nonzero] = ((rewards - mean) / (s + eps))[nonzero]
    return out


def _adv_population_std(rewards, eps=1e-6):  # the others' std with ÷ n, in a loop
    P, G = rewards.shape
    out = torch.zeros(P, G)
    for p in range(P):
        for i in range(G):
            others = [rewards[p, j].item() for j in range(G) if j != i]
            mean = sum(others) / len(others)
            var = sum((x - mean) ** 2 for x in others) / len(others)
            diff = rewards[p, i].item() - mean
            out[p, i] = diff / (var ** 0.5 + eps) if var > 0 else diff
    return out


def _adv_sqrt_var_eps(rewards, eps=1e-6):  # σ = sqrt(var + ε), no σ = 0 branch
    P, G = rewards.shape
    out = torch.zeros(P, G)
    for i in range(G):
        others = torch.cat([rewards[:, :i], rewards[:, i + 1:]], dim=1)
        var = others.var(dim=1) if G > 2 else torch.zeros(P)
        out[:, i] = (rewards[:, i] - others.mean(dim=1)) / torch.sqrt(var + eps)
    return out


def _adv_flat(rewards, eps=1e-6):
    return adv_right(rewards, eps).reshape(-1)  # [B], as the trainer stores them


ADV_WRONG = {
    "sign": lambda r, eps=1e-6: -adv_right(r, eps),
    "divide_zero_std": _adv_zero_std,
    "whole_group_std": _adv_group_std,
    "no_leave_one_out": _adv_plain_grpo,
    "no_std": lambda r, eps=1e-6: r - loo_right(r)[0],
    "population_std": _adv_population_std,
    "sqrt_var_eps": _adv_sqrt_var_eps,
    "flattened": _adv_flat,
}


def clip_right(logprobs, prev_logprobs, advantages, *, eps_low=0.2, eps_high=0.28,
               dual_clip_c=None):
    ratio = (logprobs - prev_logprobs).exp()
    surr1 = ratio * advantages
    surr2 = torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages
    loss = -torch.min(surr1, surr2)
    if dual_clip_c is not None:
        loss = torch.where((advantages < 0) & (loss > -dual_clip_c * advantages),
                           -dual_clip_c * advantages, loss)
    return loss


def _clip(ratio_fn=None, lo_hi=None, combine="max", clip_only=False, dual="neg", sign=1):
    def fn(logprobs, prev_logprobs, advantages, *, eps_low=0.2, eps_high=0.28, dual_clip_c=None):
        ratio = ratio_fn(logprobs, prev_logprobs) if ratio_fn else (logprobs - prev_logprobs).exp()
        lo, hi = lo_hi(eps_low, eps_high) if lo_hi else (eps_low, eps_high)
        a, b = -advantages * ratio, -advantages * ratio.clamp(1 - lo, 1 + hi)
        if clip_only:
            loss = b
        else:
            loss = torch.max(a, b) if combine == "max" else torch.min(a, b)
        if dual_clip_c is not None and dual != "none":
            cap = -advantages * dual_clip_c
            where = torch.ones_like(advantages, dtype=torch.bool) if dual == "all" else advantages < 0
            loss = torch.where(where, torch.max(loss, cap) if dual == "max" else torch.min(loss, cap),
                               loss)
        return sign * loss
    return fn


CLIP_WRONG = {
    "objective_sign": _clip(sign=-1),
    "optimistic_bound": _clip(combine="min"),
    "swapped_eps": _clip(lo_hi=lambda lo, hi: (hi, lo)),
    "inverted_ratio": _clip(ratio_fn=lambda lp, prev: torch.exp(prev - lp)),
    "logprob_quotient": _clip(ratio_fn=lambda lp, prev: lp / prev),
    "clip_only": _clip(clip_only=True),
    "dual_clip_all_signs": _clip(dual="all"),
    "dual_clip_missing": _clip(dual="none"),
    "one_eps": _clip(lo_hi=lambda lo, hi: (lo, lo)),
}


def _clip_the_advantage(logprobs, prev_logprobs, advantages, *, eps_low=0.2, eps_high=0.28,
                        dual_clip_c=None):
    ratio = torch.exp(logprobs - prev_logprobs)
    unclipped = ratio * advantages
    clipped = ratio * torch.clamp(advantages, 1 - eps_low, 1 + eps_high)  # A clipped, not ρ
    loss = -torch.min(unclipped, clipped)
    if dual_clip_c is not None:
        loss = torch.where(advantages < 0, torch.min(loss, -dual_clip_c * advantages), loss)
    return loss


CLIP_WRONG["clipped_advantage"] = _clip_the_advantage
CLIP_WRONG["log_ratio_as_ratio"] = _clip(ratio_fn=lambda lp, prev: lp - prev)
CLIP_WRONG["dual_clip_max"] = _clip(dual="max")


def token_right(per_token, token_mask, sample_mask):
    total, count = 0.0, 0.0
    for b in range(per_token.shape[0]):
        total = total + (per_token[b] * token_mask[b]).sum() * sample_mask[b]
        count = count + token_mask[b].sum() * sample_mask[b]
    return total / count


def seq_right(per_token, token_mask, sample_mask):
    rows = []
    for b in range(per_token.shape[0]):
        if sample_mask[b] == 0:
            continue
        n = token_mask[b].sum()
        rows.append((per_token[b] * token_mask[b]).sum() / n if n > 0 else per_token[b].sum() * 0)
    return torch.stack(rows).mean()


def _mask2(tm, sm):
    return tm * sm.unsqueeze(1)


def _per_position(x, tm, sm):
    m = _mask2(tm, sm)
    col = (x * m).sum(0) / m.sum(0).clamp(min=1)
    return col[m.sum(0) > 0].mean()


TOKEN_WRONG = {
    "no_mask": lambda x, tm, sm: x.mean(),
    "ignore_sample_mask": lambda x, tm, sm: (x * tm).sum() / tm.sum(),
    "divide_by_numel": lambda x, tm, sm: (x * _mask2(tm, sm)).sum() / x.numel(),
    "divide_by_rows": lambda x, tm, sm: (x * _mask2(tm, sm)).sum() / sm.sum(),
    "sequence_level": seq_right,
    "mean_over_batch_per_position": _per_position,
}


def _seq_rows(x, tm, sm, denominator):
    per_row = (x * tm).sum(1) / denominator(tm)
    return per_row


SEQ_WRONG = {
    "no_mask": lambda x, tm, sm: x.mean(),
    "token_level": token_right,
    "divide_by_T": lambda x, tm, sm: ((x * tm).sum(1) / x.shape[1] * sm).sum() / sm.sum(),
    "ignore_sample_mask": lambda x, tm, sm: ((x * tm).sum(1) / tm.sum(1).clamp(min=1)).mean(),
    "divide_by_all_rows": lambda x, tm, sm: ((x * tm).sum(1) / tm.sum(1).clamp(min=1) * sm).sum() / len(sm),
    "nan_empty_row": lambda x, tm, sm: ((x * tm).sum(1) / tm.sum(1) * sm).sum() / sm.sum(),
}

KL_RIGHT = {
    "k1": lambda lp, ref: -(ref - lp),
    "k2": lambda lp, ref: 0.5 * (ref - lp) ** 2,
    "k3": lambda lp, ref: (ref - lp).exp() - (ref - lp) - 1,
}
KL_WRONG = {
    "k1": {"flipped_log_ratio": lambda lp, ref: ref - lp,
           "absolute": lambda lp, ref: torch.abs(lp - ref),
           "averaged": lambda lp, ref: torch.mean(lp - ref)},
    "k2": {"no_half": lambda lp, ref: (lp - ref) ** 2,
           "ratio_minus_one": lambda lp, ref: 0.5 * (torch.exp(ref) / torch.exp(lp) - 1) ** 2,
           "averaged": lambda lp, ref: ((ref - lp) ** 2 / 2).mean()},
    "k3": {"flipped_log_ratio": lambda lp, ref: (lp - ref).exp() - 1 - (lp - ref),
           "plus_ell": lambda lp, ref: (ref - lp).exp() - 1 + (ref - lp),
           "no_minus_one": lambda lp, ref: (ref - lp).exp() - (ref - lp),
           "averaged": lambda lp, ref: torch.mean(torch.exp(ref - lp) - 1 - (ref - lp))},
}


def exact_right(logits, reference_logits):
    p = F.softmax(logits, dim=-1)
    return (p * (F.log_softmax(logits, -1) - F.log_softmax(reference_logits, -1))).sum(-1)


EXACT_WRONG = {
    "reversed": lambda z, zr: exact_right(zr, z),
    "raw_logits": lambda z, zr: (F.softmax(z, -1) * (z - zr)).sum(-1),
    "mean_over_vocab": lambda z, zr: (F.softmax(z, -1) * (F.log_softmax(z, -1) - F.log_softmax(zr, -1))).mean(-1),
    "unweighted": lambda z, zr: (F.log_softmax(z, -1) - F.log_softmax(zr, -1)).sum(-1),
    "batchmean": lambda z, zr: F.kl_div(F.log_softmax(zr, -1), F.log_softmax(z, -1),
                                        reduction="batchmean", log_target=True),
    "summed_everywhere": lambda z, zr: (F.softmax(z, -1) * (F.log_softmax(z, -1)
                                                            - F.log_softmax(zr, -1))).sum(),
}


def gae_student(rewards, values, mask, *, gamma=1.0, lam=0.95, reward_at_end=False,
                forward=False, no_gamma=False, lambda_in_delta=False, bootstrap=False,
                reset=False, mc_returns=False, reward_at_count=False, unmasked=False):
    B, T = values.shape
    adv = torch.zeros(B, T)
    for b in range(B):
        valid = [t for t in range(T) if mask[b, t] > 0]
        last = valid[-1]
        r_pos = T - 1 if reward_at_end else last
        if reward_at_count:
            r_pos = int(mask[b].sum()) - 1  # the number of valid tokens, minus 1
        nv = values[b, last + 1].item() if bootstrap and last + 1 < T else 0.0
        na = 0.0
        order = range(T) if forward else range(T - 1, -1, -1)
        for t in order:
            if mask[b, t] == 0:
                if reset and t < last:
                    nv, na = 0.0, 0.0
                continue
            r = rewards[b].item() if t == r_pos else 0.0
            delta = r + (gamma * lam if lambda_in_delta else gamma) * nv - values[b, t].item()
            a = delta + (lam if no_gamma else gamma * lam) * na
            adv[b, t] = a
            nv, na = values[b, t].item(), a
    ret = (adv + values) if unmasked else (adv + values) * mask
    if mc_returns:
        ret = torch.zeros(B, T)
        for b in range(B):
            g = 0.0
            for t in range(T - 1, -1, -1):
                if mask[b, t] == 0:
                    continue
                last = max(i for i in range(T) if mask[b, i] > 0)
                g = (rewards[b].item() if t == last else 0.0) + gamma * g
                ret[b, t] = g
    return adv, ret


def _gae(**kw):
    return lambda rewards, values, mask, *, gamma=1.0, lam=0.95: gae_student(
        rewards, values, mask, gamma=gamma, lam=lam, **kw)


def _gae_vectorised_over_padding(rewards, values, mask, *, gamma=1.0, lam=0.95):
    B, T = values.shape
    last = (mask * torch.arange(T)).argmax(1)  # each row's last valid token
    r = torch.zeros(B, T)
    r[torch.arange(B), last] = rewards
    next_values = torch.cat([values[:, 1:], torch.zeros(B, 1)], dim=1)
    deltas = r + gamma * next_values - values  # padding's values included
    adv = torch.zeros(B, T)
    running = torch.zeros(B)
    for t in reversed(range(T)):
        running = deltas[:, t] + gamma * lam * running
        adv[:, t] = running
    return adv * mask, (adv + values) * mask


def _gae_forward_accumulation(rewards, values, mask, *, gamma=1.0, lam=0.95):
    B, T = values.shape
    adv = torch.zeros(B, T)
    for b in range(B):
        idx = [t for t in range(T) if mask[b, t]]
        acc = 0.0
        for j, t in enumerate(idx):  # left to right
            v_next = values[b, idx[j + 1]].item() if j + 1 < len(idx) else 0.0
            r = rewards[b].item() if j == len(idx) - 1 else 0.0
            acc = (r + gamma * v_next - values[b, t].item()) + gamma * lam * acc
            adv[b, t] = acc
    return adv, (adv + values) * mask


def _gae_swapped(rewards, values, mask, *, gamma=1.0, lam=0.95):
    return gae_student(rewards, values, mask, gamma=lam, lam=gamma)  # the arguments mixed up


def _gae_no_bootstrap(rewards, values, mask, *, gamma=1.0, lam=0.95):
    B, T = values.shape
    adv = torch.zeros(B, T)
    for b in range(B):
        idx = [t for t in range(T) if mask[b, t]]
        acc = 0.0
        for j in reversed(range(len(idx))):
            r = rewards[b].item() if j == len(idx) - 1 else 0.0
            acc = (r - values[b, idx[j]].item()) + gamma * lam * acc  # no γ·V_next
            adv[b, idx[j]] = acc
    return adv, (adv + values) * mask


GAE_WRONG = {
    "reward_at_last_position": _gae(reward_at_end=True),
    "left_to_right": _gae(forward=True),
    "lambda_without_gamma": _gae(no_gamma=True),
    "gamma_lambda_in_delta": _gae(lambda_in_delta=True),
    "bootstrap_from_padding": _gae(bootstrap=True),
    "reset_at_gap": _gae(reset=True),
    "monte_carlo_returns": _gae(mc_returns=True),
    "accumulated_from_the_left": _gae_forward_accumulation,
    "gamma_lambda_swapped": _gae_swapped,
    "no_bootstrap": _gae_no_bootstrap,
    "through_padding": _gae_vectorised_over_padding,
    "reward_at_count_minus_one": _gae(reward_at_count=True),
    "unmasked_returns": _gae(unmasked=True),
}


def dpo_student(logprobs, reference_logprobs, token_mask, *, beta=0.1, mask=True, ref=True,
                mean=False, beta_outside=False, swap=False, sign=1, per_row=False):
    losses = []
    B = logprobs.shape[0]
    for k in range(B // 2):
        c, r = (2 * k + 1, 2 * k) if swap else (2 * k, 2 * k + 1)

        def reward(i):
            m = token_mask[i] if mask else torch.ones_like(token_mask[i])
            d = logprobs[i] - (reference_logprobs[i] if ref else 0)
            s = (d * m).sum()
            return s / m.sum() if mean else s
        margin = reward(c) - reward(r)
        losses.append(-beta * F.logsigmoid(margin) if beta_outside
                      else -F.logsigmoid(beta * margin))
    total = sign * torch.stack(losses).sum()
    return total / B if per_row else total / (B // 2)


def _dpo(**kw):
    return lambda lp, ref, tm, *, beta=0.1: dpo_student(lp, ref, tm, beta=beta, **kw)


DPO_WRONG = {
    "no_mask": _dpo(mask=False),
    "no_reference": _dpo(ref=False),
    "mean_over_tokens": _dpo(mean=True),
    "beta_outside": _dpo(beta_outside=True),
    "swapped_pairs": _dpo(swap=True),
    "sign": _dpo(sign=-1),
    "divide_by_rows": _dpo(per_row=True),
}


def _dpo_reference_added(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    rho = ((logprobs + reference_logprobs) * token_mask).sum(dim=1)
    margins = rho.view(-1, 2)
    return -F.logsigmoid(beta * (margins[:, 0] - margins[:, 1])).mean()


def _dpo_summed(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    rho = ((logprobs - reference_logprobs) * token_mask).sum(dim=1)
    return -F.logsigmoid(beta * (rho[::2] - rho[1::2])).sum()


DPO_WRONG["reference_added"] = _dpo_reference_added
DPO_WRONG["summed_pairs"] = _dpo_summed


def _dpo_halves(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    rho = ((logprobs - reference_logprobs) * token_mask).sum(dim=1)
    n = rho.shape[0] // 2
    return -F.logsigmoid(beta * (rho[:n] - rho[n:])).mean()  # chosen = the first half


def _dpo_no_log(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    rho = ((logprobs - reference_logprobs) * token_mask).sum(dim=1)
    return -torch.sigmoid(beta * (rho[0::2] - rho[1::2])).mean()


DPO_WRONG["halves"] = _dpo_halves
DPO_WRONG["no_log"] = _dpo_no_log


def reward_student(prompts, completions, compare=None):
    out = []
    for p, c in zip(prompts, completions):
        word = p[len("rev "):-1]
        out.append(float(compare(c, word)) if compare else float(c.rstrip() == word[::-1]))
    return out


def _reward(compare):
    return lambda prompts, completions: reward_student(prompts, completions, compare)


REWARD_WRONG = {
    "strip_both_ends": _reward(lambda c, w: c.strip() == w[::-1]),
    "no_strip": _reward(lambda c, w: c == w[::-1]),
    "not_reversed": _reward(lambda c, w: c.rstrip() == w),
    "kept_equals_sign": lambda prompts, completions: [
        float(c.rstrip() == p.split(" ")[1][::-1]) for p, c in zip(prompts, completions)],
    "substring": _reward(lambda c, w: w[::-1] in c),
    "prefix": _reward(lambda c, w: c.startswith(w[::-1])),
    "case_insensitive": _reward(lambda c, w: c.rstrip().lower() == w[::-1].lower()),
    "newline_only": _reward(lambda c, w: c.rstrip("\n") == w[::-1]),
}


def signal_right(rewards):
    groups = [len(set(row.tolist())) > 1 for row in rewards]
    return sum(groups) / len(groups)


SIGNAL_WRONG = {
    "any_positive": lambda r: sum(bool((row > 0).any()) for row in r) / len(r),
    "not_all_correct": lambda r: sum(not bool((row == 1).all()) for row in r) / len(r),
    "mean_between": lambda r: float(((r.mean(1) > 0) & (r.mean(1) < 1)).float().mean()),
    "wrong_axis": lambda r: sum(len(set(col.tolist())) > 1 for col in r.T) / r.shape[1],
    "count_not_fraction": lambda r: sum(len(set(row.tolist())) > 1 for row in r),
    "per_group": lambda r: torch.tensor([float(len(set(row.tolist())) > 1) for row in r]),
}

EXERCISES = {  # function name -> (check, right implementation, {mistake key: wrong one})
    "leave_one_out_baseline": (teach.check_leave_one_out_baseline, loo_right, BASELINE_WRONG),
    "grpo_advantages": (teach.check_grpo_advantages, adv_right, ADV_WRONG),
    "ppo_clip_loss": (teach.check_ppo_clip_loss, clip_right, CLIP_WRONG),
    "token_level_loss": (teach.check_token_level_loss, token_right, TOKEN_WRONG),
    "sequence_level_loss": (teach.check_sequence_level_loss, seq_right, SEQ_WRONG),
    **{k: (lambda fn, k=k: teach.check_kl_estimator(k, fn), KL_RIGHT[k], KL_WRONG[k])
       for k in ("k1", "k2", "k3")},
    "exact_kl": (teach.check_exact_kl, exact_right, EXACT_WRONG),
    "gae": (teach.check_gae, lambda *a, **k: gae_student(*a, **k), GAE_WRONG),
    "dpo_loss": (teach.check_dpo_loss, lambda *a, **k: dpo_student(*a, **k), DPO_WRONG),
    "reverse_reward": (teach.check_reverse_reward, reward_student, REWARD_WRONG),
    "fraction_with_signal": (teach.check_fraction_with_signal, signal_right, SIGNAL_WRONG),
}
WRONG = [(name, key) for name, (_, _, wrong) in EXERCISES.items() for key in wrong]


def test_every_named_mistake_has_a_student_style_wrong_implementation_here():
    assert set(EXERCISES) == set(teach.EXERCISES)
    for name, exercise in teach.EXERCISES.items():
        assert [m.key for m in exercise.mistakes] == list(EXERCISES[name][2]), name


@pytest.mark.parametrize("name", list(EXERCISES))
def test_a_right_implementation_passes_with_one_line(name, capsys):
    check, right, _ = EXERCISES[name]
    check(right)
    out = capsys.readouterr().out
    assert out.startswith(f"✓ {name}: matches ") and out.count("\n") == 1, out


@pytest.mark.parametrize("name, key", WRONG, ids=[f"{n}-{k}" for n, k in WRONG])
def test_each_wrong_implementation_gets_its_named_message(name, key):
    check, _, wrong = EXERCISES[name]
    mistake = next(m for m in teach.EXERCISES[name].mistakes if m.key == key)
    with pytest.raises(CheckFailed) as err:
        check(wrong[key])
    assert err.value.mistake == key, str(err.value)
    message = str(err.value)
    assert message.startswith(f"{name}: your ")
    # where: the case and the element, or, for a value of the wrong shape, the case and both shapes
    assert (f" {mistake.says}: see " in message and f"of case '{err.value.case}'" in message) or (
        f" {mistake.says}: on case '{err.value.case}' it has shape " in message), message
    assert message.count(mistake.says) == 1, message  # one sentence, not one per output
    assert type(err.value) is not AssertionError


def test_the_verb_agrees_and_outputs_with_one_mistake_share_a_sentence():
    with pytest.raises(CheckFailed, match=r"^dpo_loss: your loss matches \+log σ"):
        teach.check_dpo_loss(DPO_WRONG["sign"])
    with pytest.raises(CheckFailed, match=r"^grpo_advantages: your advantages match the plain"):
        teach.check_grpo_advantages(ADV_WRONG["no_leave_one_out"])
    with pytest.raises(CheckFailed) as err:  # GAE's returns follow its advantages
        teach.check_gae(GAE_WRONG["lambda_without_gamma"])
    assert str(err.value).startswith("gae: your advantages and returns match A_t = δ_t + λ")
    assert str(err.value).count("\n") == 0

    def all_ones(rewards, values, mask, *, gamma=1.0, lam=0.95):  # no known mistake
        adv = torch.ones_like(values) * mask
        return adv, (adv + values) * mask
    with pytest.raises(CheckFailed) as err:
        teach.check_gae(all_ones)
    lines = str(err.value).splitlines()
    assert lines[0].startswith("gae: your advantages differ from rlnb.gae_advantages on ")
    assert not any(x.startswith("gae: your returns") for x in lines)  # they follow: said once
    assert lines[-1] == ("  (your returns: advantages + values, 0 where the mask is 0, as in "
                         "the reference, so they follow from the above)")


def test_the_message_names_the_element_and_both_values():
    with pytest.raises(CheckFailed) as err:
        teach.check_grpo_advantages(ADV_WRONG["whole_group_std"])
    assert str(err.value) == (
        "grpo_advantages: your advantages match dividing by the whole group's std instead of "
        "the leave-one-out std: see advantages[0, 0] of case 'one correct of four', where "
        "rlnb.grpo_advantages gives 1 and you give 2.")
    # the right answer's others [0, 0, 0]: mean 0 and std 0, so rlnb keeps 1 - 0 = 1; the whole
    # group [1, 0, 0, 0] has std 0.5, and (1 - 0) / 0.5 = 2
    with pytest.raises(CheckFailed, match=r"see completion 2 \(' cba' for prompt 'rev abc='\)"):
        teach.check_reverse_reward(REWARD_WRONG["strip_both_ends"])


def test_two_mistakes_in_two_outputs_are_both_named():
    both = _loo_with(baseline=lambda r: r.mean(1, keepdim=True).expand_as(r),
                     std=lambda r: r.std(1, keepdim=True).expand_as(r))
    with pytest.raises(CheckFailed) as err:
        teach.check_leave_one_out_baseline(both)
    lines = str(err.value).splitlines()
    assert len(lines) == 2
    assert "your baseline matches the whole group's mean" in lines[0]
    assert "your std matches the whole group's std" in lines[1]


def test_an_unknown_mistake_says_where_it_differs_case_by_case():
    def off_by_a_little(rewards, eps=1e-6):
        return adv_right(rewards, eps) * 1.01
    with pytest.raises(CheckFailed) as err:
        teach.check_grpo_advantages(off_by_a_little)
    message = str(err.value)
    assert err.value.mistake is None and err.value.case == "one correct of four"
    assert "advantages[0, 0] is 1.01 where rlnb.grpo_advantages gives 1 (off by 0.01)" in message
    assert "(no known mistake explains them all)" in message
    assert "dividing by the whole group's std" not in message  # the known ones are not listed


def test_a_mistake_on_some_cases_only_is_not_named_as_that_mistake():
    def sometimes(rewards, eps=1e-6):  # the no-std mistake, but only for G = 4
        return ADV_WRONG["no_std"](rewards) if rewards.shape[1] == 4 else adv_right(rewards)
    with pytest.raises(CheckFailed) as err:
        teach.check_grpo_advantages(sometimes)
    assert err.value.mistake is None
    assert "on this case it matches not dividing by the std at all" in str(err.value)
    assert "but not on every case" in str(err.value)


def test_a_stub_stops_with_its_own_message():
    def stub(rewards):
        raise NotImplementedError("implement this: the leave-one-out mean")
    with pytest.raises(NotImplementedError, match="^implement this: the leave-one-out mean$"):
        teach.check_leave_one_out_baseline(stub)


def test_an_error_in_the_students_code_names_the_case():
    def broken(rewards):
        return rewards[:, 4], rewards[:, 4]
    with pytest.raises(CheckFailed, match=r"leave_one_out_baseline raised IndexError: .* on "
                                          r"case 'one correct of four' \(rewards=\[\[1.0, 0.0"):
        teach.check_leave_one_out_baseline(broken)


def test_in_place_edits_shapes_and_types_are_reported():
    def in_place(rewards, eps=1e-6):
        rewards -= loo_right(rewards)[0]
        return rewards
    with pytest.raises(CheckFailed, match="changed its input 'rewards' in place"):
        teach.check_grpo_advantages(in_place)
    with pytest.raises(CheckFailed, match=r"your advantages have shape \[4, 1\] on case 'one "
                                          r"correct of four', expected \[1, 4\]"):
        teach.check_grpo_advantages(lambda r, eps=1e-6: adv_right(r).T)
    with pytest.raises(CheckFailed, match=r"returned one Tensor on case 'one correct of four'; "
                                          r"return 2 values: \(baseline, std\)"):
        teach.check_leave_one_out_baseline(lambda r: loo_right(r)[0])
    with pytest.raises(CheckFailed, match="takes your function leave_one_out_baseline itself"):
        teach.check_leave_one_out_baseline(loo_right(torch.ones(1, 2)))
    with pytest.raises(CheckFailed, match="returned rewards as str"):
        teach.check_reverse_reward(lambda p, c: "cba")


def test_a_value_without_a_gradient_is_caught():
    def detached(logprobs, prev_logprobs, advantages, **kw):
        return clip_right(logprobs.detach(), prev_logprobs, advantages, **kw)
    with pytest.raises(CheckFailed, match="your values are right but no gradient reaches "
                                          "'logprobs'") as err:
        teach.check_ppo_clip_loss(detached)
    assert err.value.mistake == "no_gradient"

    def score_function(logprobs, prev_logprobs, advantages, **kw):
        # the right values, with REINFORCE's gradient -A (not -A·ρ) on the unclipped tokens
        value = clip_right(logprobs.detach(), prev_logprobs, advantages, **kw)
        unclipped = value == -advantages * (logprobs.detach() - prev_logprobs).exp()
        surrogate = -advantages * logprobs * unclipped
        return value + surrogate - surrogate.detach()
    with pytest.raises(CheckFailed, match="your values are right but the gradient with respect "
                                          "to 'logprobs' is not: on case 'inside the clip'") as err:
        teach.check_ppo_clip_loss(score_function)
    assert err.value.mistake == "wrong_gradient"


def test_check_kl_estimator_refuses_an_unknown_kind():
    with pytest.raises(ValueError, match=r"kind must be one of \['k1', 'k2', 'k3'\], got 'k4'"):
        teach.check_kl_estimator("k4", KL_RIGHT["k1"])


def test_the_cases_tell_every_pair_of_mistakes_apart():
    """No two mistakes of an exercise give the same outputs on every case: otherwise the second
    could never be named."""
    from rlnb.teach.check import _close, _computed
    warnings.simplefilter("ignore")  # the mistakes' own (torch.std of one value): test-local
    for name, ex in teach.EXERCISES.items():
        for i, a in enumerate(ex.mistakes):
            for b in ex.mistakes[i + 1:]:
                for k in range(len(ex.outputs)):
                    outs_a = [_computed(a.compute, ex, c)[k] for c in ex.cases]
                    outs_b = [_computed(b.compute, ex, c)[k] for c in ex.cases]
                    ref = [_computed(ex.reference, ex, c)[k] for c in ex.cases]
                    if all(_close(x, r, ex) for x, r in zip(outs_a, ref)):
                        continue  # a's mistake is in another output
                    assert not all(_close(x, y, ex) for x, y in zip(outs_a, outs_b)), \
                        f"{name}: {a.key} and {b.key} give the same {ex.outputs[k]}"


def test_in_ipython_a_failed_check_shows_no_library_frame():
    """The notebook display: the cell's line, then the message; none of rlnb's frames."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    try:
        assert teach.show_check_failures(shell)
        shell.user_ns["teach"] = teach
        with capture_output() as shown:
            shell.run_cell("def adv(rewards, eps=1e-6):\n    return rewards * 0 + 1\n"
                           "teach.check_grpo_advantages(adv)")
        text = re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout + shown.stderr)  # no colours
        assert "CheckFailed" in text and "teach.check_grpo_advantages(adv)" in text, text
        assert "rlnb/teach/" not in text and "check.py" not in text, text
    finally:
        InteractiveShell.clear_instance()


def test_in_ipython_an_unfilled_stub_is_one_line():
    """The student copy's stub, reached through a check: no frame at all, the message and where
    to write, on one line."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    shell = InteractiveShell.instance()
    try:
        assert teach.show_check_failures(shell)
        shell.user_ns["teach"] = teach
        with capture_output() as shown:
            shell.run_cell('def leave_one_out_baseline(rewards):\n    """doc"""\n'
                           '    raise NotImplementedError("implement this: the mean")\n\n\n'
                           "teach.check_leave_one_out_baseline(leave_one_out_baseline)")
        text = re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout + shown.stderr).strip()
        assert text == ("NotImplementedError: implement this: the mean (in "
                        "leave_one_out_baseline: write your code in place of the raise line)")
    finally:
        InteractiveShell.clear_instance()


def test_an_unexplained_mistake_lists_each_case_passed_or_failed_once():
    def right_only_with_two(rewards, eps=1e-6):  # right for G = 2 groups, else scaled
        return adv_right(rewards, eps) * (1.0 if rewards.shape[1] == 2 else 1.5)
    with pytest.raises(CheckFailed) as err:
        teach.check_grpo_advantages(right_only_with_two)
    lines = str(err.value).splitlines()
    cases = teach.EXERCISES["grpo_advantages"].cases
    assert lines[0].startswith("grpo_advantages: your advantages differ from "
                               "rlnb.grpo_advantages on ")
    assert len(lines) == 1 + len(cases)  # one line per case, no list of every known mistake
    for line, case in zip(lines[1:], cases):
        assert line.startswith((f"  ✓ '{case.name}'", f"  ✗ '{case.name}'")), line
    assert any(x.startswith("  ✓ ") for x in lines) and any(x.startswith("  ✗ ") for x in lines)


def _gae_compressed(rewards, values, mask, *, gamma=1.0, lam=0.95):
    """Right, written otherwise: each row's valid tokens gathered, GAE on them, scattered back."""
    adv = torch.zeros_like(values)
    for b in range(values.shape[0]):
        idx = mask[b].nonzero().flatten()
        v = values[b, idx]
        v_next = torch.cat([v[1:], v.new_zeros(1)])
        r = torch.zeros_like(v)
        r[-1] = rewards[b]
        deltas = r + gamma * v_next - v
        weights = (gamma * lam) ** torch.arange(len(v), dtype=v.dtype)
        a = torch.stack([(deltas[t:] * weights[: len(v) - t]).sum() for t in range(len(v))])
        adv[b, idx] = a
    return adv, (adv + values) * mask


def _adv_closed_form(rewards, eps=1e-6):
    """Right, written otherwise: the leave-one-out mean and Bessel std from sums of squares."""
    G = rewards.shape[1]
    s, q = rewards.sum(1, keepdim=True), (rewards ** 2).sum(1, keepdim=True)
    mean = (s - rewards) / (G - 1)
    n = G - 1
    var = ((q - rewards ** 2) - n * mean ** 2) / max(n - 1, 1)
    std = var.clamp(min=0).sqrt() if n > 1 else torch.zeros_like(rewards)
    std = torch.where(std < 1e-6, torch.zeros_like(std), std)
    diff = rewards - mean
    return torch.where(std > 0, diff / (std + eps), diff)


def _dpo_view(logprobs, reference_logprobs, token_mask, *, beta=0.1):
    """Right, written otherwise: pairs as a [pairs, 2] view."""
    rho = ((logprobs - reference_logprobs) * token_mask).sum(-1).view(-1, 2)
    return F.softplus(-beta * (rho[:, 0] - rho[:, 1])).mean()


@pytest.mark.parametrize("check, fn", [
    (teach.check_gae, _gae_compressed),
    (teach.check_grpo_advantages, _adv_closed_form),
    (teach.check_dpo_loss, _dpo_view),
], ids=["gae-compressed", "advantages-closed-form", "dpo-view-softplus"])
def test_right_implementations_written_otherwise_pass(check, fn, capsys):
    check(fn)
    assert capsys.readouterr().out.startswith("✓ ")
