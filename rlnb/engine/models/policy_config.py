"""The policy's config: the model to train (``policy``), the embedded tiny model's shape
(``policy.tiny``) and AdamW with its schedule (``policy.optimizer``), NeMo-RL's key names.

    PolicyConfig(model_name="tiny", train_global_batch_size=128, optimizer={"lr": 3e-4})

What each key does is the ``Policy``'s (``policy.py``); the rules between keys are validators
here (a width the heads divide, room for a prompt, a device torch sees), so a bad value is
refused when the config loads, naming its dotted key.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field

from rlnb.config import Config, cross_field_rule
from rlnb.engine.models.compile_config import CompileConfig, check_compile_applies
from rlnb.engine.models.generation import GenerationConfig
from rlnb.engine.models.lora import LoraConfig
from rlnb.engine.models.random_init import RandomInitConfig
from rlnb.engine.models.schedule import lr_factor


class TinyModelConfig(Config):
    """``policy.tiny``: the embedded character-level Llama (``policy.model_name: tiny``)."""

    hidden_size: int = Field(128, ge=8, description="Width (128 -> about 0.3 M parameters).")
    num_hidden_layers: int = Field(2, ge=1, description="Transformer blocks.")
    num_attention_heads: int = Field(4, ge=1, description="Attention heads.")
    intermediate_size: int | None = Field(None, description="MLP width (default 2x hidden).")
    chat_template: bool = Field(False, description=(
        "Give the character tokenizer a chat template (U:/A:/T: lines, tool calls)."))

    @cross_field_rule
    def _heads_divide_width(self) -> TinyModelConfig:
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(
                f"hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
                f"({self.num_attention_heads})")
        return self


class OptimizerConfig(Config):
    """``policy.optimizer``: AdamW."""

    lr: float = Field(5e-4, gt=0, description="Learning rate.")
    weight_decay: float = Field(0.0, ge=0, description="Decoupled weight decay.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="Adam betas.")
    eps: float = Field(1e-8, gt=0, description="Adam epsilon.")
    fused: bool = Field(
        False, description="torch's fused AdamW kernel instead of the default multi-tensor "
        "(foreach) form: fewer kernels, numbers equal to float rounding (about 1e-8 in float32), "
        "not bit for bit.")
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in optimizer steps.")
    warmup_start_factor: float | None = Field(
        None, ge=0, le=1, description="None: the rate at step s of the warm-up is lr·(s+1)/W. "
        "A factor f: torch's LinearLR(start_factor=f, end_factor=1), lr·(f + (1-f)·s/W), as "
        "NeMo-RL's configs schedule it (f = 0.1; Megatron's lr_warmup_init / lr, 0 allowed).")
    decay_steps: int = Field(
        0, ge=0, description="Linear decay after the warm-up: over this many steps the rate "
        "goes from lr to lr·decay_end_factor, then holds (torch's LinearLR(1, "
        "decay_end_factor) after a milestone at warmup_steps, as NeMo-RL's schedulers list it); "
        "0: constant after the warm-up.")
    decay_end_factor: float = Field(
        0.0, ge=0, le=1, description="The factor on lr at the end of the decay (with "
        "decay_steps > 0).")
    warmup_counts: Literal["optimizer_steps", "training_steps"] = Field(
        "optimizer_steps", description="What a warm-up step is: an optimizer step (one per "
        "global batch), or one pass over a step's batch (NeMo-RL's cadence: its workers tick "
        "the scheduler once per train() call, however many global batches it holds).")

    @cross_field_rule
    def _factor_needs_steps(self) -> OptimizerConfig:
        if self.warmup_start_factor is not None and not self.warmup_steps:
            raise ValueError("warmup_start_factor needs warmup_steps > 0 (it would be ignored)")
        if self.warmup_counts != "optimizer_steps" and not (self.warmup_steps
                                                            or self.decay_steps):
            raise ValueError("warmup_counts needs warmup_steps or decay_steps > 0 (it would be "
                             "ignored)")
        if self.decay_end_factor and not self.decay_steps:
            raise ValueError("decay_end_factor needs decay_steps > 0 (it would be ignored)")
        return self

    def lr_factor(self, step: int) -> float:
        """The multiplier of ``lr`` at scheduler step ``step`` (0-based): ``schedule.lr_factor``."""
        return lr_factor(self, step)


class PolicyConfig(Config):
    """``policy``: the model, its batch sizes and optimizer (NeMo-RL key names)."""

    model_name: str = Field("tiny", description="'tiny', 'random' (policy.random_init's "
                            "architecture with random weights), a hub id, or a local model "
                            "folder.")
    tokenizer_name: str | None = Field(None, description="Defaults to model_name.")
    chat_template: bool = Field(False, description="Wrap prompts in the tokenizer's template.")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig)
    random_init: RandomInitConfig = Field(
        default_factory=RandomInitConfig, description="The shape policy.model_name: random "
        "builds (default: Qwen3-0.6B's).")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="Where the model lives in one process: auto (CUDA when torch sees "
        "a GPU, else the CPU), cpu or cuda. Under a launcher, accelerate places it.")
    precision: Literal["float32", "bfloat16"] = Field(
        "float32", description="Model weights' dtype (log-probs and the loss are float32).")
    train_global_batch_size: int = Field(256, ge=1, description="Rows per optimizer step.")
    train_micro_batch_size: int = Field(64, ge=1, description="Rows per forward/backward.")
    logprob_batch_size: int = Field(128, ge=1, description="Rows per log-prob forward.")
    max_total_sequence_length: int = Field(64, ge=2, description="Prompt + response tokens.")
    max_grad_norm: float | None = Field(
        1.0, gt=0, description="Gradient clipping (max global norm); None disables.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)
    generation: GenerationConfig = Field(default_factory=GenerationConfig)
    lora: LoraConfig = Field(default_factory=LoraConfig)
    compile: CompileConfig = Field(default_factory=CompileConfig)
    attn_implementation: Literal["eager", "sdpa"] | None = Field(
        None, description="The attention kernel of the policy's forward passes (transformers' "
        "attn_implementation): None keeps the model's own (SDPA where torch has it); eager "
        "(matmul + softmax) is faster on a CPU at short rows (configs/tiny.yaml). Equal to "
        "float rounding on every token a log-prob is read for.")
    share_prompt_prefix: bool = Field(
        True, description="Forward each distinct prompt once in the update (and in the "
        "policy's and reference's log-prob passes), its rows reading its KV cache: equal to "
        "the full pass to float rounding. Not under a launcher, nor for models with dropout; "
        "with policy.compile the update keeps its compiled full pass (shared_prefix.py).")

    @cross_field_rule
    def _room_for_a_prompt(self) -> PolicyConfig:
        if self.model_name in ("tiny", "random") and self.tokenizer_name is not None:
            raise ValueError(f"tokenizer_name is for a hub or local model; the {self.model_name} "
                             "model has its own character tokenizer")
        if self.model_name == "tiny" and self.chat_template and not self.tiny.chat_template:
            raise ValueError("chat_template=true needs a tokenizer with a chat template; the "
                             "embedded tiny model's character tokenizer has one only with "
                             "policy.tiny.chat_template=true")
        if self.generation.fill_context:
            if self.generation.max_new_tokens > self.max_total_sequence_length:
                raise ValueError(
                    f"generation.max_new_tokens ({self.generation.max_new_tokens}) exceeds "
                    f"max_total_sequence_length ({self.max_total_sequence_length}) with "
                    "generation.fill_context=true (a response fills at most the whole context)")
        elif self.max_total_sequence_length <= self.generation.max_new_tokens:
            raise ValueError(
                f"max_total_sequence_length ({self.max_total_sequence_length}) must exceed "
                f"generation.max_new_tokens ({self.generation.max_new_tokens}): prompts get the "
                "difference")
        check_compile_applies(self.compile, self.generation.backend, self.generation.sampler)
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device=cuda, but this torch ({torch.__version__}, "
                             f"{'a CUDA' if torch.version.cuda else 'a CPU'} build) sees no CUDA "
                             "device: use auto or cpu")
        return self
