"""The dashboard's panels read correctly: the reward band is an interval of the mean over
prompts, smoothing is a trailing mean with the interval of that mean, explained variance on a
batch whose returns do not vary is a gap, and the token view does not magnify rounding noise."""

import math
import re

import numpy as np
import pytest
import torch
from tiny_config import TINY, with_rewards

import rlnb
from rlnb.algorithms import explained_variance
from rlnb.algorithms.value_loss import returns_vary
from rlnb.engine.runtime.distributed import Distributed
from rlnb.engine.trainers.rollout import reward_metrics

pytest.importorskip("ipywidgets")
pytest.importorskip("plotly")
from rlnb.engine.trainers.ppo import PPOTrainer  # noqa: E402
from rlnb.widgets import Dashboard  # noqa: E402
from rlnb.widgets.inspector import token_html  # noqa: E402
from rlnb.widgets.panels import band_series, panels_of, rolling_mean  # noqa: E402

SINGLE = Distributed()  # one process: what reward_metrics reduces over


def test_reward_sem_is_the_standard_error_over_prompts_by_hand():
    # 4 prompts x 4 responses: group means 1, 0.5, 0, 0.25 -> mean 0.4375
    rewards = torch.tensor([1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0], dtype=torch.float32)
    group = torch.arange(4).repeat_interleave(4)
    m = reward_metrics(SINGLE, rewards, group)
    # Σ (ḡ - 0.4375)² = 0.31640625 + 0.00390625 + 0.19140625 + 0.03515625 = 0.546875
    assert m["train/reward"] == pytest.approx(0.4375)
    assert m["train/reward_sem"] == pytest.approx(math.sqrt(0.546875 / 3 / 4))
    # the per-response std is not it: sqrt(p(1-p)) over 16 rows
    assert m["train/reward_std"] == pytest.approx(math.sqrt(0.4375 * 0.5625))
    # shuffled rows give the same numbers (groups by id, not by position)
    perm = torch.randperm(16, generator=torch.Generator().manual_seed(0))
    assert reward_metrics(SINGLE, rewards[perm], group[perm]) == pytest.approx(m)
    # one prompt: no standard error over prompts
    assert "train/reward_sem" not in reward_metrics(SINGLE, rewards[:4], group[:4])


def test_a_real_step_logs_reward_sem():
    cfg = rlnb.load_config(None, [*TINY, "sft.enabled=false", "grpo.val_period=0",
                                  "checkpointing.enabled=false", "logger.tensorboard_enabled=false"])
    trainer = with_rewards(rlnb.GRPOTrainer(cfg), pattern=(1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0))
    batch = trainer.rollout()
    means = torch.stack([batch.rewards[batch.group == g].mean() for g in batch.group.unique()])
    assert means.std().item() > 0  # the pattern gives the prompts different means
    expected = means.std().item() / math.sqrt(len(means))  # Bessel std of the P means / √P
    assert batch.metrics["train/reward_sem"] == pytest.approx(expected, rel=1e-6)


def test_rolling_mean_is_trailing_and_skips_nan():
    assert rolling_mean([1, 2, 3, 4], 1).tolist() == [1, 2, 3, 4]
    assert rolling_mean([1, 2, 3, 4], 2).tolist() == [1.0, 1.5, 2.5, 3.5]
    got = rolling_mean([1, math.nan, 3, math.nan, math.nan], 2)
    assert got[:4].tolist() == [1.0, 1.0, 3.0, 3.0] and math.isnan(got[4])


def test_band_with_smoothing_is_the_interval_of_the_smoothed_mean():
    x, lo, hi = band_series([1, 2, 3], [0.2, 0.4, 0.9], {1: 0.1, 2: 0.2, 3: 0.2},
                            width=2.0, window=2)
    assert x.tolist() == [1, 2, 3]
    centre = np.array([0.2, 0.3, 0.65])
    se = np.array([0.1, math.sqrt(0.01 + 0.04) / 2, math.sqrt(0.04 + 0.04) / 2])
    assert lo == pytest.approx(centre - 2 * se) and hi == pytest.approx(centre + 2 * se)


