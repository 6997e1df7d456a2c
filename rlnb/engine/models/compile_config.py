"""``policy.compile``: which of the policy's hot paths run under ``torch.compile``, and where the
compiled code is kept on disk. The compiling itself is ``compiled.py``, imported only when
``enabled`` (docs/guide.md#compiled-steps)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field

from rlnb.config import Config, cross_field_rule


class CompileConfig(Config):
    """``policy.compile``: ``torch.compile`` of the update and the decode step."""

    enabled: bool = Field(
        False, description="Compile the parts below (the first run on a machine compiles for "
        "tens of seconds; later runs load the compiled code from $RLNB_CACHE_DIR/compile).")
    update: bool = Field(True, description="The update's forward + backward (with gradient).")
    generation: bool = Field(
        True, description="The decode step of the hf backend's loop sampler "
        "(policy.generation.backend=hf, sampler=loop).")
    backend: Literal["inductor", "aot_eager"] = Field(
        "inductor", description="inductor: fused generated code (on CPU it needs a C++ "
        "compiler); aot_eager: traced graphs run by eager kernels, no speed-up (to check that a "
        "model traces).")

    @cross_field_rule
    def _something_to_compile(self) -> CompileConfig:
        if self.enabled and not (self.update or self.generation):
            raise ValueError("enabled=true with update=false and generation=false compiles "
                             "nothing: set enabled=false")
        return self


def check_compile_applies(compile_cfg: CompileConfig, backend: str, sampler: str) -> None:
    """A ValueError if ``policy.compile.generation`` would compile nothing: only the hf backend's
    loop sampler has a decode step of rlnb's own (vLLM compiles its own; ``generate`` is
    transformers')."""
    if compile_cfg.enabled and compile_cfg.generation and (backend, sampler) != ("hf", "loop"):
        raise ValueError(
            f"compile.generation=true compiles the decode step of generation.backend=hf with "
            f"sampler=loop, not backend={backend} with sampler={sampler}: set "
            "compile.generation=false")


def compile_cache_dir() -> Path:
    """``$RLNB_CACHE_DIR/compile`` (default ``~/.cache/rlnb/compile``), beside the warm-start
    cache of ``rlnb.run.store.warm_start_cache``."""
    return Path(os.environ.get("RLNB_CACHE_DIR", Path.home() / ".cache" / "rlnb")) / "compile"
