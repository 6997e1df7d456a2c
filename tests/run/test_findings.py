"""The findings studies: length-by-outcome metrics, the addition_think task, the effect
table's reductions and verdicts on hand-made numbers, and each finding's settings, metrics and
quick path (one thread a run, the same numbers in this process or another)."""

import math

import pytest
import torch

import rlnb
from rlnb.algorithms.baselines import calculate_baseline_and_std_per_prompt
from rlnb.engine.environments.tasks import AdditionThinkTask, TaskConfig, build_task
from rlnb.engine.trainers.grpo import GRPOTrainer, advantage_metrics
from rlnb.engine.trainers.rollout import groups_with_signal, length_by_outcome
from rlnb.engine.trainers.warm_start import supervised_batch
from rlnb.run.experiments.effects import Metric, per_seed, reduce_run, verdict, with_wall_time
from rlnb.run.experiments.findings import FINDINGS, effect_rows, run_finding
from rlnb.run.experiments.stats import Interval

# ---------------------------------------------------------------------------------- metrics


def test_length_by_outcome_on_a_hand_batch():
    lengths = torch.tensor([3, 5, 2, 6, 4])
    correct = torch.tensor([True, False, True, False, False])
    m = length_by_outcome(lengths, correct)
    assert m == {"train/mean_gen_tokens_correct": 2.5,  # (3 + 2) / 2
                 "train/mean_gen_tokens_incorrect": 5.0}  # (5 + 6 + 4) / 3


def test_an_empty_side_has_no_key_rather_than_a_nan():
    lengths = torch.tensor([3, 5])
    assert length_by_outcome(lengths, torch.tensor([True, True])) == {
        "train/mean_gen_tokens_correct": 4.0}
    assert length_by_outcome(lengths, torch.tensor([False, False])) == {
        "train/mean_gen_tokens_incorrect": 4.0}


def test_the_trainer_logs_lengths_by_outcome_of_its_own_batch():
    trainer = GRPOTrainer(rlnb.load_config(None, ["data.name=addition_think",
                                                  "grpo.val_period=0"], preset="fast"))
    batch = trainer.rollout()
    # an untrained model is never right: mark some rows correct by hand, as an environment would
    by_hand = {}
    for name, flag in (("correct", True), ("incorrect", False)):
        lens = [int(n) for n, c in zip(batch.response_lengths, batch.correct) if bool(c) == flag]
        if lens:
            by_hand[f"train/mean_gen_tokens_{name}"] = sum(lens) / len(lens)
    got = {k: v for k, v in batch.metrics.items() if "_correct" in k or "_incorrect" in k}
    assert got == pytest.approx(by_hand) and "train/mean_gen_tokens_incorrect" in got


def test_groups_with_signal_on_hand_groups():
    group = torch.tensor([0, 0, 0, 1, 1, 1, 2, 2, 2, 7, 7])
    rewards = torch.tensor([1.0, 1, 1, 0, 0, 0, 1, 0, 0, 0.5, 0.25])
    assert groups_with_signal(group, rewards) == (2, 4)  # groups 2 and 7 have signal


def test_pct_mixed_is_not_groups_with_signal_under_leave_one_out():
    # three groups of 4: all right, all wrong, one right -> one group in three has signal
    prompt_ids = torch.arange(3).repeat_interleave(4)[:, None]  # [B, 1]
    rewards = torch.tensor([1.0] * 4 + [0.0] * 4 + [1.0, 0.0, 0.0, 0.0])  # [B]
    group = prompt_ids[:, 0]
    assert groups_with_signal(group, rewards) == (1, 3)
    for loo, mixed in ((False, 100 / 3), (True, 100 * 3 / 12)):  # loo: the lone 1's baseline is 0
        baseline, _ = calculate_baseline_and_std_per_prompt(prompt_ids, rewards, leave_one_out=loo)
        m = advantage_metrics(torch.zeros(12, 3), torch.ones(12, 3), baseline, torch.ones(12))
        assert m["train/baseline_reward/pct_mixed"] == pytest.approx(mixed)


def _scripted(trainer, seen):
    """Reward 1 for the first response to a prompt with an even answer, else 0: groups of
    even answers have signal, groups of odd answers none. Records every row it scores."""
    G = trainer.config.grpo.num_generations_per_prompt
    score = trainer.task.score

    def scripted(prompts, responses, rows):
        r = score(prompts, responses, rows)
        bits = torch.tensor([int(row["answer"]) % 2 == 0 and i % G == 0
                             for i, row in enumerate(rows)])
        r.total, r.correct, r.components = bits.float(), bits, {"correct": bits.float()}
        seen.extend(rows[::G])
        return r

    trainer.task.score = scripted


