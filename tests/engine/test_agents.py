"""Agents: chat templates checked for prefix preservation, tool calls read back, the in-process
OpenAI-compatible client on the tiny model, episodes stitched token for token into samples, agent
code that fails, misbehaves or rewrites its replies marked and never trained, what a run needs
(held-out rows, turns) refused up front, and agent tasks under async GRPO and a NeMo-RL YAML."""

import asyncio
import json
import re

import pytest
import torch

from rlnb.engine.agents.agent_task import AgentTask, openenv_agent, step_parts
from rlnb.engine.agents.client import AsyncLocalOpenAI, LocalOpenAI, Sampling
from rlnb.engine.agents.episode import Episode
from rlnb.engine.agents.inspector import compare_turns, to_html, trajectory_tokens
from rlnb.engine.agents.sampler import Request, Sampled
from rlnb.engine.agents.templates import check_before_training, check_prefix, render, token_ids
from rlnb.engine.agents.tool_calls import convention_of, parse_tool_calls
from rlnb.engine.environments.calculator import TOOLS, CalculatorTask, calc, run_tool
from rlnb.engine.models.tiny import TINY_CHAT_TEMPLATE, build_char_tokenizer
from rlnb.run.config.master_config import load_config

# ChatML-style, written here: every turn rendered the same way each time (prefix-preserving)
CHATML = (
    "{% for m in messages %}<s>{{ m.role }}\n{{ m.content }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}")
# the same, but like Qwen3's: an assistant turn before the last user message loses its
# <think>...</think> block
DROPS_THINK = (
    "{% set ns = namespace(last_user=-1) %}{% for m in messages %}{% if m.role == 'user' %}"
    "{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}{% set c = m.content %}"
    "{% if m.role == 'assistant' and loop.index0 < ns.last_user and '</think>' in c %}"
    "{% set c = c.split('</think>')[-1] %}{% endif %}"
    "<s>{{ m.role }}\n{{ c }}</s>\n{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant\n{% endif %}")
NO_GENERATION_PROMPT = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"

THINKING = [{"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "<think>add</think>4"},
            {"role": "user", "content": "and 3+3?"},
            {"role": "assistant", "content": "6"}]
SMALL = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
         "sft.enabled=false", "policy.tiny.chat_template=true", "grpo.num_prompts_per_step=2",
         "grpo.num_generations_per_prompt=3", "policy.max_total_sequence_length=96",
         "policy.generation.max_new_tokens=12", "grpo.max_rollout_turns=3"]


def tokenizer_with(template: str):
    tok = build_char_tokenizer()
    tok.chat_template = template
    return tok


def trainer_for(task=None, extra=()):
    from rlnb.engine.trainers.grpo import GRPOTrainer

    return GRPOTrainer(load_config(None, [*SMALL, *extra], preset="fast"), task=task)


# ---------------------------------------------------------------------------- templates
def test_a_prefix_preserving_template_passes_and_one_that_drops_think_is_caught():
    assert check_prefix(tokenizer_with(CHATML), THINKING).ok
    report = check_prefix(tokenizer_with(DROPS_THINK), THINKING)
    assert not report.ok and report.turn == 1
    # "<s>user\n2+2?</s>\n<s>assistant\n" is 23 tokens (<s> and </s> one each): the next token
    # is where "<think>" was; afterwards the answer "4" stands there
    assert report.position == 23
    assert report.before[:3] == ["<", "t", "h"] and report.after[:2] == ["4", "</s>"]
    with pytest.raises(ValueError, match=r"not prefix-preserving: after message 1 .*usual fixes"):
        check_before_training(tokenizer_with(DROPS_THINK))
    check_before_training(tokenizer_with(CHATML))
    check_before_training(build_char_tokenizer(chat_template=True))


def test_a_template_without_a_generation_prompt_is_refused():
    with pytest.raises(ValueError, match="adds no generation prompt"):
        check_before_training(tokenizer_with(NO_GENERATION_PROMPT))
    with pytest.raises(ValueError, match="no chat template.*policy.tiny.chat_template=true"):
        render(build_char_tokenizer(), THINKING)


