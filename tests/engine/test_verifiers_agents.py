"""A verifiers tool environment (``verifiers.v1``: a ``Toolset`` of ``@vf.tool`` methods, ``@vf.stop``
hooks, a weighted rubric) built in the test and trained as agent episodes: tools served and
called in process with MCP's own schemas, bad calls answered as verifiers' chat program answers
them, turn limits and stops scored as verifiers scores them, the rubric's weights in the total,
what the loop cannot run refused by name, and a GRPO step on the tiny model whose log-probs are
the sampler's own (and steps under async GRPO). (The envs extra: skipped where verifiers is absent.)"""

import asyncio

import pytest
import torch

vf = pytest.importorskip("verifiers.v1")

import rlnb  # noqa: E402
from rlnb.engine.agents.client import AsyncLocalOpenAI  # noqa: E402
from rlnb.engine.agents.episode import Episode  # noqa: E402
from rlnb.engine.agents.inspector import trajectory_tokens  # noqa: E402
from rlnb.engine.agents.sampler import Sampled  # noqa: E402
from rlnb.engine.agents.verifiers_agent import Tools, VerifiersAgentTask  # noqa: E402
from rlnb.engine.environments.verifiers_task import VerifiersTask  # noqa: E402
from rlnb.engine.models.tiny import build_char_tokenizer  # noqa: E402
from rlnb.run.config.master_config import load_config  # noqa: E402


class Calc(vf.Toolset):
    TOOL_PREFIX = None  # the tool is advertised bare: ``calc``

    @vf.tool
    async def calc(self, x: str) -> str:
        """Multiply 'a*b'."""
        a, b = x.split("*")
        return str(int(a) * int(b))


class Product(vf.TaskData):
    answer: str = ""


class ProductTask(vf.Task[Product]):
    @classmethod
    def toolsets(cls, config):
        return [Calc(vf.ToolsetConfig())]

    @vf.reward
    async def correct(self, task: Product, trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def used_tool(self, trace) -> float:
        return float(any(m.tool_calls for m in trace.assistant_messages))


class Products(vf.Taskset[ProductTask]):
    def load(self):
        for a in range(10, 20):
            for b in (11, 12):
                yield ProductTask(Product(prompt=f"{a}*{b}", answer=str(a * b)))


SMALL = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
         "sft.enabled=false", "policy.tiny.chat_template=true", "grpo.num_prompts_per_step=2",
         "grpo.num_generations_per_prompt=3", "policy.max_total_sequence_length=96",
         "policy.generation.max_new_tokens=12", "grpo.max_rollout_turns=3", "data.num_val=4"]


def agent_task(taskset=None, max_turns=3) -> VerifiersAgentTask:
    rows = VerifiersTask.from_taskset(taskset or Products(vf.TasksetConfig()), num_val=4)
    return VerifiersAgentTask(rows, max_turns=max_turns)


def scripted(replies):
    """The in-process client, its completions the given texts in turn (the model's part only:
    template, tool-call parsing, recording are the real ones)."""
    tok = build_char_tokenizer(chat_template=True)
    episode = Episode(tok)
    client = AsyncLocalOpenAI(generator=object(), tokenizer=tok, episode=episode)
    texts = iter(replies)

    def submit(request):
        text = next(texts)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        return [Sampled(ids, [0.0] * len(ids), text, "stop")]

    client.sampling.submit = submit
    return client, episode


def call(name, args):
    return f'<tool_call>{{"name":"{name}","arguments":{args}}}</tool_call>'


