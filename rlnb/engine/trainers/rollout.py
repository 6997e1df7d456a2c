"""The rollout stage every loop shares: sample, score, log-probs; dynamic sampling on top.

    rows -> prompts (x G) -> generator -> responses -> environment -> rewards
         -> log π_old (and log π_ref) of every generated token        = RolloutBatch

Implementation choices:
1) One function for single- and multi-turn rollouts: with ``max_rollout_turns > 1`` the
   environment answers between turns (``multiturn.sample_conversations``) and ``token_mask``
   marks only generated tokens; everything after that is the same.
2) The previous-policy and reference log-probs are computed right away, so a ``RolloutBatch``
   is complete: a replay after an update still uses the log-probs of the policy that generated
   it. ``reuse_generation_logprobs`` takes them from the generator instead when it sampled with
   the policy's own weights (they agree to ~1e-6; a KV-cache vs full-pass rounding). Its
   default, ``auto``, is decided when the config loads (``resolve_logprob_reuse``): reuse with
   the hf backend in float32 in a synchronous loop; recompute in bfloat16, with vLLM (its
   kernels' log-probs differ slightly) or under async GRPO (the collector samples with older
   weights). The decision is written into the resolved config, so a resumed or verified run
   makes the same one.
3) Dynamic sampling (DAPO) generates, so it is part of this stage (``dynamic_sampling.py``).
"""

from __future__ import annotations

import time
from typing import Any

import torch

from rlnb.algorithms.filtering import overlong_filter, seq_logprob_error_mask
from rlnb.algorithms.rewards import scale_rewards, shape_rewards
from rlnb.engine.batches import RolloutBatch
from rlnb.engine.environments.base import check_rewards
from rlnb.engine.environments.multiturn import sample_conversations


def timer():
    """``elapsed = timer(); ...; elapsed()`` -> seconds since the call."""
    start = time.perf_counter()
    return lambda: time.perf_counter() - start


def resolve_logprob_reuse(loop, policy, section: str) -> bool:
    """Decide ``<section>.reuse_generation_logprobs`` (choice 2), write the decision into ``loop``
    and return it. ``auto`` becomes true only where the backend (``policy.generation.backend``)
    samples with the policy's own module, in float32 (in bfloat16 a KV-cache step and a full
    pass round differently enough to matter), in a synchronous loop; an explicit true is
    refused where the generator's weights are not the policy's, naming the key (before any
    engine starts: this runs when the config loads)."""
    from rlnb.engine.models.generation import GENERATION_BACKENDS

    asynchronous = getattr(getattr(loop, "async_grpo", None), "enabled", False)
    backend = policy.generation.backend
    shares = GENERATION_BACKENDS[backend].shares_policy_weights
    if loop.reuse_generation_logprobs == "auto":
        loop.reuse_generation_logprobs = (shares and not asynchronous
                                          and policy.precision == "float32")
    elif loop.reuse_generation_logprobs and asynchronous:
        raise ValueError(
            f"{section}.reuse_generation_logprobs=true with {section}.async_grpo.enabled=true: "
            "the collector samples with older weights than the policy being trained (set it to "
            "auto or false)")
    elif loop.reuse_generation_logprobs and not shares:
        raise ValueError(
            f"{section}.reuse_generation_logprobs=true needs a generation backend that samples "
            f"with the policy's own weights; policy.generation.backend={backend!r} does not (its "
            "log-probs differ slightly from the policy's): set it to auto or false")
    return loop.reuse_generation_logprobs


def logprob_source(loop) -> str:
    """One line naming where ``prev_logprobs`` come from, for a run's first lines."""
    if loop.reuse_generation_logprobs is True:
        return ("prev_logprobs: the generator's own (it samples with the policy's weights; "
                "reuse_generation_logprobs=true)")
    return ("prev_logprobs: recomputed by the policy after generation "
            "(reuse_generation_logprobs=false)")


def generate_and_score(trainer, rows: list[dict[str, Any]], generations: int, step: int
                       ) -> RolloutBatch:
    """Sample ``generations`` responses per row, score them, compute their log-probs."""
    return add_logprobs(trainer, sample_and_score(trainer, trainer.generator, rows, generations,
                                                  step))