def test_the_tiny_template_renders_tool_calls_as_the_calculator_demonstrates_them():
    tok = build_char_tokenizer(chat_template=True)
    assert tok.chat_template == TINY_CHAT_TEMPLATE and convention_of(tok) == "hermes"
    task = CalculatorTask(tool_demos=1.0, num_val=10)
    row = task.train_rows(1)[0]
    a, b = row["question"].split("*")
    conversation = [*row["prompt"],
                    {"role": "assistant", "content": "", "tool_calls": [
                        {"id": "call_0", "type": "function", "function": {
                            "name": "calc", "arguments": json.dumps({"x": row["question"]},
                                                             separators=(",", ":"))}}]},
                    {"role": "tool", "content": str(int(a) * int(b))},
                    {"role": "assistant", "content": row["answer"]}]
    # the warm start's text (prompt + demonstration + EOS) is the template's rendering
    assert (render(tok, row["prompt"]) + task.demonstration(row) + "</s>\n"
            == render(tok, conversation, add_generation_prompt=False))
    assert check_prefix(tok, conversation, TOOLS).ok


def test_the_calculator_settings_change_its_rows_demonstrations_and_episodes():
    rows = CalculatorTask(digits=3, num_val=10).train_rows(50)
    assert all(len(f) == 3 for r in rows for f in r["question"].split("*"))
    assert all(r["answer"] == str(eval(r["question"])) for r in rows)  # noqa: S307 - our rows
    for share in (0.0, 0.3, 1.0):
        task = CalculatorTask(tool_demos=share, num_val=10)
        calls = [task.demonstration(r).startswith("<tool_call>") for r in task.train_rows(400)]
        assert abs(sum(calls) / 400 - share) < 0.06, share
    # max_tool_calls=0: the first reply is the answer, even a tool call (which scores 0)
    replies = iter(['<tool_call>{"name":"calc","arguments":{"x":"1*1"}}</tool_call>', "1"])

    class Scripted:  # replies from a script (the untrained model would not call the tool)
        def __init__(self):
            self.chat = self
            self.completions = self
            self.sampling = Sampling(generator=object(), tokenizer=build_char_tokenizer(True))

        async def create(self, **kwargs):
            text = next(replies)
            return self.sampling.reply(kwargs["messages"], kwargs["tools"], Request([1]),
                                       [Sampled([5], [0.0], text, "stop")])

    row = {"prompt": [{"role": "user", "content": "1*1"}], "question": "1*1", "answer": "1"}
    assert asyncio.run(CalculatorTask(max_tool_calls=0, num_val=1, digits=1).agent(
        Scripted(), row)) == {"correct": 0.0}
    replies = iter(['<tool_call>{"name":"calc","arguments":{"x":"1*1"}}</tool_call>', "1"])
    assert asyncio.run(CalculatorTask(max_tool_calls=1, num_val=1, digits=1).agent(
        Scripted(), row)) == {"correct": 1.0}


# ---------------------------------------------------------------------------- tool calls
def test_tool_calls_are_read_in_the_template_convention():
    got = parse_tool_calls('ok <tool_call>{"name": "calc", "arguments": {"x": "2*3"}}</tool_call>',
                           "hermes")
    assert got.content == "ok" and got.malformed == 0
    assert got.calls == [{"id": "call_0", "type": "function",
                          "function": {"name": "calc", "arguments": '{"x": "2*3"}'}}]
    bad = parse_tool_calls('<tool_call>{"name": calc}</tool_call>', "hermes")
    assert bad.calls == [] and bad.malformed == 1 and bad.content == '<tool_call>{"name": calc}</tool_call>'
    assert parse_tool_calls('<tool_call>{"name": "calc", "argu', "hermes").malformed == 1
    llama = parse_tool_calls('{"name": "calc", "parameters": {"x": "1+1"}}', "json")
    assert llama.calls[0]["function"]["arguments"] == '{"x": "1+1"}'
    assert parse_tool_calls("just text", "json").calls == []
    assert convention_of(tokenizer_with(CHATML)) is None


def test_the_calculator_tool_computes_and_answers_mistakes_with_an_error():
    assert calc("37*48") == "1776" and calc(" 9 - 12 ") == "-3"
    assert calc("2**10").startswith("error") and calc("__import__('os')").startswith("error")
    assert run_tool("calc", '{"x": "6*7"}') == "42"
    assert run_tool("calc", "{x}") == "error: arguments are not JSON"
    assert run_tool("search", "{}") == "error: no tool 'search'"


