"""Other frameworks' rollouts in rlnb's views. A real tiny GRPO step is written out in NeMo-RL's,
verl's and TRL's formats exactly as their writers lay them out
(docs/guide.md#other-frameworks-rollouts), read back, and opened in the token view and the
counterfactual replay; NeMo-RL's carries token ids and log-probs, so its replay must equal
rlnb's own on the same step."""

import json
import math
import random

import pandas as pd
import pytest
import torch

import rlnb
from rlnb.engine.inspection.counterfactual import compare_estimators, compare_losses
from rlnb.run.config.master_config import load_config
from rlnb.run.store.foreign_rollouts import ForeignRollouts, import_rollouts
from rlnb.widgets import RolloutInspector, TokenView

QUIET = ["grpo.val_period=0", "grpo.val_at_start=false", "grpo.val_at_end=false"]


@pytest.fixture(scope="module")
def step():
    """A real step of the fast preset's tiny model, with rewards that vary inside groups."""
    trainer = rlnb.GRPOTrainer(load_config(None, QUIET, preset="fast"))
    batch = trainer.rollout()
    batch.rewards = torch.tensor([float(i % 3 == 0) for i in range(len(batch.rewards))])
    return trainer, batch, trainer.compute_advantages(batch)


def nemo_rl_lines(batch, advantages) -> list[str]:
    """NeMo-RL's train_data_step<N>.jsonl: per row its tensors `.tolist()`ed, right-padded, each
    value wrapped in a one-element list (Logger.log_batched_dict_as_jsonl slices one row)."""
    B, S = batch.input_ids.shape
    lines = []
    for i in range(B):
        keep = batch.attention_mask[i].bool()
        ids = batch.input_ids[i][keep].tolist()
        n = len(ids)

        def right(t, i=i, keep=keep, n=n):
            return t[i][keep].tolist() + [0] * (S - n)

        row = {"content": [[batch.prompts[i], batch.responses[i]]],
               "rewards": [float(batch.rewards[i])], "input_lengths": [n],
               "token_ids": [ids + [0] * (S - n)],
               "token_loss_mask": [[int(v) for v in right(batch.token_mask)]],
               "sample_loss_mask": [1.0], "advantages": [right(advantages.advantages)],
               "generation_logprobs": [right(batch.generation_logprobs)],
               "prev_logprobs": [right(batch.prev_logprobs)]}
        lines.append(json.dumps({**row, "idx": i}))
    return lines


def test_a_nemo_rl_dump_replays_as_rlnb_replays_its_own_step(step, tmp_path):
    trainer, batch, advantages = step
    (tmp_path / "train_data_step7.jsonl").write_text("\n".join(nemo_rl_lines(batch, advantages)))
    steps = ForeignRollouts(tmp_path)
    assert steps.format == "nemo-rl" and steps.steps() == [7]
    assert "reference log-probs" in repr(steps)
    got = steps.batch(7, trainer)
    assert got.group.tolist() == batch.group.tolist()  # by prompt ids, in order of appearance
    assert torch.equal(got.rewards, batch.rewards)
    for i in range(len(batch.rewards)):  # the same tokens and log-probs, row by row
        ours, theirs = batch.attention_mask[i].bool(), got.attention_mask[i].bool()
        assert got.input_ids[i][theirs].tolist() == batch.input_ids[i][ours].tolist()
        for key in ("token_mask", "generation_logprobs", "prev_logprobs"):
            assert getattr(got, key)[i][theirs].tolist() == getattr(batch, key)[i][ours].tolist()
    # one cell: the counterfactual replay and the token view of the imported step
    replay = compare_estimators(trainer, got, ["grpo", "reinforce_plus_plus"])
    mine = replay["grpo"].sequence_advantages()
    assert torch.allclose(mine, advantages.sequence_advantages(), atol=1e-6)
    stored = (got.stored_advantages * got.token_mask).sum(1) / got.token_mask.sum(1)
    assert torch.allclose(mine, stored, atol=1e-6)  # what the framework trained with
    table = compare_losses(trainer, replay["grpo"])
    assert table["probs_ratio"].iloc[0] == pytest.approx(1.0, abs=1e-5)  # the weights that sampled
    view = TokenView(trainer, got, replay["grpo"], quantity="advantage")
    assert view.static_html().count("<span") >= int(got.token_mask[got.group == 0].sum())


