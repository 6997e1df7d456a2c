"""``verifiers``: a verifiers environment (its taskset) as a task: its tasks are the prompts, its
rewards score rlnb's completions (the optional ``envs`` extra: ``pip install -e '.[envs]'``).

    trainer = rlnb.GRPOTrainer(config, environment=MyTaskset(vf.TasksetConfig()))  # in Python
    data: {name: verifiers, env_id: my-env, env_args: {difficulty: 2}}            # installed

    r = Σ_k w_k · score_k        (the task's @vf.reward methods; weight 0 and @vf.metric: logged)

Single-turn: one completion per prompt. An environment with tools or ``@vf.stop`` hooks runs
as agent episodes (``rlnb/engine/agents/verifiers_agent.py``) when ``max_rollout_turns`` > 1.

Implementation choices:
1) verifiers 0.4's environments are ``verifiers.v1``: a ``Taskset`` yields ``Task``s whose
   ``TaskData`` holds the prompt (text or messages) and a system prompt, and whose ``@vf.reward``
   and ``@vf.metric`` methods score a ``Trace``. An environment id is the taskset's installed
   package (``vf.load_taskset``, the way ``vf.load_environment`` finds it); ``env_args`` are the
   fields of that taskset's config. A ``vf.Env`` handed over gives its taskset; one whose own
   ``run`` drives the episode is kept for the agent path (``env_of``).
2) Rows: each task's prompt, as chat messages when it has a system prompt or is messages
   (through the tokenizer's chat template; few-shot turns in the prompt stay), else as text;
   the task data's other fields are row columns (``answer`` is the warm start's demonstration).
   The held-out rows are carved out as a user's data set's are (``num_val`` chosen by ``seed``,
   ``user_data.DatasetTask``); ``max_rows`` bounds an infinite taskset.
3) Scoring: one ``Trace`` per completion (the prompt's messages, then the completion as the
   sampled assistant message), scored as ``Task.score`` scores offline (no runtime): each
   metric, then each reward, called with the arguments it names (``task``, ``trace``), a mapping
   result recording several keys, every completion of a batch awaited together (in a thread of
   its own when the caller runs an event loop, as a Jupyter kernel does). ``Task.score`` inspects
   every hook's signature on every call (about 0.3 ms a completion); rlnb does it once per task
   type and plugged-function set (``_plan``), and a test holds the two to the same traces.
   Each reward of weight != 0 is a component (``train/reward/<name>``;
   GDPO normalises each); the total is Σ weight · score, verifiers' own ``trace.reward``.
   Weight-0 rewards and metrics are logged as ``train/<name>`` (their batch mean).
4) What would be wrong silently is refused when the task is built: rewards or judges that need a
   runtime or a model (verifiers would skip them offline), ``@vf.intercept`` hooks, lifecycle
   hooks (``setup``, ``finalize``, ``stage_verifier``) and ``NEEDS_CONTAINER`` (rlnb runs
   neither an interception server nor a runtime: they would never be called), a taskset with
   no tasks. A reward that raises or returns something not a finite number is named with the
   row and its prompt.
5) ``data.correct_reward`` names the reward whose score at least ``data.correct_threshold``
   is correct (or ``total``, the weighted sum); without it the task has no notion of correct
   and no accuracy metrics, as with a user's reward functions.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from numbers import Real
from typing import Any

import torch
from pydantic import Field

from rlnb.engine.environments.base import Rewards, TaskSettings, check_batch
from rlnb.engine.environments.extras import require
from rlnb.engine.environments.reward_funcs import prompt_head, run_coroutines
from rlnb.engine.environments.reward_task import RowsOf
from rlnb.engine.environments.user_data import DatasetTask

WHAT = "data.name: verifiers"
# an env seat's settings (verifiers' AgentConfig) and what stands for each in rlnb's run
SEAT_SETTINGS = {"sampling": "policy.generation: the policy's own sampling",
                 "max_turns": "grpo.max_rollout_turns",
                 "max_input_tokens": "policy.max_total_sequence_length",
                 "max_output_tokens": "policy.generation.max_new_tokens",
                 "max_total_tokens": "policy.max_total_sequence_length",
                 "model": "the policy being trained", "client": "the in-process client"}


def _vf():
    return require("verifiers.v1", WHAT)


def load_taskset(env_id: str, env_args: dict[str, Any] | None = None):
    """The taskset of the installed environment ``env_id`` (choice 1), its config from
    ``env_args``; a ``ValueError`` naming what is missing or wrong."""
    vf = _vf()
    try:
        config_type = vf.taskset_config_type(env_id)
    except ModuleNotFoundError as err:
        raise ValueError(f"data.env_id: verifiers environment {env_id!r} is not installed "
                         f"({str(err).split('. ')[0]}); pip install its package, or build the "
                         "taskset in Python and pass environment=") from None
    except (AttributeError, TypeError, ValueError) as err:
        raise ValueError(f"data.env_id: {env_id!r} is not a verifiers environment: "
                         f"{str(err).splitlines()[0]}") from None
    from pydantic import ValidationError

    try:
        config = config_type.model_validate({**(env_args or {}), "id": env_id})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"data.env_args.{where}: {first['msg']} (environment {env_id!r}, "
                         f"config {config_type.__name__})") from None
    return vf.load_taskset(config)


def taskset_of(environment):
    """The taskset of what a user hands over: a ``vf.Taskset``, or a ``vf.Env``'s (one whose
    run needs what rlnb does not run is refused: ``env_of``)."""
    vf = _vf()
    if isinstance(environment, vf.Env):
        env_of(environment)
        return environment.taskset
    if isinstance(environment, vf.Taskset):
        return environment
    raise ValueError(f"environment= takes a verifiers Taskset or Env (verifiers.v1), got "
                     f"{type(environment).__name__}")


def env_of(environment):
    """A ``vf.Env`` whose own ``run`` drives its episodes (a game, an engine answering the
    model), or None for a taskset or a ``SingleAgentEnv``. Refused: an env with several seats
    (a simulated user, a judge: each a conversation of its own, not one trainable sample), a
    ``finalize`` of its own, a seat on a harness other than ``null``, or a seat that sets what
    rlnb's run decides (``SEAT_SETTINGS``: its sampling, turn and token limits, model)."""
    vf = _vf()
    if not isinstance(environment, vf.Env):
        return None
    from verifiers.v1.configs.agent import agent_config_fields

    seats = agent_config_fields(environment.config)
    name = type(environment).__name__
    if len(seats) != 1:
        raise ValueError(f"environment= {name} has {len(seats)} agent seats ({list(seats)}): "
                         "each seat's conversation would be a sample of its own; rlnb trains "
                         "environments with one seat")
    seat, agent = next(iter(seats.items()))
    if agent.harness is not None and agent.harness.id != "null":
        raise ValueError(f"environment= {name}: its seat {seat!r} runs harness "
                         f"{agent.harness.id!r}, a program with tools of its own in a runtime, "
                         "which rlnb does not run; rlnb runs the tool-less chat loop (harness "
                         "'null') with the taskset's toolsets")
    for key, ours in SEAT_SETTINGS.items():  # what the seat would set and rlnb's loop never reads
        value = getattr(agent, key, None)
        if value is not None and (not hasattr(value, "model_dump") or value.model_dump(
                exclude_none=True)):
            raise ValueError(f"environment= {name}: its seat {seat!r} sets {key}, which rlnb's "
                             f"loop does not read (rlnb's is {ours}); leave it unset")
    if type(environment).finalize is not vf.Env.finalize:
        raise ValueError(f"environment= {name} has a finalize of its own (cross-agent "
                         "judgement over a finished episode), which rlnb does not run")
    return None if isinstance(environment, vf.SingleAgentEnv) else environment


