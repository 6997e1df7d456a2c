"""``data.name: verifiers`` and ``GRPOTrainer(config, environment=...)``: a verifiers environment's
tasks become the prompts and its rewards score rlnb's completions (weights, weight-0 rewards and
metrics logged, async scoring inside a running event loop), environments built in the test and
one installed from a local package (``vf.load_taskset`` imports it for real); bad environments
in one line. (The envs extra: skipped where verifiers is absent.)"""

import asyncio
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1")

import rlnb  # noqa: E402
from rlnb.engine.environments.verifiers_task import VerifiersTask  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "examples" / "rlnb_rg_env"
TINY_VF = ["policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
           "policy.max_total_sequence_length=24", "policy.generation.max_new_tokens=4",
           "policy.train_micro_batch_size=8", "policy.train_global_batch_size=16",
           "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
           "data.num_val=8", "sft.enabled=false", "checkpointing.enabled=false",
           "grpo.val_period=0"]


class SumData(vf.TaskData):
    answer: str = ""


class SumTask(vf.Task[SumData]):
    """Addition: 1 for the answer, 0.5 · a bare number, the length logged (weight 0) and the
    count of digits as a metric."""

    @vf.reward
    async def exact(self, task: SumData, trace) -> float:
        return float(trace.last_reply == task.answer)

    @vf.reward(weight=0.5)
    async def number(self, trace) -> float:
        return float(trace.last_reply.isdigit())

    @vf.reward(weight=0.0)
    async def chars(self, trace) -> float:
        return float(len(trace.last_reply))

    @vf.metric
    async def digits(self, trace) -> float:
        return float(sum(c.isdigit() for c in trace.last_reply))


class SumTaskset(vf.Taskset[SumTask]):
    def load(self):
        for a in range(10):
            for b in range(10):
                yield SumTask(SumData(prompt=f"{a}+{b}=", answer=str(a + b)))


def sums(**kw) -> VerifiersTask:
    return VerifiersTask.from_taskset(SumTaskset(vf.TasksetConfig()), num_val=kw.pop("num_val", 20),
                                      **kw)


def test_the_tasks_are_the_rows_and_the_held_out_ones_are_never_trained_on():
    t = sums()
    assert len(t.tasks) == 100 and len(t.val_rows()) == 20
    held = {r["prompt"] for r in t.val_rows()}
    train = {r["prompt"] for r in t.train_rows(400, seed=0)}
    assert not held & train and len(train) == 80
    row = t.val_rows(1)[0]
    assert t.demonstration(row) == row["answer"]  # the task data's answer: the warm start's


def test_rewards_are_weighted_components_and_weight_0_rewards_and_metrics_are_logged():
    t = sums()
    row = next(r for r in t.val_rows() if r["answer"] == str(eval(r["prompt"][:-1])) and
               len(r["answer"]) == 2)
    r = t.score([""] * 3, [row["answer"], "7", "x1"], [row] * 3)
    # by hand: exact + 0.5 · number; chars (weight 0) and digits (a metric) are logged only
    assert r.total.tolist() == [1.5, 0.5, 0.0]
    assert set(r.components) == {"exact", "number"}
    assert r.components["exact"].tolist() == [1.0, 0.0, 0.0]
    assert r.components["number"].tolist() == [1.0, 1.0, 0.0]
    assert r.metrics == pytest.approx({"chars": (2 + 1 + 2) / 3, "digits": (2 + 1 + 1) / 3})
    assert not t.defines_correct


class KeyedTask(SumTask):
    """SumTask plus a metric and a reward that return several keys at once."""

    @vf.metric
    async def shape(self, trace) -> dict:
        return {"long": float(len(trace.last_reply) > 1), "empty": float(not trace.last_reply)}

    @vf.reward(weight=2.0)
    async def parts(self, task: SumData, trace) -> dict:
        return {"first": float(trace.last_reply[:1] == task.answer[:1]),
                "last": float(trace.last_reply[-1:] == task.answer[-1:])}


class KeyedTaskset(vf.Taskset[KeyedTask]):
    def load(self):
        for a in range(4):
            yield KeyedTask(SumData(prompt=f"{a}+{a}=", answer=str(2 * a)))


@pytest.mark.parametrize("taskset", [SumTaskset, KeyedTaskset])
def test_rlnb_records_the_traces_task_score_records(taskset):
    """rlnb scores without Task.score's per-call signature inspection: the same rewards
    (score and weight per key) and metrics, trace by trace."""
    t = VerifiersTask.from_taskset(taskset(vf.TasksetConfig()), num_val=1)
    rows = [*t.val_rows(), *t.train_rows(3, seed=0)]
    for row in rows:
        task = t.tasks[row["vf_index"]]
        for reply in ("", "0", row["answer"], "12", "x"):
            theirs, ours = t._trace(task, row, reply), t._trace(task, row, reply)
            asyncio.run(task.score(theirs))
            asyncio.run(t.score_trace(task, ours))
            assert ours.rewards == theirs.rewards and ours.metrics == theirs.metrics, reply
            assert theirs.rewards  # (something was scored)


