"""A new estimator, task, generation backend and training loop, each one file plus one registry
entry, written outside the package as a user would: they train through load_config overrides and
`rlnb train`, the config panel and the counterfactual comparison list the new estimator, the
stepper and the dashboard show the new loop's own stages and panels, and a task with a setting
of its own is configured in the data section like a built-in one."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import yaml
from tiny_config import TINY

import rlnb
from rlnb.algorithms.estimators import ADVANTAGE_ESTIMATORS
from rlnb.engine.environments.base import Task, TaskSettings
from rlnb.engine.environments.tasks import TASKS, register_task
from rlnb.engine.inspection.counterfactual import compare_estimators
from rlnb.engine.models.generation import GENERATION_BACKENDS
from rlnb.engine.trainers.loops import LOOPS
from rlnb.run.config.master_config import dump_config, packaged_config

PLUGIN = textwrap.dedent('''
    """A user's plug-ins: each is a class plus one registry call."""
    import random

    import torch

    from rlnb.algorithms.advantages import GRPOAdvantageEstimator
    from rlnb.algorithms.estimators import register_estimator
    from rlnb.engine.environments.base import Rewards, Task
    from rlnb.engine.environments.tasks import register_task
    from rlnb.engine.models.generation import register_generation_backend
    from rlnb.engine.models.hf_backend import HFGenerationBackend


    class SignAdvantage(GRPOAdvantageEstimator):
        """A_i = sign(r_i - mean of the group), on every token."""

        def advantages(self, prompt_ids, rewards, mask, **_):
            groups = torch.unique(prompt_ids, dim=0, return_inverse=True)[1]  # [B]
            mean = torch.zeros(int(groups.max()) + 1).index_add(0, groups, rewards)
            mean = mean / torch.bincount(groups).float()
            return torch.sign(rewards - mean[groups]).unsqueeze(-1).expand_as(mask)


    class EchoTask(Task):
        """"ab=" -> "ab": copy the letters before "=" (two letters from a, b, c)."""

        name = "echo"

        def __init__(self, num_val, seed):  # defaults: its Settings' (TaskSettings)
            words = [a + b for a in "abc" for b in "abc"]
            self.val = [{"prompt": w + "=", "answer": w} for w in words[:min(num_val, 4)]]
            self.train = [{"prompt": w + "=", "answer": w} for w in words[4:]]

        def train_rows(self, n, seed=0):
            rng = random.Random(f"echo/{seed}")
            return [dict(rng.choice(self.train)) for _ in range(n)]

        def val_rows(self, n=None):
            return [dict(r) for r in self.val[:n]]

        def score(self, prompts, responses, rows):
            ok = [float(r.strip() == row["answer"]) for r, row in zip(responses, rows)]
            return Rewards(total=ok, components={"correct": ok})


    class CountingBackend(HFGenerationBackend):
        """The hf backend, counting its generation calls (an engine of one's own)."""

        calls = 0

        def generate(self, prompts):
            type(self).calls += 1
            return super().generate(prompts)


    register_estimator("sign", SignAdvantage)
    register_task("echo", EchoTask)
    register_generation_backend("counting", CountingBackend)