def _messages(data) -> list[dict[str, str]] | str:
    """A task's prompt as rlnb's row prompt (choice 2)."""
    from verifiers.v1.types import content_text

    prompt = data.prompt
    if isinstance(prompt, str) and not data.system_prompt:
        return prompt
    messages = [] if not data.system_prompt else [{"role": "system",
                                                   "content": data.system_prompt}]
    if isinstance(prompt, str):
        messages.append({"role": "user", "content": prompt})
    else:
        messages += [{"role": m.role, "content": content_text(m.content)} for m in prompt or []]
    return messages


def _needs_runtime(fn) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


class VerifiersTask(RowsOf):
    """A verifiers taskset's tasks as rows, scored by their rewards (module docstring)."""

    name = "verifiers"

    class Settings(TaskSettings):
        """``data.name: verifiers``'s settings."""

        env_id: str | None = Field(None, description="an installed verifiers environment (its "
                                   "taskset package); None: handed over in Python "
                                   "(environment=)")
        env_args: dict[str, Any] | None = Field(None, description="the taskset config's "
                                                "fields (None: its defaults)")
        max_rows: int | None = Field(None, ge=2, description="read at most this many tasks "
                                     "(needed for an infinite taskset)")

    def __init__(self, env_id: str | None, env_args: dict | None,
                 max_rows: int | None, num_val: int, seed: int):
        if env_id is None:
            raise ValueError("data.env_id: name an installed verifiers environment, or pass the "
                             "environment in Python (GRPOTrainer(config, environment=...))")
        self._setup(load_taskset(env_id, env_args), env_id, max_rows, num_val, seed)
        self.env = None

    @classmethod
    def from_taskset(cls, environment, *, max_rows: int | None = None, num_val: int = 200,
                     seed: int = 0) -> VerifiersTask:
        """The task of a taskset (or ``vf.Env``) built in Python."""
        taskset = taskset_of(environment)
        task = cls.__new__(cls)
        task._setup(taskset, getattr(taskset.config, "id", "") or None, max_rows, num_val, seed)
        task.env = env_of(environment)
        return task

    def _setup(self, taskset, env_id: str | None, max_rows: int | None, num_val: int,
               seed: int) -> None:
        vf = _vf()
        self.env_id = env_id or type(taskset).__name__
        if not taskset.bounded and max_rows is None:
            raise ValueError(f"verifiers environment {self.env_id!r} yields tasks forever: "
                             "set data.max_rows")
        tasks = []
        for task in taskset:
            tasks.append(task)
            if max_rows is not None and len(tasks) >= max_rows:
                break
        if not tasks:
            raise ValueError(f"verifiers environment {self.env_id!r} has no tasks")
        self.tasks, self.taskset = tasks, taskset
        self._check_hooks(tasks[0])
        base_fields = set(vf.TaskData.model_fields)
        rows = []
        for i, task in enumerate(tasks):
            extra = {k: v for k, v in task.data.model_dump(mode="json").items()
                     if k not in base_fields}  # the fields of the user's TaskData subclass
            rows.append({**extra, "prompt": _messages(task.data), "vf_index": i})
        self.rows = DatasetTask.__new__(DatasetTask)  # the held-out rows carved as a data set's
        self.rows._setup(rows, None, f"verifiers environment {self.env_id!r}", prompt_key="prompt",
                         answer_key="answer", num_val=num_val, val_fraction=None, seed=seed)
        self.chat = self.rows.chat
        from importlib.metadata import version

        try:  # its rewards decide the warm start's probe accuracy, and so where it stops
            source = inspect.getsource(type(tasks[0]))
        except (OSError, TypeError):
            source = f"{type(tasks[0]).__module__}.{type(tasks[0]).__qualname__}"
        self.fingerprint = ["verifiers", version("verifiers"), self.env_id,
                            self.rows.fingerprint, source]
        self.defines_correct = False  # run_task sets it from data.correct_reward
        self.correct_reward: str | None = None
        self.correct_threshold = 1.0
        self.agent_info = vf.AgentInfo(config=vf.AgentConfig())
        self._plans: dict[tuple, tuple[list, list]] = {}

    def _check_hooks(self, task) -> None:
        """Refuse what verifiers would skip offline, and what rlnb's loops never run (choice
        4), on the single-turn path and the agent path alike."""
        from verifiers.v1.utils.decorators import discover_decorated

        vf, where = _vf(), f"verifiers environment {self.env_id!r}"
        for kind in ("reward", "metric"):
            for fn in task.hooks(kind):
                if _needs_runtime(fn):
                    raise ValueError(f"{where}: {kind} {fn.__name__!r} needs a runtime (a "
                                     "sandbox), which rlnb does not run; it would be skipped")
        if task.config.judges:
            raise ValueError(f"{where}: its judges need a model endpoint, which rlnb does not "
                             "run in scoring")
        for fn in discover_decorated(task, "intercept"):
            raise ValueError(f"{where}: @vf.intercept {fn.__name__!r} rewrites model calls at "
                             "verifiers' interception server, which rlnb's in-process sampling "
                             "does not run; it would never be called")
        for hook in ("setup", "finalize", "stage_verifier"):
            if getattr(type(task), hook) is not getattr(vf.Task, hook):
                raise ValueError(f"{where}: {type(task).__name__}.{hook} is a lifecycle hook "
                                 "of verifiers' runtime (a sandbox), which rlnb does not run; "
                                 "it would never be called")
        if type(task).NEEDS_CONTAINER:
            raise ValueError(f"{where}: {type(task).__name__}.NEEDS_CONTAINER is set: its "
                             "episodes need a container, which rlnb does not run")

    @property
    def multi_turn(self) -> bool:
        """Whether episodes take turns: an ``Env`` whose own ``run`` drives them, or tasks
        with tools (their own toolsets or the taskset's) or ``@vf.stop`` hooks
        (``agents/verifiers_agent.py`` runs them)."""
        task = self.tasks[0]
        return bool(getattr(self, "env", None) is not None or type(task).toolsets(task.config)
                    or type(self.taskset).toolsets(self.taskset.config) or task.hooks("stop"))

    @property
    def reward_names(self) -> list[str]:
        """The rewards of the tasks' type, in verifiers' order."""
        return [fn.__name__ for fn in self.tasks[0].hooks("reward")]

    # ------------------------------------------------------------------ scoring (choice 3)
    def _trace(self, task, row: dict, response: str):
        vf = _vf()
        prompt = row["prompt"]
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
        nodes = [vf.MessageNode(parent=i - 1 if i else None, message=m)
                 for i, m in enumerate(messages)]
        nodes.append(vf.MessageNode(parent=len(nodes) - 1, sampled=True,
                                    message=vf.AssistantMessage(content=response)))
        return vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data),
                        agent=self.agent_info, nodes=nodes, is_completed=True, ok=True)

    def score(self, prompts: list[str], responses: list[str], rows: list[dict]) -> Rewards:
        check_batch(self.name, prompts, responses, rows)
        tasks = [self.tasks[row["vf_index"]] for row in rows]
        traces = [self._trace(t, row, r) for t, row, r in zip(tasks, rows, responses)]
        outcomes = run_coroutines([_scored(self.score_trace(t, tr))
                                   for t, tr in zip(tasks, traces)])
        for i, err in enumerate(outcomes):
            if err is not None:
                raise ValueError(self._culprit(tasks[i], traces[i], rows[i], i, err))
        components: dict[str, list[float]] = {}
        logged: dict[str, list[float]] = {}
        total = torch.zeros(len(rows), dtype=torch.float32)
        for i, trace in enumerate(traces):
            for name, reward in trace.rewards.items():
                value = None if reward is None else reward.score
                if value is None or not math.isfinite(value):
                    raise ValueError(f"verifiers environment {self.env_id!r}: reward {name!r} "
                                     f"gave {value!r} for row {i} (prompt "
                                     f"{prompt_head(rows[i]['prompt'])}); a reward is a "
                                     "finite number")
                if reward.weight == 0:
                    logged.setdefault(name, []).append(value)
                else:
                    components.setdefault(name, []).append(value)
                    total[i] += reward.weight * value
            for name, value in trace.metrics.items():
                if value is not None:
                    logged.setdefault(name, []).append(float(value))
        comps = {k: torch.tensor(v, dtype=torch.float32) for k, v in components.items()}
        if self.correct_reward is None:
            correct = torch.zeros(len(rows), dtype=torch.bool)
        else:
            ref = total if self.correct_reward == "total" else comps[self.correct_reward]
            correct = ref >= self.correct_threshold
        metrics = {k: sum(v) / len(v) for k, v in logged.items()}
        return Rewards(total, comps, correct, metrics=metrics)

    def _plan(self, task) -> tuple[list, list]:
        """``(metrics, rewards)`` of ``task``, each ``(name, call, parameter names, weight,
        bound)``: ``Task.hooks`` and the signatures, inspected once per task type and plugged
        functions (``bound``: a method of the task the plan was made from, re-bound per task)."""
        cfg = task.config
        key = (type(task), repr(sorted(cfg.metrics.items())), repr(sorted(cfg.rewards.items())))
        plan = self._plans.get(key)
        if plan is None:
            plan = tuple([(fn.__name__, getattr(fn, "__func__", fn),
                           tuple(inspect.signature(fn).parameters),
                           getattr(fn, "_vf_weight", 1.0), getattr(fn, "__self__", None) is task)
                          for fn in task.hooks(kind)] for kind in ("metric", "reward"))
            self._plans[key] = plan
        return plan

    async def score_trace(self, task, trace) -> None:
        """``Task.score(trace)`` offline (choice 3), recording into ``trace`` the same way."""
        from verifiers.v1.utils.decorators import seed, unseed

        if task.scoring_deferred:
            return
        metrics, rewards = self._plan(task)
        available = {"task": task.data, "trace": trace}

        def call(fn, params, bound):
            kwargs = {name: available[name] for name in params if name in available}
            return fn(task, **kwargs) if bound else fn(**kwargs)

        seed(trace.metrics, (m[0] for m in metrics))
        seed(trace.rewards, (r[0] for r in rewards))
        # one hook after another (Task.score gathers them; the batch's traces are gathered)
        results = [await call(fn, params, bound) for _, fn, params, _, bound in metrics]
        for (name, *_), result in zip(metrics, results):
            if isinstance(result, Mapping):
                unseed(trace.metrics, name)
                trace.record_metrics(result)
            else:
                trace.record_metric(name, result)
        results = [await call(fn, params, bound) for _, fn, params, _, bound in rewards]
        for (name, _, _, weight, _), result in zip(rewards, results):
            if isinstance(result, Mapping):
                unseed(trace.rewards, name)
                items = result.items()
            else:
                items = [(name, result)]
            for key, value in items:
                trace.record_reward(key, value, weight)

    def _culprit(self, task, trace, row: dict, i: int, err: BaseException) -> str:
        """One line naming the reward that raised on row ``i`` (choice 4)."""
        available = {"task": task.data, "trace": trace}
        name = None
        hooks = {"metric": task.hooks("metric"), "reward": task.hooks("reward")}
        kinds = {fn.__name__: kind for kind, fns in hooks.items() for fn in fns}

        def kind_of(n):
            return kinds.get(n, "reward")

        for fn in [*hooks["metric"], *hooks["reward"]]:
            found = run_coroutines([_called(fn, available)])[0]
            if found is not None:
                name, err = fn.__name__, found
                break
        if isinstance(err, _BadValue):
            return (f"verifiers environment {self.env_id!r}: {kind_of(name)} {name!r} gave "
                    f"{err.value!r} for row {i} (prompt {prompt_head(row['prompt'])}); a reward "
                    "is a finite number")
        cause = err.__cause__ or err
        what = f"{kind_of(name)} {name!r}" if name else "scoring"
        return (f"verifiers environment {self.env_id!r}: {what} raised on row {i} (prompt "
                f"{prompt_head(row['prompt'])}): {type(cause).__name__}: "
                f"{str(cause).splitlines()[0] if str(cause) else ''}")


async def _scored(coro) -> BaseException | None:
    """Await ``coro``; the exception it raised, or None."""
    try:
        await coro
    except Exception as err:  # a user's reward: reported with its row (choice 4)
        return err
    return None


async def _called(fn, available: dict) -> BaseException | None:
    """Call one reward or metric the way verifiers does; the exception it raised, or None (a
    function that is not ``async def`` is the error: verifiers awaits each one)."""
    from verifiers.v1.utils.decorators import invoke

    try:
        out = invoke(fn, available)
        if not inspect.isawaitable(out):
            return TypeError(f"{fn.__name__} is not async def; verifiers awaits every reward "
                             "and metric")
        value = await out
    except Exception as err:
        return err
    values = value.values() if isinstance(value, Mapping) else [value]
    if not all(isinstance(v, Real) and not isinstance(v, bool) for v in values):
        return _BadValue(value)
    return None


class _BadValue(Exception):
    """A reward or metric returned something not a number (or a mapping of numbers)."""

    def __init__(self, value):
        super().__init__(repr(value))
        self.value = value
