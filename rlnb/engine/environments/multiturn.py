"""Multi-turn rollouts: generate, let the environment answer, generate again, token for token.

    prompt | assistant turn 1 | observation 1 | assistant turn 2 | ... (until done)
    token_mask: 0 on the prompt and on observations, 1 on every generated token

The trainer calls ``sample_conversations`` instead of one ``generate`` when
``grpo.max_rollout_turns > 1``; the rest of the step (log-probs, advantages, loss) is the same:
the loss sees only the generated tokens, through ``token_mask``.

Implementation choices (following NeMo-RL's ``run_multi_turn_rollout``):
1) Each turn continues from token ids (``generate_ids``), never from decoded text, so the
   sequence the loss trains on is exactly the one that was sampled.
2) Only the conversations still running are sent to the generator and the environment; their
   per-turn rewards are summed into the episode reward, ``correct`` is the last step's.
3) An episode ends when the environment says done, when the next observation would not fit in
   ``policy.max_total_sequence_length`` (``truncated``), or after ``max_rollout_turns`` turns.
   A turn that used all ``max_new_tokens`` without stopping is still answered by the
   environment; ``truncated`` is the last turn's flag, as in a single-turn rollout.
4) Observations are tokenized as the environment wrote them (no chat template): the environment
   owns their format.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from pydantic import Field

from rlnb.config import Config, cross_field_rule
from rlnb.engine.environments.base import Environment, Rewards, StepResult, check_rewards
from rlnb.engine.models.backend import Generations, left_pad, tokenize_prompts


class EnvConfig(Config):
    """``env``: what answers the policy. ``task`` scores one response per prompt (the data
    task); ``retry`` gives a wrong answer ``retry_feedback`` and another turn, up to
    ``grpo.max_rollout_turns``."""

    name: str = Field("task", description="task | retry")
    retry_feedback: str = Field(" no. try again: ", description="retry: the observation text")

    @cross_field_rule
    def _feedback_only_for_retry(self) -> EnvConfig:
        default = type(self).model_fields["retry_feedback"].default
        if self.name != "retry" and self.retry_feedback != default:
            raise ValueError(f"retry_feedback is for env.name=retry, not {self.name!r}")
        return self

    def build(self, task) -> Environment:
        if self.name == "task":
            return task
        if self.name == "retry":
            return RetryEnvironment(task, self.retry_feedback)
        raise ValueError(f"env.name {self.name!r} is not one of 'task', 'retry'")


class RetryEnvironment(Environment):
    """A single-turn task made multi-turn: a wrong answer gets ``feedback`` and another try.

    Reward 1 on the turn the answer is right (0 otherwise), so the episode reward is 1 if any
    turn solved it; the conversation ends when it is solved or after the last allowed turn.
    """

    def __init__(self, task, feedback: str = " no. try again: "):
        self.task, self.feedback = task, feedback
        self.name = f"retry({task.name})"

    def score(self, prompts, responses, rows) -> Rewards:
        return self.task.score(prompts, responses, rows)

    def step(self, conversations, rows, turn) -> StepResult:
        prompts = [conv[0]["content"] for conv in conversations]
        responses = [conv[-1]["content"] for conv in conversations]
        rewards = check_rewards(self.task.score(prompts, responses, rows), len(rows), self.name)
        done = [bool(c) for c in rewards.correct.tolist()]
        observations = [None if d else self.feedback for d in done]
        return StepResult(rewards=rewards, done=done, observations=observations)


@dataclass
class Conversations:
    """B sampled episodes in the rollout layout (see ``Generations``): prompt ``[B, L]``
    left-padded, then everything after it ``[B, R]`` right-padded, with ``token_mask`` ``[B, R]``
    marking the generated tokens among the observations."""

    generations: Generations  # response_* = all tokens after the prompt
    token_mask: torch.Tensor  # [B, R] float, 1 on generated tokens
    rewards: Rewards
    turns: torch.Tensor  # [B] assistant turns taken
    seconds_generation: float
    seconds_environment: float


def sample_conversations(
    generator, env: Environment, tokenizer, prompts: list[str], rows: list[dict], *,
    max_turns: int, max_new_tokens: int, max_total_length: int, max_prompt_length: int,
) -> Conversations:
    """Run B conversations of up to ``max_turns`` assistant turns (see the module doc)."""
    import time

    pad = tokenizer.pad_token_id
    prompt_ids, prompt_mask = tokenize_prompts(tokenizer, prompts, max_prompt_length)
    B = len(prompts)
    seqs = [ids[m.bool()].tolist() for ids, m in zip(prompt_ids, prompt_mask)]
    n_prompt = [len(s) for s in seqs]
    generated = [[0.0] * n for n in n_prompt]  # 1 per generated token
    logprobs = [[0.0] * n for n in n_prompt]
    conversations = [[{"role": "user", "content": p}] for p in prompts]
    total = torch.zeros(B)
    components: dict[str, torch.Tensor] = {}
    correct = torch.zeros(B, dtype=torch.bool)
    truncated = torch.zeros(B, dtype=torch.bool)
    turns = torch.zeros(B, dtype=torch.long)
    done = [False] * B
    t_gen = t_env = 0.0
    for turn in range(max_turns):
        active = [i for i in range(B) if not done[i]]
        if not active:
            break
        room = max_total_length - max(len(seqs[i]) for i in active)
        if room < 1:  # cannot happen when observations are checked below; kept as a guard
            for i in active:
                done[i], truncated[i] = True, True
            break
        ids, mask = left_pad([seqs[i] for i in active], pad)
        start = time.perf_counter()
        gens = generator.generate_ids(ids, mask, max_new_tokens=min(max_new_tokens, room))
        t_gen += time.perf_counter() - start
        for k, i in enumerate(active):
            keep = gens.response_mask[k].bool()
            seqs[i] += gens.response_ids[k][keep].tolist()
            generated[i] += [1.0] * int(keep.sum())
            logprobs[i] += gens.generation_logprobs[k][keep].tolist()
            conversations[i].append({"role": "assistant", "content": gens.texts[k]})
            turns[i] += 1
        start = time.perf_counter()
        result = env.step([conversations[i] for i in active], [rows[i] for i in active], turn)
        t_env += time.perf_counter() - start
        check_rewards(result.rewards, len(active), env.name)
        if len(result.done) != len(active) or len(result.observations) != len(active):
            raise ValueError(f"environment {env.name!r}: step returned {len(result.done)} done "
                             f"flags for {len(active)} conversations")
        for k, i in enumerate(active):
            total[i] += result.rewards.total[k]
            for name, value in result.rewards.components.items():
                components.setdefault(name, torch.zeros(B))[i] += value[k]
            correct[i] = result.rewards.correct[k]
            truncated[i] = bool(gens.truncated[k])  # the last turn's flag is the episode's
            if result.done[k]:
                done[i] = True
            else:
                obs = result.observations[k]
                if obs is None:
                    raise ValueError(f"environment {env.name!r}: conversation {i} is not done "
                                     "but has no observation")
                obs_ids = tokenizer(obs, add_special_tokens=False)["input_ids"]
                if len(seqs[i]) + len(obs_ids) + 1 > max_total_length:
                    done[i], truncated[i] = True, True
                    continue
                seqs[i] += obs_ids
                generated[i] += [0.0] * len(obs_ids)
                logprobs[i] += [0.0] * len(obs_ids)
                conversations[i].append({"role": "user", "content": obs})
    rest = [s[n:] for s, n in zip(seqs, n_prompt)]
    response_ids, response_mask = right_pad(rest, pad)
    token_mask, _ = right_pad([g[n:] for g, n in zip(generated, n_prompt)], 0.0, torch.float32)
    gen_lp, _ = right_pad([lp[n:] for lp, n in zip(logprobs, n_prompt)], 0.0, torch.float32)
    texts = [tokenizer.decode(r, skip_special_tokens=True) for r in rest]
    return Conversations(
        generations=Generations(prompt_ids, prompt_mask, response_ids, response_mask, gen_lp,
                                truncated, texts),
        token_mask=token_mask,
        rewards=Rewards(total, components, correct),
        turns=turns,
        seconds_generation=t_gen,
        seconds_environment=t_env,
    )


def right_pad(rows, pad, dtype=torch.long) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), pad, dtype=dtype)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            out[i, : len(r)] = torch.tensor(r, dtype=dtype)
            mask[i, : len(r)] = 1
    return out, mask
