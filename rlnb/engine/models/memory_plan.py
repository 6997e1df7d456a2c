"""How much device memory each stage of a GRPO step needs, from the config, before any weight
loads (``rlnb preflight --memory``; the formulas and the measured error: docs/memory.md).

    peak(stage) = resident + what the stage adds                                      (bytes)
    resident    = N·b  (+ N·b reference) + N_t·b (gradients) + 2·N_t·b (AdamW's moments)

N parameters, N_t of them trained (all, or LoRA's adapters), b bytes per element of
``policy.precision``; V vocabulary, L layers, h width, q = heads·head_dim, k = kv heads·head_dim,
I the MLP width, T = ``max_total_sequence_length``, B = P·G rows per process.

Implementation choices:
1) The shape is read off the model built on the ``meta`` device from its config (``tiny``,
   ``random`` or a hub/local ``config.json``): parameter counts are exact for any architecture
   (tied weights once, LoRA's adapters as peft adds them), and nothing is allocated.
2) The kit keeps no float32 master copy: AdamW holds its two moments in the parameters' dtype
   and updates the bf16 weights in place. Gradients stay allocated from one update to the next
   (``zero_grad`` frees them at the start of the next update), so the plan is the steady state
   from the second step on: every stage carries gradients and moments.
3) generation (backend ``hf``, the ``loop`` sampler): the KV cache of B rows of T tokens,
   ``2·L·k·B·T·b``, one layer's extra copy while the cache grows, and a decode step's
   ``[B, V]`` temporaries (the logits in b and float32 copies, softmax); the prefill's
   ``[P, T, V]`` logits when they exceed it. ``sampler: generate`` also keeps every step's
   float32 logits (``R·B·V·4``).
4) log-probs (π_old unless reused from generation, π_ref when the KL penalty is on): one
   micro-batch of n = ``logprob_batch_size`` rows without gradient: the larger of a layer's
   transients and its ``[n, T, V]`` logits in b plus float32 copies (the cast, the scaled
   logits, and the workspace logsumexp allocates inside its kernel).
5) update: one micro-batch of m = ``train_micro_batch_size`` rows with the activations autograd
   saves per layer and token, counted op by op for a Llama/Qwen block with SDPA attention
   (no activation checkpointing: the kit has none), plus the ``[m, T, V]`` float32 logits and
   their gradients; LoRA trains N_t adapter parameters but the activations are the same.
6) Sizes are upper bounds where the run varies: every prompt is as long as the context allows
   and every response runs to ``max_new_tokens``.
7) With ``policy.share_prompt_prefix`` (``shared_prefix.py``) the update forwards each distinct
   prompt of a micro-batch once: at most min(P, m) prompts and m responses instead of m rows,
   plus each row's copy of its prompt's keys and values (``2·L·k·b`` per prompt token) and the
   responses' logits joined to their prompt's last (``m·R·V·b``).
8) With ``policy.attn_implementation: eager`` attention is a matmul, a softmax and a matmul, and
   the ``[rows, heads, queries, keys]`` weights are real tensors: the update saves the float32
   softmax (and its b-byte copy when b < 4) per layer, and a forward without gradient holds a
   layer's scores and softmax at once, in place of its MLP's transients. Per query-key pair of a
   row: heads·(4 + b·[b < 4]) saved, heads·8 transient. With grouped-query attention eager
   repeats each layer's keys and values to every head (``2·q·b`` per token): the update saves
   them, and a decode step holds one layer's. Shared prefixes pair each prompt with itself and
   each response with its whole row.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from rlnb.engine.models.lora import add_adapters
from rlnb.engine.models.shared_prefix import MIN_SAVING

GIB = 2**30


@dataclass(frozen=True)
class ModelShape:
    """What the plan reads of a model: exact counts (choice 1) and the layer shapes."""

    parameters: int  # every parameter once (tied weights once)
    trainable: int  # those with gradients: all, or LoRA's adapters
    vocab_size: int
    num_layers: int
    hidden_size: int
    q_width: int  # attention heads x head_dim
    kv_width: int  # key/value heads x head_dim
    intermediate_size: int
    qk_norm: bool = False  # RMSNorm on each head's q and k (Qwen3)
    heads: int = 1  # attention heads (eager attention's weights are per head, choice 8)

    @classmethod
    def of(cls, model: torch.nn.Module) -> ModelShape:
        c = model.config
        heads = c.num_attention_heads
        head_dim = getattr(c, "head_dim", None) or c.hidden_size // heads
        kv = getattr(c, "num_key_value_heads", None) or heads
        return cls(
            parameters=sum(p.numel() for p in model.parameters()),
            trainable=sum(p.numel() for p in model.parameters() if p.requires_grad),
            vocab_size=model.get_output_embeddings().weight.shape[0],
            num_layers=c.num_hidden_layers, hidden_size=c.hidden_size,
            q_width=heads * head_dim, kv_width=kv * head_dim,
            intermediate_size=c.intermediate_size,
            qk_norm=any(n.endswith(".q_norm") for n, _ in model.named_modules()),
            heads=heads)


def model_shape(policy) -> ModelShape:
    """The ``ModelShape`` of ``policy`` (a ``PolicyConfig``), built on the meta device from its
    config alone (choice 1): no weights are read or allocated."""
    from transformers import AutoConfig, AutoModelForCausalLM

    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[policy.precision]
    if policy.model_name == "tiny":
        from rlnb.engine.models.tiny import CHARACTERS, SPECIAL_TOKENS, build_tiny_llama

        t = policy.tiny
        with torch.device("meta"):
            model = build_tiny_llama(
                len(SPECIAL_TOKENS) + len(CHARACTERS), hidden_size=t.hidden_size,
                num_hidden_layers=t.num_hidden_layers, num_attention_heads=t.num_attention_heads,
                intermediate_size=t.intermediate_size)
    else:
        if policy.model_name == "random":
            hf = policy.random_init.hf_config(policy.max_total_sequence_length)
        else:
            try:
                hf = AutoConfig.from_pretrained(policy.model_name)
            except (OSError, ValueError) as err:
                raise ValueError(
                    f"policy.model_name: cannot read the config of {policy.model_name!r} "
                    f"({type(err).__name__}: {str(err).splitlines()[0]}); the plan needs its "
                    "config.json (a local folder, or the hub or its cache); "
                    "policy.model_name=random plans Qwen3-0.6B's shape offline") from None
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf, dtype=dtype)
    with torch.device("meta"):
        add_adapters(model, policy.lora)  # (if enabled: the adapters' exact count)
    return ModelShape.of(model)


@dataclass
class MemoryPlan:
    """Bytes per term and per stage (``stages``: generation, logprobs, update)."""

    shape: ModelShape
    dtype_bytes: int
    terms: dict[str, int] = field(default_factory=dict)
    stages: dict[str, int] = field(default_factory=dict)

    def gib(self, stage: str) -> float:
        return self.stages[stage] / GIB

    def verdicts(self, device_bytes: int | None) -> dict[str, str]:
        """Per stage: ``fits``, ``tight`` (above 90 % of the device: the caching allocator's
        fragmentation may tip it) or ``out of memory``; without a device, ``no GPU: plan only``."""
        if device_bytes is None:
            return dict.fromkeys(self.stages, "no GPU: plan only")
        return {s: "fits" if b <= 0.9 * device_bytes else "tight" if b <= device_bytes
                else "out of memory" for s, b in self.stages.items()}

    def table(self, device_bytes: int | None = None) -> str:
        """The stages, their estimates in GiB and the verdicts, as printed by the CLI."""
        verdict = self.verdicts(device_bytes)
        rows = [f"{'stage':<12} {'estimate (GiB)':>14}  verdict"]
        rows += [f"{s:<12} {self.gib(s):>14.2f}  {verdict[s]}" for s in self.stages]
        return "\n".join(rows)


def layer_activation_bytes(shape: ModelShape, b: int) -> int:
    """Bytes autograd saves per token in one decoder layer (choice 5, docs/memory.md): each
    RMSNorm its float32 input and b-byte output, (4 + b)·h twice (Qwen3's q/k norms the same
    over q and k); RoPE q, k and their rotated halves, SDPA the rotated q, k, v and its output,
    o_proj its input: 5b·q + 4b·k; the SwiGLU MLP gate, up, silu(gate) and their product: 4b·I."""
    h, q, kv, i = shape.hidden_size, shape.q_width, shape.kv_width, shape.intermediate_size
    per_token = 2 * (4 + b) * h + 5 * b * q + 4 * b * kv + 4 * b * i
    if shape.qk_norm:
        per_token += (4 + b) * (q + kv)
    return per_token


def forward_transient_bytes(shape: ModelShape, b: int) -> int:
    """Bytes per token a forward without gradient holds at once inside a layer: the MLP's
    silu(gate), up and their product (3b·I) beside the embeddings, the residual stream, the
    normed input and RMSNorm's float32 temporaries (6b·h + 8·h)."""
    return 3 * b * shape.intermediate_size + (6 * b + 8) * shape.hidden_size