def test_a_system_prompt_makes_chat_messages():
    class WithSystem(vf.Taskset[SumTask]):
        def load(self):
            for i in range(12):
                yield SumTask(SumData(prompt=[vf.UserMessage(content="1+1="),
                                              vf.AssistantMessage(content="2"),
                                              vf.UserMessage(content=f"{i}+1=")],
                                      system_prompt="Add.", answer=str(i + 1)))

    t = VerifiersTask.from_taskset(WithSystem(vf.TasksetConfig()), num_val=1)
    row = t.train_rows(1)[0]
    assert row["prompt"][:3] == [{"role": "system", "content": "Add."},
                                 {"role": "user", "content": "1+1="},
                                 {"role": "assistant", "content": "2"}]  # a few-shot turn kept
    assert t.chat
    # the tiny tokenizer has no chat template: refused when the trainer is built
    with pytest.raises(ValueError, match="gives chat messages .* has no chat template"):
        rlnb.GRPOTrainer(rlnb.load_config(None, TINY_VF),
                         environment=WithSystem(vf.TasksetConfig()))


def test_scoring_inside_a_running_event_loop():
    """A Jupyter kernel runs an event loop in the thread that calls the trainer."""
    t = sums()
    row = t.val_rows(1)[0]

    async def in_a_kernel():
        return t.score([""], [row["answer"]], [row])

    assert asyncio.run(in_a_kernel()).components["exact"].tolist() == [1.0]


def test_a_trainer_on_an_environment_records_it_and_trains():
    config = rlnb.load_config(None, [*TINY_VF, "data.correct_reward=exact",
                                     "grpo.adv_estimator.name=gdpo",
                                     "grpo.adv_estimator.reward_weights=[1.0, 0.5]"])
    trainer = rlnb.GRPOTrainer(config, environment=SumTaskset(vf.TasksetConfig()))
    assert trainer.config.data.name == "verifiers" and trainer.config.data.env_id is None
    assert trainer.task.defines_correct and trainer.config.data.num_val == 8
    m = trainer.step()
    assert m["train/reward"] == pytest.approx(m["train/reward/exact"]
                                              + 0.5 * m["train/reward/number"])
    assert "train/chars" in m and "train/digits" in m
    assert "validation/accuracy" in trainer.validate()
    # a recorded config without the object: one line saying to hand it over again
    with pytest.raises(ValueError, match="data.env_id: name an installed verifiers environment"):
        rlnb.GRPOTrainer(trainer.config)


def bad_taskset(reward):
    class Bad(vf.Task[SumData]):
        pass

    reward.__name__ = "bad"  # verifiers names a reward by its function's name
    Bad.bad = reward

    class BadSet(vf.Taskset[Bad]):
        def load(self):
            for i in range(6):
                yield Bad(SumData(prompt=f"{i}+0=", answer=str(i)))

    return BadSet(vf.TasksetConfig())


async def raises(self, trace) -> float:
    return 1 / 0


async def gives_none(self, trace):
    return None


async def gives_nan(self, trace) -> float:
    return math.nan


def not_async(self, trace) -> float:
    return 1.0


@pytest.mark.parametrize("reward, message", [
    (raises, "reward 'bad' raised on row 0 (prompt '0+0='): ZeroDivisionError: division by zero"),
    (gives_none, "reward 'bad' gave None for row 0 (prompt '0+0='); a reward is a finite number"),
    (gives_nan, "reward 'bad' gave nan for row 0 (prompt '0+0='); a reward is a finite number"),
    (not_async, "reward 'bad' raised on row 0 (prompt '0+0='): TypeError: bad is not async def"),
])
def test_a_bad_reward_is_one_line_naming_it_and_the_row(reward, message):
    t = VerifiersTask.from_taskset(bad_taskset(vf.reward(reward)), num_val=1)
    row = {"prompt": "0+0=", "answer": "0", "vf_index": 0}
    with pytest.raises(ValueError) as err:
        t.score([""], ["0"], [row])
    assert str(err.value).startswith(f"verifiers environment 'BadSet': {message}"), str(err.value)
    assert "\n" not in str(err.value)


def test_rewards_needing_a_runtime_are_refused():
    async def needs_box(self, trace, runtime) -> float:
        return 1.0

    with pytest.raises(ValueError, match="reward 'bad' needs a runtime"):
        VerifiersTask.from_taskset(bad_taskset(vf.reward(needs_box)), num_val=1)


def single_turn(name, **members):
    """A single-turn taskset (no tools, no stops) whose task type has ``members`` added."""
    task = type(name, (SumTask,), members)

    class Set(vf.Taskset[task]):
        def load(self):
            yield from (task(t.data) for t in SumTaskset(vf.TasksetConfig()))

    return Set(vf.TasksetConfig())


async def rewrite(self, request):
    return request


async def prepare(self, trace, runtime):
    return None


