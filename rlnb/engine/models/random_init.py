"""A real architecture at its real size with random weights (``policy.model_name: random``).

    Qwen3ForCausalLM(Qwen3Config(**policy.random_init)),  weights ~ the model's own init

For checks that need a model of the size a GPU run trains (memory, speed, the plumbing at real
shapes) where nothing can be downloaded. The defaults are Qwen3-0.6B's shape, as its hub
``config.json`` gives it (https://huggingface.co/Qwen/Qwen3-0.6B): 596,049,920 parameters.

Implementation choices:
1) Qwen3 (``transformers.Qwen3ForCausalLM``): the architecture of the kit's real-size recipe
   (``configs/qwen3_0.6b.yaml``). The shape is typed fields (``RandomInitConfig``), so a smaller
   model of the same architecture is a few overrides (the tests train a 2-layer, 64-wide one).
2) The tokenizer is the embedded character tokenizer (``tiny.py``) padded to the model's
   ``vocab_size`` with filler tokens ``<unused_i>`` that no text encodes to. The model keeps the
   shape's full vocabulary (151,936 rows of embedding and of logits: what dominates the
   log-prob passes' memory at this size), and the sampler still draws over every id: each one is
   a token the tokenizer knows and decodes (a filler decodes to its own name). No logit is
   masked, so generation, log-probs and the loss run exactly the code a real model runs.
3) The tokenizer carries the tiny model's chat template (``TINY_CHAT_TEMPLATE``), so a recipe
   written for a real model with ``policy.chat_template: true`` runs on it unchanged.
4) Weights are drawn by the model's own initialiser on an explicit seed, directly in the
   policy's dtype (no float32 copy of a 0.6 B model on the way).
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlnb.config import Config, cross_field_rule

# Qwen3-0.6B's config.json (https://huggingface.co/Qwen/Qwen3-0.6B/blob/main/config.json)
QWEN3_0_6B_MAX_POSITIONS = 40960


class RandomInitConfig(Config):
    """``policy.random_init``: the shape of the randomly initialised Qwen3 that
    ``policy.model_name: random`` builds (defaults: Qwen3-0.6B's)."""

    hidden_size: int = Field(1024, ge=8, description="Width (Qwen3-0.6B: 1024).")
    num_hidden_layers: int = Field(28, ge=1, description="Transformer blocks (Qwen3-0.6B: 28).")
    num_attention_heads: int = Field(16, ge=1, description="Query heads (Qwen3-0.6B: 16).")
    num_key_value_heads: int = Field(
        8, ge=1, description="Key/value heads, grouped-query attention (Qwen3-0.6B: 8).")
    head_dim: int = Field(128, ge=2, description="Width of one head (Qwen3-0.6B: 128; Qwen3 "
                          "does not tie it to hidden_size / heads).")
    intermediate_size: int = Field(3072, ge=1, description="SwiGLU MLP width (Qwen3-0.6B: 3072).")
    vocab_size: int = Field(
        151936, ge=1, description="Vocabulary rows of the embedding and the logits (Qwen3: "
        "151936); the character tokenizer is padded to it (choice 2).")
    tie_word_embeddings: bool = Field(
        True, description="The output layer shares the input embedding (Qwen3-0.6B: true).")
    rope_theta: float = Field(1e6, gt=0, description="RoPE base (Qwen3: 1e6).")
    rms_norm_eps: float = Field(1e-6, gt=0, description="RMSNorm epsilon (Qwen3: 1e-6).")

    @cross_field_rule
    def _heads_group(self) -> RandomInitConfig:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(f"num_attention_heads ({self.num_attention_heads}) must be a "
                             f"multiple of num_key_value_heads ({self.num_key_value_heads})")
        return self

    def hf_config(self, max_positions: int, *, pad_token_id: int = 0, bos_token_id: int = 2,
                  eos_token_id: int = 3):
        """The ``transformers.Qwen3Config`` of this shape (special ids: the character
        tokenizer's)."""
        from transformers import Qwen3Config

        return Qwen3Config(
            vocab_size=self.vocab_size, hidden_size=self.hidden_size,
            intermediate_size=self.intermediate_size, num_hidden_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            num_key_value_heads=self.num_key_value_heads, head_dim=self.head_dim,
            max_position_embeddings=max(QWEN3_0_6B_MAX_POSITIONS, max_positions),
            rope_theta=self.rope_theta, rms_norm_eps=self.rms_norm_eps,
            tie_word_embeddings=self.tie_word_embeddings, pad_token_id=pad_token_id,
            bos_token_id=bos_token_id, eos_token_id=eos_token_id)


def build_random_model(cfg: RandomInitConfig, *, dtype: torch.dtype, max_positions: int,
                       seed: int = 0):
    """``(model, tokenizer)``: a Qwen3 of ``cfg``'s shape with random weights in ``dtype``
    (choice 4), and the character tokenizer padded to its vocabulary (choice 2)."""
    from transformers import AutoModelForCausalLM

    from rlnb.engine.models.tiny import build_char_tokenizer

    tokenizer = build_char_tokenizer(chat_template=True, vocab_size=cfg.vocab_size)
    hf = cfg.hf_config(max_positions, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(hf, dtype=dtype)
    return model, tokenizer
