"""rlnb.ablate: real tiny runs of several arms over paired seeds, the table's statistics checked
by hand from the runs' own metrics.jsonl, the executors' process pool, and bad input."""

import json
import math
import statistics

import pytest

import rlnb
from rlnb.run.experiments.ablation import Ablation
from rlnb.run.experiments.findings import FAST

# the fast preset's small model, no warm start (an untrained model: reward 0, no update moves
# it), no validation: a run of 2 steps takes about a second
SMALL = [*FAST, "grpo.val_period=0"]
KEY = "train/mean_gen_tokens_per_sample"
T975_2, T80_2 = 4.302653, 1.060660  # t quantiles, df = 2 (printed table)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    root = tmp_path_factory.mktemp("ablate") / "study"
    # "A again" is A's config under another label: paired seeds must then agree exactly
    return rlnb.ablate({"5 tokens": [], "2 tokens": {"policy.generation.max_new_tokens": 2},
                        "A again": []},
                       seeds=[0, 1, 2], steps=2, metrics=[KEY], base=SMALL, last=2, root=root,
                       progress=False)


def _per_seed(result, index, label):
    # each seed's value straight from its metrics.jsonl: the mean over the 2 steps
    values = []
    for seed in result.seeds:
        path = result.root / f"{index}-{label.replace(' ', '_')}__seed={seed}" / "metrics.jsonl"
        steps = [json.loads(line) for line in path.read_text().splitlines()]
        assert [s["step"] for s in steps] == [1, 2]
        values.append(sum(s[KEY] for s in steps) / 2)
    return values


def test_the_table_by_hand(result):
    assert isinstance(result, Ablation) and list(result.arms) == ["5 tokens", "2 tokens",
                                                                  "A again"]
    a, b = _per_seed(result, 0, "5 tokens"), _per_seed(result, 1, "2 tokens")
    assert all(x <= 2 for x in b) and all(x > 2 for x in a)
    d = [x - y for x, y in zip(a, b)]
    mean, sd = statistics.mean(d), statistics.stdev(d)
    row = result.rows[0]
    assert (row["A"], row["B"], row["n"]) == ("5 tokens", "2 tokens", 3)
    assert row["a"] == pytest.approx(a) and row["b"] == pytest.approx(b)
    assert row["interval"].estimate == pytest.approx(mean)
    assert row["interval"].low == pytest.approx(mean - T975_2 * sd / math.sqrt(3), abs=1e-6)
    assert row["interval"].high == pytest.approx(mean + T975_2 * sd / math.sqrt(3), abs=1e-6)
    assert row["sd_diff"] == pytest.approx(sd)
    assert row["mde"] == pytest.approx((T975_2 + T80_2) * sd / math.sqrt(3), abs=1e-6)
    assert row["verdict"] == "A > B"  # the longer budget gives longer responses, clearly
    assert row["A mean ± sd"] == f"{statistics.mean(a):.4g} ± {statistics.stdev(a):.4g}"
    table = result.table
    assert list(table.columns) == [
        "metric", "A", "B", "A mean ± sd", "B mean ± sd", "A − B [95 % CI]", "seeds",
        "sd(A − B)", "detectable (80 % power)", "seeds for A − B", "verdict"]
    assert (result.root / "table.csv").read_text().splitlines()[0].startswith("metric,A,B")


def test_paired_seeds_of_the_same_config_agree_exactly(result):
    again = result.rows[1]
    assert again["B"] == "A again"
    assert again["a"] == again["b"]  # same seed, same config: the same run, bit for bit
    assert str(again["interval"]).startswith("+0 [+0, +0]")
    assert again["verdict"] == "no clear difference"
    assert again["seeds for A − B"] == "n/a (A − B = 0)"
    assert result.shared_warm_start and result.warm_starts["5 tokens"] == [None] * 3


def test_arms_of_a_seed_share_the_warm_start_built_by_the_first(tmp_path, monkeypatch):
    # the first arm builds the warm start, the second loads it from the cache: the same weights
    # and the same random state after it, so the same config gives the same run, bit for bit
    monkeypatch.setenv("RLNB_CACHE_DIR", str(tmp_path / "cache"))
    warm = ["sft.enabled=true", "sft.max_steps=20", "sft.eval_every=10", "sft.eval_prompts=16",
            "sft.stop_at_accuracy=0.99"]  # never reached: the probe samples twice
    res = rlnb.ablate({"A": [], "A again": []}, seeds=[0], steps=2, base=[*SMALL, *warm],
                      metrics=["train/reward"], root=tmp_path / "w", progress=False)
    first = json.loads((tmp_path / "w" / "0-A__seed=0" / "run.json").read_text())
    again = json.loads((tmp_path / "w" / "1-A_again__seed=0" / "run.json").read_text())
    assert (first["warm_start_cached"], again["warm_start_cached"]) == (False, True)
    assert res.shared_warm_start and first["warm_start"] == again["warm_start"]

    def numbers(record):
        return [{k: v for k, v in r.items() if not k.startswith(("timing/", "memory/")) and k != "wall_s"}
                for r in record]
    assert numbers(res.runs["A"][0]) == numbers(res.runs["A again"][0])