def test_smoothing_control_redraws_the_lines_and_the_band():
    history = [{"step": s, "train/reward": r, "train/reward_sem": 0.05, "train/kl_penalty": k}
               for s, r, k in [(1, 0.0, 0.0), (2, 1.0, 0.2), (3, 0.5, 0.1), (4, 0.5, 0.3)]]
    history[1]["validation/accuracy"] = 0.4
    dash = Dashboard(history=history)
    reward, lower = dash.fig.data[0], dash.fig.data[1]
    kl = next(t for t in dash.fig.data if t.name == "kl_penalty")
    assert list(reward.y) == [0.0, 1.0, 0.5, 0.5]
    dash.smoothing.value = 10  # as a click on the dropdown does
    assert list(reward.y) == pytest.approx([0.0, 0.5, 0.5, 0.5])
    assert list(kl.y) == pytest.approx([0.0, 0.1, 0.1, 0.15])
    # the band: the interval of the mean of n steps, 2·sqrt(n·0.05²)/n = 0.1/√n
    assert list(lower.y) == pytest.approx([0.0 - 0.1, 0.5 - 0.1 / math.sqrt(2),
                                           0.5 - 0.1 / math.sqrt(3), 0.5 - 0.05])
    accuracy = next(t for t in dash.fig.data if t.name == "held-out accuracy")
    assert list(accuracy.y) == [0.4]  # markers are never smoothed
    dash.smoothing.value = 1
    assert list(reward.y) == [0.0, 1.0, 0.5, 0.5]
    assert dash.last_values()[0]["last"] == 0.5  # the table keeps the raw values


def ppo_record(step, returns_mean, returns_sq_mean, values_mean, residual_sq_mean):
    m = {"critic/returns_mean": returns_mean, "critic/returns_sq_mean": returns_sq_mean,
         "critic/values_mean": values_mean, "critic/residual_sq_mean": residual_sq_mean}
    return {"step": step, "train/reward": returns_mean, "critic/loss": residual_sq_mean / 2,
            **m, "critic/explained_var": explained_variance(m, prefix="critic/")}


def test_explained_variance_of_a_batch_whose_returns_do_not_vary_is_a_gap():
    # every answer wrong, the critic still at 0: R = V = 0 on every token
    flat = ppo_record(1, 0.0, 0.0, 0.0, 0.0)
    assert flat["critic/explained_var"] == 1.0  # NeMo-RL's formula: 1 - 0 / max(0, 1e-8)
    # every answer right, V constant at 0.5: Var(R) = 0 again
    right = ppo_record(2, 1.0, 1.0, 0.5, 0.25)
    assert right["critic/explained_var"] == 1.0
    # R varies (half 0, half 1) and V = 0.25 + R/2: EV = 1 - 0.0625/0.25 = 0.75
    varied = ppo_record(3, 0.5, 0.5, 0.5, 0.0625)
    assert varied["critic/explained_var"] == pytest.approx(0.75)
    assert [returns_vary(r, prefix="critic/") for r in (flat, right, varied)] == [
        False, False, True]
    dash = Dashboard(history=[flat, right, varied])
    assert dash.panels == panels_of(PPOTrainer.panels)  # the loop whose panels it holds
    ev = next(t for t in dash.fig.data if t.name == "critic/explained_var")
    assert [math.isnan(y) for y in ev.y] == [True, True, False] and ev.y[2] == pytest.approx(0.75)
    row = next(r for r in dash.last_values() if r["metric"] == "critic/explained_var")
    assert row["max"] == pytest.approx(0.75) and row["min"] == pytest.approx(0.75)
    # a record from before the moments were logged is drawn as it is
    old = Dashboard(history=[{"step": 1, "critic/explained_var": 0.3, "critic/loss": 0.1}])
    assert list(next(t for t in old.fig.data if t.name == "critic/explained_var").y) == [0.3]


def _alpha(span_style: str) -> float:
    return float(re.search(r"rgba\(\d+,\d+,\d+,([0-9.]+)\)", span_style).group(1))


def test_token_view_does_not_draw_rounding_noise_in_full_colour():
    cfg = rlnb.load_config(None, [*TINY, "sft.enabled=false", "grpo.val_period=0"])
    trainer = rlnb.GRPOTrainer(cfg)
    batch = trainer.rollout()
    rows = (batch.group == 0).nonzero().flatten().tolist()
    noise = 1 + 8e-8 * torch.randn(batch.token_mask.shape, generator=torch.Generator().manual_seed(0))
    html = token_html(trainer.policy.tokenizer, batch, {"importance_weight": noise},
                      "importance_weight", rows)
    alphas = [_alpha(m) for m in re.findall(r"background:(rgba\([^)]*\))", html)]
    assert alphas and max(alphas) < 0.001, max(alphas)  # pale: no visible colour
    assert "full colour at ±0.05 (the floor" in html
    # a real deviation (a token 50 % more likely) is still drawn in full colour
    real = noise.clone()
    first = (batch.token_mask[rows[0]] > 0).nonzero()[0].item()
    real[rows[0], first] = 1.5
    html = token_html(trainer.policy.tokenizer, batch, {"importance_weight": real},
                      "importance_weight", rows)
    alphas = [_alpha(m) for m in re.findall(r"background:(rgba\([^)]*\))", html)]
    assert max(alphas) == pytest.approx(0.85) and "full colour at ±0.5</div>" in html
