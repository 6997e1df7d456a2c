"""Generation backends by name: ``policy.generation.backend`` picks one from
``GENERATION_BACKENDS``.

    generator = make_generation_backend(model, tokenizer, config.policy.generation, max_prompt)

``hf`` samples on the policy's own model (``hf_backend.py``), ``vllm`` with an in-process vLLM
engine refit after every update (``vllm_backend.py``). A backend of one's own is a
``GenerationBackend`` subclass (``backend.py``) added with ``register_generation_backend``; the
config then accepts its name.
"""

from __future__ import annotations

from pydantic import Field

from rlnb.algorithms.checks import choose
from rlnb.config import Config, cross_field_rule
from rlnb.engine.models.backend import GenerationBackend
from rlnb.engine.models.hf_backend import HFGenerationBackend
from rlnb.engine.models.vllm_backend import VLLMGenerationBackend  # imports no vllm
from rlnb.engine.models.vllm_engine import VLLMConfig
from rlnb.registry import claim


class GenerationConfig(Config):
    """``policy.generation``: how responses are sampled."""

    backend: str = Field("hf", description="hf (the policy's own model) | vllm (docs/vllm.md) "
                         "| a registered backend's name.")
    sampler: str = Field(
        "loop", description="backend=hf: loop (rlnb's lean KV-cache loop, sampler.py) | generate "
        "(transformers' model.generate); the same tokens for a seed, loop is faster.")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature; 1.0 = on-policy.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling; 1.0 disables.")
    top_k: int | None = Field(None, ge=1, description="Top-k sampling; None disables.")
    max_new_tokens: int = Field(8, ge=1, description="Response budget; longer = truncated.")
    fill_context: bool = Field(
        False, description="NeMo-RL's budget: each response may fill what its own prompt leaves "
        "of policy.max_total_sequence_length (max_new_tokens, then up to that length, caps it), "
        "and a prompt may take all but one token of it. false: every response gets "
        "max_new_tokens and prompts the rest.")
    stop_strings: list[str] | None = Field(None, description="Also end a response at these.")
    stop_token_ids: list[int] | None = Field(
        None, description="Also end a response at these token ids (kept, as EOS is).")
    vllm: VLLMConfig = Field(default_factory=VLLMConfig, description="backend=vllm's engine.")

    @cross_field_rule
    def _known_backend(self) -> GenerationConfig:
        choose(GENERATION_BACKENDS, self.backend, "generation backend (policy.generation.backend)")
        choose(dict.fromkeys(("loop", "generate")), self.sampler,
               "sampler (policy.generation.sampler)")
        if self.backend != "hf" and self.sampler != "loop":
            raise ValueError(f"policy.generation.sampler={self.sampler!r} is for backend=hf, not "
                             f"{self.backend!r} (it would be ignored)")
        if self.backend != "vllm" and self.vllm != VLLMConfig():
            raise ValueError(f"vllm.* settings are for backend=vllm, not {self.backend!r} (they "
                             "would be ignored)")
        return self


def make_generation_backend(model, tokenizer, config: GenerationConfig, max_prompt_length=None
                            ) -> GenerationBackend:
    """Build the backend named by ``config.backend`` (see ``GENERATION_BACKENDS``)."""
    cls = choose(
        GENERATION_BACKENDS, config.backend, "generation backend (policy.generation.backend)"
    )
    return cls(model, tokenizer, config, max_prompt_length)


def register_generation_backend(name: str, cls: type[GenerationBackend], *,
                                replace: bool = False) -> None:
    """Make ``policy.generation.backend: <name>`` build ``cls(model, tokenizer, config,
    max_prompt_length)`` (a ``GenerationBackend`` subclass). A name another backend holds is
    refused unless ``replace`` (``rlnb.registry.claim``)."""
    if not (isinstance(cls, type) and issubclass(cls, GenerationBackend)):
        raise TypeError(f"a generation backend is a GenerationBackend subclass, got {cls!r}")
    claim(GENERATION_BACKENDS, "generation backend", name, cls, replace=replace)


# the registry: every list of backends (the config's check, the log-prob decision) reads it
GENERATION_BACKENDS: dict[str, type[GenerationBackend]] = {
    "hf": HFGenerationBackend,
    "vllm": VLLMGenerationBackend,
}