def sample_and_score(trainer, generator, rows: list[dict[str, Any]], generations: int, step: int,
                     tokenizer=None) -> RolloutBatch:
    """Sample ``generations`` responses per row with ``generator`` and score them: a
    ``RolloutBatch`` whose ``prev_logprobs`` and ``reference_logprobs`` are None (they need the
    policy: ``add_logprobs``). The async collector calls this from its own thread, with its own
    generator and tokenizer; it reads nothing else of the trainer that training changes."""
    tokenizer = tokenizer or trainer.policy.tokenizer
    rep_rows = [r for r in rows for _ in range(generations)]
    prompts = [trainer.format_prompt(r, tokenizer) for r in rep_rows]
    loop, p = trainer.loop_config, trainer.config.policy
    extra: dict[str, float] = {}
    if loop.max_rollout_turns > 1:  # prompt | turn | observation | turn ... (multiturn.py)
        conv = sample_conversations(
            generator, trainer.env, tokenizer, prompts, rep_rows,
            max_turns=loop.max_rollout_turns, max_new_tokens=p.generation.max_new_tokens,
            max_total_length=p.max_total_sequence_length,
            max_prompt_length=trainer.max_prompt_length,
        )
        gens, rewards, generated = conv.generations, conv.rewards, conv.token_mask
        t_gen, t_reward = conv.seconds_generation, conv.seconds_environment
        extra["train/mean_turns"] = float(conv.turns.float().mean())
    else:
        elapsed = timer()
        gens = generator.generate(prompts)
        t_gen = elapsed()
        elapsed = timer()
        rewards = check_rewards(
            trainer.task.score(prompts, gens.texts, rep_rows), len(prompts), trainer.task.name)
        t_reward = elapsed()
        generated = gens.response_mask.float()
    input_ids = torch.cat([gens.prompt_ids, gens.response_ids], dim=1)  # [B, S]
    attention_mask = torch.cat([gens.prompt_mask, gens.response_mask], dim=1)  # [B, S]
    zeros = torch.zeros_like(gens.prompt_ids, dtype=torch.float32)  # [B, L]
    token_mask = torch.cat([zeros, generated], dim=1)  # [B, S]: 1 on generated tokens only
    gen_lp = torch.cat([zeros, gens.generation_logprobs], dim=1)  # [B, S]
    lengths = generated.sum(dim=1).long()  # generated tokens (observations excluded)
    batch = RolloutBatch(
        step=step, rows=rep_rows, prompts=prompts, responses=gens.texts,
        group=torch.arange(len(rows)).repeat_interleave(generations),
        prompt_ids=gens.prompt_ids, input_ids=input_ids, attention_mask=attention_mask,
        token_mask=token_mask, sample_mask=torch.ones(len(prompts)),
        generation_logprobs=gen_lp, prev_logprobs=None, reference_logprobs=None,
        rewards=rewards.total.float(), reward_components=dict(rewards.components),
        correct=rewards.correct.bool(), truncated=gens.truncated, response_lengths=lengths,
        weight_version=gens.weight_version,
    )
    batch.metrics = {"timing/train/generation": t_gen, "timing/train/reward_calculation": t_reward,
                     **shape_metrics(batch), **extra}
    return batch


