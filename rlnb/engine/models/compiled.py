"""The policy's hot paths under ``torch.compile``: the update's forward + backward and the
sampler's decode step, with the compiled artefacts kept on disk (``policy.compile``).

    logprobs [B, S]      = compiled(Policy.forward_logprobs)(model, input_ids, attention_mask)
    (logits [B, V], cache) = compiled(sampler.decode_step)(model, y [B, 1], mask [B, L+t], ...)

Why: at a few hundred thousand parameters a step is the dispatch of small ops (about 40 per layer
per decode step; norms, rotary embeddings, activations and their gradients beside the matmuls of
the update), not arithmetic. Inductor fuses those elementwise ops into a few loops, and AOTAutograd
compiles the backward with them. See docs/guide.md#compiled-steps.

Implementation choices:
1) Two functions are compiled, each with ``fullgraph=True`` so that a graph break is an error,
   not a silent split: where compiling fails (an untraceable construct in a model's forward, no
   C++ compiler), the policy runs eager from then on (both paths), after one logged line saying
   why (``compile/eager`` is then 1): the update then takes the policy's plain path
   (``Policy.forward_rows``: the shared-prefix pass where it applies), the numbers of a policy
   built without ``policy.compile``. Not caught: a failure in compiling the backward, which
   AOTAutograd does at the first ``backward()`` when shapes are dynamic (the forward compiled by
   then, so the compiler works).
2) Shapes vary (response lengths, rows that end, validation batches): the update's rows and
   sequence length, and the decode step's rows and cache length, are marked dynamic before the
   first call, so a new length does not recompile. What still recompiles (a new temperature, a
   single row, a guard of the model's own) is counted: ``compile/recompiles``.
3) On disk: inductor's FX graph cache and AOTAutograd cache live in ``$RLNB_CACHE_DIR/compile``
   (``TORCHINDUCTOR_CACHE_DIR``, unless the user set it), so a second process on the machine
   skips code generation and the C++ compiler; only Dynamo's trace of the model is redone.
4) Only the model's forward is compiled. Sampling (warpers, ``torch.multinomial``) stays eager:
   inductor draws random numbers its own way, and a seed must draw the same tokens compiled or
   not. The prefill and the no-grad log-prob passes stay eager too (once per batch).
5) One counting backend per backend name for the whole process: Dynamo keeps compiled code on
   the function's code object and guards on the backend, so a fresh backend per policy would
   recompile for every new policy (and soon reach Dynamo's recompile limit).
6) Several processes (DDP): eager, with the one line; compiling through DDP is untested.
7) Reproducible: inductor's C++ code for a scatter-add (the backward of the embedding and of the
   log-prob gather) adds with atomics from several threads, so its sums came out in another order
   from run to run. Each graph is lowered with torch's deterministic mode on, which makes
   inductor call torch's own (deterministic) kernels for those ops; the same seed then gives the
   same numbers in every process, as eager does. The mode is torch's global flag, on only while
   a graph compiles (warn-only, so an op another thread runs meanwhile is not refused).
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable

import torch

from rlnb.engine.models.compile_config import CompileConfig, compile_cache_dir

logger = logging.getLogger("rlnb.compile")


_ENV = "TORCHINDUCTOR_CACHE_DIR"
_set_by_us: str | None = None  # the value this module last wrote to the environment


def use_compile_cache_dir() -> str:
    """Point inductor's on-disk caches at ``compile_cache_dir()`` (choice 3), unless the user
    set ``TORCHINDUCTOR_CACHE_DIR`` themselves; returns the folder in use."""
    global _set_by_us
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    current = os.environ.get(_ENV)
    # importing torch._inductor writes its default into the environment: that one is not the
    # user's; ours may be re-pointed (RLNB_CACHE_DIR may have moved)
    if current in (None, _set_by_us, os.path.abspath(default_cache_dir())):
        _set_by_us = str(compile_cache_dir() / f"torch-{torch.__version__}")
        os.environ[_ENV] = _set_by_us
    return os.environ[_ENV]


# ---------------------------------------------------------------------------- counting
_active = threading.local()  # the CompiledFunction whose call is compiling, for the backend
_backends: dict[str, Callable] = {}


def _counting_backend(name: str) -> Callable:
    """The backend ``name`` wrapped to count the graphs it compiles (choice 5)."""
    if name not in _backends:
        from torch._dynamo import lookup_backend

        inner = lookup_backend(name)
        if name == "inductor":  # choice 7
            from torch._inductor.compile_fx import compile_fx

            inner = functools.partial(compile_fx, inner_compile=_deterministic_inner)

        def backend(graph, example_inputs):
            owner = getattr(_active, "fn", None)
            if owner is not None:
                owner.graphs += 1
            return inner(graph, example_inputs)

        _backends[name] = backend
    return _backends[name]


def _deterministic_inner(*args, **kwargs):
    """Inductor's compile of one graph (forward, or a backward compiled at its first call) with
    torch's deterministic mode on (choice 7)."""
    from torch._inductor.compile_fx import compile_fx_inner

    was, warn_only = (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(True, warn_only=True)  # warn: other threads run on
    try:
        return compile_fx_inner(*args, **kwargs)
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def _first_line(err: BaseException) -> str:
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "")
    return f"{type(err).__name__}: {text[:200]}"


