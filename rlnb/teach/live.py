"""Short live runs for the exercises' "predict, then run" questions.

    result = run_experiment("optimizer_steps", seed=0)
    result.table      # one row per setting: accuracy before and after, the experiment's metrics
    result.history    # one row per (setting, step): every logged metric

Each experiment trains the tiny model for a few dozen steps once per setting; the settings
differ only by their dotted config overrides (the same keys as ``rlnb train``), which the
exercise shows before the student predicts.

Implementation choices:
1) Each setting is an ordinary ``TrainingRun`` in a temporary run directory, removed at the
   end: the code path of ``rlnb train``, nothing special-cased for teaching. Checkpoints and
   rollout files are off (nothing reads them).
2) Every setting of an experiment runs with the same seed, so each starts from the same
   (cached) warm start and sees the same prompts: what differs is the setting.
3) The experiments are data (``EXPERIMENTS``): ``rlnb preflight`` reads them to build their
   warm starts and say how long the lab's runs take on the machine.
4) ``fast``: the packaged ``fast`` preset (a smaller model, no warm start) and 2 steps, so tests
   run every experiment in seconds; its numbers mean nothing. ``steps`` shortens a real run
   instead (the warm-started model, a few steps): what the tests run the lab's cells with.
5) An exercise pins the settings its formulas teach (``Experiment.pinned``), so a change of the
   embedded recipe cannot make a right answer look wrong: exercise 1 compares the student's
   leave-one-out advantages with a trainer that uses leave-one-out, whatever tiny.yaml says.
6) One torch thread (``LAB_THREADS``) while the runs train, whatever the machine's cores: the
   same seed then gives the same numbers on every machine of a CPU class (two threads sum in
   another order: other clip fractions and accuracies after 60 steps), the numbers
   docs/teaching.md quotes; and a class sharing one server does not oversubscribe it. The
   exercises' notebooks set it for their real-batch cells too.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FAST_STEPS = 2
LAB_THREADS = 1  # choice 6


@dataclass(frozen=True)
class Experiment:
    """One "predict, then run" question: the same run under a few settings.

    Args:
        name: the key in ``EXPERIMENTS``.
        exercise: the exercise that asks it (``"02_clipped_surrogate"``).
        question: what the student predicts, in one sentence.
        settings: label -> the dotted overrides that make that setting.
        steps: training steps per setting.
        config: a packaged config name (``"ppo_tiny"``), or None for the default (tiny GRPO).
        common: overrides applied to every setting (the task, validation period, ...).
        pinned: the settings the exercise teaches, pinned whatever the embedded recipe
            (``configs/tiny.yaml``) chooses: exercise 1 teaches the leave-one-out baseline,
            which the recipe turns off. Applied to every setting and to the exercise's real
            batch (``warm_trainer(overrides=experiment.pinned)``), and printed by
            ``describe`` (choice 5).
        metrics: the metric keys averaged over the last ``window`` steps in ``table``.
        dpo_beta: label -> β for the settings that train with online DPO on the policy's own
            (right, wrong) pairs instead of the loop's update (``online_dpo.py``).
    """

    name: str
    exercise: str
    question: str
    settings: Mapping[str, Sequence[str]]
    steps: int
    config: str | None = None
    common: Sequence[str] = ()
    pinned: Sequence[str] = ()
    metrics: Sequence[str] = ("train/reward",)
    window: int = 10
    dpo_beta: Mapping[str, float] = field(default_factory=dict)

    @property
    def loop(self) -> str:
        """The config section holding the loop's seed (``grpo``, ``ppo``, ...)."""
        return seed_section(self.config)

    def overrides(self, label: str, seed: int) -> list[str]:
        """Every override of one setting's run (choice 1)."""
        return [f"{self.loop}.seed={seed}", "checkpointing.enabled=false",
                "logger.log_rollouts=false", *self.pinned, *self.common,
                *self.settings[label]]

    def describe(self) -> str:
        lines = [f"{self.name}: {self.question}",
                 f"  {len(self.settings)} runs of {self.steps} steps"
                 + (f" ({self.config} config)" if self.config else "")
                 + (f", every run with {' '.join(self.common)}" if self.common else "")]
        if self.pinned:
            lines.append(f"  pinned to what the exercise teaches: {' '.join(self.pinned)}")
        for label, o in self.settings.items():
            how = (f"online DPO, β = {self.dpo_beta[label]}" if label in self.dpo_beta
                   else "the loop's own update")
            lines.append(f"  {label}: {' '.join(o) or '(no override)'} ({how})")
        return "\n".join(lines)