def test_power_lines_command_and_record(result):
    row = result.rows[0]
    lines = result.power_lines(planned=8)
    mde8 = rlnb.run.experiments.stats.minimal_detectable_effect(row["sd_diff"], 8)
    assert f"with 8 seeds the smallest effect detected with 80 % power at α = 0.05 is " \
           f"{mde8:.4g}" in lines[0]
    assert result.command.startswith("rlnb.ablate({'5 tokens': [], '2 tokens': "
                                     "['policy.generation.max_new_tokens=2']")
    assert "seeds=[0, 1, 2], steps=2" in result.command
    record = json.loads((result.root / "ablation.json").read_text())
    assert record["command"] == result.command
    assert {r["status"] for r in record["runs"].values()} == {"ok"} and len(record["runs"]) == 9


def test_bands_and_their_plot(result):
    steps = [[json.loads(x)[KEY] for x in (result.root / f"1-2_tokens__seed={s}" /
                                          "metrics.jsonl").read_text().splitlines()]
             for s in result.seeds]
    bands = result.bands()
    assert list(dict.fromkeys(bands.setting)) == list(result.arms)
    two = bands[bands.setting == "2 tokens"]
    assert two.x.tolist() == [1, 2] and two["count"].tolist() == [3, 3]
    assert two["mean"].tolist() == pytest.approx([statistics.mean(c) for c in zip(*steps)])
    assert two["sd"].tolist() == pytest.approx([statistics.stdev(c) for c in zip(*steps)])
    timed = result.bands(x="wall_s")
    assert (timed.x > 0).all() and len(timed) == len(bands)
    pytest.importorskip("plotly")
    from rlnb.widgets.findings import band_figure

    fig = band_figure(result)
    lines = [t for t in fig.data if t.mode == "lines+markers"]
    assert [t.name for t in lines] == [f"{label} (mean of 3 seeds)" for label in result.arms]
    assert list(lines[1].y) == pytest.approx(two["mean"].tolist())
    assert len(fig.data) == 6 and fig.layout.title.text == KEY  # a band and a line per arm


@pytest.mark.slow
def test_runs_in_processes_through_the_executors(tmp_path):
    root = tmp_path / "jobs"
    res = rlnb.ablate({"5 tokens": [], "2 tokens": ["policy.generation.max_new_tokens=2"]},
                      seeds=[0, 1], steps=1, metrics=[KEY], base=SMALL, root=root, jobs=2,
                      progress=False)
    assert len(res.runs["5 tokens"]) == 2 and all(len(r) == 1 for r in res.runs["2 tokens"])
    assert sorted(p.name for p in (root / "logs").iterdir()) == [
        "0-5_tokens__seed=0.log", "0-5_tokens__seed=1.log", "1-2_tokens__seed=0.log",
        "1-2_tokens__seed=1.log"]
    assert all(r[0][KEY] <= 2 for r in res.runs["2 tokens"])


def test_a_failed_run_names_its_arm_and_the_others_finish(tmp_path):
    # an untrained model is never right: dynamic sampling finds no group with signal
    arms = {"plain": [], "dynamic": {"grpo.use_dynamic_sampling": True,
                                     "grpo.dynamic_sampling_max_gen_batches": 1}}
    with pytest.raises(RuntimeError, match=r"2 of 4 run\(s\) failed; first, 'dynamic' seed 0: "
                                           r"ValueError: dynamic sampling kept 0"):
        rlnb.ablate(arms, seeds=[0, 1], steps=1, base=SMALL, root=tmp_path / "f",
                    progress=False)
    runs = json.loads((tmp_path / "f" / "ablation.json").read_text())["runs"]
    assert [r["status"] for r in runs.values()] == ["ok", "ok", "failed", "failed"]


@pytest.mark.parametrize("kwargs, match", [
    ({"arms": {"a": []}}, "at least two"),
    ({"arms": {"a": [], "b": ["loss_fn.ratio_clip_mx=0.3"]}}, r"arm 'b': .*ratio_clip_mx"),
    ({"arms": {"a": [], "b": ["grpo.seed=3"]}}, "arm 'b' sets grpo.seed"),
    ({"arms": {"a": [], "b": "loss_fn.ratio_clip_max=0.3"}}, "arm 'b': give its overrides"),
    ({"seeds": [0, 0]}, "distinct"),
    ({"steps": 0}, "steps must be"),
    ({"metrics": []}, "metrics is empty"),
    ({"base": ["policy.generation.max_new_tokens=-1"]}, "the base config"),
])
def test_bad_input_is_refused_before_anything_runs(tmp_path, kwargs, match):
    call = {"arms": {"a": [], "b": []}, "seeds": [0, 1], "steps": 1, "base": SMALL,
            "root": tmp_path / "r", "progress": False, **kwargs}
    with pytest.raises(ValueError, match=match):
        rlnb.ablate(call.pop("arms"), **call)
    assert not (tmp_path / "r").exists()


def test_a_non_empty_root_is_refused(tmp_path):
    (tmp_path / "old.txt").write_text("keep me")
    with pytest.raises(ValueError, match="exists and is not empty"):
        rlnb.ablate({"a": [], "b": []}, seeds=[0], steps=1, base=SMALL, root=tmp_path,
                    progress=False)
    assert (tmp_path / "old.txt").read_text() == "keep me"