@pytest.mark.parametrize("dynamic", [False, True])
def test_the_trainer_counts_every_generated_group(dynamic):
    over = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
            f"grpo.use_dynamic_sampling={str(dynamic).lower()}",
            "grpo.dynamic_sampling_max_gen_batches=50"]
    trainer = GRPOTrainer(rlnb.load_config(None, over, preset="fast"))
    seen = []
    _scripted(trainer, seen)
    batch = trainer.rollout()
    even = [int(row["answer"]) % 2 == 0 for row in seen]  # one entry per generated group
    assert batch.metrics["train/groups_with_signal"] == pytest.approx(sum(even) / len(even))
    if dynamic:  # more than one generation batch, and every kept row is from an even group
        assert len(seen) > trainer.config.grpo.num_prompts_per_step
        assert all(int(row["answer"]) % 2 == 0 for row in batch.rows)


# ---------------------------------------------------------------------------------- the task


@pytest.fixture(scope="module")
def think():
    return AdditionThinkTask(max_operand=50, max_filler=4, num_val=20, seed=0)


def test_the_reward_ignores_leading_filler(think):
    row = {"prompt": "12+7=", "answer": "19"}
    responses = ["19", "...19", "." * 11 + "19", "..19  ", "19.", ".1.9", " 19", "..18", "...."]
    r = think.score(["12+7="] * len(responses), responses, [row] * len(responses))
    assert r.total.tolist() == [1, 1, 1, 1, 0, 0, 0, 0, 0]
    assert r.correct.tolist() == [True] * 4 + [False] * 5
    assert r.components["format"].tolist() == [1, 1, 1, 1, 0, 0, 0, 1, 0]  # "18" is well formed


def test_rows_parse_and_their_demonstrations_are_filler_then_the_answer(think):
    rows = think.train_rows(300, seed=3)
    fillers = set()
    for row in rows:
        a, b = row["prompt"].removesuffix("=").split("+")
        assert row["prompt"].endswith("=") and row["answer"] == str(int(a) + int(b))
        assert 0 <= int(a) <= 50 and 0 <= int(b) <= 50
        target = row["sft_target"]
        filler = target[: len(target) - len(row["answer"])]
        assert target.endswith(row["answer"]) and set(filler) <= {"."}
        fillers.add(len(filler))
    assert fillers == {0, 1, 2, 3, 4}  # every length up to max_filler, nothing longer
    # the demonstrations themselves earn the reward
    r = think.score([x["prompt"] for x in rows], [x["sft_target"] for x in rows], rows)
    assert bool(r.correct.all())
    assert not {x["prompt"] for x in rows} & {x["prompt"] for x in think.val_rows()}


def test_the_warm_start_imitates_the_demonstration(think):
    tok = rlnb.engine.models.tiny.build_char_tokenizer()
    rows = [{"prompt": "1+2=", "answer": "3", "sft_target": "...3"}, {"prompt": "1+2=", "answer": "3"}]
    batch = supervised_batch(tok, rows)
    assert batch["token_mask"].sum(1).tolist() == [5.0, 2.0]  # "...3" + EOS, "3" + EOS


def test_max_filler_is_checked_and_read_by_addition_think_only():
    with pytest.raises(ValueError, match="max_filler"):
        AdditionThinkTask(max_filler=-1)
    with pytest.raises(ValueError, match="max_filler"):
        TaskConfig(name="addition", max_filler=2)
    zero = build_task({"name": "addition_think", "max_filler": 0, "num_val": 10})
    assert all(r["sft_target"] == r["answer"] for r in zero.train_rows(50))
    with pytest.raises(ValueError, match="data.max_filler"):
        rlnb.load_config(None, ["data.name=addition_think", "data.max_filler=-1"])

# ---------------------------------------------------------------------------------- the table


def _record(values, key="k", seconds=1.0):
    return with_wall_time([{"step": i + 1, key: v, "timing/train/total_step_time": seconds}
                           for i, v in enumerate(values)])


