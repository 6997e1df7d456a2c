"""Exercise checks: run a student's function on built cases and name the mistake it looks like.

    check(exercise, student_fn)  ->  one success line, or CheckFailed naming the mistake and where

An ``Exercise`` holds cases (inputs built so that each common mistake gives its own answer),
the reference (rlnb's own function, adapted to the exercise's signature) and the named mistakes
(each a small wrong implementation). Where the student's output differs from the reference,
every mistake is run on the same cases and the one whose outputs the student's match is named,
with the case and element where it parts from the reference.

Implementation choices:
1) Output by output: for an exercise returning ``(baseline, std)`` a right baseline and a
   wrong std name the std's mistake only.
2) A mistake explains an output only if it matches the student's on *every* case, so two
   mistakes that agree on one case are told apart by another. When none does, see 6.
3) Inputs are cloned for every call; a function that edits its inputs in place is reported.
4) ``NotImplementedError`` (an unfilled stub) passes through unchanged, so a notebook stops at
   the stub's "implement this" message. Any other exception from the student's code is
   reported with the case it was called on.
5) ``grad_wrt``: once the values match, the gradient of Σ w·output (w fixed, random) with
   respect to that input is compared too, so a loss computed on detached tensors is caught.
6) When no mistake explains every case, the message is one line per case: passed, or failed
   with the element, both values and any mistake it matches on that case alone. What the failing
   cases probe and the passing ones do not is where to look; the known mistakes are not listed
   again (docs/teaching.md has them).
7) In a notebook a failed check shows the cell's line, not rlnb's frames (``display.py``).
8) A wrong shape is named too when a mistake gives that shape and those values on every case
   (``F.kl_div(..., reduction="batchmean")``: one number, not one KL per position).
9) Outputs that match the same mistake are named in one sentence; an output the others
   determine (``Exercise.follows``: GAE's returns) is not diagnosed again when it follows.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch


class CheckFailed(Exception):
    """The student's function differs from rlnb's; the message says how. ``mistake`` is the
    named mistake's key (``None`` when no known mistake matches), ``case`` the case's name."""

    def __init__(self, message: str, *, mistake: str | None = None, case: str | None = None):
        super().__init__(message)
        self.mistake, self.case = mistake, case


@dataclass(frozen=True)
class Case:
    """Inputs of one call. ``inputs`` maps each argument name to its value, in the order of the
    exercise's signature; ``why`` says what the case is built to expose."""

    name: str
    inputs: Mapping[str, Any]
    why: str = ""


@dataclass(frozen=True)
class Mistake:
    """A common wrong implementation: ``compute`` has the exercise's signature, ``says``
    completes "your <output> match ..."."""

    key: str
    says: str
    compute: Callable[..., Any]


@dataclass(frozen=True)
class Exercise:
    """What ``check`` needs to grade one function.

    Args:
        function: the name the student implements (used in every message).
        reference_name: how the reference is called in messages (``rlnb.grpo_advantages``).
        reference: rlnb's own computation with the exercise's signature.
        cases, mistakes: see ``Case`` and ``Mistake``.
        outputs: the names of the returned values (one name: a single value).
        positional: how many leading inputs are passed positionally (the rest by keyword).
        grad_wrt: an input whose gradient is compared (choice 5), or None.
        element: ``(case, output name, index) -> str`` naming an element in messages.
        follows: output -> (what it is, ``f(inputs, outputs)``) for an output the others
            determine (choice 9).
    """

    function: str
    reference_name: str
    reference: Callable[..., Any]
    cases: Sequence[Case]
    mistakes: Sequence[Mistake]
    outputs: Sequence[str] = ("output",)
    positional: int = 1
    grad_wrt: str | None = None
    atol: float = 1e-5
    rtol: float = 1e-4
    element: Callable[[Case, str, tuple], str] | None = None
    notes: Mapping[str, str] = field(default_factory=dict)
    follows: Mapping[str, tuple[str, Callable[..., Any]]] = field(default_factory=dict)


# --------------------------------------------------------------------------- calling


def _call(fn: Callable, exercise: Exercise, case: Case, inputs: Mapping[str, Any]):
    names = list(inputs)
    args = [inputs[n] for n in names[: exercise.positional]]
    kwargs = {n: inputs[n] for n in names[exercise.positional:]}
    return fn(*args, **kwargs)


def _fresh(inputs: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v.clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v)
            for k, v in inputs.items()}


