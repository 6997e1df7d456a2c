"""The clipped policy-gradient loss behind GRPO, PPO, DAPO, GSPO, CISPO and REINFORCE.

    L = Σ W·max(-A·ρ, -A·clip(ρ, 1-ε_lo, 1+ε_hi))·M / N  +  β·KL(π‖π_ref)  +  μ·NLL(positives)

PPO https://arxiv.org/abs/1707.06347, GRPO https://arxiv.org/abs/2402.03300, DAPO (asymmetric
clip, token-level loss) https://arxiv.org/abs/2503.14476, dual clip
https://arxiv.org/abs/1912.09729, GSPO (sequence-level ratio) https://arxiv.org/abs/2507.18071,
CISPO https://arxiv.org/abs/2506.13585, truncated IS (TIS)
https://fengyao.notion.site/off-policy-rl, VAPO positive-example NLL
https://arxiv.org/abs/2504.05118.

Implementation choices (spec §5):
1) Layout: the pure function ``clipped_pg_loss`` takes *aligned* ``[B, T]`` tensors (index t of
   every argument is the same token). ``ClippedPGLossFn`` takes the seed's layout (stored
   ``[B, S]`` tensors, logits ``[B, S, V]``) and slices ``[:, 1:]`` to align them.
2) The per-token surrogate and its reduction are separate steps (``reduction.py``); both the
   actor term and the KL term reduce by the same rule (token- or sequence-level).
3) The KL term's importance weight is exp(log π - sg(log π)) (value 1) unless the on-policy
   approximation exp(log π - log π_gen) is on, so the KL gradient always carries the
   score-function term k·∇log π besides ∂k/∂log π. KL clamps are 20 (log-ratio) and 10 (w·k).
4) ``use_kl_in_reward`` forces the loss's β to 0 (the KL then lives in the advantages).
5) Importance weights π_prev/π_gen are detached, NaN/±inf mapped to 0, then truncated
   (tis: clamp; icepop: zero outside [lo, hi]; seq-mask-tis: drop whole rows by geometric mean).
6) Dual clip caps the surrogate at -A·C only where A < 0, also with ``disable_ppo_ratio``.
7) Deliberate difference from NeMo-RL: with sequence-level (GSPO) ratios NeMo-RL reports
   ``sampling_importance_ratio`` as (Σ_b w_b)(Σ_b sm_b)/N_seq (a B×B broadcast, B× the mean);
   rlnb reports the mean Σ_b w_b·sm_b / N_seq. The loss itself is unaffected.
8) Deliberate difference: ``truncated_importance_sampling_ratio`` set with no type fails when
   the config is built, not at the first loss call.
9) Metrics are gathered as tensors and turned into floats with a single device sync.
10) ``compile=True`` runs the same math through ``fused.py``: loss, metrics and gradient in
    one compiled pass (benchmarks/bench_algorithms.py has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from pydantic import Field, model_validator

from rlnb.algorithms.checks import check_mask, check_same_shape, check_tensor, choose, upcast
from rlnb.algorithms.fused import fused_loss_and_grad
from rlnb.algorithms.importance_sampling import TRUNCATED_IS_TYPES, truncated_importance_weights
from rlnb.algorithms.kl import KL_ESTIMATORS, calculate_kl
from rlnb.algorithms.logprobs import next_token_logprobs
from rlnb.algorithms.masked import masked_mean
from rlnb.algorithms.reduction import reduce_loss
from rlnb.config import Config, parse_config


class ClippedPGLossConfig(Config):
    """``loss_fn`` for GRPO/PPO: clipping, KL penalty, importance-sampling correction."""

    disable_ppo_ratio: bool = Field(False, description="REINFORCE/RLOO: ratio replaced by log π.")
    token_level_loss: bool = Field(
        True, description="Token-level (DAPO) vs sequence-level (GRPO paper) normalisation."
    )
    sequence_level_importance_ratios: bool = Field(
        False, description="GSPO sequence ratio; needs token_level_loss=False."
    )
    ratio_clip_min: float = Field(0.2, ge=0, description="ε_low: clip ρ below at 1-ε_low.")
    ratio_clip_max: float = Field(
        0.2, ge=0, description="ε_high: clip ρ above at 1+ε_high (DAPO clip-higher: 0.28)."
    )
    ratio_clip_c: float | None = Field(None, description="Dual-clip C > 1 (paper: 3).")
    reference_policy_kl_penalty: float = Field(0.01, ge=0, description="β of the KL penalty.")
    reference_policy_kl_type: str = Field("k3", description="k1 | k2 | k3 (Schulman).")
    kl_input_clamp_value: float | None = Field(20.0, description="Clamp of the log-ratio.")
    kl_output_clamp_value: float | None = Field(10.0, description="Clamp of w·k.")
    use_kl_in_reward: bool = Field(
        False, description="Put β·KL into the reward (Reinforce++/GAE); the loss uses β=0."
    )
    use_importance_sampling_correction: bool = Field(
        False, description="Weight by π_train/π_gen (trainer vs inference engine mismatch)."
    )
    truncated_importance_sampling_type: str | None = Field(
        None, description="tis | icepop | seq-mask-tis (needs the IS correction)."
    )
    truncated_importance_sampling_ratio: float | None = Field(
        None, description="Upper bound of the IS weight (TIS: 2.0 is common)."
    )
    truncated_importance_sampling_ratio_min: float | None = Field(
        None, description="Lower bound (tis: default 0; required by icepop and seq-mask-tis)."
    )
    use_on_policy_kl_approximation: bool = Field(
        False, description="KL importance weight exp(log π - log π_gen)."
    )
    force_on_policy_ratio: bool = Field(False, description="ρ ≡ 1: ignore prev_logprobs.")
    use_cispo: bool = Field(False, description="CISPO: -A·sg(clip(ρ))·log π.")
    positive_example_nll_weight: float = Field(
        0.0, ge=0, description="VAPO μ: NLL on positive-reward samples (needs rewards)."
    )

    @model_validator(mode="after")
    def _compatible(self) -> ClippedPGLossConfig:
        choose(KL_ESTIMATORS, self.reference_policy_kl_type, "reference_policy_kl_type")
        problems = []
        if self.sequence_level_importance_ratios and self.token_level_loss:
            problems.append("sequence_level_importance_ratios needs token_level_loss=False")
        if self.use_cispo:
            for key in ("disable_ppo_ratio", "force_on_policy_ratio",
                        "sequence_level_importance_ratios"):
                if getattr(self, key):
                    problems.append(f"use_cispo is incompatible with {key}")
            if self.ratio_clip_c is not None:
                problems.append("use_cispo is incompatible with ratio_clip_c")
            if not self.token_level_loss:
                problems.append("use_cispo needs token_level_loss=True")
        if self.ratio_clip_c is not None and not self.ratio_clip_c > 1:
            problems.append(f"ratio_clip_c must be > 1, got {self.ratio_clip_c}")
        kind, hi = self.truncated_importance_sampling_type, self.truncated_importance_sampling_ratio
        lo = self.truncated_importance_sampling_ratio_min
        if kind is not None:
            choose(dict.fromkeys(TRUNCATED_IS_TYPES), kind, "truncated_importance_sampling_type")
            if not self.use_importance_sampling_correction:
                problems.append(f"truncated_importance_sampling_type={kind!r} needs "
                                "use_importance_sampling_correction=True")
            if hi is None or hi <= 0:
                problems.append(f"truncated_importance_sampling_type={kind!r} needs "
                                f"truncated_importance_sampling_ratio > 0, got {hi}")
            if kind in ("icepop", "seq-mask-tis") and lo is None:
                problems.append(f"{kind} needs truncated_importance_sampling_ratio_min")
            if kind == "seq-mask-tis" and self.sequence_level_importance_ratios:
                problems.append(
                    "seq-mask-tis is incompatible with sequence_level_importance_ratios"
                )
        elif hi is not None:
            problems.append("truncated_importance_sampling_ratio is set but "
                            "truncated_importance_sampling_type is None (tis|icepop|seq-mask-tis)")
        if lo is not None and hi is not None and lo > hi:
            problems.append(f"truncated_importance_sampling_ratio_min ({lo}) > ratio ({hi})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def loss_kl_penalty(self) -> float:
        """β used inside the loss: 0 when the KL goes into the reward instead."""
        return 0.0 if self.use_kl_in_reward else self.reference_policy_kl_penalty


def _masked_min_max(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Min and max of ``x`` over ``mask > 0`` (+inf / -inf when the mask is empty)."""
    inf = torch.tensor(math.inf, dtype=x.dtype, device=x.device)
    valid = mask > 0
    return torch.where(valid, x, inf).amin(), torch.where(valid, x, -inf).amax()