def test_an_episode_calls_the_tool_in_process_and_the_rubric_scores_the_whole_trace():
    task = agent_task()
    row = next(r for r in task.train_rows(40) if r["prompt"] == "13*12")
    client, episode = scripted([call("calc", '{"x":"13*12"}'), "156"])
    components = asyncio.run(task.episode(client, row))
    assert components == {"correct": 1.0, "used_tool": 1.0}
    # the second request carried the tool's answer, as a tool message after the call
    second = episode.calls[1].messages
    assert second[-1] == {"role": "tool", "tool_call_id": second[-2]["tool_calls"][0]["id"],
                          "name": "calc", "content": "156"}
    # the rubric's weights make the total (1 + 0.5 * 1), as verifiers' trace.reward
    total, correct = task.rewards_of({"correct": torch.tensor([1.0, 0.0]),
                                      "used_tool": torch.tensor([1.0, 1.0])}, 2)
    assert total.tolist() == [1.5, 0.5] and correct.tolist() == [True, True]
    task.correct_reward, task.correct_threshold = "correct", 1.0
    assert task.rewards_of({"correct": torch.tensor([1.0, 0.0])}, 2)[1].tolist() == [True, False]
    # an answer without the tool: 1 for the number, nothing for the tool
    client, _ = scripted(["156"])
    assert asyncio.run(task.episode(client, row)) == {"correct": 1.0, "used_tool": 0.0}


def test_bad_tool_calls_are_answered_as_verifiers_chat_program_answers_them():
    task = agent_task()
    tools = asyncio.run(Tools([Calc(vf.ToolsetConfig())]).open(task.vf_rows.tasks[0]))
    assert tools.schemas[0]["function"]["parameters"]["required"] == ["x"]  # MCP's schema
    answers = [asyncio.run(tools.call(*c)) for c in [
        ("calc", "{bad"), ("calc", "[1]"), ("search", "{}"), ("calc", '{"x": "oops"}'),
        ("calc", '{"y": 1}'), ("calc", '{"x": "3*4"}')]]
    assert answers[0].startswith("error: invalid JSON in tool arguments")
    assert answers[1].startswith("error: tool arguments must be a JSON object, got list")
    assert answers[2] == "error: unknown tool 'search'"
    assert answers[3].startswith("Error executing tool calc: not enough values to unpack")
    assert answers[4].startswith("Error executing tool calc: 1 validation error")
    assert answers[5] == "12"


def test_the_turn_limit_and_stop_hooks_end_an_episode_and_it_is_still_scored():
    task = agent_task(max_turns=2)
    row = task.train_rows(1)[0]
    client, episode = scripted([call("calc", '{"x":"2*3"}')] * 5)
    assert asyncio.run(task.episode(client, row)) == {"correct": 0.0, "used_tool": 1.0}
    assert len(episode.calls) == 2  # max_turns: the third turn is never asked

    class Once(ProductTask):
        @vf.stop
        async def after_one(self, trace: vf.Trace) -> bool:
            return trace.num_turns >= 1

    class OnceSet(vf.Taskset[Once]):
        def load(self):
            yield from (Once(t.data) for t in Products(vf.TasksetConfig()))

    task = agent_task(OnceSet(vf.TasksetConfig()))
    client, episode = scripted([call("calc", '{"x":"2*3"}')] * 5)
    assert asyncio.run(task.episode(client, task.train_rows(1)[0]))["used_tool"] == 1.0
    assert len(episode.calls) == 1


def test_what_the_in_process_loop_cannot_run_is_refused_by_name():
    from verifiers.v1.types import Request

    class Rewrites(ProductTask):
        @vf.intercept
        async def rewrite(self, request: Request) -> Request:
            return request

    class AtRequest(ProductTask):
        @vf.stop
        async def early(self, request: Request) -> bool:
            return False

    class Count(vf.State):
        calls: int = 0

    class Stateful(vf.Toolset[vf.ToolsetConfig, Count]):
        @vf.tool
        async def tick(self) -> str:
            """Count."""
            return "ok"

    class WithState(ProductTask):
        @classmethod
        def toolsets(cls, config):
            return [Stateful(vf.ToolsetConfig())]

    for cls, match in [(Rewrites, "@vf.intercept 'rewrite'"), (AtRequest, "@vf.stop 'early'"),
                       (WithState, "toolset 'Stateful' keeps state")]:
        class Set(vf.Taskset[cls]):
            def load(self, cls=cls):
                yield from (cls(t.data) for t in Products(vf.TasksetConfig()))

        with pytest.raises(ValueError, match=match):
            agent_task(Set(vf.TasksetConfig()))
    with pytest.raises(ValueError, match="has tools or @vf.stop hooks: its episodes take turns, "
                                         "but grpo.max_rollout_turns is 1"):
        rlnb.GRPOTrainer(load_config(None, [*SMALL, "grpo.max_rollout_turns=1"], preset="fast"),
                         environment=Products(vf.TasksetConfig()))