def _same_inputs(a: Mapping[str, Any], b: Mapping[str, Any]) -> str | None:
    """The name of the first input that differs between two copies, else None."""
    for name, value in a.items():
        other = b[name]
        if not isinstance(value, torch.Tensor):
            if value != other:
                return name
        elif not torch.equal(value.detach(), other.detach()) and not (
                value.is_floating_point() and torch.equal(value.isnan(), other.isnan())
                and torch.equal(value.nan_to_num(), other.nan_to_num())):
            return name
    return None


def _as_outputs(value: Any, exercise: Exercise, *, who: str, case: Case
                ) -> tuple[torch.Tensor, ...]:
    """The returned value as one float64 tensor per output, or CheckFailed saying what's wrong."""
    n = len(exercise.outputs)
    values = (value,) if n == 1 else value
    if n > 1 and (not isinstance(values, (tuple, list)) or len(values) != n):
        got = f"{len(values)} values" if isinstance(values, (tuple, list)) else \
            f"one {type(value).__name__}"
        raise CheckFailed(f"{exercise.function}: {who} returned {got} on case '{case.name}'; "
                          f"return {n} values: ({', '.join(exercise.outputs)})", case=case.name)
    out = []
    for name, v in zip(exercise.outputs, values):
        try:
            t = v.detach() if isinstance(v, torch.Tensor) else torch.as_tensor(v)
            out.append(t.to(torch.float64))
        except (TypeError, ValueError, RuntimeError):
            raise CheckFailed(f"{exercise.function}: {who} returned {name} as "
                              f"{type(v).__name__} ({str(v)[:60]!r}) on case '{case.name}'; "
                              "return a tensor (or numbers)", case=case.name) from None
    return tuple(out)


def _student_outputs(fn: Callable, exercise: Exercise, case: Case) -> tuple[torch.Tensor, ...]:
    inputs = _fresh(case.inputs)
    try:
        value = _call(fn, exercise, case, inputs)
    except NotImplementedError:
        raise  # choice 4: the stub's own message
    except Exception as err:
        raise CheckFailed(
            f"{exercise.function} raised {type(err).__name__}: {err} on case '{case.name}' "
            f"({_show_inputs(case)})", case=case.name) from err
    changed = _same_inputs(inputs, case.inputs)
    if changed is not None:
        raise CheckFailed(
            f"{exercise.function} changed its input '{changed}' in place on case '{case.name}' "
            "(an in-place operation such as -=, +=, .add_() or an indexed assignment on an "
            "argument): work on a copy or build new tensors", case=case.name)
    return _as_outputs(value, exercise, who="your function", case=case)


def _computed(fn: Callable, exercise: Exercise, case: Case) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return _as_outputs(_call(fn, exercise, case, _fresh(case.inputs)), exercise,
                           who=getattr(fn, "__name__", "the reference"), case=case)


# --------------------------------------------------------------------------- comparing


def _close(a: torch.Tensor, b: torch.Tensor, exercise: Exercise) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=exercise.rtol,
                                                      atol=exercise.atol, equal_nan=True))


def _first_difference(a: torch.Tensor, b: torch.Tensor, exercise: Exercise) -> tuple:
    """The first index (row-major) where ``a`` and ``b`` are not close; () for 0-d tensors."""
    if a.ndim == 0:
        return ()
    ok = torch.isclose(a, b, rtol=exercise.rtol, atol=exercise.atol, equal_nan=True)
    return tuple(int(i) for i in (~ok).nonzero()[0])


def _fmt(x: float) -> str:
    return f"{x:.6g}"


def _where(exercise: Exercise, case: Case, name: str, index: tuple) -> str:
    if exercise.element is not None:
        return exercise.element(case, name, index)
    return name if not index else f"{name}[{', '.join(map(str, index))}]"


def _show_inputs(case: Case, limit: int = 160) -> str:
    parts = []
    for k, v in case.inputs.items():
        text = str(v.tolist() if isinstance(v, torch.Tensor) else v)
        parts.append(f"{k}={text if len(text) <= 60 else text[:57] + '...'}")
    joined = ", ".join(parts)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def _plural(name: str) -> bool:
    """Whether an output's name is plural ("advantages", "returns"; not "loss", "std")."""
    return name.endswith("s") and not name.endswith("ss")


def _verb(name: str, singular: str, plural: str) -> str:
    return f"{name} {plural if _plural(name) else singular}"


def _fits(got: torch.Tensor, expected: torch.Tensor) -> torch.Tensor | None:
    """``got`` in ``expected``'s shape (a scalar as 0-d, [1] or a float is fine), or None."""
    if got.shape == expected.shape:
        return got
    if got.numel() == 1 and expected.numel() == 1:
        return got.reshape(expected.shape)
    return None