''')
NEW = ["grpo.adv_estimator.name=sign", "data.name=echo", "policy.generation.backend=counting"]

LOOP_PLUGIN = textwrap.dedent('''
    """A user's loop: GRPO that trains on the sign of each advantage, with a stage of its own."""
    import dataclasses

    import torch

    from rlnb.engine.runtime.timing import timer
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.engine.trainers.loops import register_loop
    from rlnb.engine.trainers.views import REWARD_PANEL, Stage


    def signs_view(signed, advantages):
        a = signed.sequence_advantages()
        return (f"signed advantages: {int((a > 0).sum())} responses +1, "
                f"{int((a < 0).sum())} responses -1", signed.to_frame())


    class SignGRPOTrainer(GRPOTrainer):
        """GRPO whose update sees only the sign of each advantage."""

        rollout_stage, advantages_stage, update_stage = GRPOTrainer.stages
        stages = (
            rollout_stage, advantages_stage,
            Stage("Sign", "advantages -> their sign (no side effects)", "sign_advantages",
                  keeps="advantages", takes=("advantages",),
                  needs=(("Advantages", "there are no advantages to take the sign of"),),
                  view=signs_view),
            dataclasses.replace(update_stage,
                                needs=(("Sign", "Update trains on the signed advantages"),)),
        )
        panels = (REWARD_PANEL, ("positive advantages (share)", ("train/positive_share",)))

        def sign_advantages(self, batch):
            positive = float((batch.sequence_advantages() > 0).float().mean())
            return dataclasses.replace(batch, advantages=torch.sign(batch.advantages),
                                       metrics={**batch.metrics,
                                                "train/positive_share": positive})

        def step(self):
            elapsed = timer()
            rollout = self.rollout()
            advantages = self.sign_advantages(self.compute_advantages(rollout))
            return self.record_step(rollout, advantages, self.update(advantages), elapsed())


    register_loop("grpo_sign", SignGRPOTrainer, about="GRPO on the sign of each advantage")
''')


KNOB_PLUGIN = textwrap.dedent('''
    """A user's task with a setting of its own: its Settings, declared next to it."""
    import itertools
    import random

    from pydantic import Field

    from rlnb.engine.environments.base import Rewards, Task, TaskSettings
    from rlnb.engine.environments.tasks import register_task


    class WordsTask(Task):
        """"abc=" -> "abc": copy a word of `width` letters from a, b, c."""

        name = "words"

        class Settings(TaskSettings):
            width: int = Field(2, ge=2, le=4, description="letters per word")

        def __init__(self, width, num_val, seed):  # defaults: its Settings'
            self.width = width
            words = ["".join(w) for w in itertools.product("abc", repeat=width)]
            random.Random(f"words/{seed}").shuffle(words)
            held = min(num_val, 4)
            self.val = [{"prompt": w + "=", "answer": w} for w in words[:held]]
            self.train = [{"prompt": w + "=", "answer": w} for w in words[held:]]

        def train_rows(self, n, seed=0):
            rng = random.Random(f"words/train/{seed}")
            return [dict(rng.choice(self.train)) for _ in range(n)]

        def val_rows(self, n=None):
            return [dict(r) for r in self.val[:n]]

        def score(self, prompts, responses, rows):
            ok = [float(r.strip() == row["answer"]) for r, row in zip(responses, rows)]
            return Rewards(total=ok, components={"correct": ok})


    register_task("words", WordsTask)
