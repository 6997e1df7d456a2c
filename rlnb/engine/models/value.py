"""The value model (PPO's critic): the policy's transformer body with a scalar head per token.

    V_t = w · h_{t-1} + b,   V_0 = 0      h = the body's last hidden state          [B, S]

Implementation choices (docs/algorithms.md#value-loss):
1) Body + linear head, not ``AutoModelForTokenClassification``: the body is the policy model's
   own ``base_model`` (the causal LM without its output layer), so any Hugging Face causal LM
   the policy accepts has a critic, whether or not its architecture ships a token-classification
   class; nothing here is Llama-specific. A model whose ``base_model`` is itself (no separate
   body) cannot be split, and is refused naming the ``value`` section.
2) Initialised from the policy's weights (NeMo-RL starts the value model from the policy's
   checkpoint; a LoRA policy's merged weights, in a plain body the critic trains in full);
   ``value.init_from_policy: false`` builds the same architecture from the policy's config
   with fresh, seeded weights. The head starts at zero, so the first values are all 0
   and the critic's first update moves only the head.
3) Values use the stored layout with NeMo-RL's right shift: the head output at position t-1 is
   the value of the state *before* token t is emitted, so ``V[:, t]`` lines up with token t and
   ``V[:, 0] = 0`` (``rlnb.algorithms.gae.shift_values``).
4) Training reuses ``Policy``'s plumbing unchanged (global batches of
   ``value.train_global_batch_size`` rows, micro-batches, counts summed over ranks, DDP, gradient
   clipping, NeMo-RL's metric averaging): ``ValueModel`` subclasses ``Policy`` and swaps the one
   forward that plumbing runs. Its own AdamW and warm-up schedule come from ``value.optimizer``.
"""

from __future__ import annotations

import torch
from pydantic import Field

from rlnb.algorithms.gae import shift_values
from rlnb.config import Config
from rlnb.engine.models.lora import merged_copy
from rlnb.engine.models.policy import Policy, position_ids_from_mask
from rlnb.engine.models.policy_config import OptimizerConfig


class ValueConfig(Config):
    """``value``: the critic and its optimizer (NeMo-RL's key names)."""

    model_name: str | None = Field(
        None, description="null or the policy's model_name: the critic is built from the policy.")
    init_from_policy: bool = Field(
        True, description="rlnb extra: copy the policy's weights into the body (false: fresh "
        "weights of the same architecture, seeded by the loop's seed).")
    train_global_batch_size: int = Field(256, ge=1, description="Rows per critic optimizer step.")
    train_micro_batch_size: int = Field(64, ge=1, description="Rows per forward/backward.")
    logprob_batch_size: int = Field(128, ge=1, description="Rows per value-inference forward.")
    max_grad_norm: float | None = Field(
        1.0, gt=0, description="Gradient clipping (max global norm); None disables.")
    optimizer: OptimizerConfig = Field(default_factory=OptimizerConfig)


def value_body(model: torch.nn.Module) -> tuple[torch.nn.Module, int]:
    """``(body, hidden size)`` of a causal LM: its ``base_model`` and the width its output layer
    reads. Raises ``ValueError`` naming the ``value`` section when the model cannot be split."""
    name = type(model).__name__
    body = getattr(model, "base_model", model)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if body is model or not isinstance(getattr(head, "weight", None), torch.Tensor):
        raise ValueError(
            f"value: cannot build a value model from the policy's {name}: it has no separate "
            "transformer body (base_model) and output layer to replace with a value head")
    return body, head.weight.shape[-1]  # lm_head.weight is [V, H]


class ValueHeadModel(torch.nn.Module):
    """A causal LM body and a linear head: ``forward`` gives the *unshifted* head output
    ``[B, S]`` in float32 (``ValueModel.forward_values`` shifts it)."""

    def __init__(self, body: torch.nn.Module, hidden_size: int):
        super().__init__()
        self.body = body
        ref = next(body.parameters())
        self.head = torch.nn.Linear(hidden_size, 1, device=ref.device, dtype=ref.dtype)
        torch.nn.init.zeros_(self.head.weight)  # choice 2: V = 0 everywhere at the start
        torch.nn.init.zeros_(self.head.bias)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.body.get_input_embeddings()

    def forward(self, input_ids, attention_mask, position_ids) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask,
                           position_ids=position_ids, use_cache=False).last_hidden_state
        return self.head(hidden).squeeze(-1).float()  # [B, S]


class ValueModel(Policy):
    """The critic: ``values`` (no gradient) and ``optimizer_step`` (one pass of the value loss).

    Args:
        cfg: the ``value`` section.
        policy: the policy to take the body (and, by default, its weights) from.
        seed: seeds a fresh body when ``cfg.init_from_policy`` is false.
        dist: the trainer's ``Distributed`` (DDP under accelerate, like the policy).
    """

    def __init__(self, cfg: ValueConfig, policy: Policy, *, seed: int = 0, dist=None):
        body, hidden = value_body(policy.model)
        if cfg.init_from_policy:
            # a LoRA policy's body: its merged weights, a plain module the critic trains in full
            body = merged_copy(body)
        else:
            from transformers import AutoModel

            with torch.random.fork_rng(devices=[]):
                # a seed of its own: with the policy's, an untrained policy's body would come out
                torch.manual_seed(seed + 7919)
                body = AutoModel.from_config(policy.model.config)
            ref = next(policy.model.parameters())
            body = body.to(device=ref.device, dtype=ref.dtype)
        body.requires_grad_(True)
        super().__init__(cfg, model=ValueHeadModel(body, hidden), tokenizer=policy.tokenizer,
                         dist=dist or policy.dist)

    def forward_values(self, model, input_ids, attention_mask) -> torch.Tensor:
        """``[B, S]`` right-shifted values (V_t = head output at t-1, V_0 = 0), float32, with
        gradient if enabled."""
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    position_ids=position_ids_from_mask(attention_mask))  # [B, S]
        return shift_values(out)

    # Trap: ``Policy.optimizer_step`` and ``Policy.logprobs`` run ``forward_logprobs``; for the
    # critic that forward gives values (choice 4).
    forward_logprobs = forward_values

    def values(self, input_ids, attention_mask) -> torch.Tensor:
        """``[B, S]`` values of ``input_ids`` (no gradient, micro-batches of
        ``value.logprob_batch_size`` rows): ``V[:, t]`` is the value before token t."""
        return Policy.logprobs(self, input_ids, attention_mask)

    def logprobs(self, *args, **kwargs):
        raise TypeError("a value model has no log-probs; use values()")

    def optimizer_step(self, data, loss_fn, *, dry_run: bool = False) -> dict[str, float]:
        """One optimizer step per global batch of the value loss ``loss_fn(values, data, N_seq,
        N_tok)`` (``MseValueLossFn``); ``data`` holds ``returns`` and the rollout's ``values``
        besides the masks. Returns the loss metrics, ``grad_norm``, ``lr`` and the counts."""
        return super().optimizer_step(data, _OnValues(loss_fn), dry_run=dry_run)


class _OnValues:
    """Adapts a value loss to the call ``Policy.optimizer_step`` makes, which drops index 0 of
    the forward's output (``[:, 1:]``, meant for log-probs): put the V_0 = 0 column back."""

    def __init__(self, loss_fn):
        self.loss_fn = loss_fn

    def from_logprobs(self, values_tail, data, global_valid_seqs, global_valid_toks):
        values = torch.nn.functional.pad(values_tail, (1, 0))  # [B, S], V_0 = 0 (the shift)
        return self.loss_fn(values, data, global_valid_seqs, global_valid_toks)