def shape_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Response and prompt lengths of a batch from one generation call (docs/metrics.md)."""
    truncated = batch.truncated.float()
    width = batch.prompt_ids.shape[1]  # one generation call: every row's prompt is [:, :L]
    return {
        "train/mean_gen_tokens_per_sample": float(batch.response_lengths.float().mean()),
        "train/max_gen_tokens_per_sample": float(batch.response_lengths.max()),
        "train/truncation_rate": float(truncated.mean()),
        "train/natural_termination_rate": float(1 - truncated.mean()),
        "train/mean_prompt_length": float(batch.attention_mask[:, :width].sum(1).float().mean()),
        "train/total_num_tokens": float(batch.attention_mask.sum()),
    }


def add_logprobs(trainer, batch: RolloutBatch) -> RolloutBatch:
    """Fill ``batch.prev_logprobs`` (the policy's current log-probs of every generated token)
    and ``reference_logprobs`` (when the run keeps a reference), in place; returns it."""
    loop, elapsed = trainer.loop_config, timer()
    if getattr(loop, "reuse_generation_logprobs", False) is True:  # never an unresolved 'auto'
        batch.prev_logprobs = batch.generation_logprobs * batch.token_mask  # choice 2
    else:
        batch.prev_logprobs = trainer.policy.logprobs(
            batch.input_ids, batch.attention_mask) * batch.token_mask
    if trainer.need_reference:
        batch.reference_logprobs = trainer.policy.logprobs(
            batch.input_ids, batch.attention_mask, reference=True) * batch.token_mask
    batch.metrics["timing/train/policy_and_reference_logprobs"] = elapsed()
    return batch


def shaped_rewards(loop, rewards, components, truncated, lengths):
    """Reward scaling then shaping (docs/algorithms.md#reward-scaling-and-shaping), pure
    functions of the raw rewards: ``(rewards [B], components name -> [B])``."""
    if loop.reward_scaling.enabled:
        kw = loop.reward_scaling.model_dump(exclude={"enabled"})
        rewards = scale_rewards(rewards, **kw)
        components = {k: scale_rewards(v, **kw) for k, v in components.items()}
    if loop.reward_shaping.enabled:
        kw = loop.reward_shaping.model_dump(exclude={"enabled"})
        rewards = shape_rewards(rewards, truncated=truncated, response_lengths=lengths, **kw)
    return rewards, components


def sample_rollout(trainer, rows: list[dict[str, Any]] | None = None) -> RolloutBatch:
    """P prompts x G responses (dynamic sampling if enabled), with the reward metrics."""
    loop = trainer.loop_config
    elapsed = timer()
    if loop.use_dynamic_sampling:  # it logs the signal of every group it generated
        from rlnb.engine.trainers.dynamic_sampling import dynamic_sampling_rollout

        batch = dynamic_sampling_rollout(trainer, rows)
    else:
        batch = generate_and_score(trainer, rows or trainer.next_prompt_rows(),
                                   loop.num_generations_per_prompt, trainer.step_count)
    batch.metrics["timing/train/rollout"] = elapsed()
    batch.metrics.update(outcome_metrics(trainer, batch,
                                         signal=not loop.use_dynamic_sampling))
    return batch


def outcome_metrics(trainer, batch: RolloutBatch, signal: bool = True) -> dict[str, float]:
    """The rewards' mean and spread over ranks, response lengths by outcome and (``signal``) the
    fraction of groups with signal, of the batch a step trains on."""
    out = {**reward_metrics(trainer, batch.rewards, batch.group),
           **length_by_outcome(batch.response_lengths, batch.correct)}
    if signal:  # (dynamic sampling counts every group it generated instead)
        with_signal, groups = groups_with_signal(batch.group, batch.rewards)
        # every rank holds as many groups: the mean over ranks is the global fraction
        out.update(trainer.dist.mean_dict({"train/groups_with_signal": with_signal / groups}))
    return out


def groups_with_signal(group: torch.Tensor, rewards: torch.Tensor) -> tuple[int, int]:
    """``(groups whose rewards are not all equal, groups)`` for group ids ``[B]`` and raw
    rewards ``[B]``: a group of equal rewards has zero advantages under any group baseline, so
    it adds nothing to the gradient (DAPO's dynamic sampling keeps only the others)."""
    ids, index = group.unique(return_inverse=True)  # [P], [B]
    r = rewards.double()
    hi = torch.full((len(ids),), -torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, "amax")
    lo = torch.full((len(ids),), torch.inf, dtype=r.dtype).scatter_reduce(0, index, r, "amin")
    return int((hi > lo).sum()), len(ids)


def length_by_outcome(response_lengths: torch.Tensor, correct: torch.Tensor
                      ) -> dict[str, float]:
    """Mean response length ``[B]`` of the correct and of the incorrect rows ``[B]`` (bool), in
    tokens: ``train/mean_gen_tokens_correct`` / ``_incorrect``. A side with no row has no key
    (rather than a NaN): a gap in the curve, as in ``metrics.jsonl`` and the dashboard."""
    lengths, out = response_lengths.double(), {}
    for name, side in (("correct", correct), ("incorrect", ~correct)):
        if bool(side.any()):
            out[f"train/mean_gen_tokens_{name}"] = float(lengths[side].mean())
    return out


def reward_metrics(trainer, rewards: torch.Tensor, group: torch.Tensor | None = None
                   ) -> dict[str, float]:
    """``train/reward`` and ``train/reward_std`` of ``[B]`` raw rewards, over all ranks, and
    (given the ``[B]`` group ids) ``train/reward_sem``, the standard error of that mean over
    prompts: responses to one prompt are not independent draws, the prompts are, and with
    equal groups the mean reward is the mean of the P group means (no key when P < 2)."""
    r = rewards.double()
    moments = {"r": float(r.mean()), "r2": float((r * r).mean())}
    num_groups = 0
    if group is not None:
        ids, index = group.unique(return_inverse=True)  # [P], [B]
        means = torch.zeros(len(ids), dtype=r.dtype).index_add_(0, index, r) / torch.bincount(
            index, minlength=len(ids))  # [P] group means
        moments.update(g=float(means.mean()), g2=float((means * means).mean()))
        num_groups = len(ids) * trainer.dist.world_size
    moments = trainer.dist.mean_dict(moments)  # every rank holds as many rows and groups
    out = {"train/reward": moments["r"],
           "train/reward_std": max(moments["r2"] - moments["r"] ** 2, 0.0) ** 0.5}
    if num_groups >= 2:  # Bessel: sqrt(var_P(group means) · P/(P-1) / P)
        out["train/reward_sem"] = (max(moments["g2"] - moments["g"] ** 2, 0.0)
                                   / (num_groups - 1)) ** 0.5
    return out


def filtered_sample_mask(loop, batch: RolloutBatch, rewards: torch.Tensor
                         ) -> tuple[torch.Tensor, dict[str, float]]:
    """``[B]`` sample mask after overlong filtering and log-prob-error masking (the loop's
    settings), with the masking metrics."""
    sample_mask, metrics = batch.sample_mask.clone(), {}
    if loop.overlong_filtering:
        sample_mask = overlong_filter(sample_mask, batch.truncated)
    if loop.seq_logprob_error_threshold is not None:
        sample_mask, err = seq_logprob_error_mask(
            batch.prev_logprobs, batch.generation_logprobs, batch.token_mask, sample_mask,
            rewards, seq_logprob_error_threshold=loop.seq_logprob_error_threshold)
        metrics.update({f"train/{k}": v for k, v in err.items()})
    return sample_mask, metrics