@pytest.mark.parametrize("members, message", [
    ({"rewrite": vf.intercept(rewrite)}, r"@vf.intercept 'rewrite' rewrites model calls at "
                                         r"verifiers' interception server, .*never be called"),
    ({"setup": prepare}, r"Hooked.setup is a lifecycle hook of verifiers' runtime"),
    ({"finalize": prepare}, r"Hooked.finalize is a lifecycle hook"),
    ({"NEEDS_CONTAINER": True}, r"Hooked.NEEDS_CONTAINER is set: its episodes need a container"),
])
def test_hooks_a_single_turn_environment_would_never_run_are_refused_by_name(members, message):
    taskset = single_turn("Hooked", **members)
    with pytest.raises(ValueError, match=rf"verifiers environment 'Set': {message}"):
        VerifiersTask.from_taskset(taskset, num_val=4)
    with pytest.raises(ValueError, match=message):  # the trainer, on the single-turn path
        rlnb.GRPOTrainer(rlnb.load_config(None, TINY_VF, preset="fast"), environment=taskset)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """examples/rlnb_rg_env installed with pip (no index, no dependencies: verifiers and
    reasoning-gym are in this venv) into a folder put on sys.path, as site-packages would be."""
    pytest.importorskip("reasoning_gym")
    target, source = tmp_path_factory.mktemp("site"), tmp_path_factory.mktemp("src") / "pkg"
    shutil.copytree(PACKAGE, source)  # the build writes beside the sources: not in the repo
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                          "--no-deps", "--no-build-isolation", "--target", str(target),
                          str(source)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    sys.path.insert(0, str(target))
    yield target
    sys.path.remove(str(target))
    for name in [m for m in sys.modules if m.startswith("rlnb_rg_env")]:
        del sys.modules[name]


def test_an_installed_environment_loads_by_id_and_matches_the_reasoning_gym_task(installed):
    datasets = {"spell_backward": {"min_word_len": 3, "max_word_len": 5}}
    over = [*TINY_VF, "policy.max_total_sequence_length=80", "policy.generation.max_new_tokens=6",
            "data.name=verifiers", "data.env_id=rlnb-rg-env", "data.correct_reward=correct",
            f"data.env_args={{datasets: {datasets}, size: 300}}"]
    trainer = rlnb.GRPOTrainer(rlnb.load_config(None, over))
    task = trainer.task
    assert type(task.tasks[0]).__module__ == "rlnb_rg_env"  # imported from the install
    assert len(task.tasks) == 300
    m = trainer.step()
    assert {"train/reward/correct", "train/partial_credit", "train/length"} <= set(m)
    # two doors, one task: the same completions get the same reward from reasoning-gym's scorer
    from rlnb.engine.environments.reasoning_gym_task import ReasoningGymTask

    rg = ReasoningGymTask(datasets={"spell_backward": {"config": datasets["spell_backward"]}},
                          reward="correct", answer_format="plain", system_prompt=None,
                          num_val=10)
    rows = task.val_rows(4)
    rg_rows = [{**r, "dataset": "spell_backward", "entry": r["entry"]} for r in rows]
    responses = [rows[0]["answer"], rows[1]["answer"][:-1] + "q", "", rows[3]["answer"] + "x"]
    via_vf = task.score([""] * 4, responses, rows)
    via_rg = rg.score([""] * 4, responses, rg_rows)
    assert via_vf.components["correct"].tolist() == via_rg.total.tolist() == [1, 0, 0, 0]
    assert via_vf.total.tolist() == via_rg.total.tolist()
    # the scorer's partial credit, logged by both: 4 of 5 letters, or as many as the word has
    assert via_vf.metrics["partial_credit"] == pytest.approx(float(via_rg.components["score"].mean()))


def test_an_environment_that_is_not_installed_or_misconfigured_is_one_line(installed, tmp_path):
    with pytest.raises(ValueError, match="data.env_id: verifiers environment 'no-such-env' is "
                                         "not installed"):
        rlnb.GRPOTrainer(rlnb.load_config(None, [*TINY_VF, "data.name=verifiers",
                                                 "data.env_id=no-such-env"]))
    with pytest.raises(ValueError, match=r"data.env_args.size: Input should be a valid integer"):
        rlnb.GRPOTrainer(rlnb.load_config(None, [*TINY_VF, "data.name=verifiers",
                                                 "data.env_id=rlnb-rg-env",
                                                 "data.env_args={size: many}"]))
    out = subprocess.run([sys.executable, "-m", "rlnb.cli", "train", "--run-dir", "r",
                          "data.name=verifiers", "data.env_id=no-such-env"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "verifiers environment 'no-such-env' is not installed" in out.stderr
    assert not (tmp_path / "r").exists()


def test_environment_and_reward_funcs_together_are_refused():
    with pytest.raises(ValueError, match="environment= brings its own prompts and rewards"):
        rlnb.GRPOTrainer(rlnb.load_config(None, TINY_VF),
                         environment=SumTaskset(vf.TasksetConfig()),
                         reward_funcs=[lambda completions, **kw: [0.0] * len(completions)])


