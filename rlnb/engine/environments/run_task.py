"""The task a run trains on: from its config (``data``, ``reward_funcs``) and from what Python
hands a trainer (TRL's names: ``reward_funcs``, ``reward_weights``, ``train_dataset``,
``eval_dataset``).

    trainer = rlnb.GRPOTrainer(config, reward_funcs=[format_reward, accuracy_reward],
                               train_dataset=ds, eval_dataset=held_out)

Implementation choices:
1) Rows come from ``train_dataset`` (``DatasetTask.from_data``) or from ``data`` (any task:
   ``data.name: dataset`` with ``data.path``, or a built-in task's rows); reward functions, when
   the run has any, score them (``RewardFuncsTask``), whichever task gives the rows.
2) What Python hands over wins over the config and is recorded in it (``with_user_data``): the
   functions as ``module:function`` with their weights, the data as ``data.name: dataset`` with
   no path. So a run's ``config.yaml`` says what trained it, and a replay (``verify_run``,
   resume) in the same notebook is handed the same objects again.
3) What would fail at the first step fails here instead: prompts of chat messages with a
   tokenizer that has no chat template, rows without a reward, ``data.correct_reward`` with no
   reward function, reward functions in a multi-turn rollout, validation on a task with no
   held-out rows (``check_held_out_rows``, which the trainer runs once the task is built).
"""

from __future__ import annotations

from pydantic import ValidationError

from rlnb.config import format_validation_error
from rlnb.engine.environments.base import Task
from rlnb.engine.environments.reward_funcs import RewardFuncConfig, reward_func_list
from rlnb.engine.environments.reward_task import RewardFuncsTask
from rlnb.engine.environments.tasks import TaskConfig, build_task, task_arguments
from rlnb.engine.environments.user_data import DatasetTask


def user_funcs(config, reward_funcs=None, reward_weights=None):
    """The run's ``RewardFunc``s: those handed over in Python, else the config's; None if
    neither has any."""
    if reward_funcs is not None:
        return reward_func_list(reward_funcs, reward_weights)
    if reward_weights is not None:
        raise ValueError("reward_weights= without reward_funcs=: weights of the config's "
                         "functions go in reward_funcs entries ({func: ..., weight: ...})")
    configured = getattr(config, "reward_funcs", None) or []
    return reward_func_list(configured) if configured else None


def with_user_data(config, *, reward_funcs=None, reward_weights=None, train_dataset=None,
                   eval_dataset=None, environment=None):
    """``config`` with what Python hands over recorded in it (choice 2): a validated copy, or
    ``config`` itself when nothing is handed over."""
    if environment is not None:
        if train_dataset is not None or eval_dataset is not None or reward_funcs is not None:
            raise ValueError("environment= brings its own prompts and rewards: give it alone, "
                             "without train_dataset=, eval_dataset= or reward_funcs=")
        return _with_environment(config, environment)
    if reward_funcs is None and train_dataset is None and eval_dataset is None:
        if reward_weights is not None:
            user_funcs(config, None, reward_weights)  # raises
        return config
    if eval_dataset is not None and train_dataset is None:
        raise ValueError("eval_dataset= needs train_dataset= (the held-out rows of a task's own "
                         "data are data.val_split or carved out of it)")
    config = config.model_copy(deep=True)
    try:  # each assignment is type-checked; the rules across sections run in check() below
        if reward_funcs is not None:
            funcs = reward_func_list(reward_funcs, reward_weights)
            config.reward_funcs = [RewardFuncConfig(func=f.ref, weight=f.weight, name=f.name)
                                   for f in funcs]
        if train_dataset is not None:  # the data set's settings carry over, a path does not
            takes = {*DatasetTask.Settings.model_fields, *TaskConfig.model_fields}
            values = config.data.model_dump()
            kept = {k: values[k] for k in config.data.model_fields_set
                    if k in takes and k in values and k not in ("name", "path")}
            config.data = TaskConfig(name="dataset", **kept)
    except ValidationError as err:
        raise ValueError(format_validation_error(err, type(config), "")) from None
    config.check()
    return config


