"""Widget logic without a browser: state after steps, button callbacks through .click(),
figure data after an update, static twins, metric cards; on a real tiny trainer."""

import json
import math
import threading
import time

import pytest
import torch
from tiny_config import TINY

import rlnb
from rlnb.engine.inspection.token_stats import token_stats
from rlnb.widgets import (
    DEFAULT_PANELS,
    ConfigPanel,
    Dashboard,
    EstimatorComparison,
    RolloutInspector,
    StageStepper,
    TokenView,
    metric_card,
)

SMALL = [*TINY, "sft.enabled=false", "grpo.val_period=0", "checkpointing.enabled=false",
         "logger.tensorboard_enabled=false"]


def make_trainer(*extra):
    return rlnb.GRPOTrainer(rlnb.load_config(None, [*SMALL, *extra]))


def with_signal(batch):
    """The tiny untrained model gets every sum wrong: give group 0 one right answer."""
    rewards = torch.zeros_like(batch.rewards)
    rewards[(batch.group == 0).nonzero()[0]] = 1.0
    batch.rewards = rewards
    return batch


def test_dashboard_update_fills_traces_band_and_markers():
    dash = Dashboard()
    for step, (r, s) in enumerate([(0.2, 0.1), (0.5, 0.2), (0.4, 0.0)], start=1):
        metrics = {"step": step, "train/reward": r, "train/reward_sem": s,
                   "train/kl_penalty": 0.01 * step, "timing/train/generation": 0.5}
        if step == 2:
            metrics["validation/accuracy"] = 0.7
        dash.update(metrics)
    data = {t.name: t for t in dash.fig.data if t.name}
    assert dash.fig.data[0].name == "reward" and list(dash.fig.data[0].x) == [1, 2, 3]
    assert list(dash.fig.data[0].y) == [0.2, 0.5, 0.4]
    lower, upper = dash.fig.data[1], dash.fig.data[2]
    # the band is the mean ± 2 standard errors (train/reward_sem), an interval of the mean
    assert list(lower.y) == pytest.approx([0.0, 0.1, 0.4])
    assert list(upper.y) == pytest.approx([0.4, 0.9, 0.4])
    assert upper.fill == "tonexty"
    assert list(data["held-out accuracy"].x) == [2] and list(data["held-out accuracy"].y) == [0.7]
    assert list(data["kl_penalty"].y) == pytest.approx([0.01, 0.02, 0.03])
    assert list(data["generation"].y) == [0.5, 0.5, 0.5]
    assert len(data["entropy" if "entropy" in data else "approx_entropy"].x) == 0


def test_dashboard_static_twin_and_mimebundle():
    dash = Dashboard(history=[{"step": 1, "train/reward": 0.25, "train/reward_std": 0.5}])
    bundle = dash._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle
    html = bundle["text/html"]
    assert "Plotly.newPlot" in html and "train/reward" in html and "0.25" in html
    assert "1 steps" in html


