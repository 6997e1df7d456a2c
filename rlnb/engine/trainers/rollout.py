"""The rollout stage every loop shares: sample, score, log-probs.

    rows -> prompts (x G) -> generator -> responses -> environment -> rewards
         -> log π_old (and log π_ref) of every generated token        = RolloutBatch

Implementation choices:
1) What sampling and scoring read is one frozen value, ``RolloutInputs`` (the task, the
   environment, a tokenizer, the length limits): nothing training changes, so the async loop's
   collector thread samples with its own copy while the trainer trains.
2) One function for single- and multi-turn rollouts: with ``max_rollout_turns > 1`` the
   environment answers between turns (``multiturn.sample_conversations``), and a task with an
   ``agent`` runs its agent code against the in-process client (``agents/rollouts.py``);
   ``token_mask`` marks only generated tokens; everything after that is the same.
3) The previous-policy and reference log-probs are computed right away (``add_logprobs``), so a
   ``RolloutBatch`` is complete: a replay after an update still uses the log-probs of the policy
   that generated it. With ``reuse_generation_logprobs`` (decided when the config loads:
   ``loop_config.py``) they are the generator's own, which agree with a second forward to ~1e-6.
4) A batch's ``weight_version`` is the policy version (training steps done) whose weights
   sampled it: the step it was sampled at here, the collector's weights in the async loop.
5) Dynamic sampling (DAPO) generates several batches and joins them: ``dynamic_sampling.py``.
   What the advantage stage makes of a batch's rewards and sample mask (scaling, shaping,
   filtering) is the next stage's: ``advantage_inputs.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rlnb.engine.agents.rollouts import sample_agent_episodes
from rlnb.engine.data.batches import RolloutBatch
from rlnb.engine.environments.base import check_rewards
from rlnb.engine.environments.multiturn import sample_conversations
from rlnb.engine.environments.prompts import format_prompt
from rlnb.engine.runtime.timing import timer
from rlnb.engine.trainers.advantage_inputs import groups_with_signal


@dataclass(frozen=True)
class RolloutInputs:
    """What sampling and scoring read (choice 1); ``Trainer.rollout_inputs()`` builds one.

    Attributes:
        task: scores responses (``Task.score``); env: steps multi-turn conversations (the task
            itself when single-turn).
        tokenizer: formats and tokenises prompts (the collector's own copy in the async loop).
        chat_template: wrap each prompt in the tokenizer's chat template.
        max_rollout_turns, max_new_tokens, max_total_length, max_prompt_length: the limits
            (``grpo.max_rollout_turns``, ``policy.generation.max_new_tokens``,
            ``policy.max_total_sequence_length``, their difference, or all but one token of
            it with ``fill_context``).
        fill_context: NeMo-RL's budget (``policy.generation.fill_context``): each response may
            fill what its own prompt leaves of ``max_total_length`` (models/context_budget.py).
    """

    task: Any
    env: Any
    tokenizer: Any
    chat_template: bool
    max_rollout_turns: int
    max_new_tokens: int
    max_total_length: int
    max_prompt_length: int
    fill_context: bool = False


def sample_and_score(inputs: RolloutInputs, generator, rows: list[dict[str, Any]],
                     generations: int, step: int) -> RolloutBatch:
    """Sample ``generations`` responses per row with ``generator`` and score them: a
    ``RolloutBatch`` whose ``prev_logprobs`` and ``reference_logprobs`` are None (they need the
    policy: ``add_logprobs``)."""
    rep_rows = [r for r in rows for _ in range(generations)]
    agent = getattr(inputs.task, "agent", None)
    prompts = [format_prompt(r, inputs.tokenizer, inputs.chat_template) for r in rep_rows
               ] if agent is None else []
    extra: dict[str, float] = {}
    sample_mask = torch.ones(len(rep_rows))
    if agent is not None:  # the task's agent code drives the turns (agents/rollouts.py)
        conv, sample_mask, agent_metrics = sample_agent_episodes(
            agent, generator, inputs.tokenizer, rep_rows, max_turns=inputs.max_rollout_turns,
            max_new_tokens=inputs.max_new_tokens, max_total_length=inputs.max_total_length,
            rewards_of=getattr(inputs.task, "rewards_of", None))
        prompts = conv.prompts  # the agent's first request, as the template rendered it
        gens, rewards, generated = conv.generations, conv.rewards, conv.token_mask
        t_gen, t_reward = conv.seconds_generation, conv.seconds_environment
        extra.update(agent_metrics, **{"train/mean_turns": float(conv.turns.float().mean())})
    elif inputs.max_rollout_turns > 1:  # prompt | turn | observation | turn ... (multiturn.py)
        conv = sample_conversations(
            generator, inputs.env, inputs.tokenizer, prompts, rep_rows,
            max_turns=inputs.max_rollout_turns, max_new_tokens=inputs.max_new_tokens,
            max_total_length=inputs.max_total_length,
            max_prompt_length=inputs.max_prompt_length,
        )
        gens, rewards, generated = conv.generations, conv.rewards, conv.token_mask
        t_gen, t_reward = conv.seconds_generation, conv.seconds_environment
        extra["train/mean_turns"] = float(conv.turns.float().mean())
    else:
        elapsed = timer()
        if inputs.fill_context:  # NeMo-RL's per-row budget (models/context_budget.py)
            from rlnb.engine.models.context_budget import generate_to_context

            gens = generate_to_context(generator, prompts, inputs.tokenizer,
                                       inputs.max_prompt_length, inputs.max_total_length,
                                       inputs.max_new_tokens)
        else:
            gens = generator.generate(prompts)
        t_gen = elapsed()
        elapsed = timer()
        rewards = check_rewards(
            inputs.task.score_rollout(prompts, rep_rows, gens, generations=generations,
                                      step=step), len(prompts), inputs.task.name)
        t_reward = elapsed()
        generated = gens.response_mask.float()
        extra.update({f"train/{k}": v for k, v in rewards.metrics.items()})
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
        token_mask=token_mask, sample_mask=sample_mask,
        generation_logprobs=gen_lp, prev_logprobs=None, reference_logprobs=None,
        rewards=rewards.total.float(), reward_components=dict(rewards.components),
        correct=rewards.correct.bool(), truncated=gens.truncated, response_lengths=lengths,
        weight_version=step,  # choice 4
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


def add_logprobs(policy, batch: RolloutBatch, *, reuse: bool, reference: bool) -> RolloutBatch:
    """Fill ``batch.prev_logprobs`` (the policy's log-probs of every generated token, or the
    generator's own with ``reuse``: choice 3) and, with ``reference``, ``reference_logprobs``,
    in place; returns it."""
    elapsed = timer()
    if reuse:
        batch.prev_logprobs = batch.generation_logprobs * batch.token_mask
    else:
        batch.prev_logprobs = policy.logprobs(
            batch.input_ids, batch.attention_mask, token_mask=batch.token_mask
        ) * batch.token_mask
    if reference:
        batch.reference_logprobs = policy.logprobs(
            batch.input_ids, batch.attention_mask, reference=True, token_mask=batch.token_mask
        ) * batch.token_mask
    batch.metrics["timing/train/policy_and_reference_logprobs"] = elapsed()
    return batch


def outcome_metrics(dist, batch: RolloutBatch, signal: bool = True, correct: bool = True
                    ) -> dict[str, float]:
    """The rewards' mean, spread and standard error over ranks (``dist``: the trainer's
    ``Distributed``), each reward component's mean (``train/reward/<name>``), response lengths
    by outcome (when the task defines ``correct``) and (``signal``) the fraction of groups with
    signal, of the batch a step trains on."""
    out = reward_metrics(dist, batch.rewards, batch.group)
    out.update(dist.mean_dict({f"train/reward/{k}": float(v.double().mean())
                               for k, v in batch.reward_components.items()}))
    if correct:
        out.update(length_by_outcome(batch.response_lengths, batch.correct))
    if signal:  # (dynamic sampling counts every group it generated instead)
        with_signal, groups = groups_with_signal(batch.group, batch.rewards)
        # every rank holds as many groups: the mean over ranks is the global fraction
        out.update(dist.mean_dict({"train/groups_with_signal": with_signal / groups}))
    return out


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


def reward_metrics(dist, rewards: torch.Tensor, group: torch.Tensor | None = None
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
        num_groups = len(ids) * dist.world_size
    moments = dist.mean_dict(moments)  # every rank holds as many rows and groups
    out = {"train/reward": moments["r"],
           "train/reward_std": max(moments["r2"] - moments["r"] ** 2, 0.0) ** 0.5}
    if num_groups >= 2:  # Bessel: sqrt(var_P(group means) · P/(P-1) / P)
        out["train/reward_sem"] = (max(moments["g2"] - moments["g"] ** 2, 0.0)
                                   / (num_groups - 1)) ** 0.5
    return out