def _with_environment(config, environment):
    """``config`` recording a verifiers environment handed over in Python: ``data.name:
    verifiers`` with its id (None when it has none: the same object is handed over again)."""
    from rlnb.engine.environments.verifiers_task import taskset_of

    taskset = taskset_of(environment)
    config = config.model_copy(deep=True)
    values = config.data.model_dump()
    keep = {"num_val", "seed", "max_rows", "correct_reward", "correct_threshold"}
    kept = {k: values[k] for k in keep if k in values}
    try:
        config.data = TaskConfig(name="verifiers", env_id=getattr(taskset.config, "id", "") or
                                 None, **kept)
    except ValidationError as err:
        raise ValueError(format_validation_error(err, type(config), "")) from None
    config.check()
    return config


def build_run_task(config, tokenizer=None, *, reward_funcs=None, reward_weights=None,
                   train_dataset=None, eval_dataset=None, environment=None) -> Task:
    """The task of a run (choices 1 and 3): its rows, scored by its reward functions if any."""
    config = with_user_data(config, reward_funcs=reward_funcs, reward_weights=reward_weights,
                            train_dataset=train_dataset, eval_dataset=eval_dataset,
                            environment=environment)
    data = config.data
    if data.name == "verifiers":
        return _verifiers_task(config, tokenizer, environment)
    funcs = user_funcs(config, reward_funcs, reward_weights)
    if train_dataset is not None:
        settings = {k: v for k, v in task_arguments(data).items() if k != "path"}
        rows = DatasetTask.from_data(train_dataset, eval_dataset, **settings)
    else:
        rows = build_task(data)
    if funcs is None:
        if isinstance(rows, DatasetTask):
            raise ValueError("the data set has no reward of its own: give reward functions "
                             "(reward_funcs: [module:function] in the config, or reward_funcs= "
                             "in Python)")
        if data.correct_reward is not None:
            raise ValueError(f"data.correct_reward={data.correct_reward!r} names a reward "
                             "function, but the run has none (reward_funcs)")
        if getattr(rows, "chat", False) and getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(f"data.name={data.name}: its prompts are chat messages, but the "
                             f"tokenizer ({type(tokenizer).__name__}) has no chat template: "
                             "give prompts as text (reasoning_gym: data.system_prompt=null), a "
                             "model whose tokenizer has one, or for the embedded tiny model "
                             "policy.tiny.chat_template=true")
        return rows
    loop = loop_section_of(config)
    if getattr(loop, "max_rollout_turns", 1) > 1:
        raise ValueError("reward_funcs score single-turn completions, but max_rollout_turns="
                         f"{loop.max_rollout_turns}: set it to 1")
    task = RewardFuncsTask(rows, funcs, correct_reward=data.correct_reward,
                           correct_threshold=data.correct_threshold)
    if task.chat and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"the data's prompts are chat messages, but the tokenizer "
                         f"({type(tokenizer).__name__}) has no chat template: give prompts as "
                         "text, or a model whose tokenizer has one")
    return task


def _verifiers_task(config, tokenizer, environment):
    """A verifiers environment's task (``verifiers_task.py``) with the run's notion of correct
    (the trainer runs one with tools as agent episodes: ``agents/verifiers_agent.py``); one
    handed over in Python, or the installed one ``data.env_id`` names."""
    from rlnb.engine.environments.verifiers_task import VerifiersTask

    data = config.data
    settings = task_arguments(data)
    if getattr(config, "reward_funcs", None):
        raise ValueError("reward_funcs with data.name: verifiers: the environment's rubric "
                         "scores the completions; drop one of them")
    if environment is not None:
        task = VerifiersTask.from_taskset(environment, max_rows=settings["max_rows"],
                                          num_val=settings["num_val"], seed=settings["seed"])
    else:
        task = VerifiersTask(**settings)
    loop = loop_section_of(config)
    turns, section = getattr(loop, "max_rollout_turns", 1), getattr(loop, "section", "grpo")
    if task.multi_turn and turns == 1:
        raise ValueError(f"verifiers environment {task.env_id!r} has tools or @vf.stop hooks: "
                         f"its episodes take turns, but {section}.max_rollout_turns is 1; "
                         "set it to the model turns an episode may take (say 4)")
    if not task.multi_turn and turns > 1:
        raise ValueError(f"verifiers environment {task.env_id!r} is single-turn (no tools, no "
                         f"@vf.stop hooks), but {section}.max_rollout_turns={turns}: set "
                         "it to 1")
    names = task.reward_names
    if data.correct_reward is not None:
        if data.correct_reward not in (*names, "total"):
            raise ValueError(f"data.correct_reward={data.correct_reward!r} is not a reward of "
                             f"verifiers environment {task.env_id!r} ({names}) nor 'total'")
        task.correct_reward, task.correct_threshold = data.correct_reward, data.correct_threshold
        task.defines_correct = True
    if task.chat and getattr(tokenizer, "chat_template", None) is None:
        raise ValueError(f"verifiers environment {task.env_id!r} gives chat messages (a system "
                         f"prompt, or messages), but the tokenizer ({type(tokenizer).__name__}) "
                         "has no chat template: use a model whose tokenizer has one")
    return task


