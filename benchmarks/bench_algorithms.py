"""Speed of the algorithm layer against bare PyTorch, on CPU.

At B = 4096 sequences x T = 1024 tokens, 16 generations per prompt, it times
  bare      masked (logprobs * advantages).sum() forward + backward      (the floor)
  loss      clipped_pg_loss forward + backward, KL penalty and IS correction (TIS) on,
            eager and compile=True (fused loss+gradient), each with its metrics
  adv       GRPO advantages (leave-one-out baseline, std normalisation)
and prints each as a ratio. Targets: loss within 3x of bare; advantages under 5% of the loss.
Figures, not pass/fail: nothing here gates a test.

    python benchmarks/bench_algorithms.py [--batch 4096] [--tokens 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from rlnb.algorithms.advantages import grpo_advantages
from rlnb.algorithms.policy_loss import clipped_pg_loss


def timed(fn, repeats: int) -> float:
    """Median seconds of ``repeats`` calls after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    B, T, G = args.batch, args.tokens, args.group

    g = torch.Generator().manual_seed(0)
    logprobs = (torch.randn(B, T, generator=g) * 0.5 - 1.0).clamp(max=-1e-3)  # log-probs <= 0
    prev = (logprobs + 0.01 * torch.randn(B, T, generator=g)).clamp(max=0)
    generation = (prev + 0.01 * torch.randn(B, T, generator=g)).clamp(max=0)
    reference = (prev + 0.05 * torch.randn(B, T, generator=g)).clamp(max=0)
    prompt_ids = torch.arange(B // G).repeat_interleave(G)[:, None]  # [B, 1]
    rewards = (torch.rand(B, generator=g) < 0.5).float()
    lengths = torch.randint(T // 4, T + 1, (B,), generator=g)
    token_mask = (torch.arange(T)[None, :] < lengths[:, None]).float()  # right-padded [B, T]
    sample_mask = torch.ones(B)
    advantages = grpo_advantages(prompt_ids, rewards)[:, None].expand(B, T)  # [B, T] view
    n_seq, n_tok = sample_mask.sum(), token_mask.sum()

    def bare():
        x = logprobs.detach().requires_grad_()
        (x * advantages * token_mask).sum().backward()

    def loss(compile: bool):
        def run():
            x = logprobs.detach().requires_grad_()
            value, _ = clipped_pg_loss(
                x, prev, generation, advantages, token_mask, sample_mask,
                global_valid_seqs=n_seq, global_valid_toks=n_tok, reference_logprobs=reference,
                reference_policy_kl_penalty=0.01, use_importance_sampling_correction=True,
                truncated_importance_sampling_type="tis", truncated_importance_sampling_ratio=2.0,
                compile=compile,
            )
            value.backward()
        return run

    def advantages_only():
        grpo_advantages(prompt_ids, rewards)

    print(f"B={B} T={T} G={G}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    start = time.perf_counter()
    loss(True)()
    print(f"first compile=True call (compiles): {time.perf_counter() - start:.1f} s")
    t_bare = timed(bare, args.repeats)
    t_eager = timed(loss(False), args.repeats)
    t_fused = timed(loss(True), args.repeats)
    t_adv = timed(advantages_only, args.repeats)
    print(f"bare masked sum fwd+bwd     {t_bare * 1e3:8.1f} ms   1.00x")
    print(f"clipped loss, eager         {t_eager * 1e3:8.1f} ms  {t_eager / t_bare:5.2f}x")
    print(f"clipped loss, compile=True  {t_fused * 1e3:8.1f} ms  {t_fused / t_bare:5.2f}x"
          "   (target <= 3x)")
    print(f"GRPO advantages             {t_adv * 1e3:8.2f} ms  "
          f"{100 * t_adv / t_fused:5.2f}% of the compiled loss, "
          f"{100 * t_adv / t_eager:5.2f}% of the eager loss   (target < 5%)")


if __name__ == "__main__":
    main()