@dataclass
class ExperimentResult:
    """What ``run_experiment`` returns: ``table`` (a pandas DataFrame, one row per setting) and
    ``history`` (one row per setting and step), both built from the runs' logged metrics."""

    experiment: Experiment
    records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def history(self):
        import pandas as pd

        rows = [{"setting": label, **r} for label, rs in self.records.items() for r in rs]
        return pd.DataFrame(rows)

    @property
    def table(self):
        import pandas as pd

        rows = {}
        for label, records in self.records.items():
            acc = [r["validation/accuracy"] for r in records if "validation/accuracy" in r]
            trained = [r for r in records if r.get("step", 0) > 0][-self.experiment.window:]
            row = {"accuracy before": acc[0] if acc else math.nan,
                   "accuracy after": acc[-1] if acc else math.nan}
            for key in self.experiment.metrics:
                values = [r[key] for r in trained if isinstance(r.get(key), (int, float))]
                row[f"{key} (last {len(trained)})"] = (sum(values) / len(values) if values
                                                       else math.nan)
            row["seconds"] = self.seconds[label]
            rows[label] = row
        return pd.DataFrame.from_dict(rows, orient="index")

    def __repr__(self) -> str:
        return f"ExperimentResult({self.experiment.name!r}, settings={list(self.records)})"


def run_experiment(experiment: str | Experiment, *, seed: int = 0, fast: bool = False,
                   steps: int | None = None, dpo_loss: Callable | None = None,
                   log: Callable[[str], Any] = print) -> ExperimentResult:
    """Train one short run per setting of ``experiment`` (a name in ``EXPERIMENTS`` or an
    ``Experiment``) and return their metrics; ``log`` gets one line per run. ``dpo_loss``
    replaces rlnb's DPO loss in the online-DPO settings (a student's own, exercise 6)."""
    import torch

    from rlnb.run.config.master_config import packaged_config

    if isinstance(experiment, str) and experiment not in EXPERIMENTS:
        raise ValueError(f"no experiment {experiment!r}; experiments: {list(EXPERIMENTS)}")
    exp = EXPERIMENTS[experiment] if isinstance(experiment, str) else experiment
    n = FAST_STEPS if fast else (exp.steps if steps is None else steps)
    result = ExperimentResult(exp)
    config = packaged_config(exp.config) if exp.config else None
    threads = torch.get_num_threads()
    torch.set_num_threads(LAB_THREADS)  # choice 6
    try:
        _run_settings(exp, result, config, seed=seed, fast=fast, n=n, dpo_loss=dpo_loss,
                      log=log)
    finally:
        torch.set_num_threads(threads)
    return result


