"""Where a policy's model and tokenizer come from (``policy.model_name``): ``"tiny"`` builds
the embedded character-level Llama (``tiny.py``) from ``policy.tiny``; ``"random"`` a Qwen3 of
``policy.random_init``'s shape with random weights (``random_init.py``); anything else is a Hugging
Face causal LM by hub id or local path. A local path loads offline; a missing path or an
unreachable hub id fails with the config key in the message. The tokenizer pads on the left
(its EOS as the pad token when it has none), as generation needs. ``policy.attn_implementation``,
when set, switches the model's attention kernel (``set_attention``).

``Policy`` (``policy.py``) calls this once, when it is built; nothing here runs during a step.
"""

from __future__ import annotations

from pathlib import Path

import torch

from rlnb.engine.models.lora import add_adapters
from rlnb.engine.models.random_init import build_random_model
from rlnb.engine.models.tiny import build_char_tokenizer, build_tiny_llama


def set_attention(model, name: str | None):
    """Switch ``model``'s attention kernel to transformers' ``name`` (``"eager"``, ``"sdpa"``);
    ``None`` leaves it as loaded. Older transformers read the config's field at each forward."""
    if name is None:
        return model
    if not hasattr(model, "set_attn_implementation"):
        model.config._attn_implementation = name
        return model
    try:
        model.set_attn_implementation(name)
    except (ValueError, ImportError) as err:  # a model without that kernel: one line, the key
        raise ValueError(f"policy.attn_implementation={name}: {type(model).__name__} cannot run "
                         f"it ({str(err).splitlines()[0]})") from None
    return model


def load_model_and_tokenizer(cfg, seed: int = 0):
    """``(model, tokenizer)`` for ``cfg`` (a ``PolicyConfig``): the tiny model built, or a Hugging
    Face causal LM and its tokenizer loaded (offline for paths), LoRA adapters added if enabled,
    with ``policy.attn_implementation``'s attention kernel when it names one."""
    model, tokenizer = load_base(cfg, seed)
    model = set_attention(model, getattr(cfg, "attn_implementation", None))
    return add_adapters(model, cfg.lora, seed=seed), tokenizer  # (if enabled)


def load_base(cfg, seed: int):
    """``(model, tokenizer)`` as ``policy.model_name`` names them, before adapters."""
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[cfg.precision]
    if cfg.model_name == "tiny":
        t = cfg.tiny
        tokenizer = build_char_tokenizer(t.chat_template)
        model = build_tiny_llama(
            len(tokenizer),
            hidden_size=t.hidden_size,
            num_hidden_layers=t.num_hidden_layers,
            num_attention_heads=t.num_attention_heads,
            intermediate_size=t.intermediate_size,
            max_position_embeddings=max(256, cfg.max_total_sequence_length),
            seed=seed,
        )
        return model.to(dtype), tokenizer
    if cfg.model_name == "random":
        model, tokenizer = build_random_model(
            cfg.random_init, dtype=dtype, max_positions=cfg.max_total_sequence_length, seed=seed)
        return model, tokenizer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    name = cfg.model_name
    looks_local = name.startswith((".", "/", "~")) or Path(name).expanduser().exists()
    if looks_local and Path(name).expanduser().is_file():
        raise ValueError(f"policy.model_name: {name!r} is a file, not a model folder (the folder "
                         "holding config.json and the weights)")
    if looks_local and not Path(name).expanduser().is_dir():
        raise ValueError(f"policy.model_name: no model folder at {name!r}")
    try:
        tokenizer = AutoTokenizer.from_pretrained(cfg.tokenizer_name or name)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, **cfg.lora.qlora(dtype))
    except (OSError, ValueError) as err:
        raise ValueError(
            f"policy.model_name: cannot load {name!r} ({type(err).__name__}: {err}). A hub id "
            "needs network access or a populated Hugging Face cache; a local path must hold "
            "config.json and the weights."
        ) from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token  # decoder-only models often ship without one
    tokenizer.padding_side = "left"
    return model, tokenizer