def test_a_grpo_step_on_the_tiny_model_trains_the_model_tokens_with_the_samplers_logprobs():
    trainer = rlnb.GRPOTrainer(load_config(None, SMALL, preset="fast"),
                               environment=Products(vf.TasksetConfig()))
    assert isinstance(trainer.task, VerifiersAgentTask)
    assert trainer.task.tools[0]["function"]["name"] == "calc"
    batch = trainer.rollout()
    assert set(batch.reward_components) == {"correct", "used_tool"}
    total = batch.reward_components["correct"] + 0.5 * batch.reward_components["used_tool"]
    torch.testing.assert_close(batch.rewards, total)
    assert batch.metrics["train/agent/failed_episodes"] == 0.0
    tok = trainer.policy.tokenizer
    text = "".join(t for t, _, _ in trajectory_tokens(batch, 0, tok))
    assert text.startswith("<s>U:1") and "*1" in text  # the task's prompt, through the template
    lp = trainer.policy.logprobs(batch.input_ids, batch.attention_mask)
    m = batch.token_mask.bool()
    torch.testing.assert_close(lp[m], batch.generation_logprobs[m], atol=1e-4, rtol=0)
    metrics = trainer.step()
    assert metrics["train/agent/failed_episodes"] == 0.0


def test_another_harness_is_refused_and_a_single_agent_env_gives_its_taskset():
    from rlnb.engine.environments.verifiers_task import taskset_of

    env = object.__new__(vf.SingleAgentEnv)
    env.config = vf.SingleAgentEnvConfig(agent=vf.AgentConfig(harness={"id": "bash"}))
    with pytest.raises(ValueError, match="its seat 'agent' runs harness 'bash'"):
        taskset_of(env)
    env.config, env.taskset = vf.SingleAgentEnvConfig(), Products(vf.TasksetConfig())
    assert taskset_of(env) is env.taskset


