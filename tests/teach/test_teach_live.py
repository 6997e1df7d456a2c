"""rlnb.teach's live runs: experiments as short real runs per setting, and online DPO's pairing
and loss adapter on the tiny model."""

import math

import pytest
import torch

from rlnb import teach
from rlnb.teach.live import Experiment
from rlnb.teach.online_dpo import PairLoss, dpo_steps, pair_rows


@pytest.fixture(autouse=True)
def cold_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))


def test_pair_rows_takes_the_first_right_and_wrong_answer_of_each_group():
    group = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2])
    correct = torch.tensor([False, True, True, True, True, False, False, True])
    # group 0: right 1, wrong 0; group 1: no wrong answer, no pair; group 2: right 7, wrong 5
    assert pair_rows(group, correct) == [1, 0, 7, 5]


def test_the_pair_loss_is_aligned_and_learns_the_preference():
    """At π = π_ref every implicit reward is 0 and the DPO loss is exactly ln 2 (a misaligned
    slice of the stored reference log-probs would not give that); steps on the same pairs lower
    the loss and raise the chosen rows' log-probs against the rejected ones'."""
    trainer = teach.warm_trainer(fast=True)
    batch = trainer.rollout()
    rows = list(range(8))  # 4 pairs: even rows "chosen", odd rows "rejected"
    data = {k: getattr(batch, k)[rows] for k in ("input_ids", "attention_mask", "token_mask")}
    data["sample_mask"] = torch.ones(len(rows))
    policy = trainer.policy
    with torch.no_grad():
        data["reference_logprobs"] = policy.forward_logprobs(
            policy.make_reference(), data["input_ids"], data["attention_mask"])
    loss_fn = PairLoss(teach.dpo.reference_dpo, beta=1.0)

    def margin():
        with torch.no_grad():
            lp = policy.forward_logprobs(policy.model, data["input_ids"], data["attention_mask"])
        summed = (lp * data["token_mask"]).sum(-1)
        return float((summed[0::2] - summed[1::2]).mean())

    before = margin()
    first = policy.optimizer_step(data, loss_fn)
    assert first["loss"] == pytest.approx(math.log(2), abs=1e-6)
    for _ in range(4):
        last = policy.optimizer_step(data, loss_fn)
    assert last["loss"] < first["loss"] - 0.01
    assert margin() > before + 0.1


def test_an_experiment_runs_every_setting_from_the_same_start(capsys):
    result = teach.run_experiment("optimizer_steps", fast=True)
    lines = capsys.readouterr().out.splitlines()
    assert [x.split(":")[0] for x in lines] == [
        "run 1/3 '1 step per rollout'", "run 2/3 '4 steps, ε_high 0.2'",
        "run 3/3 '4 steps, ε_high 0.28'"]
    table = result.table
    assert list(table.index) == list(teach.EXPERIMENTS["optimizer_steps"].settings)
    assert table["accuracy before"].nunique() == 1  # same model, seed and held-out problems
    # one optimizer step per rollout: π = π_old in that step, the ratio is exactly 1
    assert table.loc["1 step per rollout"].filter(like="train/clip_fraction").item() == 0.0
    history = result.history
    assert set(history["setting"]) == set(table.index)
    assert history.groupby("setting")["step"].max().tolist() == [2, 2, 2]


def test_online_dpo_settings_train_with_the_given_loss():
    calls = []

    def my_loss(logprobs, reference_logprobs, token_mask, *, beta):
        calls.append(beta)
        return teach.dpo.reference_dpo(logprobs, reference_logprobs, token_mask, beta=beta)

    exp = Experiment("probe", "06", "?", {"DPO": ["grpo.num_prompts_per_step=8"]}, 2,
                     dpo_beta={"DPO": 0.3})
    trainer = teach.warm_trainer(fast=True, overrides=["grpo.num_prompts_per_step=8"])
    records = list(dpo_steps(trainer, 2, beta=0.3, loss=my_loss))
    assert records[0]["step"] == 0 and "validation/accuracy" in records[0]
    assert [r["step"] for r in records[1:]] == [1, 2] and "validation/accuracy" in records[-1]
    assert all(r["dpo/pairs"] >= 0 for r in records[1:])
    result = teach.run_experiment(exp, fast=True, dpo_loss=my_loss, log=lambda *_: None)
    assert "DPO" in result.records and all(b == 0.3 for b in calls)


def test_an_unknown_experiment_names_the_known_ones():
    with pytest.raises(ValueError, match=r"no experiment 'clip'; experiments: \['group_size', "):
        teach.run_experiment("clip", fast=True)