def _check_shapes(exercise: Exercise, got: list, expected: list) -> list:
    """The outputs in the reference's shapes; a wrong shape raises ``CheckFailed`` (choice 8)."""
    fitted = [tuple(_fits(g, e) for g, e in zip(outs, exps)) for outs, exps in zip(got, expected)]
    bad = next(((i, k) for i, row in enumerate(fitted) for k, f in enumerate(row) if f is None),
               None)
    if bad is None:
        return fitted
    (i, k), case, name = bad, exercise.cases[bad[0]], exercise.outputs[bad[1]]
    g, e = got[i][k], expected[i][k]
    for m in exercise.mistakes:
        wrong = [_mistaken(m, exercise, c, k) for c in exercise.cases]
        if all(w is not None and _fits(o[k], w) is not None and _close(_fits(o[k], w), w, exercise)
               for o, w in zip(got, wrong)):
            raise CheckFailed(f"{exercise.function}: your {_verb(name, 'matches', 'match')} "
                              f"{m.says}: on case '{case.name}' it has shape {list(g.shape)} "
                              f"where {exercise.reference_name} gives {list(e.shape)}.",
                              mistake=m.key, case=case.name)
    raise CheckFailed(f"{exercise.function}: your {_verb(name, 'has', 'have')} shape "
                      f"{list(g.shape)} on case '{case.name}', expected {list(e.shape)} "
                      f"({_show_inputs(case)})", case=case.name)


def check(exercise: Exercise, fn: Callable) -> None:
    """Grade ``fn`` against ``exercise``: print one line when it matches rlnb on every case,
    else raise ``CheckFailed`` naming the mistake it looks like and where (module docstring)."""
    if not callable(fn):
        raise CheckFailed(f"check_{exercise.function} takes your function "
                          f"{exercise.function} itself, got {type(fn).__name__}")
    expected = [_computed(exercise.reference, exercise, case) for case in exercise.cases]
    got = _check_shapes(exercise, [_student_outputs(fn, exercise, case)
                                   for case in exercise.cases], expected)
    problems = [_diagnose(exercise, k, got, expected) for k in range(len(exercise.outputs))]
    problems = [p for p in problems if p is not None]
    kept = [p for p in problems if p[1] is not None or not _follows(exercise, p[3], got)]
    if kept and len(kept) < len(problems):  # choice 9: an output that follows the others
        name = next(exercise.outputs[p[3]] for p in problems if p not in kept)
        kept.append((f"  (your {name}: {exercise.follows[name][0]}, as in the reference, so "
                     f"{'they follow' if _plural(name) else 'it follows'} from the above)",
                     None, kept[0][2], -1))
        problems = kept
    if problems:
        raise CheckFailed(_message(exercise, problems), mistake=problems[0][1],
                          case=problems[0][2])
    if exercise.grad_wrt is not None:
        _check_gradient(exercise, fn)
    names = ", ".join(f"'{c.name}'" for c in exercise.cases)
    print(f"✓ {exercise.function}: matches {exercise.reference_name} on all "
          f"{len(exercise.cases)} cases ({names})")


def _follows(exercise: Exercise, k: int, got: list) -> bool:
    """Whether the student's output k is, on every case, what ``follows`` makes of their
    other outputs."""
    name = exercise.outputs[k]
    if name not in exercise.follows or len(exercise.outputs) < 2:
        return False
    derive = exercise.follows[name][1]
    return all(_close(g[k], derive(case.inputs, g).to(torch.float64), exercise)
               for case, g in zip(exercise.cases, got))


def _message(exercise: Exercise, problems: list) -> str:
    """One sentence per output, or one for several outputs that match the same mistake
    (choice 9: GAE's advantages and returns both follow a wrong advantage)."""
    lines, done = [], set()
    for i, (text, key, _, k) in enumerate(problems):
        if i in done:
            continue
        same = [j for j, p in enumerate(problems) if key is not None and p[1] == key]
        if len(same) > 1:
            done.update(same)
            names = " and ".join(exercise.outputs[problems[j][3]] for j in same)
            text = text.replace(f"your {_verb(exercise.outputs[k], 'matches', 'match')}",
                                f"your {names} match", 1)
        lines.append(text)
    return "\n".join(lines)