class Fallback:
    """The paths of one policy, which go eager together when one fails to compile (choice 1).
    It holds them weakly: the sampler's registry keeps the decode step, which must not keep the
    update (and through it the policy and the model, the registry's key) alive."""

    def __init__(self):
        self.paths: weakref.WeakSet = weakref.WeakSet()
        self.reason: str | None = None

    def fall_back(self, reason: str) -> None:
        """Run every path eager from now on, saying why in one line (the first time)."""
        for path in self.paths:
            path.eager = True
        if self.reason is None:
            self.reason = reason
            logger.warning("policy.compile: running eager: %s", reason)


class CompiledFunction:
    """``fn`` under ``torch.compile(fullgraph=True)``, counting its graphs and compile time.

    ``mark`` receives the call's arguments before each call and marks their varying dimensions
    dynamic (choice 2). If compiling fails, the call runs ``fn`` eagerly and ``fallback`` turns
    this path and its siblings eager for good (choice 1).
    """

    def __init__(self, name: str, fn: Callable, backend: str, mark: Callable,
                 fallback: Fallback, eager: Callable | None = None):
        self.name, self.fn, self.mark, self.fallback = name, fn, mark, fallback
        self.eager_fn = eager or fn  # what runs instead once compiling failed
        self.graphs = 0  # graphs compiled (the first compile and every recompile)
        self.seconds = 0.0  # wall time of the calls that compiled
        self.eager = False
        fallback.paths.add(self)
        use_compile_cache_dir()
        self.compiled = torch.compile(fn, fullgraph=True, backend=_counting_backend(backend))

    @property
    def recompiles(self) -> int:
        return max(0, self.graphs - 1)

    def __call__(self, *args):
        if self.eager:
            return self.eager_fn(*args)
        self.mark(*args)
        from torch._dynamo.exc import TorchDynamoException

        graphs, start = self.graphs, time.perf_counter()
        _active.fn = self
        try:
            out = self.compiled(*args)
        except TorchDynamoException as err:  # tracing or the backend failed: nothing ran
            self.eager = True
            self.fallback.fall_back(f"compiling the {self.name} failed: {_first_line(err)}")
            return self.eager_fn(*args)
        finally:
            _active.fn = None
        if self.graphs > graphs:
            self.seconds += time.perf_counter() - start
        return out


# ---------------------------------------------------------------------------- the two paths
def _dynamic(tensor, *dims: int) -> None:
    # "maybe": a dimension the model needs static (a size of 1, say) stays static instead of
    # raising; the recompile, if any, is counted
    for d in dims:
        torch._dynamo.maybe_mark_dynamic(tensor, d)


def full_pass(policy) -> Callable:
    """The update's compiled function: the full pass of every row (the shared-prefix pass's
    ``torch.unique`` and cache are not compiled), with ``update_forward``'s arguments."""
    def update(model, input_ids, attention_mask, token_mask=None):
        return policy.forward_logprobs(model, input_ids, attention_mask)
    return update


def _mark_update(model, input_ids, attention_mask, token_mask=None) -> None:
    _dynamic(input_ids, 0, 1)  # [B, S]: rows and sequence length vary between batches
    _dynamic(attention_mask, 0, 1)


def _mark_decode(model, input_ids, attention_mask, cache_name, cache, extra) -> None:
    _dynamic(input_ids, 0)  # [B, 1]: rows end and are dropped
    _dynamic(attention_mask, 0, 1)  # [B, L + t]: one column more per step
    for value in extra.values():
        _dynamic(value, 0)
    # a DynamicCache's per-layer keys / values [B, H, L + t, D]; another cache type falls back
    # on Dynamo's automatic dynamic shapes (one counted recompile at the second length)
    for layer in getattr(cache, "layers", ()):
        for kind in ("keys", "values"):
            tensor = getattr(layer, kind, None)
            if isinstance(tensor, torch.Tensor) and tensor.ndim == 4:
                _dynamic(tensor, 0, 2)


class CompiledPolicy:
    """The compiled paths of one ``Policy`` (built when ``policy.compile.enabled``): ``update``
    and ``decode``, each a ``CompiledFunction`` or None. If either fails to compile, both run
    eager from then on, after one logged line (choice 1)."""

    def __init__(self, policy, cfg: CompileConfig):
        from rlnb.engine.models.sampler import COMPILED_DECODE, decode_step

        self.update = self.decode = None
        self.fallback = Fallback()
        if policy.dist.world_size > 1:  # choice 6
            self.fallback.fall_back(f"{policy.dist.world_size} processes (DDP) are not compiled")
            return
        if cfg.update:  # called as the policy's update_forward; eager: its plain path
            self.update = CompiledFunction("update", full_pass(policy), cfg.backend,
                                           _mark_update, self.fallback, eager=policy.forward_rows)
        if cfg.generation:  # the hf backend's loop sampler (checked at load)
            self.decode = CompiledFunction("decode step", decode_step, cfg.backend,
                                           _mark_decode, self.fallback)
            COMPILED_DECODE[policy.model] = self.decode

    def metrics(self) -> dict[str, float]:
        """``compile/*`` (docs/metrics.md): counts since the policy was built."""
        paths = [p for p in (self.update, self.decode) if p is not None]
        return {
            "compile/graphs": float(sum(p.graphs for p in paths)),
            "compile/recompiles": float(sum(p.recompiles for p in paths)),
            "compile/seconds": sum(p.seconds for p in paths),
            "compile/eager": float(self.fallback.reason is not None),
        }
