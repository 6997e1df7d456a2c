"""The policy: a Hugging Face causal LM, its tokenizer, optimizer, and per-token log-probs.

    logprobs[b, t] = log π_θ(x_t | x_<t) / with logits scaled by 1/temperature      [B, S]

Implementation choices (docs/algorithms.md#masked-helpers-and-reductions):
1) Any causal LM by hub id or local path (``policy.model_name``); ``"tiny"`` builds the embedded
   character-level Llama (``tiny.py``), ``"random"`` a real architecture at its real size with
   random weights (``random_init.py``: Qwen3-0.6B's shape by default); all load in
   ``loading.py``.
2) Log-probs use the *stored* layout: ``[B, S]`` with index t = log-prob of token t and index 0
   = 0, computed in float32 from logits divided by the sampling temperature (so they match the
   generation log-probs), in micro-batches of ``logprob_batch_size`` without gradient.
3) Position ids come from the attention mask (cumulative count), as in generation, so rows with
   left padding see the same positions in both.
4) ``optimizer_step`` splits a batch into global batches of ``train_global_batch_size`` rows (one
   optimizer step each) and those into micro-batches; each micro-batch loss is normalised by the
   *global* valid token/sequence counts, so the accumulated gradient is exactly the
   full global batch's. Metrics are combined as NeMo-RL does: summed over micro-batches (``*_min`` /
   ``*_max`` by min / max), then averaged over global batches.
5) AdamW with linear warm-up then constant learning rate; gradient-norm clipping. AdamW runs
   its multi-tensor (``foreach``) form: the same numbers as the per-parameter loop, bit for bit,
   in a few kernels per step (``tests/engine/test_compile.py``); ``optimizer.fused`` takes the fused
   kernel (equal to float rounding, not bit for bit).
6) The reference policy is a frozen copy, made only when the KL penalty needs one. With LoRA
   adapters (``policy.lora``, ``lora.py``) only they train, and the reference is the same module
   with the adapters off.
7) ``policy.compile`` runs the update's forward + backward and the sampler's decode step under
   ``torch.compile`` (``compiled.py``, imported only then). The update's forward is chosen once,
   when the policy is built (``update_forward``): the compiled full pass, else ``forward_rows``
   (choice 9); a compiled update whose compiling failed runs ``forward_rows`` from then on,
   exactly as a policy built without ``policy.compile``.
8) ``policy.device``: the model (and the reference copy, the optimizer state) lives on the GPU
   when torch sees one (``auto``), or where it is told; batches stay on the CPU and each
   micro-batch moves to the model's device. Under a launcher, accelerate places it instead.
9) ``policy.share_prompt_prefix`` (on by default): the update's forward + backward, and the
   log-prob passes given the token mask, run each distinct prompt once and its rows' responses
   on its KV cache (``shared_prefix.py``): the same numbers to float rounding, about half the
   tokens of a GRPO micro-batch. Checked against the full pass once per model; off under a
   launcher and for models with dropout; under ``policy.compile`` the update keeps its
   compiled full pass.
10) ``policy.attn_implementation`` picks the attention kernel of every forward the policy's
   model runs (the update, log-probs, the HF sampler, the warm start): transformers' ``eager``
   (matmul + softmax) or ``sdpa``; unset, the model keeps its own. They agree to float
   rounding except on a left-padded row's pad positions, whose queries attend to nothing and
   whose outputs no log-prob reads. At the embedded recipe's rows (12 tokens) eager takes
   about 14 % off the update on a CPU (docs/guide.md#attention-kernel).
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable

import torch

from rlnb.algorithms.logprobs import token_logprobs
from rlnb.algorithms.reduction import combine_metrics, global_valid_counts, sum_partial_metrics
from rlnb.engine.models.loading import load_model_and_tokenizer
from rlnb.engine.models.lora import adapters_disabled, has_adapters
from rlnb.engine.models.policy_config import PolicyConfig
from rlnb.engine.models.schedule import lr_factor
from rlnb.engine.models.shared_prefix import (
    SharedPrefix,
    first_scored_column,
    shared_prefix_logprobs,
)
from rlnb.engine.runtime.distributed import Distributed


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, S]`` positions counting only attended tokens (left padding starts at 0)."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


def model_device(name: str) -> torch.device:
    """``policy.device`` (choice 8) as a torch device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Policy:
    """The trainable model with its optimizer; ``logprobs`` and ``optimizer_step`` are its verbs."""

    def __init__(
        self,
        cfg: PolicyConfig,
        *,
        seed: int = 0,
        need_reference: bool = False,
        model=None,
        tokenizer=None,
        dist: Distributed | None = None,
    ):
        self.config = cfg
        self.dist = dist or Distributed()
        if model is None:
            model, tokenizer = load_model_and_tokenizer(cfg, seed=seed)
        if self.dist.accelerator is None:  # choice 8 (a launcher's accelerate places it)
            model = model.to(model_device(getattr(cfg, "device", "auto")))
        self.model, self.tokenizer = model, tokenizer
        self.lora = has_adapters(model)  # LoRA adapters: then only they train (lora.py)
        opt = cfg.optimizer
        self.optimizer = torch.optim.AdamW(
            (p for p in model.parameters() if p.requires_grad),  # LoRA: the adapters alone
            lr=opt.lr,
            weight_decay=opt.weight_decay,
            betas=opt.betas,
            eps=opt.eps,
            **({"fused": True} if opt.fused else {"foreach": True}),  # choice 5
        )
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, functools.partial(lr_factor, opt))
        # LoRA: the reference is the model with its adapters off, never a copy
        self.reference_model = None if self.lora or not need_reference else self.make_reference()
        self.train_model = self.model  # what forward/backward runs through (DDP under accelerate)
        if self.dist.accelerator is not None:
            self.train_model, self.optimizer = self.dist.accelerator.prepare(
                self.model, self.optimizer
            )
            if self.reference_model is not None:  # prepare moved the policy, not the copy
                self.reference_model.to(self.device)
        # choice 9; the critic's section (value.py) has no such field: its forward is not this
        self.shared_prefix = SharedPrefix(getattr(cfg, "share_prompt_prefix", False), model)
        if self.dist.accelerator is not None:
            self.shared_prefix.turn_off("under a launcher (DDP takes one forward per backward)")
        self.compiled = None
        compile_cfg = getattr(cfg, "compile", None)  # the critic's section (value.py) has none
        if compile_cfg is not None and compile_cfg.enabled:  # choice 7
            from rlnb.engine.models.compiled import CompiledPolicy

            self.compiled = CompiledPolicy(self, compile_cfg)
        # the update's forward + backward, chosen once (choice 4): the compiled full pass (which
        # runs forward_rows once compiling fails), else forward_rows
        compiled_update = self.compiled.update if self.compiled is not None else None
        self.update_forward = compiled_update or self.forward_rows

    def compile_metrics(self) -> dict[str, float]:
        """``compile/*`` counts (docs/metrics.md); empty unless ``policy.compile.enabled``."""
        return self.compiled.metrics() if self.compiled is not None else {}

    def sync_reference(self) -> None:
        """Make the reference (if there is one) a copy of the current weights again."""
        if self.reference_model is not None:
            self.reference_model.load_state_dict(self.model.state_dict())

    def make_reference(self):
        """A frozen copy of the current weights (the KL anchor)."""
        ref = copy.deepcopy(self.model)
        ref.requires_grad_(False)
        ref.eval()
        return ref

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def forward_logprobs(self, model, input_ids, attention_mask) -> torch.Tensor:
        """``[B, S]`` stored-layout log-probs (index 0 = 0), float32, with gradient if enabled."""
        logits = model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),
        ).logits  # [B, S, V]
        picked = token_logprobs(logits[:, :-1], input_ids[:, 1:],
                                self.config.generation.temperature)  # [B, S-1]
        return torch.nn.functional.pad(picked, (1, 0))  # [B, S]: index t ↔ token t

    def check_tokens(self, input_ids: torch.Tensor, name: str = "input_ids") -> None:
        """``[B, S]`` integer ids inside the model's vocabulary, else a ValueError (an id out
        of range would be an opaque index error deep inside the embedding)."""
        if not isinstance(input_ids, torch.Tensor) or input_ids.ndim != 2 or \
                input_ids.dtype.is_floating_point:
            raise ValueError(f"{name} must be an integer tensor [B, S], got "
                             f"{type(input_ids).__name__} {tuple(getattr(input_ids, 'shape', ()))}")
        vocab = self.model.get_input_embeddings().num_embeddings
        if input_ids.numel() and (int(input_ids.min()) < 0 or int(input_ids.max()) >= vocab):
            raise ValueError(f"{name} {tuple(input_ids.shape)} holds ids outside the vocabulary "
                             f"[0, {vocab}): min {int(input_ids.min())}, max "
                             f"{int(input_ids.max())}")

    def forward_rows(self, model, input_ids, attention_mask, token_mask=None) -> torch.Tensor:
        """``[B, S]`` log-probs of the rows: the shared-prefix pass where it applies (choice 9:
        given ``token_mask [B, S]``, on a model that passed its check), else the full pass."""
        rows = self.prefix_logprobs(model, input_ids, attention_mask, token_mask)
        return rows if rows is not None else self.forward_logprobs(model, input_ids,
                                                                   attention_mask)

    def prefix_logprobs(self, model, input_ids, attention_mask, token_mask):
        """``[B, S]`` log-probs by the shared-prefix pass (choice 9), split at the first column
        ``token_mask [B, S]`` scores; ``None`` where the plain pass should run."""
        shared = self.shared_prefix
        if not shared.enabled or token_mask is None:
            return None
        positions = position_ids_from_mask(attention_mask)
        split = first_scored_column(token_mask)

        def run():
            return shared_prefix_logprobs(model, input_ids, attention_mask, positions, split,
                                          self.config.generation.temperature)

        if not shared.checked and not shared.check(
                model, lambda: self.forward_logprobs(model, input_ids, attention_mask), run,
                attention_mask):
            return None
        return run()

    @torch.no_grad()
    def logprobs(self, input_ids, attention_mask, reference: bool = False,
                 token_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Per-token log-probs of ``input_ids [B, S]`` under the policy (or the reference);
        with ``token_mask [B, S]`` (the positions the caller reads), each distinct prompt is
        forwarded once (choice 9)."""
        self.check_tokens(input_ids)
        if reference and self.lora:  # the reference: the base, the adapters off
            with adapters_disabled(self.model):
                return self.logprobs(input_ids, attention_mask, token_mask=token_mask)
        model = self.reference_model if reference else self.model
        if model is None:
            raise ValueError(
                "no reference model: the KL penalty is off (reference_policy_kl_penalty=0)"
            )
        was_training = model.training
        model.eval()
        chunks = []
        n = self.config.logprob_batch_size
        for i in range(0, input_ids.shape[0], n):
            ids, mask = input_ids[i : i + n].to(self.device), attention_mask[i : i + n].to(
                self.device)
            scored = token_mask[i : i + n] if token_mask is not None else None
            chunks.append(self.forward_rows(model, ids, mask, scored).cpu())
        model.train(was_training)
        return torch.cat(chunks)

    def optimizer_step(
        self, data: dict[str, torch.Tensor], loss_fn: Callable, *, dry_run: bool = False,
        token_normalizer: str = "global_batch",
    ) -> dict[str, float]:
        """One optimizer step per global batch of ``data`` (stored ``[B, S]`` tensors): one step
        when the batch fits in ``train_global_batch_size`` rows, as in the default config.

        Args:
            data: ``input_ids``, ``attention_mask``, ``token_mask``, ``sample_mask`` and what
                ``loss_fn`` reads (``advantages``, ``prev_logprobs``, ...).
            loss_fn: ``loss_fn.from_logprobs(logprobs [B, S-1], data, N_seq, N_tok)``.
            dry_run: compute loss and metrics without gradients or an optimizer step.
            token_normalizer: the token-level loss's divisor: ``global_batch``, the valid
                tokens of each optimizer step's global batch (NeMo-RL), or ``rollout_mean``,
                every valid token of ``data`` over its global batches (TRL's ``dapo``: the
                same divisor for every step of a rollout).
        Returns: metrics (loss metrics, ``grad_norm``, ``lr``, ``global_valid_seqs/toks``). A
        global batch whose rows are all masked out takes no optimizer step; if none is left the
        metrics are ``loss`` 0 and zero counts.
        """
        cfg = self.config
        needed = ("input_ids", "attention_mask", "token_mask", "sample_mask")
        if not isinstance(data, dict) or any(k not in data for k in needed):
            got = sorted(data) if isinstance(data, dict) else type(data).__name__
            raise ValueError(f"optimizer_step needs a dict with {list(needed)} (stored [B, S] "
                             f"tensors), got {got}")
        self.check_tokens(data["input_ids"], "data['input_ids']")
        B = data["input_ids"].shape[0]
        world = self.dist.world_size
        if cfg.train_global_batch_size % world:
            raise ValueError(
                f"policy.train_global_batch_size ({cfg.train_global_batch_size}) must be "
                f"divisible by the number of processes ({world})")
        # the global batch spans all ranks: each rank takes its share of every optimizer step
        gbs, mbs = min(cfg.train_global_batch_size // world, B), cfg.train_micro_batch_size
        per_global: list[dict[str, float]] = []
        self.train_model.train()
        forward = self.forward_rows if dry_run else self.update_forward  # (no compile, no grad)
        if token_normalizer == "rollout_mean":
            _, all_tok = global_valid_counts(data["token_mask"][:, 1:], data["sample_mask"])
            mean_tok = self.dist.sum(all_tok) / math.ceil(B / gbs)
        elif token_normalizer != "global_batch":
            raise ValueError(f"token_normalizer: global_batch or rollout_mean, got "
                             f"{token_normalizer!r}")
        for start in range(0, B, gbs):
            rows = slice(start, min(start + gbs, B))
            n_seq, n_tok = global_valid_counts(
                data["token_mask"][rows, 1:], data["sample_mask"][rows]
            )
            n_seq, n_tok = self.dist.sum(n_seq), self.dist.sum(n_tok)  # over all ranks
            divisor = mean_tok if token_normalizer == "rollout_mean" else n_tok
            if float(n_seq) == 0 or float(n_tok) == 0:
                # every row filtered (overlong, log-prob error): nothing to learn from, and an
                # optimizer step on zero gradients would still move the weights (momentum)
                continue
            parts = []
            if not dry_run:
                self.optimizer.zero_grad(set_to_none=True)
            for m0 in range(rows.start, rows.stop, mbs):
                mb = {k: v[m0 : min(m0 + mbs, rows.stop)].to(self.device) for k, v in data.items()}
                with torch.set_grad_enabled(not dry_run):
                    logprobs = forward(self.train_model, mb["input_ids"], mb["attention_mask"],
                                       mb["token_mask"])
                    loss, metrics = loss_fn.from_logprobs(logprobs[:, 1:], mb, n_seq, divisor)
                if not dry_run:
                    # DDP averages gradients over ranks; the loss is already a global sum
                    (loss * self.dist.world_size).backward()
                parts.append(metrics)
            merged = sum_partial_metrics(parts)
            merged.update(
                global_valid_seqs=float(n_seq),
                global_valid_toks=float(n_tok),
                # the lr this step uses (reconfigure sets it between steps; the scheduler's
                # get_last_lr() would still report the old value for one step)
                lr=self.optimizer.param_groups[0]["lr"],
            )
            if not dry_run:
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm is not None else math.inf
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                merged["grad_norm"] = float(grad_norm)
                self.optimizer.step()
                if cfg.optimizer.warmup_counts == "optimizer_steps":
                    self.scheduler.step()
            per_global.append(merged)
        if not dry_run and cfg.optimizer.warmup_counts == "training_steps":
            self.scheduler.step()  # once per pass, as NeMo-RL's workers tick it
        if not per_global:  # every row masked out (e.g. all truncated, overlong filtering)
            return {"loss": 0.0, "global_valid_seqs": 0.0, "global_valid_toks": 0.0,
                    "lr": self.optimizer.param_groups[0]["lr"]}
        return average_global_batches(per_global)


def average_global_batches(per_global: list[dict[str, float]]) -> dict[str, float]:
    """NeMo-RL's driver: ``*_min`` / ``*_max`` keep their extreme (ignoring ±inf; -1.0 if none
    is finite), everything else is averaged over the global batches."""
    return combine_metrics(per_global, default="mean", empty=-1.0)
