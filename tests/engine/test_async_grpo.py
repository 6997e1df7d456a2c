"""Async GRPO: the collector generates ahead on stale weights, ages are bounded, importance
weights correct for them, the stages stay callable, checkpoints keep the buffer, and every way of
stopping ends both sides."""

import copy
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
from paths import ROOT
from tiny_config import with_rewards

from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer, merge_group_metrics
from rlnb.engine.trainers.grpo import GRPOTrainer
from rlnb.engine.trainers.loops import make_trainer
from rlnb.run.config.master_config import load_config
from rlnb.run.training.session import TrainingRun

ASYNC = str(ROOT / "configs" / "async_tiny.yaml")
SMALL = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false",
         "policy.optimizer.lr=3e-2"]
# configs/async_tiny.yaml skips the prev_logprobs forward (force_on_policy_ratio): tests that read
# the batch's prev_logprobs have them computed
RECOMPUTE = "loss_fn.force_on_policy_ratio=false"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def config(*extra):
    return load_config(ASYNC, [*SMALL, *extra], preset="fast")


def collector_threads():
    return [th for th in threading.enumerate() if th.name == "rlnb-trajectory-collector"]


@pytest.fixture
def no_threads_left():
    yield
    deadline = time.monotonic() + 10
    while collector_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not collector_threads(), "a collector thread outlived its test"


# ---------------------------------------------------------------------------------- config
@pytest.mark.parametrize("overrides, message", [
    (["grpo.async_grpo.max_trajectory_age_steps=0"], "max_trajectory_age_steps=0: must be >= 1"),
    (["grpo.async_grpo.max_trajectory_age_steps=-2"], "max_trajectory_age_steps=-2"),
    (["loss_fn.use_importance_sampling_correction=false", "loss_fn.truncated_importance_sampling_type=null",
      "loss_fn.truncated_importance_sampling_ratio=null"],
     "needs loss_fn.use_importance_sampling_correction=true"),
    (["grpo.use_dynamic_sampling=true"], "grpo.use_dynamic_sampling=true with grpo.async_grpo"),
    (["grpo.reward_shaping.enabled=true", "grpo.reward_shaping.stop_properly_penalty_coef=0.5"],
     "grpo.reward_shaping.enabled=true with grpo.async"),
    (["grpo.reward_scaling.enabled=true"], "grpo.reward_scaling.enabled=true with grpo.async"),
    (["grpo.reuse_generation_logprobs=true"], "grpo.reuse_generation_logprobs=true"),
    (["grpo.async_grpo.in_flight_weight_updates=true"], "in_flight_weight_updates=true is not"),
    (["grpo.async_grpo.recompute_kv_cache_after_weight_updates=true"],
     "recompute_kv_cache_after_weight_updates=true is not"),
    (["grpo.async_grpo.enabled=false", "grpo.async_grpo.max_trajectory_age_steps=2"],
     "grpo.async_grpo.* settings need grpo.async_grpo.enabled"),
    (["grpo.async_grpo.collector_threads=0"], "collector_threads"),
    (["grpo.async_grpo.max_buffered_rollouts=64"], "max_buffered_rollouts is read by "
                                                    "sampler=windowed only"),
    (["grpo.async_grpo.sample_freshest_first=true"], "sample_freshest_first is read by"),
    (["grpo.async_grpo.sampler=windowed", "grpo.async_grpo.max_buffered_rollouts=3"],
     "max_buffered_rollouts=3 < grpo.num_prompts_per_step"),
])
def test_bad_async_configs_fail_at_load_naming_the_key(overrides, message):
    with pytest.raises(ValueError, match="invalid config") as err:
        config(*overrides)
    assert message in str(err.value)


def test_a_backend_that_cannot_refit_is_refused(monkeypatch):
    from rlnb.engine.models import generation, hf_backend

    class FrozenBackend(hf_backend.HFGenerationBackend):
        shares_policy_weights = False  # samples with weights of its own it cannot reload

    monkeypatch.setitem(generation.GENERATION_BACKENDS, "frozen", FrozenBackend)
    with pytest.raises(ValueError, match=r"policy.generation.backend='frozen' \(FrozenBackend\) "
                                         r"cannot refit"):
        AsyncGRPOTrainer(config("policy.generation.backend=frozen"))


