"""What a trainer checks and builds before its first step, apart from the step itself: the config
it is given (a loaded config of its loop, its rules run again, the live world's own rules) and
the task with the environment that steps its conversations.

    config = checked_config(GRPOTrainer, config, dist, user_data)
    task, env = task_and_environment(config, "grpo", None, tokenizer, user_data)

``Trainer.__init__`` (``base.py``) calls both, as NeMo-RL's ``setup`` builds the parts before
``grpo_train`` runs the loop. Nothing here runs during a step.

Implementation choices:
1) A config's fields may have been assigned one by one since it was loaded: its rules (each
   section's and ``check_loop_rules`` between sections) run again here, so a rule is written
   once, in the config layer. What needs the live world (the number of ranks) is checked here.
2) A verifiers environment with tools runs its episodes as agent code
   (``VerifiersAgentTask``); an agent task's chat template must keep each turn's tokens
   (``check_agent_task``); a loop that validates needs held-out rows (``check_held_out_rows``).
"""

from __future__ import annotations

from typing import Any

from rlnb.config import Config
from rlnb.engine.agents.templates import check_agent_task
from rlnb.engine.agents.verifiers_agent import VerifiersAgentTask
from rlnb.engine.environments.run_task import build_run_task, check_held_out_rows, with_user_data
from rlnb.engine.trainers.loop_config import check_loop_rules


def checked_config(cls: type, config, dist, user: dict[str, Any]):
    """``config`` for a trainer of class ``cls`` (choice 1), with ``user``'s reward functions
    and data recorded in it (``with_user_data``); one clear error otherwise."""
    section = cls.loop_section
    if not all(hasattr(config, s) for s in (section, "policy", "loss_fn", "data")):
        raise TypeError(
            f"{cls.__name__} takes a loaded config, got {type(config).__name__}: "
            f"build one with rlnb.load_config(path_or_dict_or_None, overrides)")
    if getattr(config, section) is None:  # a config of another loop
        raise ValueError(
            f"{cls.__name__} needs a config with algorithm: {section}; this one has algorithm: "
            f"{getattr(config, 'algorithm', 'grpo')!r} "
            "(rlnb.engine.trainers.loops.make_trainer builds the loop a config names)")
    if isinstance(config, Config):  # fields may have been assigned one by one since it
        config.check()               # was built: its rules across fields run again here
    config = with_user_data(config, **user)
    check_loop_rules(config)
    loop = getattr(config, section)
    if loop.use_dynamic_sampling and dist.world_size > 1:
        # each rank would need its own number of generation batches (dynamic_sampling.py)
        raise ValueError(
            f"{section}.use_dynamic_sampling=true runs in one process only, but "
            f"{dist.world_size} were launched (ranks would draw different numbers of "
            "generation batches): set it to false or run one process")
    return config


def task_and_environment(config, section: str, task, tokenizer, user: dict[str, Any]):
    """``(task, env)``: ``task`` or the config's (``build_run_task``), and what steps its
    multi-turn conversations (``config.env``), checked (choice 2)."""
    loop = getattr(config, section)
    task = task or build_run_task(config, tokenizer, **user)
    if getattr(task, "multi_turn", False) and getattr(task, "taskset", None):
        # a verifiers environment with tools: its episodes run as agent code
        task = VerifiersAgentTask(task, max_turns=loop.max_rollout_turns)
    env = config.env.build(task)  # what steps multi-turn conversations
    if getattr(task, "agent", None) is not None:  # its turns are one sample each
        check_agent_task(task, tokenizer, config)
    check_held_out_rows(task, f"{section}.val_period", loop.val_period)
    return task, env