def test_dashboard_replays_a_run_dir(tmp_path):
    lines = [{"step": 0, "validation/accuracy": 0.1},
             {"step": 1, "train/reward": 0.3, "train/reward_std": 0.1},
             {"step": 2, "train/reward": 0.6, "train/reward_std": 0.2}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    dash = Dashboard.from_run_dir(tmp_path)
    assert list(dash.fig.data[0].x) == [1, 2] and list(dash.fig.data[0].y) == [0.3, 0.6]
    assert len(dash.history) == 3


def test_every_plotted_metric_has_a_card():
    keys = [k for p in DEFAULT_PANELS for k in (*p.keys, p.band, p.markers) if k]
    for key in keys:
        card = metric_card(key)
        assert card.formula and card.expected_range and card.check, key
    assert "KL" in metric_card("train/kl_penalty").html() or "β" in metric_card(
        "train/kl_penalty").html()
    with pytest.raises(KeyError, match="no row"):
        metric_card("train/not_a_metric")
    dash = Dashboard()
    dash.info.value = True
    assert dash.cards.layout.display == "block" and "expected" in dash.cards.value


def test_dashboard_trains_in_background_and_stop_ends_after_a_whole_step():
    trainer = make_trainer()
    dash = Dashboard(trainer)
    dash.run(200, background=True)
    assert dash.running and not dash.stop_button.disabled
    deadline = 120
    start = time.time()
    while len(dash.history) < 1 and time.time() - start < deadline:
        time.sleep(0.05)
    dash.stop_button.click()
    dash.wait(timeout=deadline)
    assert not dash.running
    steps = len(dash.history)
    assert 1 <= steps < 200
    # stopped between steps: every plotted step is a completed optimizer step
    assert trainer.step_count == steps == len(dash.fig.data[0].x)
    assert "stopped" in dash.status.value and dash.stop_button.disabled


@pytest.mark.smoke
def test_stepper_buttons_run_the_stages_in_order(tmp_path):
    run = rlnb.TrainingRun(None, overrides=SMALL, run_dir=tmp_path / "run", progress=False)
    trainer = run.trainer
    dash = Dashboard(run)  # steps are logged to the run directory
    stepper = StageStepper(run, dash)
    assert stepper.buttons["Rollout"].button_style == "primary"
    assert stepper.buttons["Stop"].disabled

    stepper.buttons["Advantages"].click()  # out of order: an error shown, nothing changed
    assert "run Rollout first" in stepper.view.value and stepper.rollout is None

    stepper.buttons["Rollout"].click()
    assert stepper.rollout is not None and "RolloutBatch" in stepper.view.value
    assert stepper.next_stage == "Advantages"
    assert stepper.buttons["Advantages"].button_style == "primary"
    assert stepper.buttons["Rollout"].button_style == ""
    stepper.buttons["Advantages"].click()
    assert stepper.advantages is not None and stepper.advantages.rollout is stepper.rollout
    assert trainer.step_count == 0
    stepper.buttons["Update"].click()
    assert trainer.step_count == 1 and stepper.next_stage == "Rollout"
    assert list(dash.fig.data[0].x) == [1]
    records = run.run_dir.read_metrics()
    assert [r["step"] for r in records] == [1] and "train/loss" in records[0]
    assert run.run_dir.rollout_steps() == [1]

    stepper.buttons["Update"].click()  # the same batch again: refused, nothing trained
    assert "already been trained on" in stepper.view.value and trainer.step_count == 1
    stepper.buttons["Advantages"].click()
    assert "already been trained on" in stepper.view.value

    stepper.buttons["Step"].click()
    assert trainer.step_count == 2 and list(dash.fig.data[0].x) == [1, 2]
    assert [r["step"] for r in run.run_dir.read_metrics()] == [1, 2]

    stepper.run_steps.value = 2
    stepper.press("Run N")  # headless (no kernel): runs in the foreground
    assert trainer.step_count == 4 and list(dash.fig.data[0].x) == [1, 2, 3, 4]


def test_rollout_inspector_flags_zero_signal_groups():
    trainer = make_trainer()
    batch = with_signal(trainer.rollout())
    adv = trainer.compute_advantages(batch)
    inspector = RolloutInspector(trainer, batch, adv)
    assert inspector.group.value == 0  # opens on the group with signal
    assert "⚠" not in inspector.header.value and "3/4 groups without signal" in \
        inspector.header.value
    G = batch.group_size
    assert inspector.table.value.count("<tr>") == G + 1  # header + one row per response
    inspector.group.value = 1
    assert "no learning signal" in inspector.header.value
    labels = [label for label, _ in inspector.group.options]
    assert "⚠" not in labels[0] and all("⚠" in x for x in labels[1:])


def test_token_stats_match_the_policy_and_the_batch():
    trainer = make_trainer("loss_fn.reference_policy_kl_penalty=0.1")
    batch = with_signal(trainer.rollout())
    adv = trainer.compute_advantages(batch)
    mask = batch.token_mask
    stats = token_stats(trainer.policy, batch, adv)
    # before any update: current = old = reference, so ratio 1 and KL 0 on response tokens
    assert torch.allclose(stats["ratio"][mask > 0], torch.ones(()), atol=1e-5)
    assert stats["kl"].abs().max() < 1e-5 and stats["kl_against"] == "reference"
    assert torch.equal(stats["logprob_gap"],
                       (batch.prev_logprobs - batch.generation_logprobs) * mask)
    assert torch.equal(stats["advantage"], adv.advantages * mask)
    vocab = trainer.policy.model.config.vocab_size
    ent = stats["entropy"][mask > 0]
    assert (ent > 0).all() and (ent <= math.log(vocab) + 1e-4).all()
    assert (stats["entropy"][mask == 0] == 0).all()

    trainer.update(adv)
    after = token_stats(trainer.policy, batch, adv)
    expected = trainer.policy.logprobs(batch.input_ids, batch.attention_mask) * mask
    assert torch.allclose(after["current_logprobs"], expected, atol=1e-5)
    moved = after["ratio"][mask > 0]
    assert (moved - 1).abs().max() > 1e-4  # the update moved the policy
    # tokens of the rewarded response became more likely, those of its wrong siblings less
    right = (batch.rewards > 0).nonzero()[0].item()
    assert after["ratio"][right][mask[right] > 0].prod() > 1
    assert after["kl"][mask > 0].max() > 0


def test_token_view_switches_quantity():
    trainer = make_trainer()
    batch = with_signal(trainer.rollout())
    adv = trainer.compute_advantages(batch)
    view = TokenView(trainer, batch, adv, quantity="advantage")
    assert "colour: <b>advantage</b>" in view.view.value
    n_tokens = int(batch.token_mask[batch.group == 0].sum())
    assert view.view.value.count("<span title=") == n_tokens
    view.quantity.value = "entropy"
    assert "colour: <b>entropy</b>" in view.view.value
    view.quantity.value = "kl"
    assert "generating policy" in view.view.value  # no reference model: KL vs π_old


def test_estimator_comparison_replays_the_same_batch():
    trainer = make_trainer()
    batch = with_signal(trainer.rollout())
    before = [p.detach().clone() for p in trainer.policy.model.parameters()]
    comp = EstimatorComparison(trainer, batch)
    assert {"grpo", "reinforce_plus_plus"} <= set(comp.summary.index)
    grpo = trainer.compute_advantages(batch).sequence_advantages()
    assert comp.table["grpo"].tolist() == pytest.approx(grpo.tolist())
    rpp = comp.table["reinforce_plus_plus"]
    assert rpp.tolist() != pytest.approx(grpo.tolist())
    assert "clip-higher 0.28" in comp.losses.index and "loss" in comp.losses.columns
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.policy.model.parameters()))
    assert trainer.step_count == 0
    assert "Plotly.newPlot" in comp.static_html()