def test_make_trainer_and_nemo_names_pick_the_async_loop(no_threads_left):
    from rlnb.nemo.grpo import _should_use_async_rollouts

    cfg = config()
    assert _should_use_async_rollouts(cfg)
    assert not _should_use_async_rollouts(load_config(None, preset="fast"))
    t = make_trainer(cfg)
    assert type(t) is AsyncGRPOTrainer
    with pytest.raises(ValueError, match="needs grpo.async_grpo.enabled=true"):
        AsyncGRPOTrainer(load_config(None, preset="fast"))


# ---------------------------------------------------------------------------------- behaviour
def test_groups_are_at_most_a_steps_old_and_made_by_the_weights_they_are_tagged_with(
        no_threads_left):
    """Each row's generation log-probs equal the log-probs of its tagged weight version
    (snapshots taken by the test), not of the weights that train on it; ages stay <= a."""
    t = with_rewards(AsyncGRPOTrainer(config("grpo.async_grpo.max_trajectory_age_steps=2",
                                             RECOMPUTE)))
    snapshots, seen = [], []
    try:
        for _version in range(5):  # the weights before each update: versions 0..4
            snapshots.append(copy.deepcopy(t.policy.model.state_dict()))
            batch = t.rollout()
            assert t.rollout() is batch  # a re-run cell gets the same batch
            t.update(t.compute_advantages(batch))
            seen.append(batch)
    finally:
        t.close()
    model = copy.deepcopy(t.policy.model).eval()
    stale = 0
    for c, batch in enumerate(seen):
        versions = batch.weight_versions
        assert ((c - versions) >= 0).all() and ((c - versions) <= 2).all(), versions
        assert batch.metrics["async/max_trajectory_age"] == float((c - versions).max())
        for v in versions.unique().tolist():
            rows = versions == v
            model.load_state_dict(snapshots[v])
            with torch.no_grad():
                lp = t.policy.forward_logprobs(model, batch.input_ids[rows],
                                               batch.attention_mask[rows])
            m = batch.token_mask[rows]
            gen = batch.generation_logprobs[rows]
            assert torch.allclose(lp * m, gen * m, atol=2e-4), (c, v)
            if v != c:  # stale rows: the current policy (prev_logprobs) sees them differently
                stale += 1
                diff = ((batch.prev_logprobs[rows] - gen) * m).abs().max()
                assert diff > 1e-3, (c, v, float(diff))
    assert stale >= 3  # with a = 2 most steps train on groups made before the last update


def test_windowed_sampler_runs_ahead_and_takes_any_group_young_enough(no_threads_left):
    """sampler: windowed (NeMo-RL's single controller): generation is held back only by the
    buffer's room, not to a steps ahead; a step takes P groups made by weights at most a
    steps old, whichever step they were generated for."""
    cfg = config("grpo.async_grpo.sampler=windowed")
    P = cfg.grpo.num_prompts_per_step
    t = with_rewards(AsyncGRPOTrainer(config("grpo.async_grpo.sampler=windowed",
                                             f"grpo.async_grpo.max_buffered_rollouts={3 * P}")))
    assert t.buffer.max_size == 3 * P
    try:
        for c in range(2):
            batch = t.rollout()
            assert batch.step == c and len(batch.weight_versions) == len(batch)
            assert ((c - batch.weight_versions) >= 0).all()
            assert ((c - batch.weight_versions) <= 1).all()
            t.update(t.compute_advantages(batch))
        col = t.collector
        with col.cond:  # the collector fills the buffer's room with the stream's next batches
            assert col.cond.wait_for(lambda: len(col.buffer) == 3 * P, timeout=120)
            targets = {e.target_weight_version for e in col.buffer.entries}
        # in order (a = 1), weights of step 2 could make batches 2 and 3 at most
        assert max(targets) >= t.step_count + 2, targets
    finally:
        t.close()
    # a resume keeps the groups a later step may take, and generates on after the last batch
    files = t.checkpoint_files()
    t2 = AsyncGRPOTrainer(config("grpo.async_grpo.sampler=windowed",
                                 f"grpo.async_grpo.max_buffered_rollouts={3 * P}"))
    t2.step_count = t.step_count
    t2.load_checkpoint_files(files)
    assert t2.collector.next_batch == files["replay_buffer"]["next_batch"] == max(targets) + 1
    assert [e.weight_version for e in t2.buffer.entries] == [
        v for v in files["replay_buffer"]["weight_versions"] if v >= t.step_count - 1]


