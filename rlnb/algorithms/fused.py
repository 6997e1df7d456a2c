"""A loss, its metrics and d loss / d logprobs in one compiled pass.

    (grad, (loss, metrics)) = grad_and_value(core)(logprobs)        under torch.compile

Why: in eager PyTorch a loss like the clipped PG loss is ~60 separate passes over a ``[B, T]``
tensor, and autograd's backward as many again; on long batches that, not the arithmetic, is the
cost. Running ``torch.func.grad_and_value`` of the loss *inside* ``torch.compile`` lets inductor
fuse forward and backward into a few loops; the ``[B, T]`` gradient is kept and handed back in
backward, so callers still just call ``loss.backward()``. See
docs/algorithms.md#clipped-policy-gradient-loss.

Implementation choices:
1) Works for any ``core(logprobs, *others, **hyper) -> (loss, metric_values)`` whose only
   differentiable input is ``logprobs`` (other tensors are data). Higher-order gradients are
   not supported.
2) One compiled function per core (``dynamic=True``, so new batch shapes do not recompile);
   the first call per configuration compiles (seconds to tens of seconds on CPU).
3) Same numbers as the eager core up to float rounding (tests/test_policy_loss.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


@functools.cache
def _compiled(core: Callable) -> Callable:
    def loss_and_grad(logprobs, others, hyper):
        def loss_of(c):
            return core(c, *others, **hyper)

        grad, (loss, values) = torch.func.grad_and_value(loss_of, has_aux=True)(logprobs)
        return grad, loss, values

    return torch.compile(loss_and_grad, dynamic=True)


class _FusedLossAndGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logprobs, core, others, hyper):
        grad, loss, values = _compiled(core)(logprobs.detach(), others, hyper)
        ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(values)
        return loss, values

    @staticmethod
    def backward(ctx, grad_loss, grad_values):
        (grad,) = ctx.saved_tensors
        return grad_loss * grad, None, None, None


def fused_loss_and_grad(
    core: Callable, logprobs: torch.Tensor, others: tuple, hyper: dict
) -> tuple[torch.Tensor, torch.Tensor]:
    """``core(logprobs, *others, **hyper)`` computed with its gradient in one compiled pass.

    Args:
        core: ``(logprobs [B, T], *others, **hyper) -> (loss 0-d, metric_values [K])``.
        logprobs: ``[B, T]``, the only input the gradient flows to.
    Returns:
        ``(loss, metric_values)``; ``loss.backward()`` sends the stored gradient to logprobs.
    """
    return _FusedLossAndGrad.apply(logprobs, core, others, hyper)