def _run_settings(exp, result, config, *, seed, fast, n, dpo_loss, log) -> None:
    from rlnb.run.training.session import TrainingRun
    from rlnb.teach.online_dpo import dpo_steps

    for i, (label, _) in enumerate(exp.settings.items()):
        root = tempfile.mkdtemp(prefix="rlnb-experiment-")
        start = time.perf_counter()
        try:
            run = TrainingRun(config, preset="fast" if fast else None, run_dir=f"{root}/run",
                              overrides=exp.overrides(label, seed), progress=False,
                              log=lambda *_: None)
            if label in exp.dpo_beta:
                records = list(dpo_steps(run.trainer, n, beta=exp.dpo_beta[label],
                                         loss=dpo_loss))
            else:
                records = [dict(m) for m in run.steps(n)]
            run.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
        result.records[label] = [_plain(r) for r in records]
        result.seconds[label] = time.perf_counter() - start
        acc = [r["validation/accuracy"] for r in records if "validation/accuracy" in r]
        accuracy = f"held-out accuracy {acc[0]:.3f} -> {acc[-1]:.3f}" if acc else ""
        log(f"run {i + 1}/{len(exp.settings)} '{label}': {n} steps in "
            f"{result.seconds[label]:.0f} s; {accuracy}")


def warm_trainer(*, seed: int = 0, fast: bool = False, overrides: Sequence[str] = (),
                 config: str | None = None):
    """A warm-started trainer of the tiny model (the warm start cached on disk), writing
    nothing: for the exercises' cells that look at one real batch."""
    from rlnb.run.config.master_config import load_config, packaged_config
    from rlnb.run.training.warm_trainer import trainer_with_warm_start

    cfg = load_config(packaged_config(config) if config else None,
                      [f"{seed_section(config)}.seed={seed}", *overrides],
                      preset="fast" if fast else None)
    return trainer_with_warm_start(cfg)[0]


def seed_section(config: str | None) -> str:
    """The section holding the loop's seed in packaged config ``config`` (None: the default):
    the loop section of the loop it names, from the loop registry (``ppo`` for ``ppo_tiny``)."""
    from rlnb.engine.trainers.loops import main_section
    from rlnb.run.config.master_config import default_config_path, packaged_config, read_yaml

    path = packaged_config(config) if config else default_config_path()
    return main_section(read_yaml(path).get("algorithm", "grpo"))


def _plain(record: Mapping[str, Any]) -> dict[str, Any]:
    """A logged record's numbers (the step's batches stay behind)."""
    return {k: v for k, v in record.items() if isinstance(v, (int, float, str, bool))}


# --------------------------------------------------------------------------- the experiments
# Every experiment is measured in docs/teaching.md (time on 2 cores, the outcome for seed 0).

EXPERIMENTS: dict[str, Experiment] = {}


def _add(exp: Experiment) -> None:
    EXPERIMENTS[exp.name] = exp


_add(Experiment(
    name="group_size",
    exercise="01_grpo_advantages",
    question="with 256 responses per step, do 128 prompts x 2 or 16 prompts x 16 give more "
             "groups with signal, and which learns faster?",
    settings={"G = 16 (16 prompts)": [],
              "G = 2 (128 prompts)": ["grpo.num_prompts_per_step=128",
                                      "grpo.num_generations_per_prompt=2"]},
    steps=100, common=["grpo.val_period=50"],
    # the exercise's advantage: leave-one-out, ÷ σ (the recipe uses the group's own baseline)
    pinned=["grpo.adv_estimator.use_leave_one_out_baseline=true",
            "grpo.adv_estimator.normalize_rewards=true"],
    metrics=("train/reward", "train/groups_with_signal")))

_add(Experiment(
    name="optimizer_steps",
    exercise="02_clipped_surrogate",
    question="how often does the clip act with 1 and with 4 optimizer steps per rollout, and "
             "does clip-higher (ε_high 0.28) change it?",
    settings={"1 step per rollout": ["policy.train_global_batch_size=256"],
              "4 steps, ε_high 0.2": ["policy.train_global_batch_size=64",
                                      "loss_fn.ratio_clip_max=0.2"],
              "4 steps, ε_high 0.28": ["policy.train_global_batch_size=64",
                                       "loss_fn.ratio_clip_max=0.28"]},
    steps=60, common=["grpo.val_period=60", "policy.train_micro_batch_size=64"],
    pinned=["loss_fn.ratio_clip_min=0.2"],  # the exercise's ε_lo
    metrics=("train/reward", "train/clip_fraction", "train/approx_entropy")))