# ---------------------------------------------------------------------------- the client
def test_the_client_samples_from_the_policy_with_its_tokens_and_logprobs():
    trainer = trainer_for()
    client = LocalOpenAI(trainer)
    reply = client.chat.completions.create(
        model="anything", messages=[{"role": "user", "content": "2*3"}], n=3, temperature=1.0,
        logprobs=True)
    assert len(reply.choices) == 3 and reply.object == "chat.completion"
    prompt = trainer.policy.tokenizer("<s>U:2*3\nA:", add_special_tokens=False)["input_ids"]
    assert reply.prompt_token_ids == prompt and reply.usage.prompt_tokens == len(prompt)
    for choice in reply.choices:
        assert len(choice.token_ids) == len(choice.logprobs.content) >= 1
        assert choice.finish_reason in ("stop", "length")
        assert all(lp.logprob <= 0 for lp in choice.logprobs.content)
    # the recorded log-probs are the policy's own on those tokens
    ids = torch.tensor([prompt + reply.choices[0].token_ids])
    lp = trainer.policy.logprobs(ids, torch.ones_like(ids))[0, len(prompt):]
    want = torch.tensor([t.logprob for t in reply.choices[0].logprobs.content])
    torch.testing.assert_close(lp, want, atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match=r"temperature=0.5, but the policy samples with "
                                         r"temperature=1.0 \(policy.generation.temperature\)"):
        client.chat.completions.create(messages=[{"role": "user", "content": "x"}],
                                       temperature=0.5)
    with pytest.raises(ValueError, match=r"logit_bias=\{1: 2\} is not supported by rlnb's "
                                         r"in-process client: it changes the sampling"):
        client.chat.completions.create(messages=[{"role": "user", "content": "x"}],
                                       logit_bias={1: 2})


def test_the_async_client_joins_concurrent_requests_in_one_generation_call():
    trainer = trainer_for()
    calls = []
    plain = trainer.generator.generate_ids
    trainer.generator.generate_ids = lambda *a, **k: calls.append(a[0].shape) or plain(*a, **k)
    client = AsyncLocalOpenAI(trainer)

    async def ask():
        return await client.chat.completions.create(messages=[{"role": "user", "content": "1"}])

    async def main():
        from rlnb.engine.agents.rollouts import Batcher

        batcher = Batcher(client.sampling.sampler, live=4)
        client.sampling.submit = batcher.submit
        replies = await asyncio.gather(*(ask() for _ in range(4)))
        return replies

    replies = asyncio.run(main())
    assert len(replies) == 4 and [tuple(s) for s in calls] == [(4, 7)]  # <s>U:1\nA: is 7


# ---------------------------------------------------------------------------- episodes
class GuessGame:
    """An OpenEnv-style environment written here: three guesses, a rubric part per guess."""

    def __init__(self, row):
        self.row, self.steps = row, 0

    def reset(self):
        return "guess", 0.0, False

    def step(self, action):
        self.steps += 1
        hit = float(action.strip() == self.row["answer"])
        return ("again" if self.steps < 2 else "end"), {"hit": hit}, self.steps >= 2


def game_task():
    rows = [{"prompt": [{"role": "user", "content": "guess"}], "answer": str(i)} for i in range(4)]
    return AgentTask(openenv_agent(GuessGame, rubric={"long": lambda obs, action: len(action) / 10}),
                     train=rows, val=rows[:2], name="guess")


def test_an_episode_becomes_one_sample_trained_on_the_model_tokens_only():
    trainer = trainer_for(game_task())
    batch = trainer.rollout()
    tok = trainer.policy.tokenizer
    assert batch.metrics["train/mean_turns"] == 2.0
    assert batch.metrics["train/agent/generation_calls"] == 2.0  # 6 episodes, 2 batched calls
    assert set(batch.reward_components) == {"hit", "long"} and bool((batch.sample_mask == 1).all())
    for i in range(len(batch.rows)):
        tokens = trajectory_tokens(batch, i, tok)
        text = "".join(t for t, _, _ in tokens)
        # the environment's observation between the turns is in the sequence, not trained
        assert text.startswith("<s>U:guess\nA:") and "U:again\nA:" in text
        env = "".join(t for t, trained, _ in tokens[len("<s>U:guess\nA:"):] if not trained)
        assert env == "\nU:again\nA:" or env.endswith("\nU:again\nA:")
    # the policy's log-probs of the stitched sequences are the sampler's own, token for token
    lp = trainer.policy.logprobs(batch.input_ids, batch.attention_mask)
    m = batch.token_mask.bool()
    torch.testing.assert_close(lp[m], batch.generation_logprobs[m], atol=1e-4, rtol=0)
    # a rubric part counts each turn: its component is the sum over the episode's two replies
    total = batch.reward_components["hit"] + batch.reward_components["long"]
    torch.testing.assert_close(batch.rewards, total)
    view = compare_turns(tok, [{"role": "user", "content": "guess"},
                               {"role": "assistant", "content": "1"},
                               {"role": "user", "content": "again"},
                               {"role": "assistant", "content": "2"}], turn=1)
    assert view.ok and "extends turn 1 token for token" in view.verdict
    assert 'data-status="ok"' in to_html(view)


