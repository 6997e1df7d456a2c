"""DPO: pairing by hand, the pairs' layout and formats, each stage on the tiny model against an
independent computation, offline pools and datasets, exact resume, 2 ranks, configs, NeMo-RL's
names, metrics docs and widgets."""

import json
import math
import re

import pytest
import torch
from launching import launch
from paths import ROOT
from tiny_config import with_rewards

from rlnb.algorithms import DPOLossFn, next_token_logprobs, preference_pairs
from rlnb.engine.data.preference_batch import PreferenceBatch
from rlnb.engine.data.preference_data import TokenPair, collate_pairs, tokenize_pairs
from rlnb.engine.models.tiny import build_char_tokenizer
from rlnb.engine.trainers.dpo import DPOTrainer
from rlnb.engine.trainers.loops import make_trainer
from rlnb.run.config.master_config import load_config
from rlnb.run.training.session import TrainingRun

DPO = "configs/dpo_tiny.yaml"
SMALL = ["sft.enabled=false", "dpo.val_period=0", "data.num_val=16"]  # with preset="fast"


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def config(*extra):
    return load_config(DPO, [*SMALL, *extra], preset="fast")


def trainer(*extra, pattern=(1.0, 0.0, 0.0, 1.0)) -> DPOTrainer:
    """A fast DPO trainer whose rewards follow ``pattern`` (every group of 4 has 2 right)."""
    return with_rewards(DPOTrainer(config(*extra)), pattern)


def params(model):
    return {k: v.detach().clone() for k, v in model.named_parameters()}


# ---------------------------------------------------------------- pairing and the loss by hand
def test_preference_pairs_by_hand():
    # prompt 0: gaps 1 for (0, 1), 0.5 for (0, 2) and (2, 1); prompt 1: all equal, no pair
    chosen, rejected, valid = preference_pairs(torch.tensor([[1.0, 0.0, 0.5], [1.0, 1.0, 1.0]]),
                                               2, generator=torch.Generator().manual_seed(0))
    assert valid.tolist() == [[True, True], [False, False]]
    assert (chosen[0, 0].item(), rejected[0, 0].item()) == (0, 1)  # the largest gap first
    assert (chosen[0, 1].item(), rejected[0, 1].item()) in {(0, 2), (2, 1)}
    # 0/1 rewards: every right answer against every wrong one, each pair once
    c, r, v = preference_pairs(torch.tensor([[1.0, 0.0, 0.0, 1.0]]), 4)
    assert v.all() and {(a, b) for a, b in zip(c[0].tolist(), r[0].tolist())} == {
        (0, 1), (0, 2), (3, 1), (3, 2)}
    # more slots than pairs: the rest are empty (index 0, not valid)
    c, r, v = preference_pairs(torch.tensor([[0.0, 1.0]]), 5)
    assert v.tolist() == [[True, False, False, False, False]]
    assert (c[0, 0].item(), r[0, 0].item()) == (1, 0) and c[0, 1:].tolist() == [0] * 4
    # ties are broken at random: over seeds, both right answers get chosen first
    firsts = {preference_pairs(torch.tensor([[1.0, 0.0, 1.0]]), 1,
                               generator=torch.Generator().manual_seed(s))[0].item()
              for s in range(20)}
    assert firsts == {0, 2}


def test_dpo_loss_from_logprobs_is_the_loss_of_the_logits_and_the_formula():
    """One pair, S = 4: tokens 2 and 3 are the responses. ρ_b = Σ_t (log π - log π_ref) over them,
    loss = -log σ(β(ρ_0 - ρ_1)), written out here with the reference in the stored layout."""
    g = torch.Generator().manual_seed(0)
    ids = torch.tensor([[1, 2, 5, 6], [1, 2, 7, 8]])
    tm = torch.tensor([[0.0, 0.0, 1.0, 1.0]] * 2)
    ref = torch.tensor([[0.0, 0.0, -1.5, -0.5], [0.0, 0.0, -0.25, -2.0]])  # index t: token t
    logits = torch.randn(2, 4, 9, generator=g)
    data = {"input_ids": ids, "token_mask": tm, "sample_mask": torch.ones(2),
            "reference_policy_logprobs": torch.roll(ref, -1, dims=-1)}  # NeMo-RL's layout
    beta = 0.5
    fn = DPOLossFn({"reference_policy_kl_penalty": beta})
    by_logits, _ = fn(logits, data, 2)
    logprobs = next_token_logprobs(logits, ids)  # [2, 3]: index t = token t+1
    by_logprobs, m = fn.from_logprobs(logprobs, data, 2)
    lp = torch.log_softmax(logits, -1)
    rho = [sum(lp[b, t - 1, ids[b, t]] - ref[b, t] for t in (2, 3)) for b in (0, 1)]
    expected = math.log1p(math.exp(-beta * float(rho[0] - rho[1])))
    assert float(by_logits) == pytest.approx(expected, abs=1e-6)
    assert float(by_logprobs) == float(by_logits)
    assert m["rewards_chosen_mean"] == pytest.approx(float(rho[0]), abs=1e-6)