@pytest.mark.smoke
def test_each_step_trains_on_the_rows_the_synchronous_loop_would(no_threads_left):
    cfg = config()
    t = AsyncGRPOTrainer(cfg)
    s = GRPOTrainer(load_config(None, ["grpo.val_period=0", "grpo.val_at_start=false"],
                                preset="fast"))
    try:
        for metrics in t.train(4):
            want = s.next_prompt_rows()
            got = metrics.rollout.rows[:: cfg.grpo.num_generations_per_prompt]
            assert got == want
    finally:
        t.close()
    assert t.state()["data_position"]["consumed_prompts"] == 4 * cfg.grpo.num_prompts_per_step


def test_importance_weights_enter_the_loss_and_their_metrics_match_the_batch(no_threads_left):
    t = with_rewards(AsyncGRPOTrainer(config(RECOMPUTE)))
    try:
        steps = list(t.train(4))
    finally:
        t.close()
    for m in steps:
        b = m.rollout
        mask = b.token_mask > 0
        w = torch.exp(b.prev_logprobs - b.generation_logprobs)[mask].double()
        assert m["async/importance_weight/mean"] == pytest.approx(float(w.mean()), rel=1e-9)
        assert m["async/importance_weight/max"] == pytest.approx(float(w.max()), rel=1e-9)
        # TIS at 2 (configs/async_tiny.yaml): the loss's mean weight is the truncated one
        truncated = w.clamp(max=2.0)
        assert m["train/sampling_importance_ratio"] == pytest.approx(float(truncated.mean()),
                                                                    rel=1e-4)
    assert any(m["async/importance_weight/std"] > 1e-3 for m in steps[1:])
    # a = 1: step 0 is fresh; later groups are one step old (or fresh when the trainer ran
    # two steps ahead of a generation: collector.py, choice 6)
    ages = [m["train/avg_trajectory_age"] for m in steps]
    assert ages[0] == 0.0 and set(ages) <= {0.0, 1.0} and 1.0 in ages


def test_thread_counts_are_set_per_side_and_restored(no_threads_left):
    torch.set_num_threads(2)
    t = AsyncGRPOTrainer(config("grpo.async_grpo.collector_threads=1",
                                "grpo.async_grpo.trainer_threads=1"))
    seen = []
    original = t.collector._generate

    def spy(target, version):
        seen.append(torch.get_num_threads())
        return original(target, version)

    t.collector._generate = spy
    for _ in t.train(2):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2 and seen and set(seen) == {1}


def test_metrics_merge_over_groups():
    groups = [{"train/mean_gen_tokens_per_sample": 2.0, "train/max_gen_tokens_per_sample": 3.0,
               "train/total_num_tokens": 10.0, "timing/train/generation": 0.5},
              {"train/mean_gen_tokens_per_sample": 4.0, "train/max_gen_tokens_per_sample": 5.0,
               "train/total_num_tokens": 12.0, "timing/train/generation": 0.5}]
    assert merge_group_metrics(groups) == {
        "train/mean_gen_tokens_per_sample": 3.0, "train/max_gen_tokens_per_sample": 5.0,
        "train/total_num_tokens": 22.0, "timing/train/generation": 0.5}


def test_every_async_metric_has_a_row_in_docs_metrics(no_threads_left):
    from metrics_doc import is_documented

    t = AsyncGRPOTrainer(config())
    try:
        metrics = next(iter(t.train(1)))
    finally:
        t.close()
    missing = [k for k in metrics if k != "step" and not is_documented(k)
               and not (k.startswith("train/") and is_documented(k.removeprefix("train/")))]
    assert not missing, f"async metrics without a row in docs/metrics.md: {missing}"


# ---------------------------------------------------------------------------------- stopping
def test_closing_train_like_the_dashboard_stop_ends_the_collector(no_threads_left):
    t = AsyncGRPOTrainer(config())
    steps = t.train(50)
    next(steps)
    assert collector_threads()
    start = time.monotonic()
    steps.close()  # what Dashboard's Stop does to the generator
    assert not collector_threads() and time.monotonic() - start < 5


def test_dashboard_stop_ends_both_sides(no_threads_left):
    from rlnb.widgets.dashboard import Dashboard

    t = AsyncGRPOTrainer(config())
    dash = Dashboard(t)
    dash.run(200, background=True)
    deadline = time.monotonic() + 30
    while t.step_count < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    start = time.monotonic()
    dash.stop()
    dash.wait(10)
    assert not dash.running and t.step_count < 200
    assert not collector_threads() and time.monotonic() - start < 5


