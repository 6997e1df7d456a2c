"""The embedded default model: a character-level tokenizer and a tiny Llama, built locally.

No hub, no download: the tokenizer is a WordLevel vocabulary over printable ASCII with
``<pad> <unk> <s> </s>`` and a pre-tokenizer that splits every character, and the model is a
``LlamaForCausalLM`` from a small ``LlamaConfig``. Both save and reload with the usual
``save_pretrained`` / ``from_pretrained`` and work with ``HF_HUB_OFFLINE=1``.

Implementation choices:
1) Llama rather than Qwen2: with ``model_type: qwen2``, ``AutoTokenizer`` forces the Qwen2
   tokenizer class, which drops spaces from a character-level vocabulary.
2) Special tokens come first (pad = 0) so padding embeddings never collide with text.
3) Weights are initialised from an explicit seed, so the same seed gives the same model.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast
# transformers and tokenizers are imported where a model is built, not with the module: loading
# a config (which every `rlnb` command does first, to refuse bad input) then costs no transformers
# import (several seconds)

SPECIAL_TOKENS = ["<pad>", "<unk>", "<s>", "</s>"]
CHARACTERS = [c for c in string.printable if c not in "\t\r\x0b\x0c"]  # printable + "\n"
# the chat format of ``policy.tiny.chat_template``: ``U:``/``A:``/``T:``/``S:`` lines, an
# assistant turn closed by ``</s>`` (the EOS the model stops on), tool calls in the
# ``<tool_call>`` JSON convention (agents/tool_calls.py), compact so a character model has few
# tokens to write
TINY_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m.role == 'system' %}S:{{ m.content }}\n"
    "{% elif m.role == 'user' %}U:{{ m.content }}\n"
    "{% elif m.role == 'assistant' %}A:{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{\"name\":\"{{ c.function.name }}\","
    "\"arguments\":{% if c.function.arguments is string %}{{ c.function.arguments }}"
    "{% else %}{{ c.function.arguments | tojson(separators=(',', ':')) }}{% endif %}}"
    "</tool_call>{% endfor %}{{ eos_token }}\n"
    "{% elif m.role == 'tool' %}T:{{ m.content }}\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
)


def build_char_tokenizer(chat_template: bool = False, vocab_size: int | None = None
                         ) -> PreTrainedTokenizerFast:
    """A character-level fast tokenizer: one token per printable ASCII character; with
    ``chat_template``, ``TINY_CHAT_TEMPLATE`` as its chat template. ``vocab_size`` pads the
    vocabulary with filler tokens ``<unused_i>`` up to that many ids: no text encodes to them
    (every character has its own id), but each id a model samples decodes
    (``random_init.py``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tokens = SPECIAL_TOKENS + CHARACTERS
    if vocab_size is not None and vocab_size < len(tokens):
        raise ValueError(f"vocab_size ({vocab_size}) is below the character tokenizer's "
                         f"{len(tokens)} tokens")
    tokens += [f"<unused_{i}>" for i in range(len(tokens), vocab_size or len(tokens))]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    core.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        unk_token="<unk>",
        bos_token="<s>",
        eos_token="</s>",
        padding_side="left",  # generation appends on the right
    )
    if chat_template:
        tokenizer.chat_template = TINY_CHAT_TEMPLATE
    return tokenizer


def build_tiny_llama(
    vocab_size: int,
    *,
    hidden_size: int = 128,
    num_hidden_layers: int = 2,
    num_attention_heads: int = 4,
    intermediate_size: int | None = None,
    max_position_embeddings: int = 256,
    seed: int = 0,
    pad_token_id: int = 0,
    bos_token_id: int = 2,
    eos_token_id: int = 3,
) -> LlamaForCausalLM:
    """A freshly initialised small Llama (about 0.3 M parameters at the defaults)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_attention_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=pad_token_id,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    return model


def save_tiny(model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, path: str | Path):
    """Save model and tokenizer to ``path`` (loadable with ``from_pretrained``)."""
    path = Path(path)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
