"""Published findings as ablations: a config pair (or more), seeds, a stated metric and effect.

    finding = FINDINGS["clip_higher"]
    result = run_finding(finding, seeds=[0, 1, 2, 3, 4])   # rlnb.ablate with the finding's arms
    result.table          # metric, A and B mean ± sd, A − B [95 % CI], power, reproduced?

Each finding names the paper's claim, the settings it compares (dotted overrides laid over one
base, so the config difference is exactly ``diff_lines``), the metrics that test it and the sign
the paper predicts. ``benchmarks/bench_findings.py`` runs them and prints one table;
``notebooks/07_reproducing_findings.ipynb`` shows each one's mechanism on a frozen batch
(``rlnb.engine.inspection.mechanisms``) and runs the same settings;
docs/algorithms.md#reproducing-published-findings says what each knob means.

Implementation choices:
1) A finding is run by ``rlnb.ablate`` (``rlnb.run.experiments.ablation``): seed ``i`` of every
   setting shares the warm start and the prompt order, so the effect is the paired t interval of the
   per-seed differences, with the power of the design beside it (``rlnb.run.experiments.effects``).
2) "Reproduced" means the 95 % interval lies on the side the paper predicts; otherwise the row
   says "not reproduced" and the power columns say how many seeds the observed effect would
   need.
3) The settings that expose an effect (the task, steps, optimizer steps per rollout, the
   reduction of each metric, the planned number of seeds ``Finding.seeds``) were chosen on
   tuning seeds 10-19 only; the reported seeds are 0, 1, 2, ... Length grows or shrinks fastest
   while the warm start's cut-off responses are unlearned, so finding 1 compares the mean over
   the run (``"run_mean"``), not the last steps, where both settings have converged.
4) ``Finding.threads``: each run trains, and each warm start is built, on one torch thread
   (as the lab's runs, ``rlnb.teach.live``): two threads sum in another order and give other
   numbers, so the table is the same whether the runs go one at a time in this process or two
   at a time (``jobs=2``) on two cores, and a loaded machine cannot stall a run on its second
   thread (on the shared 2-core machine at load 7-11, 100 steps of 256 rollouts took 12
   minutes on two threads and under one minute on one).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rlnb.run.experiments.effects import Metric, comparison_rows


@dataclass(frozen=True)
class Setting:
    """One arm of a comparison: a label and the dotted overrides it adds to the base."""

    label: str
    overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class Finding:
    """A published claim as settings to compare; ``settings[0]`` is A, each other one a B."""

    name: str
    title: str
    claim: str
    citation: str
    base: tuple[str, ...]
    settings: tuple[Setting, ...]
    metrics: tuple[Metric, ...]
    num_steps: int
    seeds: int = 5  # the planned seeds (choice 3: from the tuning seeds' spread)
    curves: tuple[str, ...] = field(default=())  # the metrics to plot against the step
    fast_extra: tuple[str, ...] = field(default=())  # what fast mode needs beyond ``FAST``
    threads: int | None = 1  # torch threads per run and warm start (choice 4); None: as is

    def base_overrides(self, *, fast: bool = False) -> list[str]:
        """The overrides every setting shares: the base (and in ``fast`` mode the small sizes
        of ``FAST`` and the finding's ``fast_extra``)."""
        return [*self.base, *((*FAST, *self.fast_extra) if fast else ())]

    def overrides(self, setting: Setting, seed: int, *, fast: bool = False) -> list[str]:
        """The full dotted overrides of one run: base, the setting, the seed."""
        return [*self.base_overrides(fast=fast), *setting.overrides, f"grpo.seed={seed}"]

    def arms(self) -> dict[str, list[str]]:
        """label -> overrides, the arms ``rlnb.ablate`` takes."""
        return {s.label: list(s.overrides) for s in self.settings}

    def diff_lines(self) -> list[str]:
        """The config difference between the settings, as a diff of dotted overrides."""
        lines = [f"  {o}" for o in self.base]
        for s in self.settings:
            lines.append(f"# {s.label}")
            lines += [f"+ {o}" for o in s.overrides] or ["  (the base as is)"]
        return lines


# Laid over every finding's base in fast mode (a smoke test: small model, tiny batch, no warm
# start; it learns nothing, so its table says nothing either).
FAST = ("policy.tiny.hidden_size=32", "policy.tiny.num_hidden_layers=1", "sft.enabled=false",
        "grpo.num_prompts_per_step=4", "grpo.num_generations_per_prompt=4",
        "policy.train_global_batch_size=16", "policy.train_micro_batch_size=16",
        "grpo.max_val_samples=16", "data.num_val=16", "grpo.val_period=1")
# Every finding: the tiny default (configs/tiny.yaml), no KL term, no checkpoints or trackers.
COMMON = ("loss_fn.reference_policy_kl_penalty=0.0", "checkpointing.enabled=false")
# Free-length responses: ``addition_think`` (filler "." before the answer, same reward), sums up
# to 40, 8 prompts x 8 responses of up to 10 new tokens. Findings 1 and 2 share it, and so share
# each seed's warm start (the RL batch sizes, which differ, are not part of its key).
THINK = ("data.name=addition_think", "data.max_filler=16", "data.max_operand=20",
         "data.num_val=100", "grpo.max_val_samples=100", "policy.generation.max_new_tokens=10",
         "policy.max_total_sequence_length=24", "grpo.num_prompts_per_step=8",
         "grpo.num_generations_per_prompt=8")

# One optimizer step per rollout of 16 prompts x 16 answers on the default task, each token
# weighted by π_θ/π_old truncated at 2 (TIS), the update's own forward as π_θ: the settings of
# configs/async_tiny.yaml, laid over the synchronous loop. AGE(k) runs the async loop in
# lockstep (every trajectory exactly k steps old after the first k steps, the same numbers on
# every run of a seed); UNCORRECTED drops the weights (lockstep admits it).
STALE = (*COMMON, "policy.train_global_batch_size=256", "policy.train_micro_batch_size=128",
         "policy.optimizer.lr=3e-4", "loss_fn.use_importance_sampling_correction=true",
         "loss_fn.truncated_importance_sampling_type=tis",
         "loss_fn.truncated_importance_sampling_ratio=2.0", "loss_fn.force_on_policy_ratio=true",
         "grpo.val_period=25")
UNCORRECTED = ("loss_fn.use_importance_sampling_correction=false",
               "loss_fn.truncated_importance_sampling_type=null",
               "loss_fn.truncated_importance_sampling_ratio=null")


def AGE(k: int) -> tuple[str, ...]:  # noqa: N802 - reads as a constant beside STALE
    """The overrides of async GRPO with every trajectory ``k`` steps old (lockstep)."""
    return ("grpo.async_grpo.enabled=true", "grpo.async_grpo.lockstep=true",
            f"grpo.async_grpo.max_trajectory_age_steps={k}")


# reasoning-gym's spell_backward alone (the envs extra), as configs/reasoning_gym_tiny.yaml asks
# it: words of 3-5 letters, reward 1 for the exact reversed word, no chat template
SPELL = ("data.name=reasoning_gym",
         "data.datasets={spell_backward: {config: {min_word_len: 3, max_word_len: 5}}}",
         "data.reward=correct", "data.answer_format=plain", "data.system_prompt=null",
         "policy.max_total_sequence_length=80", "policy.generation.max_new_tokens=6")
FINDINGS: dict[str, Finding] = {f.name: f for f in (
    Finding(
        name="length_bias",
        title="1 · Length bias of per-sequence normalisation",
        claim="Averaging the loss per sequence, then over sequences, with the advantage divided by "
              "the group's reward std, makes incorrect responses grow longer over training (a "
              "long wrong answer is penalised less per token); the token-level loss, or Dr. "
              "GRPO's unnormalised sum without ÷ std, does not.",
        citation="Liu et al., Understanding R1-Zero-Like Training: A Critical Perspective "
                 "(Dr. GRPO), arXiv 2503.20783, §3.1 and Fig. 5",
        # sums up to 40: with operands up to 50 the warm start on these demonstrations stops
        # at its 4000-step cap near 16 % accuracy. Demonstrations of up to 16 filler
        # characters but room for 10 new tokens: the longest responses of the warm start are
        # cut off before their answer, so at the start long responses are more often wrong,
        # which is what makes the two losses pull length apart (docs/algorithms.md).
        base=(*COMMON, *THINK, "policy.train_global_batch_size=64",  # one step per rollout
              "policy.train_micro_batch_size=64", "grpo.val_period=10"),
        settings=(
            Setting("seq-mean + std (GRPO)", ("loss_fn.token_level_loss=false",)),
            Setting("token-level + std", ("loss_fn.token_level_loss=true",)),
            Setting("Dr. GRPO (token sum, no std)", (
                "loss_fn.token_level_loss=true", "grpo.adv_estimator.normalize_rewards=false")),
        ),
        # the effect is on how fast the cut-off long responses are unlearned: the mean over
        # the run (choice 3), not where both settings end up
        metrics=(Metric("incorrect length (tokens, mean over the run)",
                        "train/mean_gen_tokens_incorrect", how="run_mean", expect=1),
                 Metric("correct length (tokens, mean over the run)",
                        "train/mean_gen_tokens_correct", how="run_mean", expect=0),
                 Metric("truncated responses (share, mean over the run)",
                        "train/truncation_rate", how="run_mean", expect=0)),
        num_steps=20,
        curves=("train/mean_gen_tokens_incorrect", "train/mean_gen_tokens_correct",
                "train/reward"),
    ),
    Finding(
        name="clip_higher",
        title="2 · Clip-higher keeps entropy up",
        claim="With several optimizer steps per rollout, raising the upper clip ε_high from 0.2 "
              "to 0.28 lets low-probability tokens with positive advantage grow, so token "
              "entropy stays higher (no entropy collapse) and the policy explores more.",
        citation="Yu et al., DAPO: An Open-Source LLM Reinforcement Learning System at Scale, "
                 "arXiv 2503.14476, §3.1 and Fig. 2",
        # the free-length task of finding 1 (any filler length is right, so a rare token with a
        # positive advantage is often another right response, not the one right digit) with 4
        # optimizer steps per rollout of 64 rows, so that ratios leave 1 and the clip binds
        base=(*COMMON, *THINK, "policy.train_global_batch_size=16",
              "policy.train_micro_batch_size=16", "grpo.val_period=10"),
        settings=(
            Setting("ε_high = 0.28", ("loss_fn.ratio_clip_max=0.28",)),
            Setting("ε_high = 0.2", ("loss_fn.ratio_clip_max=0.2",)),
        ),
        metrics=(Metric("token entropy (nats, mean over the run)", "train/approx_entropy",
                        how="run_mean", expect=1),
                 Metric("clip fraction (mean over the run)", "train/clip_fraction",
                        how="run_mean", expect=0),
                 Metric("held-out accuracy (final)", "validation/accuracy", how="final",
                        expect=1)),
        num_steps=60,
        curves=("train/approx_entropy", "train/clip_fraction", "validation/accuracy"),
    ),
    Finding(
        name="dynamic_sampling",
        title="3 · Dynamic sampling when groups saturate",
        claim="Once most groups are all-correct they carry no gradient; generating until the "
              "batch is full of groups with mixed rewards (dynamic sampling) keeps the effective "
              "batch full and reaches a given accuracy in fewer steps, at the price of extra "
              "generation per step.",
        citation="Yu et al., DAPO, arXiv 2503.14476, §3.2 and Fig. 6",
        # reasoning-gym's spell_backward (answers of 3-5 letters), warm-started to 60 %: about
        # half the groups of 16 are all right or all wrong. Chosen on tuning seeds 10-14 (the
        # mean over the run +1.1 to +3.4 points on each; on the addition task of the first
        # study, +0.8 [-7.5, +9.1] on seeds 0-4: docs/benchmarks.md)
        base=(*COMMON, *SPELL, "sft.stop_at_accuracy=0.6", "grpo.num_prompts_per_step=16",
              "grpo.num_generations_per_prompt=16", "policy.train_global_batch_size=256",
              "policy.train_micro_batch_size=128", "grpo.val_period=10"),
        settings=(
            # saturated batches need many generation batches: more than 10 would raise
            Setting("dynamic sampling", ("grpo.use_dynamic_sampling=true",
                                         "grpo.dynamic_sampling_max_gen_batches=30")),
            Setting("plain GRPO", ("grpo.use_dynamic_sampling=false",)),
        ),
        # the claim is on how fast accuracy rises: the mean of the held-out readings over the
        # run (every 10 steps), the final reading beside it
        metrics=(Metric("held-out accuracy (mean over the run)", "validation/accuracy",
                        how="run_mean", expect=1),
                 Metric("held-out accuracy (final, same steps)", "validation/accuracy",
                        how="final", expect=0),
                 Metric("held-out accuracy at equal wall time", "validation/accuracy",
                        how="at_equal_time", expect=0),
                 Metric("training seconds", "timing/train/total_step_time", how="seconds",
                        expect=1),
                 Metric("generated groups with signal (last 10 steps)",
                        "train/groups_with_signal", expect=0)),
        num_steps=40,
        curves=("validation/accuracy", "train/groups_with_signal",
                "train/dynamic_sampling_num_gen_batches"),
        # an untrained model is never right, and dynamic sampling would never find a group with
        # signal: a short warm start (cached after the first run)
        fast_extra=("data.num_val=8", "grpo.max_val_samples=8", "sft.enabled=true",
                    "sft.stop_at_accuracy=0.1", "sft.max_steps=1000", "sft.eval_every=50",
                    "sft.eval_prompts=32"),
    ),
    Finding(
        name="group_size",
        title="4 · Group size at equal rollouts",
        claim="At a fixed number of rollouts per step, two answers per prompt over many prompts "
              "learn at least as fast as sixteen answers over few: GRPO's group acts as a "
              "contrastive pair more than as a baseline estimate, and the gradient's variance "
              "falls with the number of prompts (2-GRPO keeps 97.6 % of 16-GRPO's accuracy with "
              "1/8 of the rollouts).",
        citation="Wu et al., It Takes Two: Your GRPO Is Secretly DPO, arXiv 2510.00977",
        # the embedded recipe as it is, 100 steps, 256 rollouts a step: G = 2 ended 7 points
        # ahead on each tuning seed 10-12 (the lab's exercise 1, with a leave-one-out baseline,
        # had seen the same sign on seeds 0-2: the unseen seeds 20-24 are the clean test)
        base=(*COMMON, "grpo.val_period=25"),
        settings=(
            Setting("G = 2 x 128 prompts", ("grpo.num_prompts_per_step=128",
                                            "grpo.num_generations_per_prompt=2")),
            Setting("G = 16 x 16 prompts", ("grpo.num_prompts_per_step=16",
                                             "grpo.num_generations_per_prompt=16")),
        ),
        metrics=(Metric("held-out accuracy (final)", "validation/accuracy", how="final",
                        expect=1),
                 Metric("held-out accuracy (mean over the run)", "validation/accuracy",
                        how="run_mean", expect=0),
                 Metric("groups with signal (last 10 steps)", "train/groups_with_signal",
                        expect=0)),
        num_steps=100,
        curves=("validation/accuracy", "train/groups_with_signal", "train/reward"),
    ),
    *(Finding(
        name=f"staleness_{k}",
        title=f"{5 if k == 1 else 6} · Trajectories {k} step{'s' if k > 1 else ''} stale: the "
              "importance-sampling correction",
        claim="Training on trajectories sampled by weights k steps old (asynchronous RL) "
              "without correction costs accuracy against on-policy training on the same "
              "rollouts; weighting each token by π_θ/π_old (the importance-sampling correction "
              "of NeMo-RL's async GRPO, AReaL's decoupled objective) recovers it.",
        citation="Noukhovitch et al., Asynchronous RLHF, arXiv 2410.18252; Fu et al., AReaL, "
                 "arXiv 2505.24298 (the decoupled objective); NeMo-RL's async GRPO",
        # lr 3e-4 (tiny.yaml's) and ages 1 and 8 of 1, 4, 8, chosen on tuning seeds 10-14: at
        # 5e-4 (configs/async_tiny.yaml's) both stale arms of age 8 collapse, at 1e-3 on-policy
        # training does too
        base=STALE,
        settings=(
            Setting(f"age {k}, uncorrected", (*AGE(k), *UNCORRECTED)),
            Setting(f"age {k}, corrected", AGE(k)),
            Setting("on-policy", ()),
        ),
        metrics=(Metric("held-out accuracy (final)", "validation/accuracy", how="final",
                        expect=-1),
                 Metric("held-out accuracy (mean over the run)", "validation/accuracy",
                        how="run_mean", expect=-1),
                 Metric("training reward (last 10 steps)", "train/reward", expect=0)),
        num_steps=150,
        curves=("validation/accuracy", "train/reward", "train/sampling_importance_ratio"),
    ) for k in (1, 8)),
)}


# ---------------------------------------------------------------------------------- runs
def run_finding(finding: Finding, seeds: Sequence[int], *, num_steps: int | None = None,
                fast: bool = False, extra: Sequence[str] = (), **ablate_options: Any):
    """Every setting of ``finding`` over ``seeds`` through ``rlnb.ablate`` (``extra``: overrides
    added to every run; ``ablate_options``: its ``root``, ``jobs``, ``ray``, ``progress``...).
    Returns the ``Ablation``."""
    import torch

    from rlnb.run.experiments.ablation import ablate

    steps = finding.num_steps if num_steps is None else num_steps
    threads, before = finding.threads, torch.get_num_threads()
    here = not (ablate_options.get("jobs") or ablate_options.get("ray")
                or ablate_options.get("cpus_per_run") or ablate_options.get("gpus_per_run"))
    if threads is not None and not here:  # each run's process (choice 4)
        ablate_options["cpus_per_run"] = threads
    try:
        if threads is not None:  # the warm starts are built in this process either way
            torch.set_num_threads(threads)
        return ablate(finding.arms(), seeds=list(seeds), steps=steps,
                      metrics=list(finding.metrics),
                      base=[*finding.base_overrides(fast=fast), *extra], **ablate_options)
    finally:
        torch.set_num_threads(before)


def effect_rows(finding: Finding, runs: Mapping[str, Sequence[list[dict]]],
                confidence: float = 0.95) -> list[dict[str, Any]]:
    """One row per (B setting, metric) of ``rlnb.run.experiments.effects.comparison_rows``, with the
    finding's title under ``"finding"``."""
    rows = comparison_rows([s.label for s in finding.settings], runs, finding.metrics,
                           confidence=confidence)
    return [{"finding": finding.title, **r} for r in rows]