def test_an_error_in_the_collector_reaches_the_trainer(no_threads_left):
    t = AsyncGRPOTrainer(config())
    calls = []

    def failing_score(prompts, responses, rows):
        calls.append(1)
        raise ZeroDivisionError("the reward server is down")

    t.task.score = failing_score
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="trajectory collector failed while generating for "
                                           "step 0: ZeroDivisionError: the reward server"):
        list(t.train(3))
    assert len(calls) == 1 and time.monotonic() - start < 10


def test_generation_failures_are_retried_up_to_the_limit(no_threads_left):
    t = AsyncGRPOTrainer(config("grpo.async_grpo.max_generation_failures=2"))
    score, calls = t.task.score, []

    def flaky(prompts, responses, rows):
        calls.append(1)
        if len(calls) in (1, 2):
            raise ConnectionError("flaky reward server")
        return score(prompts, responses, rows)

    t.task.score = flaky
    with pytest.warns(UserWarning, match="generation for step 0 failed"):
        steps = list(t.train(2))
    assert steps[0]["async/generation_failures"] == 2.0 and t.step_count == 2


def test_an_error_in_the_trainer_stops_the_collector(no_threads_left):
    class Failing(AsyncGRPOTrainer):
        def compute_advantages(self, batch, adv_estimator=None):
            if self.step_count == 1:
                raise ArithmeticError("bad advantages at step 1")
            return super().compute_advantages(batch, adv_estimator)

    t = Failing(config())
    with pytest.raises(ArithmeticError):
        list(t.train(5))
    assert t.step_count == 1