def test_the_inspector_names_the_first_token_a_template_rewrote():
    view = compare_turns(tokenizer_with(DROPS_THINK), THINKING, turn=1)
    assert view.diverges_at == 23 and not view.ok
    assert view.rows[23].turn_n == "<" and view.rows[23].turn_next == "4"
    assert [r.role for r in view.rows[22:24]] == ["prompt", "model"]
    assert "rewrites turn 1 at token 23" in view.verdict and 'data-status="diverges"' in to_html(view)


def test_a_non_preserving_template_is_refused_when_the_trainer_is_built(monkeypatch):
    from rlnb.engine.models import tiny

    monkeypatch.setattr(tiny, "TINY_CHAT_TEMPLATE", DROPS_THINK)
    with pytest.raises(ValueError, match="not prefix-preserving: after message 1"):
        trainer_for(game_task())


def test_misbehaving_agents_are_marked_and_counted():
    rows = [{"prompt": [{"role": "user", "content": "x"}], "answer": str(i)} for i in range(4)]

    async def agent(client, row):
        messages = [{"role": "user", "content": "go"}]
        reply = await client.chat.completions.create(messages=messages, tools=TOOLS)
        kind = int(row["answer"]) % 4
        if kind == 0:
            raise RuntimeError("the agent's own bug")
        if kind == 1:  # three calls where max_rollout_turns allows 2
            for _ in range(2):
                messages += [reply.choices[0].message, {"role": "user", "content": "more"}]
                reply = await client.chat.completions.create(messages=messages)
        if kind == 2:  # a fresh conversation mid-episode: not one sample
            await client.chat.completions.create(messages=[{"role": "user", "content": "new"}])
        return {"correct": 1.0}

    trainer = trainer_for(AgentTask(agent, train=rows, name="odd"),
                          ["grpo.max_rollout_turns=2", "grpo.num_generations_per_prompt=2"])
    batch = trainer.rollout()
    kinds = [int(r["answer"]) % 4 for r in batch.rows]
    m = batch.metrics
    assert m["train/agent/failed_episodes"] == kinds.count(0)
    assert m["train/agent/truncated_episodes"] == kinds.count(1)
    assert m["train/agent/broken_episodes"] == kinds.count(2)
    want = torch.tensor([0.0 if k in (0, 2) else 1.0 for k in kinds])
    assert torch.equal(batch.sample_mask, want)
    # a failed or truncated episode earns nothing; the broken one's reward is kept but unused
    assert [float(r) for r in batch.rewards] == [0.0 if k in (0, 1) else 1.0 for k in kinds]

    async def always_fails(client, row):
        raise KeyError("missing")

    trainer.task = AgentTask(always_fails, train=rows)
    with pytest.raises(ValueError, match=r"every agent episode failed; the first: agent episode "
                                         r"of row 0, call 1: KeyError"):
        trainer.rollout()


def test_a_conversation_past_the_context_ends_the_episode_as_truncated():
    rows = [{"prompt": [{"role": "user", "content": "x"}], "answer": "1"}]

    def agent(client, row):  # the synchronous client shape, in a thread of its own
        return client.chat.completions.create(
            messages=[{"role": "user", "content": "y" * 200}]) and 1.0

    trainer = trainer_for(AgentTask(agent, train=rows * 2), ["grpo.num_prompts_per_step=1"])
    batch = trainer.rollout()
    assert batch.metrics["train/agent/truncated_episodes"] == 3.0
    assert batch.metrics["train/agent/failed_episodes"] == 0.0