def check_held_out_rows(task, key: str, period: int | None = None) -> None:
    """Refuse validation (``key``: ``grpo.val_period`` = ``period`` > 0, or a direct call) on a
    task with no held-out rows (an ``AgentTask`` built without ``val=``), naming the ways out."""
    if period == 0 or task.val_rows(1):  # (0: the loop never validates)
        return
    need = (f"{key}={period} validates on them every {period} steps" if period
            else f"{key} needs them")
    off = f", or set {key}=0 to train without validation" if period else ""
    raise ValueError(f"task {getattr(task, 'name', type(task).__name__)!r} has no held-out rows, "
                     f"but {need}: give the task held-out rows (rlnb.AgentTask(agent, "
                     "train=rows, val=held_out_rows); a data set: eval_dataset= or "
                     f"data.val_split){off}")


def loop_section_of(config):
    """The config's loop section (``grpo``, ``ppo``, ``dpo``), or None: a ``LoopConfig``, or a
    section with rules of its own (``dpo``: ``check_rules``, ``needs_reference``,
    ``logprob_source``). A ``MasterConfig`` finds it in the loop registry (its ``loop_config``:
    a loop registered on another's section reads that one); another config object names it by
    its algorithm."""
    section = getattr(config, "loop_config", None)
    return section if section is not None else getattr(
        config, getattr(config, "algorithm", "grpo"), None)


def check_reward_rules(config) -> None:
    """Rules between ``reward_funcs`` and the other sections, checked when a config loads
    (names are known there only for functions the config itself names)."""
    entries = getattr(config, "reward_funcs", None) or []
    if not entries:
        return
    names = [e.name or e.func.rsplit(":", 1)[1].rsplit(".", 1)[-1] for e in entries]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"reward_funcs: two functions are called {dup!r}; give one a name "
                         "({func: ..., name: ...})")
    correct = config.data.correct_reward
    if correct is not None and correct not in (*names, "total"):
        raise ValueError(f"data.correct_reward={correct!r} is not one of reward_funcs {names} "
                         "nor 'total'")
    loop = loop_section_of(config)
    if loop is None:
        return
    section = loop.section
    if loop.max_rollout_turns > 1:
        raise ValueError(f"reward_funcs score single-turn completions, but {section}."
                         f"max_rollout_turns={loop.max_rollout_turns}: set it to 1")
    weights = [e.weight for e in entries]
    est = loop.adv_estimator
    if est.name == "gdpo" and est.reward_weights is not None and len(est.reward_weights) != len(
            names):
        raise ValueError(f"{section}.adv_estimator.reward_weights has {len(est.reward_weights)} "
                         f"entries for {len(names)} reward components (reward_funcs, in the "
                         f"order {sorted(names)}): give one weight per function")
    if est.name == "gdpo" and any(w != 1.0 for w in weights) and est.reward_weights is None:
        order = sorted(names)
        raise ValueError(f"reward_funcs carry weights {weights}, but GDPO normalises each "
                         f"component and weighs them with {section}.adv_estimator.reward_weights "
                         f"(components in the order {order}): set the weights there")
