"""Reward functions as plain Python callables, called the way TRL's ``GRPOTrainer`` calls them.

    def accuracy_reward(completions, solution, **kwargs) -> list[float | None]: ...
    trainer = rlnb.GRPOTrainer(config, reward_funcs=[format_reward, accuracy_reward],
                               train_dataset=ds)
    reward_funcs: [rewards:format_reward, {func: rewards:accuracy_reward, weight: 2.0}]  # YAML

    r_i = Σ_k w_k · f_k(row i)        (a function's None counts 0 in the sum, as TRL's nansum)

Implementation choices:
1) The call is TRL's: ``f(prompts=, completions=, completion_ids=, **columns, trainer_state=,
   log_metric=, log_extra=)``, with every column of the rows but ``prompt`` (one list entry per
   completion) and a ``transformers.TrainerState`` whose ``global_step`` is the training step.
   Prompts are the rows' own (text, or messages); completions are text, or
   ``[{"role": "assistant", "content": text}]`` when the prompts are messages; completion ids
   run to the end-of-sequence token when there is one.
2) Each function is a named component of the reward (``Rewards.components``: logged as
   ``train/reward/<name>``; GDPO normalises each one separately); the total is their weighted
   sum. ``async def`` functions are awaited together (in a thread of their own when the caller
   runs an event loop, as a Jupyter kernel does). A function marked ``@group_reward`` is
   called once per group with that group's G completions and returns G scores.
3) Every output is checked where it is returned: one value per completion, each a finite real
   number or None. A function that raises is called again row by row to find the row that
   raises; the one-line error names the function, the row, the prompt's first characters and
   the line of the user's code.
4) The task that scores rows with them, its weighted sum and its notion of correct:
   ``reward_task.py``.
5) A function named ``module:function`` in a config is imported when the task is built; its
   record in the run's config is that reference (a function defined in a notebook is recorded
   as ``__main__:name`` and resolves again in that notebook).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import math
import re
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from numbers import Real
from typing import Any

import torch
from pydantic import Field, field_validator, model_validator

from rlnb.config import Config
from rlnb.engine.environments.prompts import is_messages

_REF = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.<>]*")


class RewardFuncConfig(Config):
    """One entry of ``reward_funcs``: ``module:function`` alone, or with a weight and a name."""

    func: str = Field(description="'module:function' (the module imports from the working "
                      "directory or the config file's folder)")
    weight: float = Field(1.0, description="its weight in the sum r = Σ w_k f_k")
    name: str | None = Field(None, description="its component name (default: the function's)")

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"func": data} if isinstance(data, str) else data

    @field_validator("func")
    @classmethod
    def _a_reference(cls, ref: str) -> str:
        if not _REF.fullmatch(ref):
            raise ValueError(f"{ref!r} is not 'module:function' (e.g. 'mypkg.rewards:correct')")
        return ref

    @field_validator("weight")
    @classmethod
    def _finite(cls, w: float) -> float:
        if not math.isfinite(w):
            raise ValueError(f"a weight is a finite number, got {w}")
        return w


def group_reward(func: Callable) -> Callable:
    """Mark ``func`` as a whole-group reward: called once per group with its G completions (and
    the group's prompts and columns), it returns G scores (choice 2)."""
    func.__rlnb_group_reward__ = True
    return func


class RewardFunctionError(ValueError):
    """A reward function raised, or returned something that is not one score per completion."""


@dataclass(frozen=True)
class RewardFunc:
    """A reward function with its component name, weight and (for the record) reference."""

    func: Callable
    name: str
    weight: float = 1.0
    ref: str | None = None

    @property
    def per_group(self) -> bool:
        return bool(getattr(self.func, "__rlnb_group_reward__", False))


def reference(func: Callable) -> str:
    """``module:qualname`` of a callable: what a run's config records (choice 5)."""
    module = getattr(func, "__module__", None) or "__main__"
    name = getattr(func, "__qualname__", None) or type(func).__name__
    return f"{module}:{name}"


def resolve(ref: str, where: str) -> Callable:
    """The callable ``module:function`` names; a one-line ValueError naming ``where`` if the module
    does not import or holds no such callable."""
    module_name, _, attr = ref.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # the user's module: any error means "does not import"
        raise ValueError(f"{where}: cannot import {module_name!r} for {ref!r} "
                         f"({type(err).__name__}: {err})") from None
    if getattr(module, "__file__", None) is None and hasattr(module, "__path__"):
        folder = list(module.__path__)[0]
        raise ValueError(f"{where}: {module_name!r} is a directory ({folder}), not a module: "
                         f"name the module file in it ({module_name}.<file>:{attr})")
    obj = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
    if not callable(obj):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                       and getattr(v, "__module__", None) == module.__name__)
        hint = (" (a function defined in a notebook or script resolves only there: move it to a "
                "module, or pass reward_funcs= in Python)" if module_name == "__main__" else "")
        raise ValueError(f"{where}: {module_name!r} has no function {attr!r} (it has "
                         f"{found[:8]}){hint}")
    return obj


