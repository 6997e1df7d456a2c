"""Exercise 1's checks: the leave-one-out baseline and std, and GRPO's advantages.

    b_i = mean_{j≠i} r_j,     σ_i = Bessel std of {r_j : j≠i},
    A_i = (r_i - b_i)/(σ_i + ε) where σ_i > 0, else r_i - b_i

The student's functions take rewards ``[P, G]`` (one row per prompt, its G responses); the
references are ``rlnb.calculate_baseline_and_std_per_prompt`` and ``rlnb.grpo_advantages``
with ``leave_one_out=True`` on the same rewards flattened to ``[B]`` with a prompt id per row.
The rewards are multiples of 1/4, so every sum is exact in float32 and a two-pass std agrees
with rlnb's one-pass formula to the last bit (docs/algorithms.md#baselines).
"""

from __future__ import annotations

import torch

from rlnb.algorithms.advantages import grpo_advantages as rlnb_grpo_advantages
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.teach.check import Case, Exercise, Mistake, check


def _prompt_ids(rewards: torch.Tensor) -> torch.Tensor:
    P, G = rewards.shape
    return torch.arange(P).repeat_interleave(G)  # [B]: row b belongs to prompt b // G


def reference_baseline(rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """rlnb's leave-one-out baseline and std, ``[P, G]`` each."""
    baseline, std = calculate_baseline_and_std_per_prompt(
        _prompt_ids(rewards), rewards.reshape(-1), leave_one_out=True)
    return baseline.reshape(rewards.shape), std.reshape(rewards.shape)  # [P, G]


def reference_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """rlnb's GRPO advantages with the leave-one-out baseline and std, ``[P, G]``."""
    a = rlnb_grpo_advantages(_prompt_ids(rewards), rewards.reshape(-1), leave_one_out=True,
                             normalize_rewards=True, epsilon=eps)
    return a.reshape(rewards.shape)


# --------------------------------------------------------------------------- the mistakes


def _others_mean(r: torch.Tensor, dim: int = 1) -> torch.Tensor:
    n = r.shape[dim]
    return (r.sum(dim, keepdim=True) - r) / (n - 1)


def _others_std(r: torch.Tensor, *, unbiased: bool = True, nan_pairs: bool = False):
    P, G = r.shape
    out = torch.zeros_like(r)
    for i in range(G):
        others = torch.cat([r[:, :i], r[:, i + 1:]], dim=1)  # [P, G-1]
        if others.shape[1] < 2 and not nan_pairs:
            continue  # the std of one reward: 0 (rlnb), not NaN
        out[:, i] = others.std(dim=1, unbiased=unbiased)
    return out


def _group_std(r: torch.Tensor) -> torch.Tensor:
    return r.std(dim=1, keepdim=True).expand_as(r)


BASELINE_MISTAKES = {
    "baseline": [
        Mistake("whole_group_mean", "the whole group's mean (the response itself included) "
                "instead of the mean of the other G-1 responses",
                lambda r: (r.mean(1, keepdim=True).expand_as(r), _others_std(r))),
        Mistake("divide_by_G", "dividing the others' sum by G instead of G-1 (there are G-1 "
                "others)", lambda r: ((r.sum(1, keepdim=True) - r) / r.shape[1], _others_std(r))),
        Mistake("wrong_axis", "leaving one out along the prompts (dim 0) instead of along the "
                "group (dim 1): rewards are [P, G]",
                lambda r: (_others_mean(r, dim=0), _others_std(r))),
    ],
    "std": [
        Mistake("whole_group_std", "the whole group's std instead of the leave-one-out std "
                "(the std of the other G-1 rewards)",
                lambda r: (_others_mean(r), _group_std(r))),
        Mistake("population_std", "the std of the others with ÷ n instead of Bessel's ÷ (n-1) "
                "(torch.std's default is unbiased=True)",
                lambda r: (_others_mean(r), _others_std(r, unbiased=False))),
        Mistake("nan_pair", "NaN for a pair: with G = 2 each response has one other, whose std "
                "is undefined; rlnb defines it as 0",
                lambda r: (_others_mean(r), _others_std(r, nan_pairs=True))),
    ],
}


def _advantage_mistakes() -> list[Mistake]:
    def loo(r):
        return r - _others_mean(r), _others_std(r)

    def divided(num, std, eps):
        return torch.where(std > 0, num / (std + eps), num)

    return [
        Mistake("sign", "the baseline minus the reward instead of the reward minus the baseline "
                "(a sign error: good responses get pushed down)",
                lambda r, eps=1e-6: -divided(*loo(r), eps)),
        Mistake("divide_zero_std", "dividing by σ + ε also where σ = 0: rlnb divides only where "
                "σ > 0 and keeps r - b elsewhere (else 1/ε = 10⁶ times the difference)",
                lambda r, eps=1e-6: loo(r)[0] / (loo(r)[1] + eps)),
        Mistake("whole_group_std", "dividing by the whole group's std instead of the "
                "leave-one-out std",
                lambda r, eps=1e-6: divided(loo(r)[0], _group_std(r), eps)),
        Mistake("no_leave_one_out", "the plain GRPO advantage (r - group mean) / group std, "
                "without leave-one-out",
                lambda r, eps=1e-6: divided(r - r.mean(1, keepdim=True), _group_std(r), eps)),
        Mistake("no_std", "not dividing by the std at all (r - b: Dr. GRPO's choice, not this "
                "exercise's)", lambda r, eps=1e-6: loo(r)[0]),
        Mistake("population_std", "dividing by the others' std with ÷ n instead of Bessel's "
                "÷ (n-1) (torch.std's default is unbiased=True)",
                lambda r, eps=1e-6: divided(loo(r)[0], _others_std(r, unbiased=False), eps)),
        Mistake("sqrt_var_eps", "dividing by σ = sqrt(var + ε) everywhere: where the others "
                "agree that is (r - b)/√ε, a thousand times the difference; rlnb keeps r - b "
                "where σ = 0 and divides by σ + ε elsewhere",
                lambda r, eps=1e-6: loo(r)[0] / (loo(r)[1] ** 2 + eps).sqrt()),
        Mistake("flattened", "the right values flattened to [B]: return them as [P, G], one "
                "row per prompt, as the rewards came",
                lambda r, eps=1e-6: divided(*loo(r), eps).flatten()),
    ]


def _rewards(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


CASES = [
    Case("one correct of four", {"rewards": _rewards([[1, 0, 0, 0]])},
         "one prompt, one right answer of four"),
    Case("two prompts of six", {"rewards": _rewards([[1, 0, 0, 1, 0, 1],
                                                     [0.5, 0.5, 0, 1, 0.25, 0]])},
         "P = 2, G = 6: the group is a row"),
    Case("no signal", {"rewards": _rewards([[1, 1, 1, 1], [0, 0, 0, 0]])},
         "all-equal groups: every advantage is 0"),
    Case("pairs", {"rewards": _rewards([[1, 0], [0.5, 0.5], [1, 0.25]])},
         "G = 2: each response has one other"),
    Case("two equal others", {"rewards": _rewards([[1, 0, 0], [0, 0.5, 0.5], [1, 1, 0.5]])},
         "G = 3: the first response's others are equal, so its σ is 0"),
]

BASELINE = Exercise(
    function="leave_one_out_baseline",
    reference_name="rlnb.calculate_baseline_and_std_per_prompt",
    reference=reference_baseline,
    cases=CASES,
    mistakes=[*BASELINE_MISTAKES["baseline"], *BASELINE_MISTAKES["std"]],
    outputs=("baseline", "std"),
)

ADVANTAGES = Exercise(
    function="grpo_advantages",
    reference_name="rlnb.grpo_advantages",
    reference=reference_advantages,
    cases=CASES,
    mistakes=_advantage_mistakes(),
    outputs=("advantages",),
    # 1/ε-sized values differ in their last digits between implementations
    rtol=1e-4,
)


def check_leave_one_out_baseline(fn) -> None:
    """Check ``fn(rewards [P, G]) -> (baseline [P, G], std [P, G])``."""
    check(BASELINE, fn)


def check_grpo_advantages(fn) -> None:
    """Check ``fn(rewards [P, G], eps=1e-6) -> advantages [P, G]``."""
    check(ADVANTAGES, fn)