def test_malformed_and_unknown_tool_calls_are_counted_not_raised():
    tok = build_char_tokenizer(chat_template=True)
    client = LocalOpenAI(generator=object(), tokenizer=tok, episode=Episode(tok))
    messages = [{"role": "user", "content": "2*3"}]
    text = '<tool_call>{"name":"search","arguments":{}}</tool_call><tool_call>{bad</tool_call>'
    ids = tok(text, add_special_tokens=False)["input_ids"]
    client.sampling.submit = lambda request: [Sampled(ids, [0.0] * len(ids), text, "stop")]
    reply = client.chat.completions.create(messages=messages, tools=TOOLS)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].function.name == "search"
    assert choice.message.content == "<tool_call>{bad</tool_call>"
    assert client.episode.counts == {"malformed_tool_calls": 1, "unknown_tool_calls": 1}


def test_step_results_are_read_as_tuples_gymnasium_tuples_or_attributes():
    class Result:
        observation, reward, done = "o", {"a": 1.0}, True

    assert step_parts(("o", 1.0, False)) == ("o", 1.0, False)
    assert step_parts(("o", 1.0, False, True, {})) == ("o", 1.0, True)
    assert step_parts(Result()) == ("o", {"a": 1.0}, True)


def test_an_agent_task_needs_a_chat_template_and_its_warm_start_key_covers_the_turns():
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.engine.trainers.warm_start import warm_start_key

    over = [x for x in SMALL if not x.startswith("policy.tiny.chat_template")]
    with pytest.raises(ValueError, match=r"data.name=calculator: its prompts are chat messages.*"
                                         r"policy.tiny.chat_template=true"):
        GRPOTrainer(load_config(None, [*over, "data.name=calculator"], preset="fast"))
    trainer = trainer_for(None, ["data.name=calculator"])
    key = warm_start_key(trainer, trainer.config.sft)
    trainer.config.grpo.max_rollout_turns = 2
    assert warm_start_key(trainer, trainer.config.sft) != key


def test_max_tokens_cuts_a_completion_as_a_server_would():
    trainer = trainer_for()
    client = LocalOpenAI(trainer)
    reply = client.chat.completions.create(messages=[{"role": "user", "content": "1"}],
                                           max_tokens=2, n=4)
    eos = trainer.policy.tokenizer.eos_token_id
    for choice in reply.choices:
        assert 1 <= len(choice.token_ids) <= 2
        assert choice.finish_reason == "length" or choice.token_ids[-1] == eos
    long = [{"role": "user", "content": "y" * 120}]
    with pytest.raises(ValueError, match=r"the prompt has 126 tokens and "
                                         r"policy.max_total_sequence_length is 96"):
        client.chat.completions.create(messages=long)


# ---------------------------------------------------------------------------- token in, token out
ASK = [{"role": "user", "content": "2*3"}]
CALL = '<tool_call>{"name":"calc","arguments":{"x":"2*3"}}</tool_call>'


def episode_client(*texts):
    """The in-process client recording into an episode, its completions ``texts`` in turn (each
    closed by EOS, as the sampler returns them); template and stitching are the real ones."""
    tok = build_char_tokenizer(chat_template=True)
    client = LocalOpenAI(generator=object(), tokenizer=tok, episode=Episode(tok))
    replies = iter(texts)

    def submit(request):
        text = next(replies)
        ids = tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        return [Sampled(ids, [0.0] * len(ids), text, "stop")]

    client.sampling.submit = submit
    return client, tok


def as_dict(message):
    """The reply rebuilt by hand: role, content and tool calls, the calls with other ids and
    their arguments re-serialised (other JSON text, the same values)."""
    calls = [{"id": f"mine_{i}", "type": "function", "function": {
        "name": c.function.name, "arguments": json.dumps(json.loads(c.function.arguments),
                                                         indent=1)}}
             for i, c in enumerate(message.tool_calls or [])]
    return {"role": "assistant", "content": message.content, "tool_calls": calls or None}


def openai_message(message):
    openai = pytest.importorskip("openai")
    return openai.types.chat.ChatCompletionMessage.model_validate(message.model_dump())


PASSED_BACK = {"the reply object": lambda m: m, "its model_dump()": lambda m: m.model_dump(),
               "its to_dict()": lambda m: m.to_dict(), "a dict with the same role, content and "
               "tool calls": as_dict, "openai's own message type": openai_message,
               "a dict holding the reply's call objects": lambda m: {
                   "role": "assistant", "content": m.content, "tool_calls": m.tool_calls}}


