"""Input checks shared by the algorithm layer.

Every public estimator and loss validates its tensors with these helpers so that bad input
fails with a ``ValueError`` naming the argument, what it got and what was expected, instead
of a broadcasting error three functions deeper (or, worse, a silently wrong number).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from difflib import get_close_matches
from typing import Any, TypeVar

import torch

T = TypeVar("T")


def _describe(x: torch.Tensor) -> str:
    return f"shape {tuple(x.shape)} and dtype {x.dtype}"


def check_tensor(
    name: str,
    x: Any,
    *,
    ndim: int | Sequence[int] | None = None,
    shape: Sequence[int | None] | None = None,
    floating: bool = False,
) -> torch.Tensor:
    """Check that ``x`` is a tensor of the given rank/shape; ``None`` in ``shape`` is a wildcard.

    ``floating=True`` requires a floating-point dtype (log-probs, rewards, advantages): an
    integer tensor there is almost always a bug upstream (for example token ids passed as
    log-probs), and silently casting it would hide it.
    """
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None:
        allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
        if x.ndim not in allowed:
            want = " or ".join(f"{n}-D" for n in allowed)
            raise ValueError(f"{name} must be {want}, got {_describe(x)}")
    if shape is not None:
        ok = x.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, x.shape))
        if not ok:
            want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
            raise ValueError(f"{name} must have shape {want}, got {_describe(x)}")
    if floating and not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got {_describe(x)}")
    return x


def check_mask(name: str, m: Any, *, shape: Sequence[int | None] | None = None) -> torch.Tensor:
    """Check that ``m`` is a 0/1 mask (bool, int or float dtype) and return it as float32.

    Fractional masks are rejected: every normalisation (docs/algorithms.md) counts mask
    entries, and a 0.5 would be half-counted in one place and fully counted in another.
    """
    check_tensor(name, m, shape=shape)
    if m.dtype != torch.bool and m.numel() > 0:
        bad = (m != 0) & (m != 1)
        if bool(bad.any()):
            idx = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(
                f"{name} must contain only 0 and 1, got {m[idx].item()!r} at index {idx} "
                f"({_describe(m)})"
            )
    return m.to(torch.float32)


def check_finite(name: str, x: torch.Tensor) -> torch.Tensor:
    """Check that ``x`` holds no NaN or ±inf (one device sync); the message names the first one.

    Rewards are the usual culprit: one NaN reward makes its whole group's baseline and std NaN,
    and every advantage of the group with them, without any error.
    """
    if x.is_floating_point() and x.numel() > 0 and not bool(torch.isfinite(x).all()):
        bad = ~torch.isfinite(x)
        idx = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"{name} must be finite, got {int(bad.sum())} NaN/inf value(s); the first is "
            f"{x[idx].item()!r} at index {idx} ({_describe(x)})"
        )
    return x


def check_same_rows(**tensors: torch.Tensor | None) -> int:
    """Check that every given tensor has the same first dimension (the batch B) and return it."""
    sizes = {k: v.shape[0] for k, v in tensors.items() if v is not None and v.ndim > 0}
    if len(set(sizes.values())) > 1:
        detail = ", ".join(f"{k} has {n}" for k, n in sizes.items())
        raise ValueError(f"batch sizes disagree: {detail} rows")
    return next(iter(sizes.values())) if sizes else 0


def check_same_shape(**tensors: torch.Tensor | None) -> tuple[int, ...]:
    """Check that every given tensor has exactly the same shape and return it."""
    shapes = {k: tuple(v.shape) for k, v in tensors.items() if v is not None}
    if len(set(shapes.values())) > 1:
        detail = ", ".join(f"{k} {s}" for k, s in shapes.items())
        raise ValueError(f"shapes disagree: {detail}")
    return next(iter(shapes.values())) if shapes else ()


def choose(registry: Mapping[str, T], name: str, what: str) -> T:
    """Look ``name`` up in a variant dict; an unknown name lists the valid ones and a close one."""
    if name in registry:
        return registry[name]
    valid = ", ".join(repr(k) for k in registry)
    close = get_close_matches(str(name), list(registry), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ValueError(f"unknown {what} {name!r}{hint}; valid: {valid}")


def alias(name: str, value: Any, other_name: str, other_value: Any) -> Any:
    """One input that callers may pass under either of two keywords; two different values for
    it is a ``TypeError`` (the very same tensor under both names is fine)."""
    if other_value is None:
        return value
    if value is not None and value is not other_value:
        raise TypeError(f"{name} and {other_name} name the same input: pass one of them")
    return other_value


def upcast(x: torch.Tensor | None) -> torch.Tensor | None:
    """Half-precision tensors to float32 (NeMo-RL's arithmetic); float32/float64 unchanged."""
    if x is None or x.dtype in (torch.float32, torch.float64):
        return x
    return x.float()