def test_config_panel_applies_between_steps_and_refuses_bad_values():
    trainer = make_trainer()
    panel = ConfigPanel(trainer)
    panel.controls["loss_fn.ratio_clip_max"].value = 0.28
    panel.controls["policy.optimizer.lr"].value = 1e-3
    changed = panel.apply()
    assert changed["loss_fn.ratio_clip_max"] == (0.2, 0.28)
    assert trainer.loss_fn.config.ratio_clip_max == 0.28
    assert trainer.config.loss_fn.ratio_clip_max == 0.28
    trainer.step()
    assert trainer.policy.optimizer.param_groups[0]["lr"] == pytest.approx(
        trainer.policy.scheduler.get_last_lr()[0])
    assert trainer.policy.scheduler.base_lrs[0] == 1e-3

    panel.controls["loss_fn.reference_policy_kl_penalty"].value = 0.1  # no reference model
    assert panel.apply() == {}
    assert "reference model" in panel.message.value
    assert trainer.config.loss_fn.reference_policy_kl_penalty == 0.0
    assert panel.controls["loss_fn.reference_policy_kl_penalty"].value == 0.0  # reset


def test_each_loops_config_panel_shows_the_fields_it_declares():
    """The panel knows no loop: PPO's shows its critic rate and GAE λ (GRPO's keys would not
    exist on its config) and applies a change; GRPO's lists its estimators."""
    from rlnb.engine.trainers.views import COMMON_FIELDS
    from rlnb.run.config.master_config import packaged_config

    ppo = rlnb.PPOTrainer(rlnb.load_config(packaged_config("ppo_tiny"), ["ppo.val_period=0"],
                                           preset="fast"))
    panel = ConfigPanel(ppo)
    assert list(panel.controls) == [f.key for f in type(ppo).config_fields] == [
        "policy.optimizer.lr", "value.optimizer.lr", "ppo.adv_estimator.gae_lambda",
        "loss_fn.ratio_clip_max"]
    panel.controls["ppo.adv_estimator.gae_lambda"].value = 0.9
    assert panel.apply() == {"ppo.adv_estimator.gae_lambda": (0.95, 0.9)}
    assert ppo.config.ppo.adv_estimator.gae_lambda == 0.9
    grpo = ConfigPanel(make_trainer())
    assert list(grpo.controls)[:len(COMMON_FIELDS)] == [f.key for f in COMMON_FIELDS]
    assert "reinforce_plus_plus" in grpo.controls["grpo.adv_estimator.name"].options