def reward_func_list(funcs, weights=None) -> list[RewardFunc]:
    """``RewardFunc``s from what a user gives: a callable, a list of callables, ``module:function``
    strings or ``RewardFuncConfig``s, or a dict ``{name: callable}``; ``weights`` (TRL's
    ``reward_weights``) one per function."""
    if callable(funcs) or isinstance(funcs, (str, RewardFuncConfig)):
        funcs = [funcs]
    items = list(funcs.items()) if isinstance(funcs, Mapping) else [(None, f) for f in funcs]
    if not items:
        raise ValueError("reward_funcs is empty: give at least one reward function")
    if weights is not None and len(weights) != len(items):
        raise ValueError(f"reward_weights has {len(weights)} entries for {len(items)} reward "
                         "functions")
    out: list[RewardFunc] = []
    for i, (name, f) in enumerate(items):
        where = f"reward_funcs[{i}]"
        weight, ref = 1.0, None
        if isinstance(f, (str, dict)):
            f = RewardFuncConfig.model_validate(f)
        if isinstance(f, RewardFuncConfig):
            name, weight, ref = name or f.name, f.weight, f.func
            f = resolve(f.func, where)
        elif not callable(f):
            raise ValueError(f"{where} is a {type(f).__name__}, not a function or "
                             "'module:function'")
        if weights is not None:
            weight = float(weights[i])
        name = name or getattr(f, "__name__", None) or type(f).__name__
        check_call_signature(f, f"{where} ({name})")
        out.append(RewardFunc(f, str(name), weight, ref or reference(f)))
    names = [f.name for f in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise ValueError(f"two reward functions are called {dup!r}: name them ({{func: ..., "
                         "name: ...}} in a config, {name: function} in Python)")
    if "total" in names:
        raise ValueError("a reward function may not be called 'total' (data.correct_reward: "
                         "total means the sum)")
    return out


# ------------------------------------------------------------------------------ the call

# what every call passes besides the data's columns (choice 1)
CALL_KEYWORDS = ("prompts", "completions", "completion_ids", "trainer_state", "log_metric",
                 "log_extra")


def check_call_signature(f, where: str) -> None:
    """Refuse, when the functions are resolved (before any step), one that cannot take TRL's
    keyword arguments: without ``**kwargs`` it must name each of ``CALL_KEYWORDS``."""
    try:
        params = inspect.signature(f).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: the call will tell
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    takes = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    missing = [k for k in CALL_KEYWORDS if k not in takes]
    if missing:
        raise ValueError(f"{where} cannot take TRL's keyword arguments: it has no {missing[0]!r} "
                         "parameter and no **kwargs. Add **kwargs to its signature (each call "
                         "passes prompts, completions, completion_ids, the data's columns, "
                         "trainer_state, log_metric and log_extra)")


def prompt_head(prompt: Any, n: int = 30) -> str:
    """The first characters of a prompt (of its last message when it is messages)."""
    if is_messages(prompt):
        prompt = prompt[-1]["content"] if prompt else ""
    text = str(prompt)
    return repr(text[:n] + ("…" if len(text) > n else ""))


def _user_line(err: BaseException) -> str:
    """``file.py:12``, the innermost frame of the traceback outside rlnb (the user's code)."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if "/rlnb/engine/environments/" not in f.filename.replace("\\", "/")]
    if not frames:
        return ""
    f = frames[-1]
    return f" [{f.filename.rsplit('/', 1)[-1]}:{f.lineno}]"


def run_coroutines(coros: list) -> list:
    """Await ``coros`` together; in a worker thread when this thread runs an event loop."""

    async def gather():
        return await asyncio.gather(*coros)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(gather())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, gather()).result()


@dataclass
class RewardCall:
    """What one scoring call needs besides the functions: ``[B]`` lists, G and the step."""

    prompts: list
    completions: list
    completion_ids: list[list[int]]
    columns: dict[str, list]
    generations: int
    step: int

    def kwargs(self, rows: slice, log: dict) -> dict[str, Any]:
        """TRL's keyword arguments for the rows ``rows`` (choice 1)."""
        from transformers import TrainerState

        return {"prompts": self.prompts[rows], "completions": self.completions[rows],
                "completion_ids": self.completion_ids[rows],
                **{k: v[rows] for k, v in self.columns.items()},
                "trainer_state": TrainerState(global_step=self.step),
                "log_metric": lambda name, value: log["metrics"].setdefault(name, []).append(
                    float(value)),
                "log_extra": lambda column, values: log["extra"].setdefault(column, []).extend(
                    values)}


def build_call(rows: list[dict], texts: list[str], completion_ids: list[list[int]],
               generations: int, step: int) -> RewardCall:
    """The ``RewardCall`` of B rows (G consecutive per prompt) and their completions."""
    chat = bool(rows) and isinstance(rows[0].get("prompt"), list)
    completions = ([[{"role": "assistant", "content": t}] for t in texts] if chat
                   else list(texts))
    keys = [k for k in (rows[0] if rows else {}) if k not in ("prompt", "completion",
                                                                "completion_ids")]
    return RewardCall([r["prompt"] for r in rows], completions, completion_ids,
                      {k: [r.get(k) for r in rows] for k in keys}, generations, step)


def call_reward_funcs(funcs: list[RewardFunc], call: RewardCall
                      ) -> tuple[dict[str, list[float | None]], dict]:
    """Each function's scores ``[B]`` (None where it does not score a row), and what they
    logged (``{"metrics": {name: [values]}, "extra": {column: values}}``)."""
    B, G = len(call.prompts), max(call.generations, 1)
    log: dict = {"metrics": {}, "extra": {}}
    spans = {f.name: ([slice(s, s + G) for s in range(0, B, G)] if f.per_group
                      else [slice(0, B)]) for f in funcs}
    results: dict[str, list] = {}
    pending = []  # (function, span, coroutine)
    for f in funcs:
        for span in spans[f.name]:
            try:
                out = f.func(**call.kwargs(span, log))
            except Exception as err:
                raise _located(f, call, span, err, log) from None
            if inspect.isawaitable(out):
                pending.append((f, span, out))
            else:
                results.setdefault(f.name, []).append((span, out))
    if pending:
        outs = run_coroutines([_caught(c) for _, _, c in pending])
        for (f, span, _), out in zip(pending, outs):
            if isinstance(out, _Raised):
                raise _located(f, call, span, out.err, log) from None
            results.setdefault(f.name, []).append((span, out))
    scores = {}
    for f in funcs:
        values: list[float | None] = [None] * B
        for span, out in sorted(results[f.name], key=lambda x: x[0].start):
            values[span] = check_output(f, out, call, span)
        scores[f.name] = values
    return scores, log


@dataclass
class _Raised:
    err: BaseException


async def _caught(coro):
    try:
        return await coro
    except Exception as err:  # reported with its row by _located
        return _Raised(err)


def _located(f: RewardFunc, call: RewardCall, span: slice, err: BaseException, log: dict
             ) -> RewardFunctionError:
    """The error of ``f`` raising ``err`` on ``span``, with the first row that raises alone
    (choice 3)."""
    what = f"{type(err).__name__}: {err}".splitlines()[0] + _user_line(err)
    row = None
    if not f.per_group and span.stop - span.start > 1:
        for i in range(span.start, span.stop):
            try:
                out = f.func(**call.kwargs(slice(i, i + 1), log))
                if inspect.isawaitable(out):
                    out = run_coroutines([out])[0]
            except Exception as one:
                row, what = i, f"{type(one).__name__}: {one}".splitlines()[0] + _user_line(one)
                break
    else:
        row = span.start
    if row is None:
        return RewardFunctionError(f"reward function {f.name!r} raised {what} on a batch of "
                                   f"{span.stop - span.start} (no single row raises alone)")
    group = f"group {row // max(call.generations, 1)}, " if f.per_group else ""
    return RewardFunctionError(f"reward function {f.name!r} raised {what} at row {row} ({group}"
                               f"prompt {prompt_head(call.prompts[row])})")


def check_output(f: RewardFunc, out: Any, call: RewardCall, span: slice) -> list[float | None]:
    """``out`` as one float (or None) per row of ``span``; a RewardFunctionError otherwise."""
    n = span.stop - span.start
    kind = "the group's" if f.per_group else "the batch's"
    if isinstance(out, torch.Tensor):
        out = out.tolist()
    elif hasattr(out, "tolist") and not isinstance(out, (str, bytes)):  # numpy
        out = out.tolist()
    if not isinstance(out, (list, tuple)):
        raise RewardFunctionError(f"reward function {f.name!r} returned a "
                                  f"{type(out).__name__}, not a list of {n} scores (one per "
                                  f"completion of {kind})")
    if len(out) != n:
        raise RewardFunctionError(f"reward function {f.name!r} returned {len(out)} scores for "
                                  f"{n} completions (one per completion of {kind}; rows "
                                  f"{span.start}..{span.stop - 1})")
    values: list[float | None] = []
    for i, v in enumerate(out):
        row = span.start + i
        if v is None:
            values.append(None)
            continue
        if hasattr(v, "item") and not isinstance(v, (list, tuple)):
            try:
                v = v.item()
            except (ValueError, TypeError):
                pass
        if not isinstance(v, Real):
            raise RewardFunctionError(f"reward function {f.name!r} returned {v!r} "
                                      f"({type(v).__name__}) at row {row} (prompt "
                                      f"{prompt_head(call.prompts[row])}): a score is a number "
                                      "or None")
        if not math.isfinite(float(v)):
            raise RewardFunctionError(f"reward function {f.name!r} returned {float(v)} at row "
                                      f"{row} (prompt {prompt_head(call.prompts[row])}): a "
                                      "score is finite")
        values.append(float(v))
    return values
