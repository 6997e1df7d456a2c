"""A terminal tour of the algorithm layer on one frozen batch (``rlnb demo``).

It builds a small, deterministic GRPO-shaped batch (P prompts × G responses with 0/1 rewards
and per-token log-probs), then replays the same tokens through several advantage estimators,
KL estimators and clipping settings: the counterfactual comparison the notebooks do with plots.
"""

from __future__ import annotations

import torch

from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.algorithms.estimators import make_advantage_estimator
from rlnb.algorithms.kl import KL_ESTIMATORS, calculate_kl
from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.algorithms.reduction import global_valid_counts


def frozen_batch(num_prompts: int = 4, group_size: int = 4, seq_len: int = 12, seed: int = 0):
    """A deterministic batch in NeMo-RL's stored layout (``[B, S]`` tensors, B = P*G)."""
    g = torch.Generator().manual_seed(seed)
    B = num_prompts * group_size
    prompt_ids = torch.arange(num_prompts).repeat_interleave(group_size)[:, None]  # [B, 1]
    rewards = (torch.rand(B, generator=g) < 0.5).float()
    rewards[:group_size] = 1.0  # one group that is all correct: no learning signal
    lengths = torch.randint(3, seq_len - 3, (B,), generator=g)
    token_mask = torch.zeros(B, seq_len)
    for b, n in enumerate(lengths.tolist()):  # prompt = first 3 tokens, then n response tokens
        token_mask[b, 3 : 3 + n] = 1
    generation = -torch.rand(B, seq_len, generator=g) * 2  # log-probs in (-2, 0]
    # noisy copies, kept log-probabilities (<= 0): the loss refuses anything else
    prev = (generation + 0.02 * torch.randn(B, seq_len, generator=g)).clamp(max=0)
    current = (prev + 0.15 * torch.randn(B, seq_len, generator=g)).clamp(max=0)
    reference = (prev + 0.3 * torch.randn(B, seq_len, generator=g)).clamp(max=0)
    return {
        "prompt_ids": prompt_ids,
        "rewards": rewards,
        "token_mask": token_mask,
        "sample_mask": torch.ones(B),
        "generation_logprobs": generation,
        "prev_logprobs": prev,
        "reference_policy_logprobs": reference,
        "current_logprobs": current,
    }


def _row(label: str, values, width: int = 7) -> str:
    return f"{label:<28}" + "".join(f"{v:>{width}.3f}" for v in values)


def run_demo(seed: int = 0, print_fn=print) -> dict[str, torch.Tensor]:
    """Print the tour; return the advantages per estimator (used by the tests)."""
    batch = frozen_batch(seed=seed)
    B = batch["rewards"].shape[0]
    mask = batch["token_mask"] * batch["sample_mask"][:, None]
    print_fn(f"rlnb demo: one frozen batch of {B} responses (4 prompts x 4), seed {seed}\n")
    print_fn(_row("rewards", batch["rewards"].tolist()))
    _, std = calculate_baseline_and_std_per_prompt(batch["prompt_ids"], batch["rewards"])
    zero = (std == 0).view(4, 4).all(dim=1)  # [P]
    silent = zero.nonzero().flatten().tolist()
    print_fn(f"groups with no learning signal (all rewards equal): {silent}\n")

    print_fn("advantage per response, same rewards through each estimator:")
    settings = {
        "GRPO (RLOO baseline)": {"name": "grpo"},
        "GRPO (group mean)": {"name": "grpo", "use_leave_one_out_baseline": False},
        "Dr. GRPO (no std)": {"name": "grpo", "normalize_rewards": False},
        "Reinforce++": {"name": "reinforce_plus_plus"},
    }
    out = {}
    for label, cfg in settings.items():
        adv = make_advantage_estimator(cfg).compute_advantage(
            batch["prompt_ids"], batch["rewards"], mask
        )
        out[label] = adv
        first_valid = mask.argmax(dim=1)  # [B]: first response token of each row
        print_fn(_row(label, adv[torch.arange(B), first_valid].tolist()))

    print_fn("\nKL(policy || reference) per estimator, mean over response tokens:")
    for name in KL_ESTIMATORS:
        kl = calculate_kl(batch["current_logprobs"], batch["reference_policy_logprobs"], name)
        print_fn(f"  {name}: {float((kl * mask).sum() / mask.sum()):.5f}")

    print_fn("\nclipped policy loss on the same tokens (GRPO advantages):")
    data = {k: batch[k] for k in ("generation_logprobs", "prev_logprobs",
                                  "reference_policy_logprobs", "token_mask", "sample_mask")}
    data["advantages"] = out["GRPO (RLOO baseline)"]
    n_seq, n_tok = global_valid_counts(batch["token_mask"][:, 1:], batch["sample_mask"])
    logprobs = batch["current_logprobs"][:, 1:]
    variants = {
        "PPO clip 0.2": {},
        "DAPO clip-higher 0.28": {"ratio_clip_max": 0.28},
        "sequence-level (GRPO paper)": {"token_level_loss": False},
        "GSPO sequence ratios": {
            "token_level_loss": False,
            "sequence_level_importance_ratios": True,
        },
        "REINFORCE (no ratio)": {"disable_ppo_ratio": True},
    }
    print_fn(f"{'':<28}{'loss':>9}{'ratio':>9}{'clipped':>9}{'kl':>9}")
    for label, cfg in variants.items():
        loss, m = ClippedPGLossFn(cfg).from_logprobs(logprobs, data, n_seq, n_tok)
        print_fn(f"{label:<28}{loss.item():>9.4f}{m['probs_ratio']:>9.4f}"
                 f"{m['probs_ratio_clamped']:>9.4f}{float(m['kl_penalty']):>9.4f}")
    print_fn("\nNext: the notebooks step through the same stages on a real model.")
    return out