# ---------------------------------------------------------------- pairs: layout and formats
def test_collate_interleaves_rows_with_prompts_left_and_responses_right():
    pairs = [TokenPair([2, 5], [7, 3], [8, 9, 3], "a", "x", "yz", 1.0, 0.0),
             TokenPair([2], [6, 3], [6, 6, 3], "b", "u", "uu")]
    b = collate_pairs(pairs, torch.tensor([True, False]), 0, step=3, source="dataset")
    assert b.input_ids.tolist() == [[2, 5, 7, 3, 0], [2, 5, 8, 9, 3], [0, 2, 6, 3, 0],
                                    [0, 2, 6, 6, 3]]
    assert b.attention_mask.tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0],
                                         [0, 1, 1, 1, 1]]
    assert b.token_mask.tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1], [0, 0, 1, 1, 0],
                                     [0, 0, 1, 1, 1]]
    assert b.sample_mask.tolist() == [1, 1, 0, 0] and b.chosen.tolist() == [True, False] * 2
    assert b.pair.tolist() == [0, 0, 1, 1] and b.response_lengths.tolist() == [2, 3, 2, 3]
    assert b.rewards[:2].tolist() == [1.0, 0.0] and b.rewards[2:].isnan().all()
    assert b.to_rows() == [{"prompt": "a", "chosen": "x", "rejected": "yz"}]
    b.reference_logprobs = torch.arange(20.0).view(4, 5)
    rolled = b.train_data()["reference_policy_logprobs"]  # index t = log π_ref of token t+1
    assert torch.equal(rolled[:, :-1], b.reference_logprobs[:, 1:])


TEMPLATE = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}|{% endfor %}"
            "{% if add_generation_prompt %}<assistant>{% endif %}")


def test_text_and_message_rows_tokenise_like_the_policy_samples():
    tok = build_char_tokenizer()
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    [p] = tokenize_pairs([{"prompt": "1+2=", "chosen": "3", "rejected": "4"}], tok,
                         max_length=20)
    assert p.prompt_ids == [tok.bos_token_id, *ids("1+2=")]  # as tokenize_prompts: BOS first
    assert p.chosen_ids == [*ids("3"), tok.eos_token_id] and p.rejected_ids == [*ids("4"), 3]
    tok.chat_template = TEMPLATE
    user = [{"role": "user", "content": "1+2="}]
    [m] = tokenize_pairs([{"prompt": user, "chosen": [{"role": "assistant", "content": "3"}],
                           "rejected": [{"role": "assistant", "content": "4"}]}], tok,
                         max_length=40)
    assert m.prompt == "<user>1+2=|<assistant>" and (m.chosen, m.rejected) == ("3|", "4|")
    assert m.chosen_ids == ids("3|")  # the template's end-of-turn ends it: no EOS added


BAD_ROWS = [  # the second row is the bad one: the message names it
    ({"prompt": "1+2=", "chosen": "3"}, "my pairs: row 1 has no 'rejected' column"),
    ({"prompt": "1+2=", "chosen": "3", "rejected": "3"}, "row 1 has identical chosen and rejected"),
    ({"prompt": "1+2=", "chosen": 3, "rejected": "4"}, "row 1, 'chosen' is a int"),
    ({"prompt": "1+2=", "chosen": "3", "rejected": [{"role": "assistant", "content": "4"}]},
     "row 1 mixes text and messages"),
    ({"prompt": [{"role": "user", "content": "1"}], "chosen": [{"role": "assistant",
      "content": "2"}], "rejected": [{"role": "assistant", "content": "3"}]},
     "row 1 holds messages, which need a tokenizer with a chat template"),
    ({"prompt": "1" * 30, "chosen": "3", "rejected": "4"}, "row 1 is 33 tokens"),
    # empty text: refused before the end-of-sequence token would make it one token long
    ({"prompt": "1+2=", "chosen": "", "rejected": "4"}, "row 1 has an empty 'chosen' response"),
    ({"prompt": "1+2=", "chosen": "3", "rejected": ""}, "row 1 has an empty 'rejected' response"),
]