@pytest.mark.parametrize("first", ["4", CALL])
@pytest.mark.parametrize("how", PASSED_BACK)
def test_a_reply_passed_back_unchanged_continues_the_episode_token_for_token(how, first):
    client, tok = episode_client(first, "6")
    reply = client.chat.completions.create(messages=ASK, tools=TOOLS)
    message = reply.choices[0].message
    after = ({"role": "tool", "tool_call_id": "call_0", "content": "6"} if message.tool_calls
             else {"role": "user", "content": "sure?"})
    second = client.chat.completions.create(messages=[*ASK, PASSED_BACK[how](message), after],
                                            tools=TOOLS)
    episode = client.episode
    assert episode.broken is None
    first_call = episode.calls[0]
    seen = first_call.prompt_ids + first_call.sampled.token_ids  # as sampled, never re-encoded
    assert second.prompt_token_ids[:len(seen)] == seen
    assert tok.decode(second.prompt_token_ids[len(seen):]) == (
        "\nT:6\nA:" if message.tool_calls else "\nU:sure?\nA:")


def edited(messages, reply):
    """Ways an agent changes the conversation before its next call, and the reason each gives."""
    other_call = {"id": "call_0", "type": "function",
                  "function": {"name": "calc", "arguments": '{"x": "3*3"}'}}
    return {
        "EDITED": ([*messages, {"role": "assistant", "content": "EDITED"}],
                   r"messages\[1\] is not the reply the client returned \('content' differs\)"),
        "other arguments": ([*messages, {**reply, "tool_calls": [other_call]}],
                            r"messages\[1\] is not the reply .*\('tool_calls' differs\)"),
        "a name added": ([*messages, {**reply, "name": "bot"}],
                         r"messages\[1\] is not the reply .*\('name' added\)"),
        "an earlier message": ([{"role": "user", "content": "2*4"}, reply],
                               r"messages\[0\] \(user\) changed since the previous call "
                               r"\('content' differs\)"),
        "the reply dropped": (list(messages), r"messages\[1\] is a 'user' message where the "
                                              r"previous call's reply"),
    }


@pytest.mark.parametrize("edit", ["EDITED", "other arguments", "a name added",
                                  "an earlier message", "the reply dropped"])
def test_an_agent_that_edits_its_last_reply_is_prompted_with_the_edit_and_the_episode_marked(
        edit):
    client, tok = episode_client(CALL, "6")
    reply = client.chat.completions.create(messages=ASK, tools=TOOLS).choices[0].message.to_dict()
    messages, reason = edited(ASK, reply)[edit]
    messages = [*messages, {"role": "tool", "tool_call_id": "call_0", "content": "6"}]
    if edit == "the reply dropped":
        messages = [*ASK, {"role": "user", "content": "again"}]
    second = client.chat.completions.create(messages=messages, tools=TOOLS)
    # the model is prompted with the conversation the agent sent, as the template renders it
    assert second.prompt_token_ids == token_ids(tok, render(tok, messages, TOOLS))
    if edit == "EDITED":
        assert "A:EDITED</s>" in tok.decode(second.prompt_token_ids)
    assert re.match(rf"call 2: {reason}", client.episode.broken), client.episode.broken
    # the sample keeps the first call only (and the trainer masks it out: the test below)
    first, rest, mask, _ = client.episode.sample()
    assert first == client.episode.calls[0].prompt_ids
    assert rest == client.episode.calls[0].sampled.token_ids and all(mask)


EDIT_ROWS = [{"prompt": [{"role": "user", "content": "x"}], "answer": str(i),
              "mode": "edit" if i % 2 else "keep"} for i in range(4)]


async def editing_agent(client, row):
    """Two calls; rows in ``"edit"`` mode rewrite the first reply to ``"EDITED"`` before the
    second."""
    messages = [{"role": "user", "content": "go" + row["answer"]}]
    reply = await client.chat.completions.create(messages=messages)
    message = reply.choices[0].message
    kept = message if row["mode"] == "keep" else {"role": "assistant", "content": "EDITED"}
    messages += [kept, {"role": "user", "content": "more"}]
    await client.chat.completions.create(messages=messages)
    return float(len(message.content or "") % 2)  # some signal within a group


