"""The diagnosis card: each finding produced, with its fix, on a real tiny run built to show it,
and on none of the others; a healthy run shows none; ``rlnb doctor`` reads a run directory.

Every run starts from the same warm start (the fast preset's tiny model taught single-digit sums
for 150 supervised steps, so it ends its answers: an untrained model is cut off on nearly every
response, which would be a finding of its own) and trains 12-20 GRPO steps."""

import pytest

import rlnb
from rlnb.engine.inspection.diagnosis import Finding, diagnose
from rlnb.engine.models.policy import Policy
from rlnb.run.config.master_config import load_config
from rlnb.run.training.probes import attach_probes

# the runs were built under NeMo-RL's numerics (the embedded recipe before it took TRL's three
# choices): with the group baseline the KL run below no longer runs away in 20 steps
BASE = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
        "data.max_operand=9", "grpo.use_leave_one_out_baseline=true",
        "grpo.update_rows=in_order", "grpo.token_normalizer=global_batch"]
TWO_STEPS = "policy.train_global_batch_size=8"  # P x G = 16 rows: two optimizer steps a rollout
ROWS = [{"prompt": f"{a}+{b}=", "solution": str(a + b)} for a in range(10) for b in range(10)]


# --- reward functions that make each problem (TRL's signature; module level: configs name them)
def half_always(completions, **kwargs):
    """0.5 whatever the completion: nothing to learn."""
    return [0.5] * len(completions)


def first_operand_odd(prompts, completions, **kwargs):
    """Reads only the prompt: a group's G responses always score alike."""
    return [float(int(p[0]) % 2) for p in prompts]


def anything_but_zero(completions, **kwargs):
    """Pays nearly every response."""
    return [0.0 if c.startswith("0") else 1.0 for c in completions]


def exactly_one(completions, **kwargs):
    """Pays one response: the policy collapses onto it."""
    return [1.0 if c == "1" else 0.0 for c in completions]


def odd_digit_share(completions, **kwargs):
    """The share of odd digits: pulls the policy away from where it started."""
    return [sum(ch in "13579" for ch in c) / max(len(c), 1) for c in completions]


@pytest.fixture(scope="module")
def warm_state():
    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    cfg = load_config(None, [*BASE, "sft.enabled=true", "sft.max_steps=150",
                             "sft.stop_at_accuracy=0.3"], preset="fast")
    trainer, _ = trainer_with_warm_start(cfg)
    state = {k: v.clone() for k, v in trainer.policy.model.state_dict().items()}
    trainer.close()
    return state


def records_of(state, over=(), steps=12, reward=None):
    cfg = load_config(None, [*BASE, *over], preset="fast")
    policy = Policy(cfg.policy, seed=cfg.grpo.seed,
                    need_reference=cfg.loss_fn.reference_policy_kl_penalty > 0)
    policy.model.load_state_dict(state)
    policy.sync_reference()
    user = {"reward_funcs": [reward], "train_dataset": ROWS} if reward else {}
    trainer = rlnb.GRPOTrainer(cfg, policy=policy, **user)
    attach_probes(trainer)  # the funnel, as a run records it
    out = []
    for i in range(steps):
        m = trainer.step()
        out.append({"step": i + 1, **{k: v for k, v in m.items() if isinstance(v, (int, float))}})
    trainer.close()
    return out, cfg