def test_reconfigure_refuses_keys_that_change_shapes():
    trainer = make_trainer()
    with pytest.raises(ValueError, match="cannot change between steps"):
        trainer.reconfigure({"policy.train_global_batch_size": 8})
    with pytest.raises(ValueError, match="ratio_clip_maxx|ratio_clip_max"):
        trainer.reconfigure({"loss_fn.ratio_clip_maxx": 0.3})


def test_config_panel_applies_during_background_training_between_two_steps():
    trainer = make_trainer()
    dash = Dashboard(trainer)
    panel = ConfigPanel(trainer)  # finds the dashboard that trains this trainer
    gate = threading.Event()
    original_step = trainer.step

    def slow_step():  # hold each step until the test lets it go
        gate.wait(30)
        gate.clear()
        return original_step()

    trainer.step = slow_step
    lr_before = trainer.config.policy.optimizer.lr
    assert lr_before != 2e-3
    dash.run(50, background=True)
    panel.controls["policy.optimizer.lr"].value = 2e-3
    panel.apply()  # a step is in progress: queued, nothing changed yet
    assert "applies after step 1" in panel.message.value
    assert trainer.config.policy.optimizer.lr == lr_before
    gate.set()  # step 1 ends; the change lands before step 2 starts
    deadline = time.time() + 60
    while "applied from step" not in panel.message.value and time.time() < deadline:
        time.sleep(0.01)
    assert "applied from step 2" in panel.message.value
    assert trainer.config.policy.optimizer.lr == 2e-3
    panel.controls["loss_fn.ratio_clip_max"].value = 0.3
    panel.apply()
    panel.reset()  # cancels the queued change
    assert "cancelled" in panel.message.value
    assert panel.controls["loss_fn.ratio_clip_max"].value == 0.2
    dash.stop()
    gate.set()
    dash.wait(timeout=60)
    assert trainer.config.loss_fn.ratio_clip_max == 0.2  # the cancelled change never landed
    lrs = [m["train/lr"] for m in dash.history]
    assert lrs[0] == lr_before and set(lrs[1:]) == {2e-3}, lrs


# --- a user's reward functions: the dashboard's panels and note, the workbench's static twin
def fmt(completions, **kwargs):
    return [1.0 if c[:1].isdigit() else 0.0 for c in completions]