def test_ctrl_c_ends_both_sides_within_seconds(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import sys, threading, time
        sys.path.insert(0, {str(ROOT)!r})
        from rlnb.engine.trainers.async_grpo import AsyncGRPOTrainer
        from rlnb.run.config.master_config import load_config
        t = AsyncGRPOTrainer(load_config({ASYNC!r}, {SMALL!r}, preset="fast"))
        try:
            for m in t.train(100000):
                print("step", m["step"], flush=True)
        except KeyboardInterrupt:
            start = time.monotonic()
            names = [th.name for th in threading.enumerate()]
            print("interrupted; threads:", names, "in", round(time.monotonic() - start, 2),
                  flush=True)
    """))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # SIGINT as a terminal gives it: a shell running pytest in the background (``cmd &``)
    # hands its children SIGINT ignored, and Python then never raises KeyboardInterrupt
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.startswith("step 3"):
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=30)
    elapsed = time.monotonic() - sent
    assert proc.returncode == 0, "".join(lines) + out
    assert "interrupted; threads: ['MainThread']" in out, out
    assert elapsed < 10


# ---------------------------------------------------------------------------------- checkpoints
def test_resume_keeps_the_buffer_and_trains_every_row_once(tmp_path, no_threads_left,
                                                          monkeypatch):
    # whether the collector has generated ahead when step 3 saves depends on timing (a loaded
    # machine may save first): the save waits until a group for a step not yet trained is in
    plain_files = AsyncGRPOTrainer.checkpoint_files

    def files_with_groups_ahead(self):
        c = self.collector
        with c.cond:
            c.cond.wait_for(lambda: c.error is not None or any(
                t >= self.step_count for t in c.buffer.state_dict()["target_weight_versions"]),
                timeout=120)
        return plain_files(self)

    monkeypatch.setattr(AsyncGRPOTrainer, "checkpoint_files", files_with_groups_ahead)
    over = [*SMALL, "grpo.async_grpo.max_trajectory_age_steps=2", "checkpointing.enabled=true",
            "checkpointing.save_period=3"]
    run = TrainingRun(load_config(ASYNC, over, preset="fast"), run_dir=tmp_path / "run")
    first = [m.rollout.rows for m in run.steps(4)]
    run.close()
    saved = torch.load(tmp_path / "run" / "checkpoints" / "step_000003" / "replay_buffer.pt",
                       weights_only=True)
    assert saved["target_weight_versions"], "the checkpoint at step 3 holds buffered groups"
    assert min(saved["target_weight_versions"]) >= 3
    resumed = TrainingRun(load_config(ASYNC, over, preset="fast"), run_dir=tmp_path / "run",
                          resume=True)
    t = resumed.trainer
    assert t.step_count == 3 and len(t.buffer) > 0
    later = list(resumed.steps(3))
    resumed.close()
    # the first resumed step trains on groups generated before the stop (older than step 3)
    assert int(later[0].rollout.weight_versions.min()) < 3
    # every step trains on its own rows of the stream: none lost, none twice
    P, G = t.config.grpo.num_prompts_per_step, t.config.grpo.num_generations_per_prompt
    trained = first[:3] + [m.rollout.rows for m in later]
    for step, rows in enumerate(trained):
        assert rows[::G] == t.prompt_rows_at(step * P, P), step
    assert trained[3] == first[3]  # step 4 repeated after the resume: the same prompts


def test_nemo_async_grpo_train_drives_the_loop(tmp_path, no_threads_left):
    from rlnb.nemo.grpo import async_grpo_train, setup

    parts = setup(config(), run_dir=tmp_path / "run")
    summary = async_grpo_train(parts, max_trajectory_age_steps=1, num_steps=2)
    parts.run.close()
    assert summary["steps"] == 2 and type(parts.trainer) is AsyncGRPOTrainer
    with pytest.raises(ValueError, match="max_trajectory_age_steps=2 differs"):
        async_grpo_train(parts, max_trajectory_age_steps=2)


# ---------------------------------------------------------------------------------- two ranks
@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_train_async_with_a_collector_each(tmp_path):
    """`rlnb train configs/async_tiny.yaml` under accelerate: each rank's collector generates
    its share of every step (no rank waits for the other's data), and rank 0 logs each step."""
    import json

    from launching import launch
    from tiny_config import TINY

    work = tmp_path / "work"
    work.mkdir()
    proc = launch(["-m", "rlnb.cli", "train", ASYNC, *TINY, *SMALL, "sft.enabled=false",
                   "--run-dir", "run", "--steps", "3", "--no-progress"], work, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in (work / "run" / "metrics.jsonl").read_text()
               .splitlines()]
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["train/avg_trajectory_age"] for r in records][0] == 0.0
    # P = 4 over 2 ranks: rank 0's collector generated its 2 groups of each of the 3 steps before
    # that step read the counter (how they spread over the steps depends on timing)
    assert sum(r["async/groups_generated"] for r in records) >= 3 * 2


def test_verify_replays_an_async_run_on_its_data_order(tmp_path, no_threads_left):
    """`rlnb verify` on an async run compares what is reproducible (every step's prompts) and
    says what is not; a run whose logged prompts were changed differs."""
    import pandas as pd

    from rlnb.run.training.verify import ASYNC_NOT_COMPARED, verify_run

    over = [*SMALL, "checkpointing.enabled=true", "checkpointing.save_period=2"]
    run = TrainingRun(load_config(ASYNC, over, preset="fast"), run_dir=tmp_path / "run")
    list(run.steps(4))
    run.close()
    lines = []
    report = verify_run(tmp_path / "run", 2, log=lines.append)
    assert report.exact and [r["prompts"] for r in report.rows] == ["same", "same"]
    assert "same data order" in report.summary() and ASYNC_NOT_COMPARED in lines[0]
    path = tmp_path / "run" / "rollouts" / "steps_000001.parquet"  # steps 1-4, sealed by close
    table = pd.read_parquet(path)
    step4 = table["step"] == 4  # another order of the same prompts
    table.loc[step4, "prompt"] = table.loc[step4, "prompt"].iloc[::-1].to_numpy()
    table.to_parquet(path, index=False)
    report = verify_run(tmp_path / "run", 2, log=lines.append)
    assert report.first_difference == "step 4, prompts differ"


def test_force_on_policy_ratio_skips_the_prev_logprob_forward_with_the_same_loss(
        no_threads_left):
    """With one optimizer step per rollout, the loss's own forward is π_θc's: taking
    sg(log π_θ) as prev_logprobs (force_on_policy_ratio) gives the recompute's numbers."""
    import math

    t = with_rewards(AsyncGRPOTrainer(config()))
    try:
        for _ in range(6):  # stage by stage until a batch is stale (made before an update)
            batch = t.rollout()
            adv = t.compute_advantages(batch)
            if int(batch.weight_versions.max()) < t.step_count:
                break
            t.update(adv)
        assert t.config.policy.train_global_batch_size == len(batch)  # one optimizer step
        recompute = t.update(adv, dry_run=True).metrics
        forced = t.update(adv, dry_run=True, loss_fn={"force_on_policy_ratio": True}).metrics
        for key in ("train/loss", "train/sampling_importance_ratio",
                    "train/token_mult_prob_error", "train/gen_kl_error"):
            assert forced[key] == pytest.approx(recompute[key], rel=1e-5, abs=1e-7), key
        assert abs(recompute["train/sampling_importance_ratio"] - 1) > 1e-5  # stale: w != 1
    finally:
        t.close()
    f = with_rewards(AsyncGRPOTrainer(config("loss_fn.force_on_policy_ratio=true")))
    try:
        steps = list(f.train(2))
    finally:
        f.close()
    b = steps[-1].rollout
    assert not b.prev_logprobs.any()  # the placeholder: no forward pass was made
    assert math.isnan(steps[-1]["async/importance_weight/mean"])
    assert math.isfinite(steps[-1]["train/loss"]) and steps[-1]["train/sampling_importance_ratio"] > 0


# ---------------------------------------------------------------------------------- lockstep
@pytest.mark.parametrize("overrides, message", [
    (["grpo.async_grpo.sampler=windowed"], "sampler='windowed' with lockstep=true"),
    (["grpo.async_grpo.collector_threads=1"], "collector_threads=1 with lockstep=true"),
    (["grpo.async_grpo.max_generation_failures=2"], "max_generation_failures=2 with lockstep"),
])
def test_lockstep_refuses_what_it_would_ignore(overrides, message):
    with pytest.raises(ValueError, match="invalid config") as err:
        config("grpo.async_grpo.lockstep=true", *overrides)
    assert message in str(err.value)


def test_lockstep_trains_step_c_on_weights_c_minus_a_in_the_callers_thread(no_threads_left):
    """lockstep: no collector thread; step c's groups were sampled by weights max(0, c − a)
    (their generation log-probs are those weights', from snapshots taken by the test)."""
    t = with_rewards(AsyncGRPOTrainer(config("grpo.async_grpo.max_trajectory_age_steps=2",
                                             "grpo.async_grpo.lockstep=true", RECOMPUTE)))
    snapshots, seen = [], []
    try:
        for _ in range(5):
            snapshots.append(copy.deepcopy(t.policy.model.state_dict()))
            batch = t.rollout()
            assert not collector_threads()  # generated here, no thread started
            t.update(t.compute_advantages(batch))
            seen.append(batch)
    finally:
        t.close()
    model = copy.deepcopy(t.policy.model).eval()
    for c, batch in enumerate(seen):
        v = max(0, c - 2)
        assert batch.weight_versions.tolist() == [v] * len(batch), (c, batch.weight_versions)
        assert batch.metrics["train/avg_trajectory_age"] == c - v
        model.load_state_dict(snapshots[v])
        with torch.no_grad():
            lp = t.policy.forward_logprobs(model, batch.input_ids, batch.attention_mask)
        m = batch.token_mask
        assert torch.allclose(lp * m, batch.generation_logprobs * m, atol=2e-4), c


def _lockstep_run(*extra):
    t = with_rewards(AsyncGRPOTrainer(config("grpo.async_grpo.max_trajectory_age_steps=3",
                                             "grpo.async_grpo.lockstep=true", *extra)))
    try:
        losses = [m["train/loss"] for m in t.train(5)]
    finally:
        t.close()
    return losses, {k: v.clone() for k, v in t.policy.model.state_dict().items()}


def test_lockstep_repeats_bit_for_bit_and_admits_the_uncorrected_control(no_threads_left):
    """Two lockstep runs of one seed give the same losses and weights exactly; with the
    importance-sampling correction off (admitted only in lockstep) the stale steps differ."""
    losses, weights = _lockstep_run()
    again, weights_again = _lockstep_run()
    assert losses == again
    assert all(torch.equal(weights[k], weights_again[k]) for k in weights)
    off, _ = _lockstep_run("loss_fn.use_importance_sampling_correction=false",
                           "loss_fn.truncated_importance_sampling_type=null",
                           "loss_fn.truncated_importance_sampling_ratio=null")
    assert off[0] == pytest.approx(losses[0], rel=1e-4)  # step 0 trains on its own weights: w = 1
    assert off[4] != pytest.approx(losses[4], rel=1e-6)  # age 3: w != 1 reweights the loss