def test_a_verl_dump_regroups_reordered_rows_by_prompt(step, tmp_path):
    trainer, batch, _ = step
    rows = [{"input": p, "output": r, "gts": None, "score": float(s), "step": 3, "acc": float(s)}
            for p, r, s in zip(batch.prompts, batch.responses, batch.rewards)]
    random.Random(0).shuffle(rows)  # balance_batch reorders verl's rows
    (tmp_path / "3.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    steps = ForeignRollouts(tmp_path)
    assert steps.format == "verl" and "log-probs (recomputed under the trainer's policy)" in (
        steps.missing)
    got = steps.batch(3, trainer)
    for g in got.group.unique():  # every group holds one prompt, and all of its rows
        prompts = {got.prompts[i] for i in (got.group == g).nonzero().flatten().tolist()}
        assert len(prompts) == 1 and batch.prompts.count(prompts.pop()) == int((got.group == g).sum())
    assert got.reward_components["acc"].tolist() == got.rewards.tolist()
    adv = compare_estimators(trainer, got, ["grpo"])["grpo"].sequence_advantages()
    for i in range(len(rows)):
        members = got.rewards[got.group == got.group[i]]
        assert math.copysign(1, adv[i]) == math.copysign(1, got.rewards[i] - members.mean()) or (
            abs(adv[i]) < 1e-6 and abs(got.rewards[i] - members.mean()) < 1e-6)
    # re-tokenized from text: the log-probs are the trainer policy's, so the ratio is 1
    assert torch.equal(got.generation_logprobs, got.prev_logprobs)
    assert TokenView(trainer, got, None).static_html()


def test_trl_completions_read_with_none_rewards_as_zero_and_the_funnel_counts_them(tmp_path):
    folder = tmp_path / "completions"
    folder.mkdir()
    frame = pd.DataFrame({"step": [5] * 4, "prompt": ["1+1=", "1+1=", "2+2=", "2+2="],
                          "completion": ["2", "3", "4", "4"],
                          "format_reward": [1.0, 1.0, 1.0, 1.0],
                          "accuracy_reward": [1.0, float("nan"), 1.0, 1.0],
                          "advantage": [0.5, -0.5, 0.0, 0.0]})
    frame.to_parquet(folder / "completions_00005.parquet")
    steps = ForeignRollouts(tmp_path)
    assert steps.format == "trl" and steps.steps() == [5]
    cols = steps.rows(5)
    assert cols["reward"] == [2.0, 1.0, 2.0, 2.0] and cols["group"] == [0, 0, 1, 1]
    funnel = steps.funnel(5)
    assert funnel["funnel/generated"] == 4 and funnel["funnel/no_signal"] == 2
    assert funnel["funnel/trained"] == 2 and "funnel/truncated" not in funnel
    run = import_rollouts(tmp_path, tmp_path / "run")
    from rlnb.run.store.rollout_store import RolloutStore
    from rlnb.run.training.funnel import step_funnel

    assert RolloutStore(run / "rollouts").read(5)["reward/accuracy_reward"].tolist() == [
        1.0, 0.0, 1.0, 1.0]
    assert "no_signal:      2 rows ( 50.0%)" in step_funnel(run)


def test_bad_rollout_files_get_one_line_naming_the_file(step, tmp_path):
    trainer, batch, advantages = step
    with pytest.raises(ValueError, match="no rollout files found"):
        ForeignRollouts(tmp_path)
    bad = tmp_path / "train_data_step1.jsonl"
    bad.write_text('{"token_ids": [[1, 2]]\n')
    with pytest.raises(ValueError, match=r"train_data_step1.jsonl:1 is not valid JSON"):
        ForeignRollouts(tmp_path).rows(1)
    bad.write_text(json.dumps({"rewards": [1.0]}))
    with pytest.raises(ValueError, match=r":1: no token_ids, token_loss_mask, input_lengths"):
        ForeignRollouts(tmp_path).rows(1)
    line = json.loads(nemo_rl_lines(batch, advantages)[0])
    line["token_ids"][0][0] = 10**6  # another model's vocabulary
    bad.write_text(json.dumps(line))
    with pytest.raises(ValueError, match=r"train_data_step1.jsonl: token ids .* outside the "
                                         r"vocabulary"):
        ForeignRollouts(tmp_path).batch(1, trainer)
    with pytest.raises(ValueError, match="holds nemo-rl rollout files, not verl"):
        ForeignRollouts(tmp_path, "verl")
    (tmp_path / "run").mkdir()
    with pytest.raises(ValueError, match="exists; import into a new folder"):
        import_rollouts(tmp_path, tmp_path / "run")


def test_completions_written_by_trl_itself_replay_to_trls_own_advantages(step):
    """tests/data/trl_grpo_run was written by TRL 1.16's GRPOTrainer (log_completions=True) on
    the tiny model: tools/write_trl_completions.py. Two reward functions, one returning None on
    some prompts (NaN in the file)."""
    from paths import ROOT

    trainer, _, _ = step
    steps = ForeignRollouts(ROOT / "tests" / "data" / "trl_grpo_run")
    assert steps.format == "trl" and steps.steps() == [1, 2]
    frame = pd.read_parquet(steps.files[2])
    cols = steps.rows(2)
    assert len(set(cols["group"])) == 4 and all(
        cols["group"][i] == cols["group"][i - i % 4] for i in range(16))  # blocks of G = 4
    want = [d + (0.0 if math.isnan(e) else e) for d, e in zip(frame["digits"], frame["exact"])]
    assert cols["reward"] == pytest.approx(want)
    batch = steps.batch(2, trainer)
    assert batch.responses == list(frame["completion"])
    # TRL's advantage: (r - group mean) / (group std + 1e-4), the unbiased std
    replay = compare_estimators(trainer, batch, [{"name": "grpo", "normalize_rewards": True,
                                                  "use_leave_one_out_baseline": False}])
    (got,) = replay.values()
    assert got.sequence_advantages().tolist() == pytest.approx(frame["advantage"].tolist(),
                                                               abs=2e-3)
    no_signal = sum(len(set(cols["reward"][g * 4:(g + 1) * 4])) == 1 for g in range(4)) * 4
    assert steps.funnel(2)["funnel/no_signal"] == no_signal
    report = steps.signal(2)  # each stored group as the prompt's samples
    assert report.group_size == 4 and len(report.prompts) == 4
    assert report.expected[4] == pytest.approx(no_signal / 16)  # C(k,4)/C(4,4): measured exactly
    assert RolloutInspector(trainer, batch, got).static_html()  # the group view
    assert TokenView(trainer, batch, got).static_html()


def test_rlnb_doctor_reads_a_trl_output_folder_as_it_is_and_diff_names_the_import(capsys):
    """The folder TRL 1.16 wrote: the doctor reads its steps as they are (mean reward and funnel)
    and says what it read; `rlnb diff` needs run directories and names import_rollouts."""
    from paths import ROOT

    from rlnb.cli import main

    folder = ROOT / "tests" / "data" / "trl_grpo_run"
    assert main(["doctor", str(folder)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("diagnosis of steps 1-2: ")
    assert f"read TRL's rollout files in {folder} as they are" in out
    assert "import_rollouts(folder, run_dir)" in out
    assert main(["diff", str(folder), str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "trl rollout files, not an rlnb run directory" in err
    assert "import_rollouts(folder, run_dir)" in err