class Player(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig()


class Guess(vf.Env[Player]):
    """A game whose engine answers the model (verifiers' multi-turn shape): up to three guesses
    of the product, "higher"/"lower" after each, the reward ``won`` (weight 2) recorded by the run."""

    async def run(self, task, agents):
        async with agents.player.interaction(task) as chat:
            segment = await chat.turn()
            for _ in range(2):
                if segment.terminated or segment.last_reply == task.data.answer:
                    break
                guess = int(segment.last_reply) if segment.last_reply.isdigit() else 0
                segment = await chat.turn("higher" if guess < int(task.data.answer) else "lower")
        chat.trace.record_reward("won", float(chat.trace.last_reply == task.data.answer), 2.0)


def guess_env(config=None):
    env = object.__new__(Guess)  # as verifiers builds it, without installing the taskset by id
    env.config, env.taskset = config or Player(), Products(vf.TasksetConfig())
    return env


def test_an_env_whose_run_answers_the_model_plays_one_conversation_and_adds_its_rewards():
    rows = VerifiersTask.from_taskset(guess_env(), num_val=4)
    assert rows.multi_turn and rows.env is not None
    task = VerifiersAgentTask(rows, max_turns=3)
    row = next(r for r in task.train_rows(40) if r["prompt"] == "13*12")
    client, episode = scripted(["100", call("calc", '{"x":"13*12"}'), "156"])
    components = asyncio.run(task.episode(client, row))
    # the run's reward beside the rubric's; the engine's "higher" is a user turn of the one
    # conversation, between the model's guess and its tool call
    assert components == {"won": 1.0, "correct": 1.0, "used_tool": 1.0}
    assert [m["content"] for m in episode.calls[1].messages if m["role"] == "user"] == [
        "13*12", "higher"]
    client, episode = scripted(["1", "2", "3", "4"])  # three wrong guesses: the turn limit
    assert asyncio.run(task.episode(client, row))["won"] == 0.0 and len(episode.calls) == 3

    two = object.__new__(Guess)

    class TwoSeats(vf.EnvConfig):
        player: vf.AgentConfig = vf.AgentConfig()
        user: vf.AgentConfig = vf.AgentConfig()

    two.config, two.taskset = TwoSeats(), Products(vf.TasksetConfig())
    with pytest.raises(ValueError, match=r"Guess has 2 agent seats \(\['player', 'user'\]\)"):
        VerifiersTask.from_taskset(two)


def test_an_env_episode_trains_on_the_tiny_model_with_the_engines_turns_untrained():
    trainer = rlnb.GRPOTrainer(load_config(None, SMALL, preset="fast"), environment=guess_env())
    batch = trainer.rollout()
    assert {"won", "correct", "used_tool"} == set(batch.reward_components)
    c = batch.reward_components  # the run's weight as it recorded it, the rubric's as declared
    torch.testing.assert_close(batch.rewards, 2 * c["won"] + c["correct"] + 0.5 * c["used_tool"])
    assert batch.metrics["train/agent/failed_episodes"] == 0.0
    assert batch.metrics["train/mean_turns"] > 1  # the engine answered at least one guess
    lp = trainer.policy.logprobs(batch.input_ids, batch.attention_mask)
    m = batch.token_mask.bool()
    torch.testing.assert_close(lp[m], batch.generation_logprobs[m], atol=1e-4, rtol=0)
    tok = trainer.policy.tokenizer
    for i in range(len(batch.rows)):
        env_text = "".join(t for t, trained, _ in trajectory_tokens(batch, i, tok)
                           if not trained)
        assert "higher" in env_text or "lower" in env_text or "won" not in env_text


def test_a_tool_environment_trains_under_async_grpo():
    from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer
    from rlnb.engine.trainers.loops import make_trainer

    config = load_config(None, [*SMALL, "grpo.async_grpo.enabled=true",
                                "loss_fn.use_importance_sampling_correction=true"], preset="fast")
    trainer = make_trainer(config, environment=Products(vf.TasksetConfig()))
    assert isinstance(trainer, AsyncGRPOTrainer) and isinstance(trainer.task, VerifiersAgentTask)
    try:
        for _ in range(2):  # its episodes run in the collector's thread, on the policy's copy
            metrics = trainer.step()
            assert metrics["train/agent/failed_episodes"] == 0.0
            assert {"train/reward/correct", "train/reward/used_tool"} <= set(metrics)
    finally:
        trainer.close()


@pytest.mark.parametrize("setting, key", [({"max_turns": 5}, "max_turns"),
                                          ({"sampling": {"temperature": 0.3}}, "sampling"),
                                          ({"max_output_tokens": 9}, "max_output_tokens")])
def test_a_seat_setting_rlnb_would_not_read_is_refused_by_name(setting, key):
    env = guess_env(Player(player=vf.AgentConfig(**setting)))
    with pytest.raises(ValueError, match=rf"environment= Guess: its seat 'player' sets {key}, "
                                         r"which rlnb's loop does not read \(rlnb's is "):
        VerifiersTask.from_taskset(env, num_val=4)
    assert VerifiersTask.from_taskset(guess_env(), num_val=4).env is not None  # none set: runs