@pytest.mark.parametrize(("row", "fragment"), BAD_ROWS, ids=[f for _, f in BAD_ROWS])
def test_a_bad_row_is_named(row, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        tokenize_pairs([{"prompt": "0+0=", "chosen": "0", "rejected": "1"}, row],
                       build_char_tokenizer(), max_length=20, where="my pairs")


# ---------------------------------------------------------------- stages on the tiny model
def test_on_policy_pairs_prefer_the_rewarded_response_of_the_same_prompt():
    t = trainer()
    b = t.pairs()
    assert isinstance(b, PreferenceBatch) and b.source == "on_policy"
    assert b.num_pairs == 4 * 2 and bool(b.kept.all())  # P = 4 prompts x 2 pairs each
    s = b.samples
    for k in range(b.num_pairs):
        assert (b.rewards[2 * k].item(), b.rewards[2 * k + 1].item()) == (1.0, 0.0)
        assert b.prompts[2 * k] == b.prompts[2 * k + 1]
        group = [i for i in range(len(s)) if s.prompts[i] == b.prompts[2 * k]]
        assert {b.responses[2 * k], b.responses[2 * k + 1]} <= {s.responses[i] for i in group}
    assert b.metrics["train/groups_with_signal"] == 1.0 and b.metrics["train/reward"] == 0.5
    # no reward difference, no pair: every slot is empty and an update leaves the weights
    t = trainer(pattern=(1.0,))
    b = t.reference_logprobs(t.pairs())
    before = params(t.policy.model)
    result = t.update(b)
    assert not bool(b.kept.any()) and result.metrics["train/global_valid_seqs"] == 0
    assert all(torch.equal(before[k], v) for k, v in t.policy.model.named_parameters())


def test_compute_loss_matches_an_independent_computation_and_the_update():
    t = trainer()
    t.reconfigure({"policy.optimizer.lr": 1e-2})
    for _ in range(2):  # move the policy away from the reference
        t.step()
    b = t.reference_logprobs(t.pairs())
    s = t.compute_loss(b)
    tm, ref = b.token_mask, b.reference_logprobs
    current = t.policy.logprobs(b.input_ids, b.attention_mask) * tm  # the policy's own path
    rho = ((current - ref) * tm).sum(1)
    assert torch.allclose(s.logprobs, current, atol=1e-6) and torch.allclose(s.rewards, rho,
                                                                             atol=1e-5)
    beta = t.config.dpo.reference_policy_kl_penalty
    losses = torch.log1p(torch.exp(-beta * (rho[0::2] - rho[1::2])))
    assert torch.allclose(s.losses, losses, atol=1e-6)
    assert s.loss == pytest.approx(float(losses.mean()), abs=1e-6)  # every pair kept
    dry = t.update(b, dry_run=True)
    assert dry.metrics["train/loss"] == pytest.approx(s.loss, abs=1e-6)
    # KL: torch.distributions on the two models' full next-token distributions
    with torch.no_grad():
        pos = t.policy.model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        refl = t.policy.reference_model(input_ids=b.input_ids,
                                        attention_mask=b.attention_mask).logits
    kl = torch.distributions.kl_divergence(torch.distributions.Categorical(logits=pos[:, :-1]),
                                           torch.distributions.Categorical(logits=refl[:, :-1]))
    mask = tm[:, 1:] > 0
    assert torch.allclose(s.kl[:, 1:][mask], kl[mask], atol=1e-5)
    assert s.metrics["train/kl_to_reference"] == pytest.approx(float(kl[mask].mean()), rel=1e-4)
    assert s.metrics["train/logprobs_chosen"] == pytest.approx(
        float((current * tm).sum(1)[0::2].mean()), rel=1e-5)
    assert s.metrics["train/reward_margin"] == pytest.approx(float((rho[0::2] - rho[1::2]).mean()),
                                                             abs=1e-5)


@pytest.mark.smoke
def test_updates_on_a_frozen_batch_push_the_chosen_above_the_rejected():
    t = trainer()
    b = t.reference_logprobs(t.pairs())
    first = t.compute_loss(b)
    assert first.loss == pytest.approx(math.log(2), abs=1e-6)  # policy = reference: ρ = 0
    before = params(t.policy.model)
    dry = t.update(b, dry_run=True)
    assert t.step_count == 0 and all(torch.equal(before[k], v)
                                     for k, v in t.policy.model.named_parameters())
    assert dry.dry_run and "train/grad_norm" not in dry.metrics
    t.reconfigure({"policy.optimizer.lr": 1e-2})
    for _ in range(8):
        t.update(b)
    after = t.compute_loss(b)
    assert after.loss < 0.6 and float((after.margins > 0).float().mean()) >= 0.75
    assert float(after.rewards[1::2].mean()) < 0  # the rejected answers became less likely
    assert t.step_count == 8 and len({k for k, v in t.policy.model.named_parameters()
                                      if not torch.equal(before[k], v)}) == len(before)


def test_an_empty_slot_does_not_reach_the_loss():
    t = trainer()
    b = t.reference_logprobs(t.pairs())
    b.sample_mask[:2] = 0  # pair 0 is now an empty slot
    a = t.update(b, dry_run=True).metrics
    b.input_ids[:2, -1] = 7  # whatever its tokens are
    b.reference_logprobs[:2] = -3.0 * b.token_mask[:2]
    c = t.update(b, dry_run=True).metrics
    assert a["train/loss"] == c["train/loss"] and a["train/num_valid_samples"] == 7


def test_a_beta_for_one_call_and_between_steps():
    t = trainer()
    t.reconfigure({"policy.optimizer.lr": 1e-2})
    t.step()
    b = t.reference_logprobs(t.pairs())
    s1, s5 = t.compute_loss(b), t.compute_loss(b, {"reference_policy_kl_penalty": 5.0})
    assert s5.beta == 5.0 and torch.allclose(
        s5.losses, torch.log1p(torch.exp(-5.0 * s1.margins)), atol=1e-5)
    t.reconfigure({"dpo.reference_policy_kl_penalty": 5.0})
    assert t.loss_fn.cfg.reference_policy_kl_penalty == 5.0
    assert t.update(b, dry_run=True).metrics["train/loss"] == pytest.approx(s5.loss, abs=1e-6)
    with pytest.raises(ValueError, match="loss_fn"):
        t.reconfigure({"loss_fn.ratio_clip_max": 0.3})


# ---------------------------------------------------------------- offline pairs
def test_a_warm_start_pool_is_sampled_once_and_read_in_reshuffled_passes():
    t = trainer("dpo.pairs.source=warm_start", "dpo.pairs.pool_prompts=8")
    rng = torch.get_rng_state()
    pool = t.offline_pairs
    assert torch.equal(torch.get_rng_state(), rng)  # its own random state
    assert t.offline_pairs is pool and 0 < len(pool) <= 8 * 2
    assert all(p.reward_chosen == 1.0 and p.reward_rejected == 0.0 for p in pool)
    n = len(pool)
    first, second = t.offline_rows(0, n), t.offline_rows(n, n)
    key = lambda p: (p.prompt, p.chosen, p.rejected)  # noqa: E731
    assert sorted(map(key, first)) == sorted(map(key, pool)) == sorted(map(key, second))
    b = t.pairs()
    assert b.source == "warm_start" and b.num_pairs == 4 and t.consumed_prompts == 4
    assert [key(p) for p in first[:4]] == [(b.prompts[i], b.responses[i], b.responses[i + 1])
                                           for i in range(0, 8, 2)]


def rows_file(tmp_path, n=24):
    rows = [{"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": str(a + b + 1)}
            for a in range(n // 4) for b in range(4)]
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return rows, path


DATASET = ["dpo.pairs.source=dataset"]


def test_a_dataset_of_pairs_from_a_file_a_list_or_a_datasets_dataset(tmp_path):
    rows, path = rows_file(tmp_path)
    t = DPOTrainer(config(*DATASET, f"dpo.pairs.dataset={path}"))
    b = t.pairs()
    got = [{"prompt": b.prompts[i], "chosen": b.responses[i], "rejected": b.responses[i + 1]}
           for i in range(0, len(b), 2)]
    assert all(r in rows for r in got) and b.rewards.isnan().all() and bool(b.kept.all())
    eos = t.policy.tokenizer.eos_token_id
    last = b.input_ids.gather(1, (b.attention_mask.cumsum(1).argmax(1, keepdim=True)))
    assert (last == eos).all()  # every response ends with EOS, as a sampled right answer does
    datasets = pytest.importorskip("datasets")
    for given in (rows, datasets.Dataset.from_list(rows)):
        u = DPOTrainer(config(*DATASET), pairs=given)
        assert [p.prompt for p in u.offline_pairs] == [r["prompt"] for r in rows]
    with pytest.raises(ValueError, match="dpo.pairs.source=dataset needs pairs"):
        DPOTrainer(config(*DATASET))


# ---------------------------------------------------------------- runs: resume, verify, CLI
RUN = [*SMALL, "dpo.val_period=2", "dpo.max_num_steps=4", "checkpointing.enabled=true",
       "checkpointing.save_period=2"]


def comparable(path):
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return [{k: v for k, v in r.items() if not k.startswith("timing/")} for r in rows]


def run(tmp_path, name, extra, steps, resume=False):
    r = TrainingRun(DPO, overrides=[*RUN, *extra], run_dir=tmp_path / name, resume=resume,
                    preset="fast", progress=False, log=lambda *a: None)
    with_rewards(r.trainer)
    r.train(steps)
    return r


@pytest.mark.parametrize("source", [["dpo.pairs.source=on_policy"],
                                    ["dpo.pairs.source=warm_start", "dpo.pairs.pool_prompts=8"]],
                         ids=["on_policy", "warm_start"])
def test_a_resumed_dpo_run_repeats_the_uninterrupted_run_exactly(tmp_path, source):
    full = run(tmp_path, "full", source, 4)
    run(tmp_path, "cut", source, 2)
    ckpt = tmp_path / "cut" / "checkpoints" / "step_000002"
    assert (ckpt / "preference_pool.pt").exists() == ("dpo.pairs.pool_prompts=8" in source)
    resumed = run(tmp_path, "cut", source, 2, resume=True)
    a, b = comparable(tmp_path / "full" / "metrics.jsonl"), comparable(tmp_path / "cut" /
                                                                       "metrics.jsonl")
    assert [r["step"] for r in a] == [0, 1, 2, 3, 4] and "train/preference_loss" in a[-1]
    assert a == b  # every metric, bit for bit
    for (k, p), q in zip(full.trainer.policy.model.named_parameters(),
                         resumed.trainer.policy.model.parameters()):
        assert torch.equal(p, q), k
    state = json.loads((ckpt.parent / "step_000004" / "trainer_state.json").read_text())
    from rlnb.nemo.dpo import DPOSaveState

    assert set(state) == set(DPOSaveState.__annotations__)
    from rlnb.run.training.verify import verify_run

    def scored(*a, **k):  # verify rebuilds the trainer: give it the same rewards
        return with_rewards(make_trainer(*a, **k))

    import rlnb.run.training.warm_trainer as built  # where verify builds its trainer

    original = built.make_trainer
    built.make_trainer = scored
    try:
        report = verify_run(tmp_path / "full", 2, log=lambda *a: None)
    finally:
        built.make_trainer = original
    assert report.exact and report.weights_checked, report.summary()
    assert any(r["rollouts"] == "same" for r in report.rows)


def test_resuming_on_another_dataset_is_refused(tmp_path):
    rows, path = rows_file(tmp_path)
    extra = [*DATASET, f"dpo.pairs.dataset={path}"]
    run(tmp_path, "run", extra, 2)
    path.write_text("\n".join(json.dumps({**r, "rejected": r["rejected"] + "0"}) for r in rows))
    with pytest.raises(ValueError, match="preference pairs differ from the run's"):
        run(tmp_path, "run", extra, 1, resume=True)


def test_rlnb_train_runs_the_dpo_loop(tmp_path, capsys):
    from rlnb.cli import main

    _, path = rows_file(tmp_path)
    code = main(["train", DPO, *SMALL, *DATASET, f"dpo.pairs.dataset={path}",
                 "policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1",
                 "dpo.num_prompts_per_step=4", "policy.train_global_batch_size=16",
                 "checkpointing.enabled=false", "--run-dir", str(tmp_path / "run"),
                 "--steps", "2", "--no-progress"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "DPO: log π_ref from the frozen reference" in out.out
    metrics = comparable(tmp_path / "run" / "metrics.jsonl")
    assert "train/preference_loss" in metrics[-1] and "train/kl_to_reference" in metrics[-1]
    assert make_trainer(config()).__class__ is DPOTrainer


@pytest.mark.distributed
@pytest.mark.slow
def test_two_ranks_train_on_their_own_pairs_and_end_with_identical_weights(tmp_path):
    from paths import ROOT, SUPPORT

    out = tmp_path / "out"
    proc = launch([str(SUPPORT / "dist_dpo_script.py"), str(out), "2"], ROOT, tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr[-4000:]
    infos = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    w = [torch.load(out / f"rank{r}.pt") for r in (0, 1)]
    assert sorted(i["rank"] for i in infos) == [0, 1] and all(i["torch_world_size"] == 2
                                                              for i in infos)
    for step in range(2):  # each rank paired its own half of the prompts
        assert not set(infos[0]["prompts"][step]) & set(infos[1]["prompts"][step])
    for k in w[0]["final"]:
        assert torch.equal(w[0]["final"][k], w[1]["final"][k]), k
        assert torch.equal(w[0]["start"][k], w[1]["start"][k]), k
    assert any(not torch.equal(w[0]["final"][k], w[0]["start"][k]) for k in w[0]["final"])
    for m0, m1 in zip(infos[0]["metrics"], infos[1]["metrics"]):
        for key in ("train/loss", "train/accuracy", "train/num_valid_samples",
                    "train/kl_to_reference", "train/global_valid_seqs"):
            assert m0[key] == pytest.approx(m1[key], rel=1e-6), key
        assert m0["train/global_valid_seqs"] == 2 * m0["train/num_valid_samples"]


# ---------------------------------------------------------------- configs
NOT_DPO = ["dpo.use_dynamic_sampling=true", "dpo.reward_scaling.enabled=true",
           "dpo.adv_estimator.name=grpo", "dpo.skip_reference_policy_logprobs_calculation=true",
           "dpo.reuse_generation_logprobs=true", "dpo.max_rollout_turns=2"]


@pytest.mark.parametrize("override", NOT_DPO)
def test_grpo_keys_in_the_dpo_section_are_refused_with_the_reason(override):
    key = override.split(".")[1].split("=")[0]
    with pytest.raises(ValueError, match=f"'{key}' is not a DPO key"):
        config(override)


def test_dpo_sections_load_dump_and_refuse_what_dpo_does_not_read():
    with pytest.raises(ValueError, match="dpo: a section of algorithm 'dpo', but algorithm is "
                                         "'grpo'"):
        load_config(None, ["dpo.seed=1"])
    with pytest.raises(ValueError, match="loss_fn.ratio_clip_max=0.3: DPO does not read loss_fn"):
        config("loss_fn.ratio_clip_max=0.3")
    with pytest.raises(ValueError, match="must be even under DPO"):
        config("policy.train_micro_batch_size=7")
    with pytest.raises(ValueError, match="pool_prompts=8 is not read with source='on_policy'"):
        config("dpo.pairs.pool_prompts=8")
    with pytest.raises(ValueError, match="dpo.reference_policy_kl_penalty"):
        config("dpo.reference_policy_kl_penalty=0")
    dpo = load_config(DPO)
    dumped = dpo.model_dump(mode="json")
    assert dumped["algorithm"] == "dpo" and "grpo" not in dumped and dpo.grpo is None
    assert load_config(dumped) == dpo  # a written config.yaml loads back the same
    assert config().dpo.num_prompts_per_step == 4  # the fast preset shrinks the dpo section
    assert list(load_config(None).model_dump(mode="json")) == [
        "policy", "loss_fn", "grpo", "sft", "data", "env", "logger", "checkpointing", "cluster"]


# ---------------------------------------------------------------- NeMo-RL names, docs, widgets
def test_nemo_dpo_names_drive_the_trainer(tmp_path):
    from rlnb.nemo import dpo as nemo_dpo

    assert nemo_dpo.DPOConfig is type(config().dpo)
    parts = nemo_dpo.setup(config("checkpointing.enabled=false"), run_dir=tmp_path / "run")
    with_rewards(parts.trainer)
    assert isinstance(parts.trainer, DPOTrainer) and parts.loss_fn is parts.trainer.loss_fn
    assert set(parts.dpo_save_state) == set(nemo_dpo.DPOSaveState.__annotations__)
    [batch] = nemo_dpo.add_ref_logprobs_to_data([parts.trainer.pairs()], parts)
    assert batch.reference_logprobs is not None
    summary = nemo_dpo.dpo_train(parts, 1)
    assert summary["steps"] == 1 and "validation/accuracy" in nemo_dpo.validate(parts)
    with pytest.raises(ValueError, match="algorithm"):
        nemo_dpo.setup(load_config(None, preset="fast"), run_dir=tmp_path / "grpo")


def test_every_dpo_metric_has_a_row_in_docs_metrics():

    from metrics_doc import is_documented

    t = trainer("dpo.val_period=1", "dpo.val_num_generations_per_prompt=2")
    keys = set()
    for m in t.train(2):
        keys |= set(m)
    assert {"train/preference_loss", "train/kl_to_reference", "validation/pass_k"} <= keys
    missing = sorted(k for k in keys if k != "step" and not is_documented(k)
                     and not (k.startswith("train/") and is_documented(k.removeprefix("train/"))))
    assert not missing, f"metrics without a row in docs/metrics.md: {missing}"
    doc = (ROOT / "docs" / "metrics.md").read_text()
    section = doc.split("## DPO loop metrics", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))
    assert rows <= keys, f"DPO rows for keys the loop does not emit: {sorted(rows - keys)}"


def test_dashboard_stepper_and_token_view_follow_the_dpo_loop(monkeypatch):
    pytest.importorskip("ipywidgets")
    pytest.importorskip("plotly")
    monkeypatch.setenv("RLNB_HEADLESS", "1")
    from rlnb.widgets import Dashboard, PairView, StageStepper, TokenView

    t = trainer()
    dash = Dashboard(t)
    keys = dash.plotted_keys()
    assert {"train/preference_loss", "train/reward_margin", "train/kl_to_reference",
            "train/logprobs_rejected", "train/accuracy"} <= set(keys)
    assert "has no row" not in dash.cards_html()
    stepper = StageStepper(t, dash)
    assert list(stepper.stages) == ["Pairs", "Reference", "Loss", "Update"]
    stepper.press("Loss")  # out of order: refused in the widget
    assert "run Reference first" in stepper.view.value
    for stage in ("Pairs", "Reference", "Loss", "Update"):
        assert stepper.next_stage == stage
        stepper.press(stage)
        assert "Error" not in stepper.view.value, stepper.view.value
    assert t.step_count == 1 and "train/preference_loss" in dash.history[-1]
    stepper.press("Loss")  # the pairs have been trained on
    assert "run Pairs first" in stepper.view.value
    stepper.press("Step")
    dash.run(1)
    assert t.step_count == 3 and len(dash.columns["train/preference_loss"][0]) == 3
    view = TokenView(t, stepper.rollout)
    assert isinstance(view, PairView)
    html = view.static_html()
    assert "chosen" in html and "rejected" in html and "margin ρ_c − ρ_r" in html
    # each row's colours sum to its implicit reward (title values of its spans)
    view.quantity.value = "log_ratio"
    k = view.pair.value
    values = [float(v) for v in re.findall(r"log_ratio = ([-0-9.e+]+)", view.static_html())]
    n_c = int(stepper.rollout.token_mask[2 * k].sum())
    assert sum(values[:n_c]) == pytest.approx(float(view.scores.rewards[2 * k]), abs=1e-3)
    view.quantity.value = "kl"
    assert "colour: <b>kl</b>" in view.static_html()
    history = Dashboard(history=dash.history)  # a saved run's metrics: DPO's panels
    assert "train/preference_loss" in history.plotted_keys()
