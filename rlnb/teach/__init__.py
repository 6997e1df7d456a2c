"""Teaching: exercise checks, the live runs the exercises ask about, the exercise builder, the
grader and the lab's pre-flight check (docs/teaching.md).

    from rlnb import teach
    teach.check_grpo_advantages(grpo_advantages)          # ✓ ... or which mistake, and where
    teach.run_experiment("optimizer_steps", seed=0).table  # a short real run per setting

The modules:

- ``check``: run a student's function on built cases, name the mistake it looks like
  (``Exercise``, ``Case``, ``Mistake``, ``CheckFailed``);
- ``display``: how a failed check and an unfilled stub look in a notebook;
- ``advantages``, ``surrogate``, ``aggregation``, ``kl``, ``gae``, ``dpo``, ``rewards``: each
  exercise's checks (its cases, rlnb's reference and the named mistakes);
- ``live``: the "predict, then run" experiments (``EXPERIMENTS``, ``run_experiment``);
- ``online_dpo``: exercise 6's online DPO steps with the student's own loss;
- ``build``: ``rlnb teach build``: student and solution notebooks from
  ``notebooks/exercises/``;
- ``grade``: ``rlnb teach grade``: a folder of students' notebooks checked into a table and a
  CSV; ``grade_worker``: the process that runs one notebook's definitions and the checks;
- ``preflight``: ``rlnb preflight``: the install, a kernel, the warm starts and the speed.

Nothing here imports a Jupyter package.
"""

from rlnb.teach.advantages import (
    ADVANTAGES,
    BASELINE,
    check_grpo_advantages,
    check_leave_one_out_baseline,
)
from rlnb.teach.aggregation import (
    SEQUENCE_LEVEL,
    TOKEN_LEVEL,
    check_sequence_level_loss,
    check_token_level_loss,
)
from rlnb.teach.check import Case, CheckFailed, Exercise, Mistake, check
from rlnb.teach.display import show_check_failures
from rlnb.teach.dpo import DPO, check_dpo_loss
from rlnb.teach.gae import GAE, check_gae
from rlnb.teach.kl import ESTIMATORS, EXACT, check_exact_kl, check_kl_estimator
from rlnb.teach.live import (
    EXPERIMENTS,
    LAB_THREADS,
    Experiment,
    ExperimentResult,
    run_experiment,
    warm_trainer,
)
from rlnb.teach.rewards import REWARD, SIGNAL, check_fraction_with_signal, check_reverse_reward
from rlnb.teach.surrogate import SURROGATE, check_ppo_clip_loss

# every graded function, by the name the student implements (tests feed each mistake to it)
EXERCISES: dict[str, Exercise] = {
    e.function: e for e in (BASELINE, ADVANTAGES, SURROGATE, TOKEN_LEVEL, SEQUENCE_LEVEL,
                            *ESTIMATORS.values(), EXACT, GAE, DPO, REWARD, SIGNAL)
}

__all__ = [
    "EXERCISES", "EXPERIMENTS", "LAB_THREADS", "Case", "CheckFailed", "Exercise", "Experiment",
    "ExperimentResult", "Mistake", "check", "check_dpo_loss", "check_exact_kl",
    "check_fraction_with_signal", "check_gae", "check_grpo_advantages", "check_kl_estimator",
    "check_leave_one_out_baseline", "check_ppo_clip_loss", "check_reverse_reward",
    "check_sequence_level_loss", "check_token_level_loss", "run_experiment",
    "show_check_failures", "warm_trainer",
]

show_check_failures()  # in a notebook: a failed check without rlnb's frames, a stub in one line