def clipped_pg_loss(
    logprobs: torch.Tensor,
    prev_logprobs: torch.Tensor | None,
    generation_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    token_mask: torch.Tensor,
    sample_mask: torch.Tensor,
    *,
    global_valid_seqs: torch.Tensor | float,
    global_valid_toks: torch.Tensor | float,
    reference_logprobs: torch.Tensor | None = None,
    logprobs_unfiltered: torch.Tensor | None = None,
    rewards: torch.Tensor | None = None,
    disable_ppo_ratio: bool = False,
    token_level_loss: bool = True,
    sequence_level_importance_ratios: bool = False,
    ratio_clip_min: float = 0.2,
    ratio_clip_max: float = 0.2,
    ratio_clip_c: float | None = None,
    reference_policy_kl_penalty: float = 0.01,
    reference_policy_kl_type: str = "k3",
    kl_input_clamp_value: float | None = 20.0,
    kl_output_clamp_value: float | None = 10.0,
    use_importance_sampling_correction: bool = False,
    truncated_importance_sampling_type: str | None = None,
    truncated_importance_sampling_ratio: float | None = None,
    truncated_importance_sampling_ratio_min: float | None = None,
    use_on_policy_kl_approximation: bool = False,
    force_on_policy_ratio: bool = False,
    use_cispo: bool = False,
    positive_example_nll_weight: float = 0.0,
    compile: bool = False,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate + KL penalty + optional VAPO NLL over one (micro-)batch.

    Args (all per-token tensors *aligned*: index t of each is the same token):
        logprobs: ``[B, T]`` log π of the sampled tokens under the current policy (gradient).
        prev_logprobs: ``[B, T]`` log π_old from before the update (ignored, may be None, with
            ``force_on_policy_ratio``).
        generation_logprobs: ``[B, T]`` log-probs reported by the generation engine.
        advantages: ``[B, T]``.
        token_mask: ``[B, T]`` 0/1 generated tokens; sample_mask: ``[B]`` 0/1 rows.
        global_valid_seqs / global_valid_toks: N_seq / N_tok of the whole global batch.
        reference_logprobs: ``[B, T]``, needed when the loss's β ≠ 0.
        logprobs_unfiltered: ``[B, T]`` log π without top-k/top-p filtering, for the KL term.
        rewards: ``[B]``, enables the positive-example NLL (μ > 0).
        The keywords are ``ClippedPGLossConfig``'s fields; ``reference_policy_kl_penalty`` is
        the β *used in the loss* (pass 0 when the KL is in the reward).
        compile: run the math through ``torch.compile`` (same numbers to float rounding,
            several times faster on long batches; the first call compiles).
    Returns:
        ``(loss, metrics)``: 0-d loss and the spec §5.9 metrics as python numbers.
    """
    check_tensor("logprobs", logprobs, ndim=2, floating=True)
    shape = tuple(logprobs.shape)
    dtype = upcast(logprobs).dtype  # masks in the values' dtype, so 1e-8 survives in float64
    # Shapes are checked here; 0/1 values inside the pass (one fused read), then below.
    tm = check_tensor("token_mask", token_mask, shape=shape).to(dtype)
    sm = check_tensor("sample_mask", sample_mask, shape=(shape[0],)).to(dtype)
    check_tensor("generation_logprobs", generation_logprobs, shape=shape, floating=True)
    check_tensor("advantages", advantages, shape=shape, floating=True)
    beta = reference_policy_kl_penalty
    if not force_on_policy_ratio:
        check_tensor("prev_logprobs", prev_logprobs, shape=shape, floating=True)
    if beta != 0:
        if reference_logprobs is None:
            raise ValueError("reference_logprobs is required when reference_policy_kl_penalty != 0")
        check_tensor("reference_logprobs", reference_logprobs, shape=shape, floating=True)
    check_same_shape(logprobs=logprobs, logprobs_unfiltered=logprobs_unfiltered)
    if ratio_clip_c is not None and not ratio_clip_c > 1:
        raise ValueError(f"ratio_clip_c must be > 1, got {ratio_clip_c}")

    tensors = (
        logprobs, prev_logprobs, generation_logprobs, advantages, tm, sm,
        global_valid_seqs, global_valid_toks, reference_logprobs, logprobs_unfiltered, rewards,
    )
    hyper = dict(
        disable_ppo_ratio=disable_ppo_ratio, token_level_loss=token_level_loss,
        sequence_level_importance_ratios=sequence_level_importance_ratios,
        ratio_clip_min=ratio_clip_min, ratio_clip_max=ratio_clip_max, ratio_clip_c=ratio_clip_c,
        beta=beta, reference_policy_kl_type=reference_policy_kl_type,
        kl_input_clamp_value=kl_input_clamp_value, kl_output_clamp_value=kl_output_clamp_value,
        use_importance_sampling_correction=use_importance_sampling_correction,
        truncated_importance_sampling_type=truncated_importance_sampling_type,
        truncated_importance_sampling_ratio=truncated_importance_sampling_ratio,
        truncated_importance_sampling_ratio_min=truncated_importance_sampling_ratio_min,
        use_on_policy_kl_approximation=use_on_policy_kl_approximation,
        force_on_policy_ratio=force_on_policy_ratio, use_cispo=use_cispo,
        positive_example_nll_weight=positive_example_nll_weight,
    )
    fusable = logprobs_unfiltered is None or not logprobs_unfiltered.requires_grad
    if compile and fusable:
        loss, values = fused_loss_and_grad(_clipped_pg_core, logprobs, tensors[1:], hyper)
    else:
        loss, values = _clipped_pg_core(*tensors, **hyper)
    keys = metric_keys(truncated=truncated_importance_sampling_ratio is not None)
    *values, invalid_mask_entries = values.tolist()  # the one device sync
    if invalid_mask_entries:
        check_mask("token_mask", token_mask)  # raises, naming the first bad entry
        check_mask("sample_mask", sample_mask)
    metrics: dict[str, float] = dict(zip(keys, values))
    if metrics["kl_penalty"] == 0:
        metrics["kl_penalty"] = 0  # an integer 0, as NeMo-RL reports "no KL"
    return loss, metrics


def _clipped_pg_core(
    logprobs, prev_logprobs, generation_logprobs, advantages, tm, sm, n_seq, n_tok,
    reference_logprobs, logprobs_unfiltered, rewards, *, disable_ppo_ratio, token_level_loss,
    sequence_level_importance_ratios, ratio_clip_min, ratio_clip_max, ratio_clip_c, beta,
    reference_policy_kl_type, kl_input_clamp_value, kl_output_clamp_value,
    use_importance_sampling_correction, truncated_importance_sampling_type,
    truncated_importance_sampling_ratio, truncated_importance_sampling_ratio_min,
    use_on_policy_kl_approximation, force_on_policy_ratio, use_cispo, positive_example_nll_weight,
):
    """The math of ``clipped_pg_loss`` on validated inputs; no host sync, so it can be compiled.

    Returns ``(loss, values [K+1])``: the metrics in the order of ``metric_keys``, then the
    count of mask entries that are not 0/1.
    """
    c, q, A = upcast(logprobs), upcast(generation_logprobs), upcast(advantages)
    # force_on_policy_ratio: p := sg(c), so the ratio is exactly 1 and prev_logprobs is ignored.
    p = c.detach() if force_on_policy_ratio else upcast(prev_logprobs)
    c_u = c if logprobs_unfiltered is None else upcast(logprobs_unfiltered)
    M = tm * sm.unsqueeze(-1)  # [B, T]
    kl_fn = KL_ESTIMATORS[reference_policy_kl_type]
    stats: dict[str, torch.Tensor] = {}

    # --- diagnostics: how far apart the trainer and the generation engine are (no gradient).
    # One exponential serves all of them and the IS weights (the loss is bound by transcendental
    # math on long batches): r = π_gen/π_prev = e^(q-p), so e^(p-q) = 1/r, e^|q-p| = max(r, 1/r),
    # and against the mixture m = ½π_prev + ½π_gen: π_prev/m = 2/(1+r), π_gen/m = 2/(1+1/r),
    # log(π_prev/m) = log 2 - softplus(q-p), log(π_gen/m) = log(π_prev/m) + (q-p).
    with torch.no_grad():
        gap = q - p
        r = torch.exp(gap)
        inv_r = 1 / r  # = e^(p-q): the raw token importance weight π_prev/π_gen
        stats["token_mult_prob_error"] = masked_mean(torch.maximum(r, inv_r), M, None, n_tok)
        if reference_policy_kl_type == "k3":  # k3(ℓ) = e^ℓ - 1 - ℓ, with e^ℓ already known
            gen_kl, policy_kl = inv_r - 1 + gap, r - 1 - gap  # ℓ = p - q and ℓ = q - p
        else:
            gen_kl, policy_kl = kl_fn(-gap), kl_fn(gap)
        stats["gen_kl_error"] = masked_mean(gen_kl, M, None, n_tok)
        stats["policy_kl_error"] = masked_mean(policy_kl, M, None, n_tok)
        softplus = torch.where(gap > 20, gap, torch.log1p(r))  # log(1 + e^gap), overflow-safe
        a = math.log(2) - softplus  # log(π_prev / m)
        b = a + gap  # log(π_gen / m)
        js = 0.5 * ((2 / (1 + r) - a - 1) + (2 / (1 + inv_r) - b - 1))
        stats["js_divergence_error"] = masked_mean(js, M, None, n_tok)
        # 0/1 masks are checked here, inside the (possibly fused) pass; the caller raises.
        stats["invalid_mask_entries"] = (tm * (1 - tm) != 0).sum() + (sm * (1 - sm) != 0).sum()

    # --- KL penalty to the reference policy
    if beta != 0:
        if use_on_policy_kl_approximation:
            w_kl = torch.exp(c_u - q)
        else:
            # Value 1 and gradient ∇log π (the score-function term): the same value and the
            # same gradient as exp(log π - sg(log π)), without an exp per token.
            w_kl = 1 + (c_u - c_u.detach())
        w_kl = torch.nan_to_num(w_kl, nan=0.0, posinf=0.0, neginf=0.0)
        kl_tok = beta * calculate_kl(
            c_u, upcast(reference_logprobs), reference_policy_kl_type,
            kl_input_clamp_value, kl_output_clamp_value, w_kl,
        )
        kl = reduce_loss(kl_tok, tm, sm, token_level_loss=token_level_loss,
                         global_valid_toks=n_tok, global_valid_seqs=n_seq)
    else:
        kl = torch.zeros((), device=c.device)

    # --- probability ratios and the clipped surrogate
    token_ratio = None  # exp(c - p) per token, when computed
    if force_on_policy_ratio:
        ratio = torch.exp(c - c.detach())
        ratio_clamped = ratio
    elif not disable_ppo_ratio:
        log_ratio = c - p
        if sequence_level_importance_ratios:
            seq_log_ratio = masked_mean(log_ratio, tm, dim=-1)  # [B], token_mask only
            ratio = torch.exp(seq_log_ratio).unsqueeze(-1).expand_as(c)
        else:
            ratio = token_ratio = torch.exp(log_ratio)
        ratio_clamped = ratio.clamp(1 - ratio_clip_min, 1 + ratio_clip_max)
    else:
        ratio = ratio_clamped = c
    with torch.no_grad():  # π/π_gen = (π/π_prev)·(π_prev/π_gen): reuse the ratio if it is there
        c_d = c.detach()
        if token_ratio is not None:
            pi_over_gen = token_ratio.detach() * inv_r
        else:
            pi_over_gen = torch.exp(c_d - q)
        stats["approx_entropy"] = masked_mean(-pi_over_gen * c_d, M, None, n_tok)
    if use_cispo:
        per_token = -A * ratio_clamped.detach() * c
    else:
        per_token = torch.maximum(-A * ratio, -A * ratio_clamped)
    if ratio_clip_c is not None:
        per_token = torch.where(A < 0, torch.minimum(per_token, -A * ratio_clip_c), per_token)

    # --- importance-sampling correction (trainer vs generation engine)
    with torch.no_grad():
        w, is_oob = truncated_importance_weights(
            p, q, tm, M, sm, sequence_level=sequence_level_importance_ratios,
            kind=truncated_importance_sampling_type, hi=truncated_importance_sampling_ratio,
            lo=truncated_importance_sampling_ratio_min,
            global_valid_toks=n_tok, global_valid_seqs=n_seq, token_weights=inv_r,
        )
    if use_importance_sampling_correction:
        per_token = w * per_token
    actor = reduce_loss(per_token, tm, sm, token_level_loss=token_level_loss,
                        global_valid_toks=n_tok, global_valid_seqs=n_seq)

    # --- VAPO: NLL on positive examples, normalised locally (not by the global counts)
    nll = torch.zeros((), device=c.device)
    if positive_example_nll_weight > 0 and rewards is not None:
        positive = M * (rewards > 0).float().unsqueeze(-1)
        nll = masked_mean(-c, positive)  # 0 when there is no positive token
    loss = actor + kl + positive_example_nll_weight * nll

    # --- metrics
    with torch.no_grad():
        ratio_d, clamped_d = ratio.detach(), ratio_clamped.detach()
        r_min, r_max = _masked_min_max(ratio_d, M)
        rc_min, rc_max = _masked_min_max(clamped_d, M)
        if sequence_level_importance_ratios:
            sir = masked_mean(w.squeeze(-1), sm, None, n_seq)  # choice 7: the true mean
        else:
            sir = masked_mean(w, M, None, n_tok)
        kl_metric = torch.where(kl != 0, kl / beta if beta != 0 else kl, torch.zeros_like(kl))
        ordered = {  # the order of METRIC_KEYS
            "loss": loss.detach(),
            "probs_ratio": masked_mean(ratio_d, M, None, n_tok),
            "probs_ratio_clamped": masked_mean(clamped_d, M, None, n_tok),
            "probs_ratio_min": r_min,
            "probs_ratio_max": r_max,
            "probs_ratio_clamped_min": rc_min,
            "probs_ratio_clamped_max": rc_max,
            "kl_penalty": kl_metric.detach(),
            **{k: stats[k] for k in ("token_mult_prob_error", "gen_kl_error",
                                     "policy_kl_error", "js_divergence_error")},
            "sampling_importance_ratio": sir,
            "num_valid_samples": sm.sum(),
            "approx_entropy": stats["approx_entropy"],
        }
        if is_oob is not None:
            ordered["is_oob_ratio"] = is_oob
        ordered["positive_nll_loss"] = nll.detach()
        # rlnb extra (not a NeMo-RL key): share of valid tokens whose ratio the clip moved
        ordered["clip_fraction"] = masked_mean((ratio_d != clamped_d).float(), M, None, n_tok)
        ordered["invalid_mask_entries"] = stats["invalid_mask_entries"]  # not a metric
        values = torch.stack([v.float().reshape(()) for v in ordered.values()])
    return loss, values


def metric_keys(truncated: bool) -> tuple[str, ...]:
    """The metric names ``clipped_pg_loss`` returns, in order (spec §5.9)."""
    keys = METRIC_KEYS if truncated else tuple(k for k in METRIC_KEYS if k != "is_oob_ratio")
    return keys


METRIC_KEYS = (
    "loss", "probs_ratio", "probs_ratio_clamped", "probs_ratio_min", "probs_ratio_max",
    "probs_ratio_clamped_min", "probs_ratio_clamped_max", "kl_penalty", "token_mult_prob_error",
    "gen_kl_error", "policy_kl_error", "js_divergence_error", "sampling_importance_ratio",
    "num_valid_samples", "approx_entropy", "is_oob_ratio", "positive_nll_loss", "clip_fraction",
)


_REQUIRED_KEYS = ("input_ids", "advantages", "generation_logprobs", "token_mask", "sample_mask")


class ClippedPGLossFn:
    """Seed-style wrapper: ``loss_fn(next_token_logits, data, N_seq, N_tok) -> (loss, metrics)``.

    ``data`` holds stored ``[B, S]`` tensors (index t = token t): ``input_ids``, ``advantages``,
    ``prev_logprobs``, ``generation_logprobs``, ``reference_policy_logprobs``, ``token_mask``,
    ``sample_mask [B]``, optionally ``rewards [B]`` and ``curr_logprobs_unfiltered [B, S-1]``.
    """

    def __init__(self, cfg: ClippedPGLossConfig | Mapping[str, Any] | None = None):
        self.config = parse_config(ClippedPGLossConfig, cfg, "loss_fn")

    @property
    def loss_type(self) -> str:
        return "token_level" if self.config.token_level_loss else "sequence_level"

    def __call__(self, next_token_logits, data, global_valid_seqs, global_valid_toks):
        if "input_ids" not in data:
            raise ValueError("data is missing 'input_ids' [B, S]")
        logprobs = next_token_logprobs(next_token_logits, data["input_ids"])
        return self.from_logprobs(logprobs, data, global_valid_seqs, global_valid_toks)

    def from_logprobs(self, logprobs, data, global_valid_seqs, global_valid_toks):
        """Same as calling the loss, with the current log-probs ``[B, S-1]`` already computed."""
        cfg = self.config
        needed = list(_REQUIRED_KEYS[1:])
        if not cfg.force_on_policy_ratio:
            needed.append("prev_logprobs")
        if cfg.loss_kl_penalty != 0:
            needed.append("reference_policy_logprobs")
        missing = [k for k in needed if k not in data]
        if missing:
            raise ValueError(f"data is missing {missing} (stored [B, S] tensors)")

        def aligned(key):  # stored [B, S] (index t = token t) -> [B, S-1] like logprobs
            x = data.get(key)
            if x is None:
                return None
            check_tensor(key, x, shape=(logprobs.shape[0], logprobs.shape[1] + 1))
            return x[:, 1:]

        kwargs = cfg.model_dump(exclude={"use_kl_in_reward"})
        kwargs["reference_policy_kl_penalty"] = cfg.loss_kl_penalty
        return clipped_pg_loss(
            logprobs,
            None if cfg.force_on_policy_ratio else aligned("prev_logprobs"),
            aligned("generation_logprobs"),
            aligned("advantages"),
            aligned("token_mask"),
            data["sample_mask"],
            global_valid_seqs=global_valid_seqs,
            global_valid_toks=global_valid_toks,
            reference_logprobs=aligned("reference_policy_logprobs"),
            logprobs_unfiltered=data.get("curr_logprobs_unfiltered"),
            rewards=data.get("rewards"),
            **kwargs,
        )