def _diagnose(exercise: Exercise, k: int, got: list, expected: list
              ) -> tuple[str, str | None, str, int] | None:
    """For output k: None if it matches everywhere, else (message, mistake key, case name, k)."""
    name = exercise.outputs[k]
    failing = [i for i, (g, e) in enumerate(zip(got, expected)) if not _close(g[k], e[k], exercise)]
    if not failing:
        return None
    fn = exercise.function
    wrong = {m.key: [_mistaken(m, exercise, c, k) for c in exercise.cases]
             for m in exercise.mistakes}
    for m in exercise.mistakes:  # choice 2: a mistake must match on every case
        if all(w is not None and _close(g[k], w, exercise) for g, w in zip(got, wrong[m.key])):
            i = failing[0]
            case = exercise.cases[i]
            index = _first_difference(got[i][k], expected[i][k], exercise)
            e, g = expected[i][k][index].item(), got[i][k][index].item()
            return (f"{fn}: your {_verb(name, 'matches', 'match')} {m.says}: see "
                    f"{_where(exercise, case, name, index)} of case '{case.name}', where "
                    f"{exercise.reference_name} gives {_fmt(e)} and you give {_fmt(g)}.",
                    m.key, case.name, k)
    # choice 6: no known mistake explains every case: which cases pass and which fail, each
    # with what it probes, is the student's best clue
    lines = [f"{fn}: your {_verb(name, 'differs', 'differ')} from {exercise.reference_name} "
             f"on {len(failing)} of {len(exercise.cases)} cases (no known mistake explains "
             "them all):"]
    for i, case in enumerate(exercise.cases):
        probes = case.why or _show_inputs(case)
        if i not in failing:
            lines.append(f"  ✓ '{case.name}' ({probes})")
            continue
        index = _first_difference(got[i][k], expected[i][k], exercise)
        e, g = expected[i][k][index].item(), got[i][k][index].item()
        line = (f"  ✗ '{case.name}' ({probes}): {_where(exercise, case, name, index)} is "
                f"{_fmt(g)} where {exercise.reference_name} gives {_fmt(e)} (off by {g - e:.4g})")
        here = [m.says for m in exercise.mistakes
                if wrong[m.key][i] is not None and _close(got[i][k], wrong[m.key][i], exercise)]
        if here:
            line += "; on this case it matches " + "; or ".join(here) + ", but not on every case"
        lines.append(line)
    if exercise.notes.get(name):
        lines.append(exercise.notes[name])
    return "\n".join(lines), None, exercise.cases[failing[0]].name, k


def _mistaken(mistake: Mistake, exercise: Exercise, case: Case, k: int) -> torch.Tensor | None:
    """Output k of a mistake on a case; None where the mistake itself cannot run there."""
    try:
        with warnings.catch_warnings():  # e.g. torch.std of one element: the mistake's own
            warnings.simplefilter("ignore")
            return _computed(mistake.compute, exercise, case)[k]
    except Exception:  # e.g. a wrong axis that does not fit this case's shape
        return None


def _weights(shape: torch.Size) -> torch.Tensor:
    g = torch.Generator().manual_seed(1234)
    return torch.rand(shape, generator=g, dtype=torch.float64) + 0.5


def _gradient(fn: Callable, exercise: Exercise, case: Case, *, student: bool):
    inputs = _fresh(case.inputs)
    x = inputs[exercise.grad_wrt]
    x.requires_grad_(True)
    with torch.enable_grad():
        out = _call(fn, exercise, case, inputs)
        out = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(out, torch.Tensor) or not out.requires_grad:
            return None
        total = (out.double() * _weights(out.shape)).sum()
        (grad,) = torch.autograd.grad(total, x, allow_unused=True)
    return torch.zeros_like(x, dtype=torch.float64) if grad is None else grad.double()


def _check_gradient(exercise: Exercise, fn: Callable) -> None:
    name, fn_name = exercise.grad_wrt, exercise.function
    for case in exercise.cases:
        ref = _gradient(exercise.reference, exercise, case, student=False)
        got = _gradient(fn, exercise, case, student=True)
        if got is None:
            raise CheckFailed(
                f"{fn_name}: your values are right but no gradient reaches '{name}' (case "
                f"'{case.name}'): a .detach(), .item(), .tolist(), torch.no_grad() or a new "
                "tensor built from numbers cuts the graph; keep every step a tensor operation",
                mistake="no_gradient", case=case.name)
        if not _close(got, ref, exercise):
            index = _first_difference(got, ref, exercise)
            raise CheckFailed(
                f"{fn_name}: your values are right but the gradient with respect to '{name}' "
                f"is not: on case '{case.name}' it is {_fmt(got[index].item())} at "
                f"{name}[{', '.join(map(str, index))}] where {exercise.reference_name}'s is "
                f"{_fmt(ref[index].item())} (a detached term, or a clamp where the reference "
                "keeps the gradient, changes the gradient but not the value)",
                mistake="wrong_gradient", case=case.name)
