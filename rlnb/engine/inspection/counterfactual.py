"""Counterfactual replay: one frozen batch through several estimators and loss settings.

    advs = compare_estimators(trainer, batch, ["grpo", "reinforce_plus_plus"])
    table = estimator_table(advs)                  # one row per response, one column per estimator
    losses = compare_losses(trainer, advs["grpo"], {"clip 0.2": {}, "clip-higher": {...}})

Nothing here changes the trainer: ``compute_advantages`` has no side effects and the loss
comparison uses ``update(dry_run=True)`` (no gradient, no optimizer step).

Implementation choice: an estimator or setting that cannot run on this batch (OPD without a
teacher, a KL type without reference log-probs) is reported as its error message instead of
stopping the comparison, so one cell shows everything that can be compared.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rlnb.algorithms.estimators import estimator_names
from rlnb.engine.data.batches import AdvantageBatch, RolloutBatch


def trainable_estimators(loop: str = "grpo") -> tuple[str, ...]:
    """The estimators a loop can train with, from the registry (``rlnb.algorithms.estimators``):
    what a comparison replays by default."""
    return tuple(estimator_names(loop, trainable=True))


def compare_estimators(
    trainer, batch: RolloutBatch, estimators: Iterable[str | dict[str, Any]] | None = None
) -> dict[str, AdvantageBatch | Exception]:
    """``name -> AdvantageBatch`` (or the error it raised) for each estimator on ``batch``
    (default: every estimator GRPO's loop can train with).

    An estimator is a name or an ``adv_estimator`` override dict (``{"name": "grpo",
    "normalize_rewards": False}``; its label is the dict's items joined).
    """
    out: dict[str, AdvantageBatch | Exception] = {}
    for est in trainable_estimators() if estimators is None else estimators:
        spec = {"name": est} if isinstance(est, str) else dict(est)
        label = est if isinstance(est, str) else ", ".join(f"{k}={v}" for k, v in est.items())
        try:
            out[label] = trainer.compute_advantages(batch, spec)
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            out[label] = err
    return out


def estimator_table(advantages: dict[str, AdvantageBatch | Exception]):
    """One row per response (group, prompt, response, reward) + each estimator's sequence
    advantage (its mean over the response's tokens)."""
    import pandas as pd

    ok = {k: v for k, v in advantages.items() if isinstance(v, AdvantageBatch)}
    if not ok:
        return pd.DataFrame()
    first = next(iter(ok.values())).rollout
    frame = pd.DataFrame({
        "group": first.group.tolist(),
        "response": first.responses,
        "reward": first.rewards.tolist(),
    })
    for name, adv in ok.items():
        frame[name] = adv.sequence_advantages().tolist()
    return frame


def estimator_summary(advantages: dict[str, AdvantageBatch | Exception]):
    """Per estimator: mean / std / min / max of token advantages, share of rows with signal."""
    import pandas as pd

    rows = []
    for name, adv in advantages.items():
        if isinstance(adv, Exception):
            rows.append({"estimator": name, "error": f"{type(adv).__name__}: {adv}"})
            continue
        mask = adv.rollout.token_mask > 0
        a = adv.advantages[mask]
        seq = adv.sequence_advantages()
        rows.append({
            "estimator": name,
            "mean": float(a.mean()),
            "std": float(a.std()) if a.numel() > 1 else 0.0,
            "min": float(a.min()),
            "max": float(a.max()),
            "rows with signal": float((seq.abs() > 1e-8).float().mean()),
        })
    return pd.DataFrame(rows).set_index("estimator")


def default_loss_settings(batch: RolloutBatch) -> dict[str, dict[str, Any]]:
    """Clipping variants, and the KL estimators when the batch has reference log-probs."""
    settings: dict[str, dict[str, Any]] = {
        "trainer's": {},
        "clip ε=0.2": {"ratio_clip_min": 0.2, "ratio_clip_max": 0.2},
        "clip-higher 0.28": {"ratio_clip_min": 0.2, "ratio_clip_max": 0.28},
        "dual clip c=3": {"ratio_clip_c": 3.0},
        "no clip (REINFORCE)": {"disable_ppo_ratio": True},
    }
    if batch.reference_logprobs is not None:
        for k in ("k1", "k2", "k3"):
            settings[f"KL {k}, β=0.05"] = {
                "reference_policy_kl_penalty": 0.05, "reference_policy_kl_type": k,
            }
    return settings


def compare_losses(
    trainer, advantages: AdvantageBatch, settings: dict[str, dict[str, Any]] | None = None,
    keys: tuple[str, ...] = ("loss", "probs_ratio", "clip_fraction", "kl_penalty",
                             "approx_entropy", "probs_ratio_clamped_max"),
):
    """Dry-run ``update`` under each ``loss_fn`` setting: one row per setting, loss metrics."""
    import pandas as pd

    settings = default_loss_settings(advantages.rollout) if settings is None else settings
    rows = []
    for label, overrides in settings.items():
        try:
            result = trainer.update(advantages, dry_run=True, loss_fn=dict(overrides))
            rows.append({"setting": label,
                         **{k: result.metrics.get(f"train/{k}") for k in keys}})
        except (ValueError, KeyError, TypeError, RuntimeError) as err:
            rows.append({"setting": label, "error": f"{type(err).__name__}: {err}"})
    return pd.DataFrame(rows).set_index("setting")