USER = "data.correct_reward=null"
CASES = {  # name: (overrides, steps, reward function, the one finding expected)
    "healthy": ([TWO_STEPS], 12, None, None),
    "ratio_one": ([], 12, None, "ratio_one"),  # P x G = 16 = the global batch: one step
    "truncated": ([TWO_STEPS, "policy.generation.max_new_tokens=1"], 12, None, "truncated"),
    "too_hard": ([TWO_STEPS, "data.max_operand=999"], 12, None, "too_hard"),
    "rewards_constant": ([TWO_STEPS, USER], 12, half_always, "rewards_constant"),
    "no_signal": ([TWO_STEPS, USER], 12, first_operand_odd, "no_signal"),
    "too_easy": ([TWO_STEPS, USER], 12, anything_but_zero, "too_easy"),
    "entropy_collapse": ([TWO_STEPS, USER, "policy.optimizer.lr=1e-2"], 20, exactly_one,
                         "entropy_collapse"),
    "kl_runaway": ([TWO_STEPS, USER, "policy.optimizer.lr=3e-3",
                    "loss_fn.reference_policy_kl_penalty=0.01"], 20, odd_digit_share, "kl_runaway"),
    # the commonest failure: a learning rate that throws the policy off its start in step 1
    # (the built-in task; its KL is far above 0 from the first step, so a rule that compares
    # the last steps with the first saw nothing)
    "kl_from_start": ([TWO_STEPS, "policy.optimizer.lr=1e-2",
                       "loss_fn.reference_policy_kl_penalty=0.05"], 12, None, "kl_runaway"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_each_finding_shows_on_the_run_built_for_it_and_no_other(warm_state, name):
    over, steps, reward, expected = CASES[name]
    records, cfg = records_of(warm_state, over, steps, reward)
    card = diagnose(records, config=cfg)
    assert card.keys == ([expected] if expected else []), card.text()
    assert card.steps == (1, steps)
    if expected:
        (finding,) = card.findings
        assert finding.fix and finding.what
        assert finding.kind == ("expected" if name == "ratio_one" else "problem")
        if name == "kl_from_start":
            assert "first updates threw the policy far from its start" in finding.what
            assert "lower policy.optimizer.lr" in finding.fix
        assert f"{finding.key}: " in card.text() and "fix: " in card.text()
        assert "<table>" in card._repr_html_()
    else:
        assert card.text().startswith(f"diagnosis of steps 1-{steps}: no problem found")


def step(i, **kw):
    base = {"step": i, "train/reward": 0.5, "train/reward_std": 0.4, "funnel/generated": 16.0,
            "funnel/no_signal": 4.0, "funnel/trained": 12.0, "train/probs_ratio_min": 0.9,
            "train/probs_ratio_max": 1.1}
    return {**base, **kw}


def test_the_built_in_tasks_reward_is_its_correct_component_not_format(warm_state):
    from rlnb.run.experiments.proxy import proxy_vs_truth

    records, _ = records_of(warm_state, [TWO_STEPS], 6)
    assert all(r["train/reward"] == r["train/reward/correct"] for r in records)
    report = proxy_vs_truth(records)
    assert report.shares == {"correct": 1.0} and report.unrewarded == ["format"]


def test_a_kl_far_from_zero_from_the_first_step_is_the_finding_and_hides_what_followed():
    # the KL starts at 0 (the reference is the starting policy): 3 nats a token from step 1 is
    # the finding even though it never "grew"; the truncation and the collapse that came after
    # step 1 are its consequences, not findings of their own
    records = [step(i, **{"train/kl_penalty": 3.0 + 0.1 * i, "train/approx_entropy":
                          1.5 if i == 1 else 0.01, "train/truncation_rate": 0.0 if i < 4 else 1.0})
               for i in range(1, 11)]
    card = diagnose(records)
    assert card.keys == ["kl_runaway"], card.text()
    assert "already 3.2 nats a token over the first 3 step(s) (step 1: 3.1)" in card.text()
    assert ("after step 1, as consequences of the KL from the start (not shown apart; the same "
            "fix): entropy_collapse, truncated") in card.notes
    # a KL that starts near 0 and stays there is no finding, however many steps
    calm = [step(i, **{"train/kl_penalty": 0.01}) for i in range(1, 21)]
    assert diagnose(calm).keys == []
    # truncation already in step 1 is not the KL's doing: it stays a finding of its own
    cut = [{**r, "train/truncation_rate": 1.0} for r in records]
    assert diagnose(cut).keys == ["truncated", "kl_runaway"]


def test_entropy_collapse_is_measured_from_the_first_step():
    # collapsed by step 2: the mean of the first three steps (0.87) was no start to fall from
    ent = [2.0, 0.3, 0.3, 0.3, 0.3]
    records = [step(i, **{"train/approx_entropy": e}) for i, e in enumerate(ent, 1)]
    (finding,) = diagnose(records).findings
    assert finding.key == "entropy_collapse"
    assert "fell from 2 (step 1) to 0.3 nats a token" in finding.what


def test_one_cause_one_finding_the_explaining_finding_hides_the_others():
    # every response cut off and every reward 0: the truncation is the finding, not "too hard",
    # "no signal" or "rewards constant"
    cut = [step(i, **{"train/truncation_rate": 1.0, "train/reward": 0.0, "train/reward_std": 0.0,
                      "train/reward/correct": 0.0, "funnel/no_signal": 16.0,
                      "funnel/trained": 0.0}) for i in range(1, 6)]
    assert diagnose(cut).keys == ["truncated"]
    # the same without truncation: nobody solves the task
    hard = [{**r, "train/truncation_rate": 0.0} for r in cut]
    assert diagnose(hard).keys == ["too_hard"]
    # a nonzero constant reward is named even when responses are cut off
    const = [{**r, "train/reward": 0.5, "train/reward/correct": 0.5} for r in cut]
    assert diagnose(const).keys == ["truncated", "rewards_constant"]


def test_a_ratio_of_one_with_several_optimizer_steps_is_a_problem():
    flat = [step(i, **{"train/probs_ratio_min": 1.0, "train/probs_ratio_max": 1.0})
            for i in range(1, 4)]
    several = {"grpo": {"num_prompts_per_step": 4, "num_generations_per_prompt": 4},
               "policy": {"train_global_batch_size": 8}}
    (f,) = diagnose(flat, config=several).findings
    assert (f.key, f.kind) == ("ratio_one", "problem") and "2 optimizer steps" in f.what
    one = {**several, "policy": {"train_global_batch_size": 16}}
    assert diagnose(flat, config=one).findings[0].kind == "expected"
    # no row carried gradient: nothing could move the policy, so the ratio says nothing
    idle = [{**r, "funnel/trained": 0.0} for r in flat]
    assert "ratio_one" not in diagnose(idle, config=several).keys


def test_the_card_reads_only_the_first_steps_and_says_when_there_are_none():
    late = [step(i) for i in range(1, 5)] + [
        step(i, **{"train/truncation_rate": 1.0}) for i in range(5, 40)]
    assert diagnose(late, first=4).keys == [] and "truncated" in diagnose(late).keys
    empty = diagnose([{"step": 0, "validation/accuracy": 0.2}])
    assert empty.steps is None and empty.text() == "diagnosis: no training step logged yet"
    assert Finding("k", "expected", "w", "f").text() == "[expected] k: w\n    fix: f"


def test_the_signal_check_is_set_beside_what_the_steps_measured():
    from rlnb.engine.inspection.signal_check import SignalReport

    report = SignalReport(group_size=4, samples=16, step=0, expected={2: 0.5, 4: 0.3})
    card = diagnose([step(i) for i in range(1, 4)], signal=report)
    assert card.notes == ["signal check at step 0: it expected 30% of groups of G=4 without "
                          "signal", "measured: 25% of the rows sat in groups without signal "
                          "over steps 1-3"]


def test_rlnb_doctor_reads_a_run_directory(tmp_path, capsys):
    from rlnb.cli import main
    from rlnb.run.training.session import TrainingRun

    # the fast preset's untrained model: nearly every response is cut off at 4 tokens
    run = TrainingRun(load_config(None, BASE, preset="fast"), run_dir=tmp_path / "run",
                      progress=False, log=lambda *a: None)
    list(run.steps(3))
    run.close()
    assert main(["doctor", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("diagnosis of steps 1-3: 1 problem(s)")
    assert "[problem] truncated: " in out and "(4 tokens)" in out
    assert main(["doctor", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"rlnb doctor: {tmp_path}: no config.yaml (not an rlnb run directory)"
    assert main(["doctor", str(tmp_path / "run"), "--first", "0"]) == 2
    assert "first=0: read at least one step" in capsys.readouterr().err