''')


@pytest.fixture()
def plugin(tmp_path, monkeypatch):
    """The plug-in module in a folder of its own, found as a user's module is (the working
    directory); the registries are restored afterwards."""
    (tmp_path / "my_plugins.py").write_text(PLUGIN)
    (tmp_path / "my_loops.py").write_text(LOOP_PLUGIN)
    (tmp_path / "knob_plugins.py").write_text(KNOB_PLUGIN)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    registries = (ADVANTAGE_ESTIMATORS, TASKS, GENERATION_BACKENDS, LOOPS)
    saved = [dict(r) for r in registries]
    yield tmp_path
    for registry, before in zip(registries, saved):
        registry.clear()
        registry.update(before)
    sys.modules.pop("my_plugins", None)
    sys.modules.pop("my_loops", None)
    sys.modules.pop("knob_plugins", None)


def test_without_the_import_the_names_are_refused(plugin):
    with pytest.raises(ValueError, match=r"grpo.adv_estimator.name: unknown advantage estimator "
                                         r"'sign'"):
        rlnb.load_config(None, [*TINY, NEW[0]], preset="fast")


def test_each_plugin_trains_a_step_through_load_config(plugin):
    config = rlnb.load_config(None, ["imports=[my_plugins]", *TINY, *NEW], preset="fast")
    plugins = sys.modules["my_plugins"]
    trainer = rlnb.GRPOTrainer(config)
    assert type(trainer.task) is plugins.EchoTask
    assert type(trainer.generator) is plugins.CountingBackend
    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    batch = trainer.rollout()
    assert all(r["prompt"].endswith("=") and len(r["prompt"]) == 3 for r in batch.rows)
    adv = trainer.compute_advantages(batch)
    assert adv.estimator == "sign"
    # the sign estimator's advantages, derived by hand from the batch's rewards
    r = batch.rewards.view(4, 4)  # [P, G]
    expected = torch.sign(r - r.mean(dim=1, keepdim=True)).flatten()  # [B]
    assert torch.equal(adv.sequence_advantages(), expected)
    result = trainer.update(adv)
    assert result.step == 1 and plugins.CountingBackend.calls == 1
    if expected.abs().sum() > 0:  # a group with signal moves the weights
        assert any(not torch.equal(a, b) for a, b in
                   zip(before, trainer.policy.model.parameters()))


def test_the_panel_and_the_comparison_list_the_new_estimator(plugin):
    from rlnb.engine.inspection.counterfactual import trainable_estimators

    config = rlnb.load_config(None, ["imports=[my_plugins]", *TINY], preset="fast")
    assert "sign" in trainable_estimators()
    trainer = rlnb.GRPOTrainer(config)
    batch = trainer.rollout()
    compared = compare_estimators(trainer, batch)
    assert list(compared) == ["grpo", "gdpo", "reinforce_plus_plus", "sign"]
    assert not isinstance(compared["sign"], Exception)
    pytest.importorskip("ipywidgets")
    from rlnb.widgets.config_panel import ConfigPanel

    panel = ConfigPanel(trainer)
    assert "sign" in panel.controls["grpo.adv_estimator.name"].options


def test_rlnb_train_with_the_plugins(plugin):
    """`rlnb train` in a fresh process: the config's imports make the names valid there too,
    and the run's config.yaml keeps them, so the run can be resumed."""
    run = plugin / "run"
    out = subprocess.run(
        [sys.executable, "-m", "rlnb.cli", "train", "--no-progress", "--steps", "1",
         "--run-dir", str(run), "imports=[my_plugins]", *TINY, *NEW, "sft.enabled=false",
         "grpo.val_period=0", "checkpointing.enabled=false"],
        capture_output=True, text=True, timeout=600, cwd=plugin)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1]
    saved = (run / "config.yaml").read_text()
    assert "- my_plugins" in saved and "name: sign" in saved and "name: echo" in saved


def test_a_loop_registered_from_outside_brings_its_stages_and_panels(plugin, monkeypatch):
    """`algorithm: grpo_sign` builds the plug-in's trainer on GRPO's section; the stepper shows
    its four stages (one no built-in loop has) and each press does what it says; the dashboard
    draws the panels it declares."""
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    monkeypatch.setenv("RLNB_HEADLESS", "1")
    from tiny_config import with_rewards

    from rlnb.engine.trainers.loops import make_trainer
    from rlnb.widgets import Dashboard, StageStepper

    with pytest.raises(ValueError, match="unknown training loop"):
        rlnb.load_config(None, [*TINY, "algorithm=grpo_sign"])
    config = rlnb.load_config(None, ["imports=[my_loops]", "algorithm=grpo_sign", *TINY,
                                     "grpo.val_period=0"])
    loops = sys.modules["my_loops"]
    assert config.loop_config is config.grpo and config.ppo is None
    with pytest.raises(ValueError, match="a section of algorithm 'ppo'"):
        rlnb.load_config(None, ["imports=[my_loops]", "algorithm=grpo_sign", "ppo.seed=1"])
    # a preset shrinks the loop's section, GRPO's here
    fast = rlnb.load_config(None, ["imports=[my_loops]", "algorithm=grpo_sign"], preset="fast")
    assert fast.grpo.num_prompts_per_step < rlnb.load_config(None).grpo.num_prompts_per_step
    trainer = with_rewards(make_trainer(config))  # each group's rewards: 1, 0, 0, 1
    assert type(trainer) is loops.SignGRPOTrainer

    dash = Dashboard(trainer)
    assert [p.title for p in dash.panels] == ["reward (mean ± 2 s.e. over prompts)",
                                              "positive advantages (share)"]
    assert dash.panels[1].keys == ("train/positive_share",)
    assert dash.panels[0].band == "train/reward_sem"  # the dashboard's drawing of the reward
    # a saved run of the loop replays with the loop's panels: the run records its trainer
    # (parts.json), so no UI file guesses the loop from the metric names
    quick = rlnb.load_config(None, ["imports=[my_loops]", "algorithm=grpo_sign", *TINY,
                                    "grpo.val_period=0", "sft.enabled=false",
                                    "checkpointing.enabled=false"])
    saved = rlnb.TrainingRun(quick, run_dir=plugin / "signrun", progress=False,
                             log=lambda *a: None)
    list(saved.steps(1))
    saved.close()
    replay = Dashboard.from_run_dir(plugin / "signrun")
    assert [p.keys for p in replay.panels] == [p.keys for p in dash.panels]
    stepper = StageStepper(trainer, dash)
    assert stepper.stages == ("Rollout", "Advantages", "Sign", "Update")
    assert stepper.buttons["Sign"].tooltip == "stage 3: advantages -> their sign (no side effects)"
    stepper.press("Sign")  # out of order: refused in the widget
    assert "run Advantages first: there are no advantages to take the sign of" in \
        stepper.view.value

    stepper.press("Rollout")
    assert stepper.rollout is not None and "RolloutBatch" in stepper.view.value
    stepper.press("Advantages")
    raw = stepper.advantages
    assert stepper.next_stage == "Sign"
    stepper.press("Update")  # the advantages are not signed yet
    assert "run Sign first: Update trains on the signed advantages" in stepper.view.value
    assert trainer.step_count == 0
    stepper.press("Sign")
    # by hand: rewards 1, 0, 0, 1 in every group of 4 -> advantages +, -, -, + -> signs ±1
    assert torch.equal(stepper.advantages.sequence_advantages(),
                       torch.tensor([1.0, -1.0, -1.0, 1.0]).repeat(4))
    assert torch.equal(stepper.advantages.advantages, torch.sign(raw.advantages))
    assert stepper.advantages.rollout is stepper.rollout
    assert "signed advantages: 8 responses +1, 8 responses -1" in stepper.view.value
    assert stepper.next_stage == "Update"

    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    stepper.press("Update")
    assert trainer.step_count == 1 and "UpdateResult(step=1)" in stepper.view.value
    assert any(not torch.equal(a, b) for a, b in zip(before, trainer.policy.model.parameters()))
    assert dash.history[-1]["step"] == 1
    assert dash.history[-1]["train/positive_share"] == 0.5  # the Sign stage's, recorded
    assert list(dash.columns["train/positive_share"][1]) == [0.5]  # and plotted
    stepper.press("Sign")  # the batch has been trained on
    assert "run Rollout first: this batch has already been trained on" in stepper.view.value
    stepper.press("Step")  # the loop's own step: signed advantages again
    assert trainer.step_count == 2 and dash.history[-1]["train/positive_share"] == 0.5


def test_a_loop_whose_stages_do_not_fit_is_refused_when_defined():
    from rlnb.engine.trainers.grpo import GRPOTrainer
    from rlnb.engine.trainers.loops import register_loop
    from rlnb.engine.trainers.views import Stage

    with pytest.raises(TypeError, match="stage 'Values' takes \\['values'\\], which no stage"):
        type("Bad", (GRPOTrainer,), {"stages": (
            GRPOTrainer.stages[0],
            Stage("Values", "v", "compute_advantages", keeps="v", takes=("values",)))})
    with pytest.raises(TypeError, match="calls 'no_such_method'"):
        type("Bad", (GRPOTrainer,), {"stages": (Stage("X", "x", "no_such_method", keeps="x"),)})
    with pytest.raises(TypeError, match="Trainer subclass"):
        register_loop("x", dict)
    with pytest.raises(TypeError, match="first section"):
        register_loop("x", GRPOTrainer, ("ppo",))
    with pytest.raises(ValueError, match=r"loop 'grpo' is taken by rlnb\.engine\.trainers\.grpo"
                                         r"\.GRPOTrainer; register .*MyGRPO under another name"):
        register_loop("grpo", type("MyGRPO", (GRPOTrainer,), {}))
    assert "x" not in LOOPS


def test_a_plugin_task_with_a_setting_of_its_own(plugin):
    """`imports:` registers the task and its Settings: data.width is checked with its type,
    refused naming its dotted key, and reaches the task; one step trains on its rows."""
    config_file = plugin / "words.yaml"
    config_file.write_text(yaml.safe_dump({
        **yaml.safe_load(packaged_config("tiny").read_text()), "imports": ["knob_plugins"],
        "data": {"name": "words", "width": 3}}))
    config = rlnb.load_config(config_file, TINY, preset="fast")
    assert (config.data.width, config.data.num_val) == (3, 16)
    trainer = rlnb.GRPOTrainer(config)
    assert type(trainer.task).__name__ == "WordsTask" and trainer.task.width == 3
    batch = trainer.rollout()
    assert all(len(r["prompt"]) == 4 for r in batch.rows)  # three letters and "="
    assert trainer.update(trainer.compute_advantages(batch)).step == 1
    # the run's config.yaml keeps the setting, flat, and reads back as the same config
    saved = yaml.safe_load(dump_config(config))
    assert saved["data"] == {"name": "words", "num_val": 16, "seed": 0, "width": 3,
                             "correct_reward": None, "correct_threshold": 1.0}
    assert rlnb.load_config(saved) == config
    for override, line in [
            ("data.width=abc", "data.width: Input should be a valid integer, unable to parse "
                               "string as an integer (got 'abc')"),
            ("data.width=9", "data.width: Input should be less than or equal to 4 (got 9)"),
            ("data.widht=3", "data.widht: unknown key; did you mean 'width'? task 'words' takes "
                             "num_val, seed, width, correct_reward, correct_threshold (got 3)"),
            ("data.max_operand=3", "data.max_operand: task 'words' has no such setting "
                                   "('addition' and 'addition_think' have it); it takes num_val, "
                                   "seed, width, correct_reward, correct_threshold (got 3)")]:
        with pytest.raises(ValueError) as err:
            rlnb.load_config(config_file, [override])
        assert str(err.value).splitlines() == ["invalid config:", f"  {line}"]
    # unset, the setting is its Settings' default
    assert rlnb.load_config({"imports": ["knob_plugins"], "data": {"name": "words"}}).data.width == 2


def test_registering_something_that_is_not_one_is_refused():
    with pytest.raises(TypeError, match="no compute_advantage"):
        rlnb.register_estimator("x", object)
    with pytest.raises(TypeError, match="Task subclass"):
        register_task("x", dict)
    with pytest.raises(TypeError, match="GenerationBackend subclass"):
        from rlnb.engine.models.generation import register_generation_backend

        register_generation_backend("x", dict)

    class Unread(Task):
        class Settings(TaskSettings):
            width: int = 2

        def __init__(self, num_val, seed):
            pass

    with pytest.raises(TypeError, match=r"constructor takes no \['width'\], which its Settings"):
        register_task("x", Unread)

    class Clash(Task):
        class Settings(TaskSettings):
            correct_reward: str | None = None

        def __init__(self, correct_reward=None, num_val=200, seed=0):
            pass

    with pytest.raises(TypeError, match=r"declares \['correct_reward'\], which the data section"):
        register_task("x", Clash)
    assert "x" not in TASKS


def test_a_taken_name_is_refused_unless_replaced_on_purpose():
    """Each registry refuses another class under a taken name, built in or a plug-in's, naming
    the class that holds it (two plug-ins choosing one name say which came first); the same
    definition again (a re-run cell) and replace=True (on purpose) are accepted."""
    from rlnb.engine.environments.generated import AdditionTask
    from rlnb.engine.models.generation import GENERATION_BACKENDS, register_generation_backend
    from rlnb.engine.models.hf_backend import HFGenerationBackend

    class MyAddition(AdditionTask):
        pass

    class MyHF(HFGenerationBackend):
        pass

    class MyGRPO(rlnb.GRPOAdvantageEstimator):
        pass

    taken = "is taken by {}; register {} under another name, or pass replace=True"
    with pytest.raises(ValueError, match=re.escape("task 'addition' " + taken.format(
            "rlnb.engine.environments.generated.AdditionTask",
            f"{__name__}.{MyAddition.__qualname__}"))):
        register_task("addition", MyAddition)
    with pytest.raises(ValueError, match="generation backend 'hf' is taken by rlnb.engine"):
        register_generation_backend("hf", MyHF)
    with pytest.raises(ValueError, match="estimator 'grpo' is taken by rlnb.algorithms"):
        rlnb.register_estimator("grpo", MyGRPO)
    assert TASKS["addition"] is AdditionTask and GENERATION_BACKENDS["hf"] is HFGenerationBackend
    assert ADVANTAGE_ESTIMATORS["grpo"] is rlnb.GRPOAdvantageEstimator
    register_task("addition", AdditionTask)  # the same class: nothing changes
    # a plug-in's name: a second plug-in is refused, the first one's cell run again is not
    register_task("rlnb_test_words", MyAddition)
    again = type("MyAddition", (AdditionTask,), {"__qualname__": MyAddition.__qualname__,
                                                   "__module__": MyAddition.__module__})
    register_task("rlnb_test_words", again)
    with pytest.raises(ValueError, match="task 'rlnb_test_words' is taken by .*MyAddition"):
        register_task("rlnb_test_words", AdditionTask)
    try:  # on purpose
        register_task("addition", MyAddition, replace=True)
        assert TASKS["addition"] is MyAddition
    finally:
        register_task("addition", AdditionTask, replace=True)
        del TASKS["rlnb_test_words"]
    assert TASKS["addition"] is AdditionTask


def test_the_estimator_hook_example_in_contributing_runs_and_the_old_name_is_refused():
    """CONTRIBUTING.md's ten-line estimator: it registers, trains through its public hook and
    gives the sign of each response's advantage; a class that still defines the old private
    hook (`_advantages`, never called now) is refused when it is defined."""
    from paths import ROOT

    from rlnb.algorithms.advantages import Estimator
    from rlnb.algorithms.gae import GeneralizedAdvantageEstimator

    text = (ROOT / "CONTRIBUTING.md").read_text()
    (example,) = [c for c in re.findall(r"```python\n(.*?)```", text, re.S) if "advantages(" in c]
    assert len(example.strip().splitlines()) <= 16  # the hook itself: a few lines
    saved = dict(ADVANTAGE_ESTIMATORS)
    try:
        namespace: dict = {}
        exec(compile(example, "CONTRIBUTING.md", "exec"), namespace)
        estimator = ADVANTAGE_ESTIMATORS["sign"]()
        prompts = torch.tensor([[1], [1], [1], [2], [2], [2]])
        rewards = torch.tensor([1.0, 0.0, 0.0, 0.5, 0.5, 0.5])
        got = estimator.compute_advantage(prompts, rewards, torch.ones(6, 3))
        assert got[:, 0].tolist() == [1.0, -1.0, -1.0, 0.0, 0.0, 0.0]
    finally:
        ADVANTAGE_ESTIMATORS.clear()
        ADVANTAGE_ESTIMATORS.update(saved)
    for base in (Estimator, GeneralizedAdvantageEstimator):
        with pytest.raises(TypeError, match="_advantages: the estimator hook is public now; "
                                            "rename it to advantages"):
            type("Old", (base,), {"_advantages": lambda self, *a, **k: None})