def test_reductions_of_one_run():
    rec = _record([1.0, None, 3.0, 5.0])
    assert reduce_run(rec, Metric("m", "k", last=2)) == 4.0  # (3 + 5) / 2
    assert reduce_run(rec, Metric("m", "k", last=3)) == 4.0  # the None step is skipped
    assert reduce_run(rec, Metric("m", "k", how="run_mean", last=1)) == 3.0  # (1 + 3 + 5) / 3
    # validation-only records (no training time) are not training steps
    assert reduce_run([{"k": 100.0, "wall_s": 0.0}, *rec], Metric("m", "k", how="run_mean")) == 3.0
    assert reduce_run(rec, Metric("m", "k", how="final")) == 5.0
    assert reduce_run(rec, Metric("m", "k", how="seconds")) == 4.0
    assert math.isnan(reduce_run(rec, Metric("m", "other")))
    # steps to a rise over the first logged value (1.0 at step 1): +2 first at step 3 (3.0),
    # +4 at step 4 (5.0); +5 never: the last step, a lower bound
    assert reduce_run(rec, Metric("m", "k", how="steps_to", gain=2.0)) == 3.0
    assert reduce_run(rec, Metric("m", "k", how="steps_to", gain=4.0)) == 4.0
    assert reduce_run(rec, Metric("m", "k", how="steps_to", gain=5.0)) == 4.0
    with pytest.raises(ValueError, match="how='mean'"):
        Metric("m", "k", how="mean")


def test_equal_time_compares_what_each_setting_reached_in_the_time_both_had():
    slow = _record([0.1, 0.5, 0.9], seconds=2.0)  # at 2, 4, 6 s
    fast = _record([0.2, 0.3, 0.4], seconds=1.0)  # at 1, 2, 3 s
    a, b = per_seed([slow], [fast], Metric("m", "k", how="at_equal_time"))
    assert (a, b) == ([0.1], [0.4])  # within 3 s: the slow run's first point, the fast one's last


def test_effect_rows_give_the_paired_interval_and_verdict():
    finding = FINDINGS["clip_higher"]
    a_label, b_label = (s.label for s in finding.settings)
    runs = {a_label: [_record([x], "train/approx_entropy") for x in (3.0, 4.0, 5.0)],
            b_label: [_record([x], "train/approx_entropy") for x in (1.0, 1.0, 2.0)]}
    row = effect_rows(finding, runs)[0]
    # differences 2, 3, 3: mean 8/3, sd 1/sqrt(3), se 1/3, t(0.975, 2) = 4.3027
    assert row["interval"].estimate == pytest.approx(8 / 3)
    assert row["interval"].low == pytest.approx(8 / 3 - 4.302653 / 3, abs=1e-5)
    assert row["verdict"] == "yes" and row["finding"] == finding.title
    assert row["A mean ± sd"] == "4 ± 1" and row["B mean ± sd"] == "1.333 ± 0.5774"
    # power beside it: MDE = (t(0.975, 2) + t(0.8, 2))·sd/√3 = (4.3027 + 1.0607)/3
    assert row["sd_diff"] == pytest.approx(1 / math.sqrt(3))
    assert row["mde"] == pytest.approx((4.302653 + 1.060660) / 3, abs=1e-5)
    assert row["detectable (80 % power)"] == "1.788"
    # the clip fraction (no prediction) was never logged by these hand runs
    assert effect_rows(finding, runs)[1]["verdict"] == "n/a (never logged)"


def test_verdicts():
    def iv(lo, hi):
        return Interval((lo + hi) / 2, lo, hi, 0.95, "paired t")
    assert verdict(iv(0.1, 0.5), 1) == "yes" and verdict(iv(-0.5, -0.1), -1) == "yes"
    assert verdict(iv(-0.5, -0.1), 1) == "not reproduced (opposite)"
    assert verdict(iv(-0.1, 0.5), 1) == "not reproduced (interval holds 0)"
    # no predicted sign: which arm is higher, if the interval says
    assert verdict(iv(0.1, 0.5), 0) == "A > B" and verdict(iv(-0.5, -0.1), 0) == "A < B"
    assert verdict(iv(-0.1, 0.5), 0) == "no clear difference"
    assert verdict(iv(math.nan, math.nan), 1).startswith("n/a")


@pytest.mark.parametrize("name", list(FINDINGS))
@pytest.mark.parametrize("fast", [False, True])
def test_every_setting_loads_and_differs_only_by_its_overrides(name, fast):
    finding = FINDINGS[name]
    if "data.name=reasoning_gym" in finding.base:  # the envs extra
        pytest.importorskip("reasoning_gym")
    configs = [rlnb.load_config(None, finding.overrides(s, 1, fast=fast))
               for s in finding.settings]
    dumps = [c.model_dump() for c in configs]
    assert all(c.grpo.seed == 1 for c in configs)
    for setting, dump in zip(finding.settings[1:], dumps[1:]):
        changed = {k for k in _flat(dump) if _flat(dump)[k] != _flat(dumps[0])[k]}
        named = {o.split("=")[0] for s in (finding.settings[0], setting) for o in s.overrides}
        if any("async_grpo.enabled" in k for k in named):  # auto: false under the async loop
            named.add("grpo.reuse_generation_logprobs")
        assert changed and changed <= named, (setting.label, changed)


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


