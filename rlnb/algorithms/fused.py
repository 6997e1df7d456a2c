"""A loss, its metrics and d loss / d logprobs in one compiled pass.

    (grad, (loss, metrics)) = grad_and_value(core)(logprobs)        under torch.compile

Why: in eager PyTorch a loss like the clipped PG loss is ~60 separate passes over a ``[B, T]``
tensor, and autograd's backward as many again; on long batches that, not the arithmetic, is the
cost. Running ``torch.func.grad_and_value`` of the loss *inside* ``torch.compile`` lets inductor
fuse forward and backward into a few loops; the ``[B, T]`` gradient is kept and handed back in
backward, so callers still just call ``loss.backward()``. See
docs/algorithms.md#clipped-policy-gradient-loss.

Implementation choices:
1) Works for any ``core(logprobs, *others, **hyper) -> (loss, aux)`` whose only
   differentiable input is ``logprobs`` (other tensors are data) and whose ``aux`` is any
   nesting of dicts and tuples of tensors (the metrics). Higher-order gradients are not
   supported.
2) One compiled function per core (``dynamic=True``, so new batch shapes do not recompile);
   the first call per configuration compiles (seconds to tens of seconds on CPU).
3) Same numbers as the eager core up to float rounding (tests/algorithms/test_policy_loss.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch


@functools.cache
def _compiled(core: Callable) -> Callable:
    def loss_and_grad(logprobs, others, hyper):
        def loss_of(c):
            return core(c, *others, **hyper)

        grad, (loss, aux) = torch.func.grad_and_value(loss_of, has_aux=True)(logprobs)
        return grad, loss, aux

    return torch.compile(loss_and_grad, dynamic=True)


class _AttachGrad(torch.autograd.Function):
    """``loss`` (computed without autograd) made a function of ``logprobs`` whose gradient is
    the one the compiled pass stored."""

    @staticmethod
    def forward(ctx, loss, logprobs, grad):
        ctx.save_for_backward(grad)
        return loss.clone()

    @staticmethod
    def backward(ctx, grad_loss):
        (grad,) = ctx.saved_tensors
        return None, grad_loss * grad, None


def fused_loss_and_grad(core: Callable, logprobs: torch.Tensor, others: tuple, hyper: dict
                        ) -> tuple[torch.Tensor, Any]:
    """``core(logprobs, *others, **hyper)`` computed with its gradient in one compiled pass.

    Args:
        core: ``(logprobs [B, T], *others, **hyper) -> (loss 0-d, aux)``.
        logprobs: ``[B, T]``, the only input the gradient flows to.
    Returns:
        ``(loss, aux)``; ``loss.backward()`` sends the stored gradient to logprobs.
    """
    grad, loss, aux = _compiled(core)(logprobs.detach(), others, hyper)
    return _AttachGrad.apply(loss, logprobs, grad), aux
