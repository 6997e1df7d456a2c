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
   ``torch.compile`` (``compiled.py``, imported only then).
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
import math
from collections.abc import Callable
from typing import Literal

import torch
from pydantic import Field

from rlnb.algorithms.logprobs import token_logprobs
from rlnb.algorithms.reduction import combine_metrics, global_valid_counts, sum_partial_metrics
from rlnb.config import Config, cross_field_rule
from rlnb.engine.models.compile_config import CompileConfig, check_compile_applies
from rlnb.engine.models.generation import GenerationConfig
from rlnb.engine.models.loading import load_model_and_tokenizer
from rlnb.engine.models.lora import LoraConfig, adapters_disabled, has_adapters
from rlnb.engine.models.random_init import RandomInitConfig
from rlnb.engine.models.shared_prefix import (
    SharedPrefix,
    first_scored_column,
    shared_prefix_logprobs,
)
from rlnb.engine.runtime.distributed import Distributed


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
        """The multiplier of ``lr`` at scheduler step ``step`` (0-based): the warm-up, then the
        decay (docs/algorithms.md#learning-rate-schedule)."""
        warmup, start, decay = self.warmup_steps, self.warmup_start_factor, self.decay_steps
        if decay and step >= warmup:  # LinearLR(1, e, D), its step 0 at the milestone W
            done = min(step - warmup, decay) / decay
            return 1.0 + (self.decay_end_factor - 1.0) * done
        if not warmup:
            return 1.0
        if start is None:
            return min(1.0, (step + 1) / warmup)
        return start + (1.0 - start) * min(step, warmup) / warmup


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
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, opt.lr_factor)
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
            rows = None
            if token_mask is not None:
                rows = self.prefix_logprobs(model, ids, mask, token_mask[i : i + n])
            chunks.append((rows if rows is not None else self.forward_logprobs(
                model, ids, mask)).cpu())
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
            compiled = self.compiled is not None and self.compiled.update is not None \
                and not self.compiled.update.eager and not dry_run  # (eager: compiling failed)
            forward = self.compiled.update if compiled else self.forward_logprobs  # choice 7
            for m0 in range(rows.start, rows.stop, mbs):
                mb = {k: v[m0 : min(m0 + mbs, rows.stop)].to(self.device) for k, v in data.items()}
                with torch.set_grad_enabled(not dry_run):
                    logprobs = None if compiled else self.prefix_logprobs(  # choice 9
                        self.train_model, mb["input_ids"], mb["attention_mask"],
                        mb["token_mask"])
                    if logprobs is None:
                        logprobs = forward(
                            self.train_model, mb["input_ids"], mb["attention_mask"]
                        )
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