def plan_memory(policy, *, prompts: int, generations: int, reference: bool,
                reuse_generation_logprobs: bool, shape: ModelShape | None = None,
                prompt_length: int | None = None) -> MemoryPlan:
    """The memory plan of one GRPO step of ``policy`` (a ``PolicyConfig``) on one process.

    Args:
        prompts, generations: P and G of one process (B = P·G rows are generated).
        reference: the KL penalty is on (π_ref log-probs; a reference copy unless LoRA).
        reuse_generation_logprobs: π_old comes from generation (no policy log-prob pass).
        shape: the model's, when it is built already (default: from the config, choice 1).
        prompt_length: the prompts' token width (default: all that the context leaves them,
            choice 6); responses run to ``max_new_tokens``.
    """
    gen = policy.generation
    if gen.backend != "hf":
        raise ValueError(f"the memory plan covers policy.generation.backend=hf, not "
                         f"{gen.backend!r} (vLLM reserves its own share of the device: "
                         "policy.generation.vllm.gpu_memory_utilization)")
    shape = shape or model_shape(policy)
    b = 4 if policy.precision == "float32" else 2
    P, B, V = prompts, prompts * generations, shape.vocab_size
    longest = policy.max_total_sequence_length
    if prompt_length is None:
        prompt_length = longest - 1 if gen.fill_context else longest - gen.max_new_tokens
    T = min(longest, prompt_length + gen.max_new_tokens)  # a row's tokens, prompt + response
    lora = policy.lora.enabled
    t = {
        "weights": shape.parameters * b,
        "reference": shape.parameters * b if reference and not lora else 0,
        "gradients": shape.trainable * b,
        "optimizer": 2 * shape.trainable * b,  # choice 2: the moments in the weights' dtype
    }
    resident = sum(t.values())
    kv_per_token = 2 * shape.num_layers * shape.kv_width * b
    t["kv_cache"] = kv_per_token * B * T
    # while the cache grows, each layer's key (then value) exists twice for one torch.cat
    t["kv_growth"] = t["kv_cache"] // (2 * shape.num_layers)
    # a decode step: the last and the new [B, V] logits, the float32 z and softmax (choice 3)
    t["decode"] = B * V * (2 * b + 4 * 2)
    if gen.sampler == "generate":  # output_logits: every step's [B, V] in float32
        t["decode"] += gen.max_new_tokens * B * V * 4
    # the prefill: P distinct prompts, their cache repeated to B rows, all their logits
    prefill = kv_per_token * (P + B) * prompt_length + P * prompt_length * V * b
    n = min(policy.logprob_batch_size, B)
    passes = int(not reuse_generation_logprobs) + int(reference)
    # the logits, their float32 cast (a copy when b < 4) and scaled copy (τ != 1), and the
    # [n, T, V] float32 workspace logsumexp allocates inside its kernel, exp(z - max)
    copies = int(b < 4) + int(gen.temperature != 1.0)
    eager = getattr(policy, "attn_implementation", None) == "eager"  # choice 8
    gqa = eager and shape.kv_width < shape.q_width
    if gqa:  # a decode step's keys and values repeated to every head, one layer at a time
        t["decode"] += 2 * B * T * shape.q_width * b
    t["logprob_forward"] = n * T * forward_transient_bytes(shape, b) if passes else 0
    if eager and passes:  # one layer's [n, heads, T, T] scores and softmax, float32, in
        # place of the MLP's transients (they are not alive at once)
        t["logprob_forward"] = max(t["logprob_forward"], n * T * (
            (6 * b + 8) * shape.hidden_size + T * shape.heads * 8))
    t["logprob_logits"] = n * T * V * (b + 4 * copies) if passes else 0
    t["logsumexp_workspace"] = n * T * V * 4 if passes else 0
    m = min(policy.train_micro_batch_size, B)
    R = T - prompt_length  # a response's columns
    # choice 7: the shared-prefix pass forwards at most min(P, m) distinct prompts and m
    # responses, when that saves what it needs to (shared_prefix.MIN_SAVING)
    rows_forwarded = m * T
    shared = min(P, m) * prompt_length + m * R
    if getattr(policy, "share_prompt_prefix", False) and generations > 1 and 0 < R < T and \
            shared <= (1 - MIN_SAVING) * m * T:
        rows_forwarded = shared
    t["activations"] = rows_forwarded * shape.num_layers * layer_activation_bytes(shape, b)
    # the logits, the float32 z logsumexp saves (a copy when b < 4 or τ != 1), and in
    # backward logsumexp's, gather's and their summed gradient
    saved_z = int(b < 4 or gen.temperature != 1.0)
    t["update_logits"] = rows_forwarded * V * (b + 4 * (3 + saved_z))
    pairs = m * T * T  # query-key pairs of the update's rows (choice 8)
    if rows_forwarded < m * T:
        pairs = min(P, m) * prompt_length ** 2 + m * R * T
        # every row's copy of its prompt's keys and values (the cache the responses attend
        # to), and the responses' logits joined to the prompts' last ones
        t["activations"] += m * prompt_length * kv_per_token
        t["update_logits"] += m * R * V * b
    if eager:  # the softmax autograd saves per layer, float32 (and its copy in b when b < 4)
        t["activations"] += pairs * shape.num_layers * shape.heads * (4 + (b if b < 4 else 0))
        if gqa:  # the matmuls save the keys and values repeated to every head
            t["activations"] += m * T * shape.num_layers * 2 * b * shape.q_width
    # AdamW's foreach step: a temporary the size of the second moment (sqrt), after backward
    t["optimizer_step"] = shape.trainable * b
    stages = {
        "generation": resident + max(t["kv_cache"] + t["kv_growth"] + t["decode"], prefill),
        "logprobs": resident + max(t["logprob_forward"],
                                   t["logprob_logits"] + t["logsumexp_workspace"]),
        "update": resident + max(t["activations"] + t["update_logits"], t["optimizer_step"]),
    }
    return MemoryPlan(shape, b, t, {k: int(math.ceil(v)) for k, v in stages.items()})