def exact(completions, solution, **kwargs):
    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]


ROWS = [{"prompt": f"{a}+{b}=", "solution": str(a + b)} for a in range(6) for b in range(6)]


def user_trainer(*extra):
    cfg = rlnb.load_config(None, [*SMALL, "data.name=dataset", *extra])
    return rlnb.GRPOTrainer(cfg, reward_funcs=[fmt, exact], train_dataset=ROWS)


def test_the_dashboard_plots_each_reward_function_and_says_when_there_is_no_accuracy(tmp_path):
    trainer = user_trainer()
    dash = Dashboard(trainer)
    assert dash.panels[-1].keys == ("train/reward/fmt", "train/reward/exact")
    assert dash.panels[0].markers == "validation/reward"
    assert "no accuracy: no reward defines a correct response" in dash.status.value
    assert "data.correct_reward" in dash.static_html()
    dash.run(1, background=False)
    dash.update({"step": 1, **trainer.validate()})
    assert dash.columns["train/reward/fmt"][1] and dash.columns["validation/reward"][1]
    assert "validation/accuracy" not in dash.columns
    with_correct = Dashboard(user_trainer("data.correct_reward=exact"))
    assert with_correct.panels[0].markers == "validation/accuracy"
    assert with_correct.note is None
    replay = Dashboard(history=dash.history)  # the history of a run with no accuracy
    assert replay.panels[0].markers == "validation/reward"
    run = rlnb.TrainingRun(None, overrides=[*SMALL, "data.name=dataset"], run_dir=tmp_path / "r",
                           progress=False, log=lambda *a: None, reward_funcs=[fmt, exact],
                           train_dataset=ROWS)
    run.train(1)
    run.close()
    saved = Dashboard.from_run_dir(tmp_path / "r")  # its config names the functions
    assert saved.panels[-1].keys == ("train/reward/fmt", "train/reward/exact")
    assert saved.panels[0].markers == "validation/reward"


def test_the_reward_workbench_shows_components_and_flags_no_signal_groups():
    from rlnb.widgets import RewardWorkbench

    trainer = user_trainer("data.correct_reward=exact")
    bench = RewardWorkbench(trainer, rows={"prompt": "1+2=", "solution": "3"},
                            completions=["3", "x", "4", "5"], generations=2)
    html = bench.static_html()
    assert "2 group(s) of 2; 1 with no signal (groups [1])" in html
    assert "<th>fmt</th>" in html and "<th>exact</th>" in html
    assert bench.table.no_signal_groups == [1]  # totals 1, 1 (fmt only): all equal
    batch = trainer.rollout()
    on_batch = RewardWorkbench(trainer, batch=batch)
    assert len(on_batch.table.rows) == len(batch.responses)
    with pytest.raises(ValueError, match="has none"):
        RewardWorkbench(make_trainer(), rows={"prompt": "1+2="}, completions=["3"])


def test_inspector_token_view_and_stepper_on_a_run_of_reward_functions(tmp_path):
    def half(completions, **kwargs):  # signal in every group
        return [float(i % 2) for i in range(len(completions))]

    cfg = rlnb.load_config(None, [*SMALL, "data.name=dataset", "data.correct_reward=half"])
    trainer = rlnb.GRPOTrainer(cfg, reward_funcs=[half], train_dataset=ROWS)
    batch = trainer.rollout()
    adv = trainer.compute_advantages(batch)
    inspector = RolloutInspector(trainer, batch, adv)
    assert "0/4 groups without signal" in inspector.header.value
    view = TokenView(trainer, batch, adv, quantity="advantage")
    assert view.view.value.count("<span title=") == int(batch.token_mask[batch.group == 0].sum())
    stepper = StageStepper(trainer)
    stepper.press("Step")
    assert trainer.step_count == 1, stepper.view.value