def test_episodes_whose_agent_rewrote_a_reply_are_counted_and_never_trained():
    rows, agent = EDIT_ROWS, editing_agent

    extra = ["grpo.max_rollout_turns=2", "grpo.num_prompts_per_step=4"]
    trainer = trainer_for(AgentTask(agent, train=rows, name="edits"), extra)
    batch = trainer.rollout()
    edits = torch.tensor([r["mode"] == "edit" for r in batch.rows])
    assert batch.metrics["train/agent/broken_episodes"] == float(edits.sum()) == 6.0
    assert torch.equal(batch.sample_mask, (~edits).float())
    advantages = trainer.compute_advantages(batch)
    assert torch.equal(advantages.sample_mask, (~edits).float())  # the loss's mask: none trained
    assert batch.metrics["train/mean_turns"] == 2.0
    # every episode rewrote its reply: the step trains no token and changes no weight
    rows = [{**r, "mode": "edit"} for r in rows]
    trainer = trainer_for(AgentTask(agent, train=rows, name="edits"), extra)
    before = {n: p.detach().clone() for n, p in trainer.policy.model.named_parameters()}
    metrics = trainer.step()
    assert metrics["train/agent/broken_episodes"] == 12.0
    assert metrics["train/global_valid_toks"] == 0.0 and metrics["train/global_valid_seqs"] == 0.0
    assert all(torch.equal(p, before[n]) for n, p in trainer.policy.model.named_parameters())


# ---------------------------------------------------------------------------- what the run needs
def test_an_agent_task_without_held_out_rows_is_refused_where_validation_would_run():
    rows = [{"prompt": [{"role": "user", "content": "x"}], "answer": "1"}]

    def agent(client, row):
        return 1.0

    from rlnb.engine.trainers.grpo import GRPOTrainer

    config = load_config(None, [*SMALL, "grpo.val_period=10"], preset="fast")
    with pytest.raises(ValueError, match=r"task 'agent' has no held-out rows, but "
                                         r"grpo.val_period=10 validates on them every 10 steps: "
                                         r"give the task held-out rows \(rlnb.AgentTask\(agent, "
                                         r"train=rows, val=held_out_rows\).*or set "
                                         r"grpo.val_period=0"):
        GRPOTrainer(config, task=AgentTask(agent, train=rows))
    trainer = trainer_for(AgentTask(agent, train=rows))  # val_period=0: no validation, no rows
    with pytest.raises(ValueError, match=r"has no held-out rows, but trainer.validate\(\) needs"):
        trainer.validate()
    assert trainer_for(AgentTask(agent, train=rows, val=rows)).validate()["validation/reward"] == 1