_add(Experiment(
    name="length_bias",
    exercise="03_loss_aggregation",
    question="on a task whose answer may follow any number of '.' characters, do wrong "
             "answers grow longer under the sequence-level loss than under the token-level one?",
    settings={"token-level": ["loss_fn.token_level_loss=true"],
              "sequence-level": ["loss_fn.token_level_loss=false"]},
    # addition_think on sums up to 40 (its warm start stops at its accuracy gate instead of its
    # 4000-step cap), with room for every demonstration: the lab asks the question on a task
    # where nothing pushes length either way; notebook 07's finding (rlnb.run.experiments.findings)
    # uses cut-off demonstrations instead, to expose the effect
    steps=60, common=["data.name=addition_think", "data.max_filler=4", "data.max_operand=20",
                      "data.num_val=100", "grpo.max_val_samples=100",
                      "policy.generation.max_new_tokens=12",
                      "policy.max_total_sequence_length=24", "grpo.num_prompts_per_step=8",
                      "grpo.num_generations_per_prompt=8", "policy.train_global_batch_size=64",
                      "policy.train_micro_batch_size=64", "grpo.val_period=10"],
    metrics=("train/reward", "train/mean_gen_tokens_incorrect",
             "train/mean_gen_tokens_correct")))

_add(Experiment(
    name="kl_penalty",
    exercise="04_kl_estimators",
    question="with a KL penalty β = 0.01 or β = 0.5 (k3), how far does the policy drift from "
             "the warm start, and what does it cost in accuracy?",
    settings={"β = 0.01": ["loss_fn.reference_policy_kl_penalty=0.01"],
              "β = 0.5": ["loss_fn.reference_policy_kl_penalty=0.5"]},
    steps=100, common=["grpo.val_period=50"],
    pinned=["loss_fn.reference_policy_kl_type=k3"],  # the estimator the exercise names
    metrics=("train/reward", "train/kl_penalty")))

_add(Experiment(
    name="gae_lambda",
    exercise="05_gae",
    question="PPO with λ = 1 (Monte Carlo returns minus V) or λ = 0 (one-step TD, all from the "
             "critic): which learns faster while the critic is young?",
    settings={"λ = 1.0": ["ppo.adv_estimator.gae_lambda=1.0"],
              "λ = 0.0": ["ppo.adv_estimator.gae_lambda=0.0"]},
    steps=60, config="ppo_tiny", common=["ppo.val_period=60"],
    # the exercise's GAE: γ = 1, then whitened over the batch (the solution's explanation)
    pinned=["ppo.adv_estimator.name=gae", "ppo.adv_estimator.gae_gamma=1.0",
            "ppo.adv_estimator.normalize_advantages=true"],
    metrics=("train/reward", "critic/explained_var")))

_add(Experiment(
    name="online_dpo",
    exercise="06_dpo_loss",
    question="DPO on one (right, wrong) pair of the model's own answers per prompt, against "
             "GRPO on all 16 answers of the same prompts: which gains more held-out accuracy "
             "in 60 steps, and what does β change?",
    settings={"GRPO": [], "DPO β = 0.1": [], "DPO β = 1.0": []},
    dpo_beta={"DPO β = 0.1": 0.1, "DPO β = 1.0": 1.0},
    steps=60, common=["grpo.val_period=60"],
    metrics=("train/reward", "dpo/pairs", "dpo/loss")))

_add(Experiment(
    name="reward_temperature",
    exercise="07_reward_function",
    question="on the reverse task, what share of groups carries signal at sampling "
             "temperature 1.0 and at 0.3, and which learns faster?",
    settings={"temperature 1.0": ["policy.generation.temperature=1.0"],
              "temperature 0.3": ["policy.generation.temperature=0.3"]},
    steps=60, common=["data.name=reverse", "grpo.val_period=60"],
    metrics=("train/reward", "train/groups_with_signal")))
