"""Exercise 5's check: generalised advantage estimation per token, and the returns.

    R_t = r at the row's last valid token, else 0
    δ_t = R_t + γ·V_next - V_t,     A_t = δ_t + γλ·A_next,     returns_t = A_t + V_t

right to left over the valid tokens: a masked position advances neither V_next nor A_next,
and past the last valid token both are 0 (the episode ended). The reference is
``rlnb.gae_advantages(..., normalize_advantages=False)`` (raw advantages, zero where the mask
is 0), with the returns masked too (rlnb leaves them unmasked; the loss masks them).
"""

from __future__ import annotations

import torch

from rlnb.algorithms.gae import gae_advantages
from rlnb.teach.check import Case, Exercise, Mistake, check


def reference_gae(rewards, values, mask, *, gamma=1.0, lam=0.95):
    """rlnb's raw GAE advantages and returns ``[B, T]`` each, zero where ``mask`` is 0."""
    adv, returns = gae_advantages(rewards, values, mask, gae_gamma=gamma, gae_lambda=lam,
                                  normalize_advantages=False)
    return adv, returns * mask


def _variant(*, reward_at="last_valid", direction="right_to_left", trace="gamma_lambda",
             delta="gamma", padding="terminal", gaps="carry", returns="a_plus_v"):
    """A wrong GAE: each keyword names what the mistake changes (defaults are right)."""

    def gae(rewards, values, mask, *, gamma=1.0, lam=0.95):
        B, T = values.shape
        token_rewards = torch.zeros_like(values)
        for b in range(B):
            valid = mask[b].nonzero().flatten()
            if len(valid):
                t_r = {"last_valid": int(valid[-1]), "end": T - 1,
                       "count": len(valid) - 1}[reward_at]
                token_rewards[b, t_r] = rewards[b]
        adv = torch.zeros_like(values)
        if padding == "through":  # vectorised over every position, masked only at the end
            adv = _plain_gae(token_rewards, values, gamma, lam) * mask
            return adv, (adv + values) * mask
        if direction == "accumulate_forward":
            return _accumulated_forward(token_rewards, values, mask, gamma, lam)
        for b in range(B):
            next_v = next_a = 0.0
            steps = range(T - 1, -1, -1) if direction == "right_to_left" else range(T)
            last = int(mask[b].nonzero().flatten()[-1]) if mask[b].any() else -1
            if padding == "bootstrap" and 0 <= last < T - 1:
                next_v = float(values[b, last + 1])  # the padding's value, not 0
            for t in steps:
                if mask[b, t] == 0:
                    if gaps == "reset" and t < last:
                        next_v = next_a = 0.0
                    continue
                discount = {"gamma": gamma, "gamma_lambda": gamma * lam, "lambda": lam,
                            "none": 0.0}[delta]
                d = token_rewards[b, t] + discount * next_v - values[b, t]
                a = d + (gamma * lam if trace == "gamma_lambda" else lam) * next_a
                adv[b, t] = a
                next_v, next_a = float(values[b, t]), float(a)
        if returns == "a_plus_v":
            ret = (adv + values) * mask
        elif returns == "unmasked":
            ret = adv + values
        else:  # the discounted reward-to-go (λ = 1 returns), whatever λ
            ret = reference_gae(rewards, values, mask, gamma=gamma, lam=1.0)[1]
        return adv, ret

    return gae


def _plain_gae(token_rewards, values, gamma, lam):
    """GAE over every position of each row, padding included (V past the row's end is 0)."""
    B, T = values.shape
    adv = torch.zeros_like(values)
    next_v = torch.zeros(B)
    next_a = torch.zeros(B)
    for t in range(T - 1, -1, -1):
        d = token_rewards[:, t] + gamma * next_v - values[:, t]
        next_a = d + gamma * lam * next_a
        adv[:, t], next_v = next_a, values[:, t]
    return adv


def _accumulated_forward(token_rewards, values, mask, gamma, lam):
    """Right δ's (V_next: the next valid token's value), accumulated from the left."""
    B, T = values.shape
    adv = torch.zeros_like(values)
    for b in range(B):
        valid = [int(t) for t in mask[b].nonzero().flatten()]
        deltas = [float(token_rewards[b, t]) + gamma * (float(values[b, valid[j + 1]])
                                                       if j + 1 < len(valid) else 0.0)
                  - float(values[b, t]) for j, t in enumerate(valid)]
        a = 0.0
        for t, d in zip(valid, deltas):
            a = d + gamma * lam * a
            adv[b, t] = a
    return adv, (adv + values) * mask


