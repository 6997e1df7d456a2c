"""Teaching: exercise checks, the live runs the exercises ask about, the exercise builder and
the lab's pre-flight check (docs/teaching.md).

    from rlnb import teach
    teach.check_grpo_advantages(grpo_advantages)          # ✓ ... or which mistake, and where
    teach.run_experiment("optimizer_steps", seed=0).table  # a short real run per setting

Each ``check_*`` runs the student's function on cases built to expose the common mistakes,
compares it with rlnb's own implementation and, when it differs, names the mistake its output
matches (``check.py``). ``CheckFailed`` is what a failed check raises. Nothing here imports a
Jupyter package; the exercise sources live in ``notebooks/exercises/`` and
``rlnb teach build OUT`` turns them into student and solution notebooks (``build.py``).
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
from rlnb.teach.check import Case, CheckFailed, Exercise, Mistake, check, show_check_failures
from rlnb.teach.dpo import DPO, check_dpo_loss
from rlnb.teach.gae import GAE, check_gae
from rlnb.teach.kl import ESTIMATORS, EXACT, check_exact_kl, check_kl_estimator
from rlnb.teach.live import EXPERIMENTS, Experiment, ExperimentResult, run_experiment, warm_trainer
from rlnb.teach.rewards import REWARD, SIGNAL, check_fraction_with_signal, check_reverse_reward
from rlnb.teach.surrogate import SURROGATE, check_ppo_clip_loss

# every graded function, by the name the student implements (tests feed each mistake to it)
EXERCISES: dict[str, Exercise] = {
    e.function: e for e in (BASELINE, ADVANTAGES, SURROGATE, TOKEN_LEVEL, SEQUENCE_LEVEL,
                            *ESTIMATORS.values(), EXACT, GAE, DPO, REWARD, SIGNAL)
}

__all__ = [
    "EXERCISES", "EXPERIMENTS", "Case", "CheckFailed", "Exercise", "Experiment",
    "ExperimentResult", "Mistake", "check", "check_dpo_loss", "check_exact_kl",
    "check_fraction_with_signal", "check_gae", "check_grpo_advantages", "check_kl_estimator",
    "check_leave_one_out_baseline", "check_ppo_clip_loss", "check_reverse_reward",
    "check_sequence_level_loss", "check_token_level_loss", "run_experiment",
    "show_check_failures", "warm_trainer",
]

show_check_failures()  # in a notebook: a failed check shows the student's frames only