# ---------------------------------------------------------------------------------- findings 4, 5
@pytest.mark.parametrize("fast", [False, True])
def test_group_size_spends_the_same_rollouts_on_more_or_fewer_prompts(fast):
    finding = FINDINGS["group_size"]
    a, b = (rlnb.load_config(None, finding.overrides(s, 0, fast=fast)).grpo
            for s in finding.settings)
    assert (a.num_prompts_per_step, a.num_generations_per_prompt) == (128, 2)
    assert (b.num_prompts_per_step, b.num_generations_per_prompt) == (16, 16)
    assert a.num_prompts_per_step * a.num_generations_per_prompt == \
        b.num_prompts_per_step * b.num_generations_per_prompt  # equal rollouts a step


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("age", [1, 8])
def test_staleness_compares_stale_uncorrected_corrected_and_on_policy(age, fast):
    finding = FINDINGS[f"staleness_{age}"]
    uncorrected, corrected, on_policy = (rlnb.load_config(None, finding.overrides(s, 0, fast=fast))
                                         for s in finding.settings)
    for c in (uncorrected, corrected):
        assert c.grpo.async_grpo.enabled and c.grpo.async_grpo.lockstep
        assert c.grpo.async_grpo.max_trajectory_age_steps == age
    assert not on_policy.grpo.async_grpo.enabled
    assert not uncorrected.loss_fn.use_importance_sampling_correction
    assert uncorrected.loss_fn.truncated_importance_sampling_type is None
    for c in (corrected, on_policy):  # the correction, as configs/async_tiny.yaml has it
        assert c.loss_fn.use_importance_sampling_correction
        assert (c.loss_fn.truncated_importance_sampling_type,
                c.loss_fn.truncated_importance_sampling_ratio) == ("tis", 2.0)
    for c in (uncorrected, corrected, on_policy):  # ratio 1: only the weights w differ
        assert c.loss_fn.force_on_policy_ratio
        if not fast:  # one optimizer step per rollout
            assert c.policy.train_global_batch_size == \
                c.grpo.num_prompts_per_step * c.grpo.num_generations_per_prompt


@pytest.mark.slow
@pytest.mark.parametrize("name", ["group_size", "staleness_8"])
def test_the_quick_path_runs_and_logs_every_metric(name, tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    finding = FINDINGS[name]
    threads = torch.get_num_threads()
    result = run_finding(finding, [0], num_steps=2, fast=True, root=tmp_path / "runs",
                         progress=False)  # FAST validates every step
    assert torch.get_num_threads() == threads  # the finding's one thread, given back
    for metric in finding.metrics:
        for setting in finding.settings:
            record = result.runs[setting.label][0]
            assert any(r.get(metric.key) is not None for r in record), (setting.label, metric)
    if name == "staleness_8":  # lockstep: ages 0, 1 in the first two steps; none on-policy
        for label in ("age 8, uncorrected", "age 8, corrected"):
            ages = [r["train/avg_trajectory_age"] for r in result.runs[label][0]
                    if "train/avg_trajectory_age" in r]
            assert ages == [0.0, 1.0], (label, ages)
        assert not any("train/avg_trajectory_age" in r for r in result.runs["on-policy"][0])


@pytest.mark.slow
def test_a_finding_gives_the_same_numbers_here_and_in_a_process_of_its_own(tmp_path,
                                                                          monkeypatch):
    """One torch thread a run (Finding.threads): in this process or in a pool's process, the
    same seed trains the same steps."""
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    finding = FINDINGS["group_size"]
    options = dict(num_steps=2, fast=True, extra=["grpo.val_period=0"], progress=False)
    here = run_finding(finding, [0], root=tmp_path / "here", **options)
    pool = run_finding(finding, [0], root=tmp_path / "pool", jobs=1, **options)
    for setting in finding.settings:
        losses = [[r.get("train/loss") for r in run[setting.label][0]]
                  for run in (here.runs, pool.runs)]
        assert losses[0] == losses[1] and any(x is not None for x in losses[0]), setting.label