def test_a_turn_limit_below_what_the_calculator_needs_is_refused_when_the_config_loads(
        tmp_path, capsys):
    from rlnb.cli import main
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.run.config.master_config import packaged_config

    recipe = packaged_config("calculator_tiny")
    with pytest.raises(ValueError, match=r"grpo.max_rollout_turns=1, but task 'calculator' "
                                         r"\(data.name\) needs 2 model turns per episode \(data.max_tool_calls=1: .*\): "
                                         r"set grpo.max_rollout_turns=2 or more"):
        load_config(recipe, ["grpo.max_rollout_turns=1"])
    with pytest.raises(ValueError, match=r"needs 4 model turns .*data.max_tool_calls=3"):
        load_config(recipe, ["data.max_tool_calls=3"])
    assert load_config(recipe, ["grpo.max_rollout_turns=1", "data.max_tool_calls=0"])
    # the command line: exit 2, one line naming the key, nothing written
    code = main(["train", str(recipe), "grpo.max_rollout_turns=1", "--run-dir",
                 str(tmp_path / "run"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "grpo.max_rollout_turns=1, but task 'calculator' (data.name)" in err
    assert not (tmp_path / "run").exists()
    # a calculator handed over in Python is held to the same when the trainer is built
    config = load_config(None, [*SMALL, "grpo.max_rollout_turns=1"], preset="fast")
    with pytest.raises(ValueError, match=r"grpo.max_rollout_turns=1, but task 'calculator' "
                                         r"\(data.name\) needs 3 model turns"):
        GRPOTrainer(config, task=CalculatorTask(max_tool_calls=2, num_val=4))
    # DPO samples one turn per episode (its max_rollout_turns is not a setting): named as such
    from rlnb.engine.trainers.dpo import DPOTrainer

    dpo = load_config(packaged_config("dpo_tiny"), [
        "sft.enabled=false", "policy.tiny.chat_template=true", "dpo.val_period=0",
        "data.name=calculator"], preset="fast")
    with pytest.raises(ValueError, match=r"the dpo loop samples 1 model turn per episode, but "
                                         r"task 'calculator' \(data.name\) needs 2 .*train the "
                                         r"task with grpo"):
        DPOTrainer(dpo)


# ---------------------------------------------------------------------------- joints
ASYNC = ["grpo.async_grpo.enabled=true", "loss_fn.use_importance_sampling_correction=true"]


def test_agent_tasks_train_under_async_grpo_with_their_masks_and_counts_through_the_buffer():
    from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer
    from rlnb.engine.trainers.loops import make_trainer

    rows, agent = EDIT_ROWS, editing_agent

    config = load_config(None, [*SMALL, *ASYNC, "grpo.max_rollout_turns=2",
                                "grpo.num_prompts_per_step=4"], preset="fast")
    trainer = make_trainer(config, task=AgentTask(agent, train=rows, name="edits"))
    assert isinstance(trainer, AsyncGRPOTrainer)
    try:
        batch = trainer.rollout()  # from the collector's thread, through the replay buffer
        keep = torch.tensor([r["mode"] == "keep" for r in batch.rows]).float()
        assert torch.equal(batch.sample_mask, keep) and batch.metrics["train/mean_turns"] == 2.0
        assert batch.metrics["train/agent/broken_episodes"] == 6.0
        # generated by the weights the policy still has: the stitched episodes' log-probs are
        # the sampler's, token for token
        lp = trainer.policy.logprobs(batch.input_ids, batch.attention_mask)
        m = batch.token_mask.bool() & keep.bool()[:, None]
        torch.testing.assert_close(lp[m], batch.generation_logprobs[m], atol=1e-4, rtol=0)
        for _ in range(2):
            metrics = trainer.step()
            assert metrics["train/agent/broken_episodes"] == 6.0
            assert metrics["train/global_valid_seqs"] == 6.0  # the kept episodes only
    finally:
        trainer.close()
    # the built-in calculator (its own agent code, the calc tool) under the async loop
    config = load_config(None, [*SMALL, *ASYNC, "data.name=calculator", "grpo.max_rollout_turns=2",
                                "data.num_val=4"], preset="fast")
    trainer = make_trainer(config)
    try:
        metrics = trainer.step()
        assert metrics["train/agent/failed_episodes"] == 0.0 and "train/mean_turns" in metrics
    finally:
        trainer.close()


def test_a_nemo_rl_yaml_whose_rlnb_section_names_an_agent_task_trains_it(tmp_path):
    """NeMo-RL's GRPO reads math rows from data.train; an agent task named in the rlnb: section
    replaces that data section: NeMo-RL's data keys are listed as ignored (not refused as keys
    the task lacks), and with them ignored the calculator trains a step of the YAML's loop."""
    from nemo_shaped_configs import grpo_shaped, math_jsonl, tiny_model, write_yaml

    from rlnb.engine.trainers.loops import make_trainer

    cfg = grpo_shaped(tiny_model(tmp_path / "model"), math_jsonl(tmp_path / "math.jsonl"))
    cfg["grpo"]["max_rollout_turns"] = 2
    cfg["rlnb"] = {"data": {"name": "calculator", "num_val": 8},
                   "policy": {"model_name": "tiny", "tiny": {"chat_template": True},
                              "chat_template": True}}
    path = write_yaml(tmp_path / "grpo_calculator.yaml", cfg)
    with pytest.raises(ValueError) as refused:
        load_config(path)
    assert "replaced by the rlnb: section's data (task 'calculator')" in str(refused.value)
    assert "has no such setting" not in str(refused.value)
    config = load_config(path, ignore_unsupported=True)
    assert config.data.name == "calculator" and config.grpo.max_rollout_turns == 2
    with pytest.raises(ValueError, match=r"grpo.max_rollout_turns=1, but task 'calculator' "
                                         r"\(data.name\) needs 2 model turns"):
        load_config(path, ["grpo.max_rollout_turns=1"], ignore_unsupported=True)
    trainer = make_trainer(load_config(config, ["grpo.val_period=0", "sft.enabled=false",
                                                "grpo.num_prompts_per_step=2",
                                                "grpo.num_generations_per_prompt=2"]))
    assert trainer.step()["train/mean_turns"] >= 1