MISTAKES = [
    Mistake("reward_at_last_position", "putting the reward at the last position T-1 instead "
            "of the row's last valid token (padding follows short rows)",
            _variant(reward_at="end")),
    Mistake("left_to_right", "running the recursion left to right: A_t needs A_{t+1}, so it "
            "must run from the end backwards", _variant(direction="left_to_right")),
    Mistake("lambda_without_gamma", "A_t = δ_t + λ·A_{t+1} (the γ in γλ is missing)",
            _variant(trace="lambda")),
    Mistake("gamma_lambda_in_delta", "δ_t = R_t + γλ·V_{t+1} - V_t (λ belongs in the "
            "accumulation, not in δ)", _variant(delta="gamma_lambda")),
    Mistake("bootstrap_from_padding", "bootstrapping the last valid token from the padding's "
            "value: past the end of the response V_next is 0 (the episode is over)",
            _variant(padding="bootstrap")),
    Mistake("reset_at_gap", "resetting V_next and A_next at a masked position inside the row "
            "(an environment turn between two responses is not the end of the episode: skip "
            "it and carry both across)", _variant(gaps="reset")),
    Mistake("monte_carlo_returns", "the Monte Carlo reward-to-go (the λ = 1 return) instead "
            "of A_t + V_t", _variant(returns="reward_to_go")),
    Mistake("accumulated_from_the_left", "the right δ_t, but accumulated from the left, "
            "A_t = δ_t + γλ·A_{t-1}: A_t sums the δ's that come *after* t, so the recursion runs "
            "from the end backwards", _variant(direction="accumulate_forward")),
    Mistake("gamma_lambda_swapped", "δ_t = R_t + λ·V_{t+1} - V_t (γ and λ swapped: γ "
            "discounts the next value in δ, λ only weighs the accumulation)",
            _variant(delta="lambda")),
    Mistake("no_bootstrap", "δ_t = R_t - V_t (the γ·V_{t+1} term is missing: δ bootstraps from "
            "the next token's value)", _variant(delta="none")),
    Mistake("through_padding", "running the recursion over every position and masking only "
            "at the end: masked positions (padding, an environment turn) pass their values "
            "into V_next and their δ's into A_next; skip them", _variant(padding="through")),
    Mistake("reward_at_count_minus_one", "putting the reward at index mask.sum() - 1 (the "
            "number of valid tokens minus 1): that is the last valid token only when the valid "
            "tokens start at 0 with no gap; take the index of the last 1 in the mask",
            _variant(reward_at="count")),
    Mistake("unmasked_returns", "returns A_t + V_t at every position: they must be 0 where "
            "the mask is 0, like the advantages (multiply by the mask)",
            _variant(returns="unmasked")),
]


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


CASES = [
    Case("γ = λ = 1, full rows", {"rewards": _t([1.0, 0.0]),
                                  "values": _t([[0.5, 0.6, 0.7], [0.2, 0.1, 0.4]]),
                                  "mask": _t([[1, 1, 1], [1, 1, 1]]), "gamma": 1.0, "lam": 1.0},
         "no padding, no discount"),
    Case("γ = 0.9, λ = 0.8, padding", {"rewards": _t([1.0, -1.0, 0.5]),
                                       "values": _t([[0.5, 0.3, 0.9, 0.8],
                                                     [0.1, 0.2, 0.3, 0.4],
                                                     [0.6, 0.7, 0.2, 0.3]]),
                                       "mask": _t([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]]),
                                       "gamma": 0.9, "lam": 0.8},
         "rows of 2, 4 and 3 tokens, right-padded"),
    Case("multi-turn gap", {"rewards": _t([2.0]), "values": _t([[0.3, 0.4, 0.9, 0.9, 0.5, 0.6]]),
                            "mask": _t([[1, 1, 0, 0, 1, 1]]), "gamma": 0.95, "lam": 0.9},
         "tokens 2-3 are an environment turn (masked) between two responses"),
    Case("prompt first", {"rewards": _t([1.0, 0.5]),
                          "values": _t([[0.7, 0.7, 0.2, 0.4, 0.6], [0.5, 0.1, 0.3, 0.8, 0.9]]),
                          "mask": _t([[0, 0, 1, 1, 1], [0, 1, 1, 0, 0]]), "gamma": 1.0,
                          "lam": 0.9},
         "as in a real batch: the prompt's tokens (masked) come first, then the response"),
]

GAE = Exercise(
    function="gae",
    reference_name="rlnb.gae_advantages",
    reference=reference_gae,
    cases=CASES,
    mistakes=MISTAKES,
    outputs=("advantages", "returns"),
    positional=3,
    follows={"returns": ("advantages + values, 0 where the mask is 0",
                         lambda inputs, outs: (outs[0] + inputs["values"]) * inputs["mask"])},
)


def check_gae(fn) -> None:
    """Check ``fn(rewards [B], values [B, T], mask [B, T], *, gamma, lam)`` returning
    ``(advantages, returns)``, both ``[B, T]`` and 0 where ``mask`` is 0."""
    check(GAE, fn)
