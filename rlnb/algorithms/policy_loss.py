"""The clipped policy-gradient loss behind GRPO, PPO, DAPO, GSPO, CISPO and REINFORCE.

    L = Σ W·max(-A·ρ, -A·clip(ρ, 1-ε_lo, 1+ε_hi))·M / N  +  β·KL(π‖π_ref)  +  μ·NLL(positives)

PPO https://arxiv.org/abs/1707.06347, GRPO https://arxiv.org/abs/2402.03300, DAPO (asymmetric
clip, token-level loss) https://arxiv.org/abs/2503.14476, dual clip
https://arxiv.org/abs/1912.09729, GSPO (sequence-level ratio) https://arxiv.org/abs/2507.18071,
CISPO https://arxiv.org/abs/2506.13585, truncated IS (TIS)
https://fengyao.notion.site/off-policy-rl, VAPO positive-example NLL
https://arxiv.org/abs/2504.05118. See docs/algorithms.md#clipped-policy-gradient-loss.

Implementation choices:
1) Layout: the pure function ``clipped_pg_loss`` takes *aligned* ``[B, T]`` tensors (index t of
   every argument is the same token). ``ClippedPGLossFn`` takes NeMo-RL's layout (stored
   ``[B, S]`` tensors, logits ``[B, S, V]``) and slices ``[:, 1:]`` to align them.
2) The options are one value, a ``ClippedPGLossConfig``: pass ``config=`` or keyword options
   (validated into one; an unknown option is a ``TypeError``). The loss is a composition of
   small steps a reader can take one at a time: ``probability_ratio`` and ``clipped_surrogate``
   (surrogate.py), ``kl_penalty_term`` (kl.py), ``truncated_importance_weights`` and
   ``train_inference_diagnostics`` (importance_sampling.py), ``reduce_loss`` (reduction.py).
3) ``use_kl_in_reward`` forces the loss's β to 0 (the KL then lives in the advantages).
4) Deliberate difference from NeMo-RL: with sequence-level (GSPO) ratios NeMo-RL reports
   ``sampling_importance_ratio`` as (Σ_b w_b)(Σ_b sm_b)/N_seq (a B×B broadcast, B× the mean);
   rlnb reports the mean Σ_b w_b·sm_b / N_seq. The loss itself is unaffected.
5) Deliberate difference: option combinations that cannot work fail when the config is built,
   not at the first loss call (``truncated_importance_sampling_ratio`` without a type,
   ``ratio_clip_min >= 1``, which would silently disable the lower clip, ...).
6) Bad input fails with a ``ValueError`` naming the tensor: masks that are not 0/1, NaN/inf
   advantages, log-probs above ``LOGPROB_TOLERANCE`` or NaN, an empty batch, global counts
   <= 0. The value checks ride in the same reduction as the metrics, so the loss still makes
   exactly one device sync.
7) ``compile=True`` runs the same math through ``fused.py``: loss, metrics and gradient in
   one compiled pass (benchmarks/bench_algorithms.py has the figures).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from rlnb.algorithms.checks import check_finite, check_mask, check_same_shape, check_tensor, upcast
from rlnb.algorithms.fused import fused_loss_and_grad
from rlnb.algorithms.importance_sampling import (
    train_inference_diagnostics,
    truncated_importance_weights,
)
from rlnb.algorithms.kl import kl_penalty_term
from rlnb.algorithms.logprobs import next_token_logprobs
from rlnb.algorithms.masked import masked_mean
from rlnb.algorithms.policy_loss_config import ClippedPGLossConfig, loss_config
from rlnb.algorithms.reduction import reduce_loss
from rlnb.algorithms.surrogate import clipped_surrogate, positive_example_nll, probability_ratio
from rlnb.config import parse_config

__all__ = ["ClippedPGLossConfig", "ClippedPGLossFn", "clipped_pg_loss", "loss_config"]


def _beta(cfg: ClippedPGLossConfig) -> float:
    """The β the loss uses: 0 under ``use_kl_in_reward`` (the config's ``loss_kl_penalty``,
    written here so a step never calls into the config module)."""
    return 0.0 if cfg.use_kl_in_reward else cfg.reference_policy_kl_penalty

# A log-prob above this is not a log-probability (float32 log-softmax errs by ~1e-6).
LOGPROB_TOLERANCE = 1e-3


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
    config: ClippedPGLossConfig | Mapping[str, Any] | None = None,
    compile: bool = False,
    **options: Any,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Clipped surrogate + KL penalty + optional VAPO NLL over one (micro-)batch.

    Args (all per-token tensors *aligned*: index t of each is the same token):
        logprobs: ``[B, T]`` log π of the sampled tokens under the current policy (gradient).
        prev_logprobs: ``[B, T]`` log π_old from before the update (ignored, may be None, with
            ``force_on_policy_ratio``).
        generation_logprobs: ``[B, T]`` log-probs reported by the generation engine.
        advantages: ``[B, T]``, finite.
        token_mask: ``[B, T]`` 0/1 generated tokens; sample_mask: ``[B]`` 0/1 rows.
        global_valid_seqs / global_valid_toks: N_seq / N_tok (> 0) of the whole global batch.
        reference_logprobs: ``[B, T]``, needed when the loss's β ≠ 0.
        logprobs_unfiltered: ``[B, T]`` log π without top-k/top-p filtering, for the KL term.
        rewards: ``[B]``, enables the positive-example NLL (μ > 0).
        config: a ``ClippedPGLossConfig`` (or its dict); ``**options`` are its fields, applied
            on top (``ratio_clip_max=0.28, reference_policy_kl_penalty=0.0``). The KL weight
            used is ``config.loss_kl_penalty`` (0 under ``use_kl_in_reward``).
        compile: run the math through ``torch.compile`` (same numbers to float rounding,
            several times faster on long batches; the first call compiles).
    Returns:
        ``(loss, metrics)``: 0-d loss and the metrics of ``METRIC_KEYS`` as python numbers.
    """
    # a ready config is used as is (no re-validation per call: the loss runs every micro-batch)
    cfg = (config if isinstance(config, ClippedPGLossConfig) and not options
           else loss_config(config, **options))
    check_tensor("logprobs", logprobs, ndim=2, floating=True)
    shape = tuple(logprobs.shape)
    if 0 in shape:
        raise ValueError(f"logprobs must not be empty, got shape {shape} (B = 0 or T = 0)")
    dtype = upcast(logprobs).dtype  # masks in the values' dtype, so 1e-8 survives in float64
    # Shapes are checked here; values inside the pass (one fused read), then below.
    tm = check_tensor("token_mask", token_mask, shape=shape).to(dtype)
    sm = check_tensor("sample_mask", sample_mask, shape=(shape[0],)).to(dtype)
    check_tensor("generation_logprobs", generation_logprobs, shape=shape, floating=True)
    check_tensor("advantages", advantages, shape=shape, floating=True)
    if not cfg.force_on_policy_ratio:
        check_tensor("prev_logprobs", prev_logprobs, shape=shape, floating=True)
    if _beta(cfg) != 0:
        if reference_logprobs is None:
            raise ValueError("reference_logprobs is required when reference_policy_kl_penalty != 0")
        check_tensor("reference_logprobs", reference_logprobs, shape=shape, floating=True)
    check_same_shape(logprobs=logprobs, logprobs_unfiltered=logprobs_unfiltered)
    for name, n in (("global_valid_seqs", global_valid_seqs),
                    ("global_valid_toks", global_valid_toks)):
        if not isinstance(n, torch.Tensor):  # a tensor count is checked in the fused pass
            _check_count(name, n)

    others = (
        prev_logprobs, generation_logprobs, advantages, tm, sm, global_valid_seqs,
        global_valid_toks, reference_logprobs, logprobs_unfiltered, rewards,
    )
    fusable = logprobs_unfiltered is None or not logprobs_unfiltered.requires_grad
    if compile and fusable:
        loss, (metric_values, checks) = fused_loss_and_grad(
            _clipped_pg_core, logprobs, others, {"cfg": cfg})
    else:
        loss, (metric_values, checks) = _clipped_pg_core(logprobs, *others, cfg=cfg)
    keys = [*metric_values, *checks]
    values = torch.stack([v.float().reshape(()) for v in [*metric_values.values(),
                                                          *checks.values()]]).tolist()  # 1 sync
    numbers = dict(zip(keys, values))
    _raise_on_bad_input({k: numbers[k] for k in checks}, token_mask=token_mask,
                        sample_mask=sample_mask, advantages=advantages)
    metrics: dict[str, float] = {k: numbers[k] for k in metric_values}
    if metrics["kl_penalty"] == 0:
        metrics["kl_penalty"] = 0  # an integer 0, as NeMo-RL reports "no KL"
    return loss, metrics


def _clipped_pg_core(
    logprobs, prev_logprobs, generation_logprobs, advantages, tm, sm, n_seq, n_tok,
    reference_logprobs, logprobs_unfiltered, rewards, *, cfg: ClippedPGLossConfig,
):
    """The math of ``clipped_pg_loss`` on shape-checked inputs; no host sync, so it compiles.

    Returns ``(loss, (metrics, checks))``: two dicts of 0-d tensors, the metrics (keys as in
    ``METRIC_KEYS``) and the values ``_raise_on_bad_input`` reads.
    """
    # log-probs of the sampled tokens under the current policy (the one with a gradient), the
    # policy that sampled them (π_old) and the generation engine (π_gen)
    logp, gen_logp, A = upcast(logprobs), upcast(generation_logprobs), upcast(advantages)
    # force_on_policy_ratio: π_old := sg(π), so the ratio is exactly 1, prev_logprobs ignored.
    old_logp = logp.detach() if cfg.force_on_policy_ratio else upcast(prev_logprobs)
    M = tm * sm.unsqueeze(-1)  # [B, T]
    beta = _beta(cfg)
    reduce = dict(token_level_loss=cfg.token_level_loss, global_valid_toks=n_tok,
                  global_valid_seqs=n_seq)

    # --- trainer vs generation engine: diagnostics, raw importance weights π_old / π_gen
    diagnostics, raw_weights = train_inference_diagnostics(
        old_logp, gen_logp, M, kl_type=cfg.reference_policy_kl_type, global_valid_toks=n_tok
    )

    # --- KL penalty to the reference policy
    if beta != 0:
        logp_kl = logp if logprobs_unfiltered is None else upcast(logprobs_unfiltered)
        kl_tok = kl_penalty_term(
            logp_kl, upcast(reference_logprobs), gen_logp, beta=beta,
            kl_type=cfg.reference_policy_kl_type,
            input_clamp_value=cfg.kl_input_clamp_value,
            output_clamp_value=cfg.kl_output_clamp_value,
            on_policy_kl_approximation=cfg.use_on_policy_kl_approximation,
        )
        kl = reduce_loss(kl_tok, tm, sm, **reduce)
    else:
        kl = torch.zeros((), dtype=logp.dtype, device=logp.device)

    # --- probability ratio and the clipped surrogate
    ratio, ratio_clamped = probability_ratio(
        logp, old_logp, tm, ratio_clip_min=cfg.ratio_clip_min, ratio_clip_max=cfg.ratio_clip_max,
        disable_ppo_ratio=cfg.disable_ppo_ratio,
        sequence_level=cfg.sequence_level_importance_ratios,
        force_on_policy=cfg.force_on_policy_ratio,
    )
    per_token = clipped_surrogate(A, ratio, ratio_clamped, logp, use_cispo=cfg.use_cispo,
                                  ratio_clip_c=cfg.ratio_clip_c)

    # --- importance-sampling correction (trainer vs generation engine), detached
    with torch.no_grad():
        w, is_oob = truncated_importance_weights(
            old_logp, gen_logp, tm, M, sm, sequence_level=cfg.sequence_level_importance_ratios,
            kind=cfg.truncated_importance_sampling_type,
            hi=cfg.truncated_importance_sampling_ratio,
            lo=cfg.truncated_importance_sampling_ratio_min,
            global_valid_toks=n_tok, global_valid_seqs=n_seq, token_weights=raw_weights,
        )
    if cfg.use_importance_sampling_correction:
        per_token = w * per_token
    actor = reduce_loss(per_token, tm, sm, **reduce)

    # --- VAPO: NLL on positive examples, normalised locally (not by the global counts)
    nll = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if cfg.positive_example_nll_weight > 0 and rewards is not None:
        nll = positive_example_nll(logp, M, rewards)
    loss = actor + kl + cfg.positive_example_nll_weight * nll

    with torch.no_grad():
        token_ratio = not (cfg.force_on_policy_ratio or cfg.disable_ppo_ratio
                           or cfg.sequence_level_importance_ratios)
        # π/π_gen = (π/π_prev)·(π_prev/π_gen): reuse the token ratio when there is one.
        pi_over_gen = (ratio.detach() * raw_weights if token_ratio
                       else torch.exp(logp.detach() - gen_logp))
        metrics = _metrics(
            cfg, loss=loss, kl=kl, nll=nll, ratio=ratio.detach(),
            ratio_clamped=ratio_clamped.detach(), weights=w, is_oob=is_oob,
            approx_entropy=masked_mean(-pi_over_gen * logp.detach(), M, None, n_tok),
            diagnostics=diagnostics, M=M, sm=sm, n_seq=n_seq, n_tok=n_tok,
        )
        checks = _input_checks(logp, old_logp, gen_logp, A,
                               reference_logprobs if beta != 0 else None, tm, sm, n_seq, n_tok,
                               check_prev=not cfg.force_on_policy_ratio)
    return loss, (metrics, checks)


def _masked_min_max(x: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Min and max of ``x`` over ``mask > 0`` (+inf / -inf when the mask is empty)."""
    inf = torch.tensor(math.inf, dtype=x.dtype, device=x.device)
    valid = mask > 0
    return torch.where(valid, x, inf).amin(), torch.where(valid, x, -inf).amax()


def _metrics(cfg, *, loss, kl, nll, ratio, ratio_clamped, weights, is_oob, approx_entropy,
             diagnostics, M, sm, n_seq, n_tok) -> dict[str, torch.Tensor]:
    """The metrics (``METRIC_KEYS``, in that order) as 0-d tensors (no sync)."""
    r_min, r_max = _masked_min_max(ratio, M)
    rc_min, rc_max = _masked_min_max(ratio_clamped, M)
    if cfg.sequence_level_importance_ratios:
        sir = masked_mean(weights.squeeze(-1), sm, None, n_seq)  # choice 4: the true mean
    else:
        sir = masked_mean(weights, M, None, n_tok)
    beta = _beta(cfg)
    kl_metric = torch.where(kl != 0, kl / beta if beta != 0 else kl, torch.zeros_like(kl))
    metrics = {
        "loss": loss.detach(),
        "probs_ratio": masked_mean(ratio, M, None, n_tok),
        "probs_ratio_clamped": masked_mean(ratio_clamped, M, None, n_tok),
        "probs_ratio_min": r_min, "probs_ratio_max": r_max,
        "probs_ratio_clamped_min": rc_min, "probs_ratio_clamped_max": rc_max,
        "kl_penalty": kl_metric.detach(),  # KL / β
        **{k: diagnostics[k] for k in ("token_mult_prob_error", "gen_kl_error",
                                       "policy_kl_error", "js_divergence_error")},
        "sampling_importance_ratio": sir,
        "num_valid_samples": sm.sum(),
        "approx_entropy": approx_entropy,
    }
    if is_oob is not None:  # only with truncated importance sampling
        metrics["is_oob_ratio"] = is_oob
    metrics["positive_nll_loss"] = nll.detach()
    # rlnb extra (not a NeMo-RL key): share of valid tokens whose ratio the clip moved
    metrics["clip_fraction"] = masked_mean((ratio != ratio_clamped).to(M.dtype), M, None, n_tok)
    return metrics


def _input_checks(logp, old_logp, gen_logp, A, ref, tm, sm, n_seq, n_tok, *, check_prev
                  ) -> dict[str, torch.Tensor]:
    """What ``_raise_on_bad_input`` reads, as 0-d tensors (no sync)."""
    absent = torch.full((), -math.inf, device=logp.device)
    return {
        "bad_mask_entries": (tm * (1 - tm) != 0).sum() + (sm * (1 - sm) != 0).sum(),
        "bad_advantages": (~torch.isfinite(A)).sum(),  # NaN/inf poison the loss even if masked
        "logprobs": logp.detach().amax(),  # amax propagates NaN: one number catches NaN and > 0
        "prev_logprobs": old_logp.amax() if check_prev else absent,
        "generation_logprobs": gen_logp.amax(),
        "reference_logprobs": upcast(ref).amax() if ref is not None else absent,
        "global_valid_seqs": torch.as_tensor(n_seq, device=logp.device),
        "global_valid_toks": torch.as_tensor(n_tok, device=logp.device),
    }


def _raise_on_bad_input(checks: dict[str, float], *, token_mask, sample_mask, advantages):
    """Turn the fused input checks into a ``ValueError`` naming the tensor (error path only)."""
    if checks["bad_mask_entries"]:
        check_mask("token_mask", token_mask)  # raises, naming the first bad entry
        check_mask("sample_mask", sample_mask)
    if checks["bad_advantages"]:
        check_finite("advantages", advantages)
    for name in ("logprobs", "prev_logprobs", "generation_logprobs", "reference_logprobs"):
        top = checks[name]
        if math.isnan(top):
            raise ValueError(f"{name} contains NaN")
        if top > LOGPROB_TOLERANCE:
            raise ValueError(f"{name} must be log-probabilities (<= 0), got a maximum of "
                             f"{top:.4g} (tolerance {LOGPROB_TOLERANCE})")
    for name in ("global_valid_seqs", "global_valid_toks"):
        _check_count(name, checks[name])


def _check_count(name: str, n: float) -> None:
    if not n > 0:
        raise ValueError(f"{name} must be > 0, got {n} (a global batch with no valid sequence "
                         "or token has nothing to train on: skip the update)")


# the metrics clipped_pg_loss returns, in order (is_oob_ratio only with truncated importance
# sampling); docs/metrics.md documents each
METRIC_KEYS = (
    "loss", "probs_ratio", "probs_ratio_clamped", "probs_ratio_min", "probs_ratio_max",
    "probs_ratio_clamped_min", "probs_ratio_clamped_max", "kl_penalty", "token_mult_prob_error",
    "gen_kl_error", "policy_kl_error", "js_divergence_error", "sampling_importance_ratio",
    "num_valid_samples", "approx_entropy", "is_oob_ratio", "positive_nll_loss", "clip_fraction",
)


_REQUIRED_KEYS = ("advantages", "generation_logprobs", "token_mask", "sample_mask")


class ClippedPGLossFn:
    """NeMo-RL-style wrapper: ``loss_fn(next_token_logits, data, N_seq, N_tok) -> (loss, metrics)``.

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
        needed = list(_REQUIRED_KEYS)
        if not cfg.force_on_policy_ratio:
            needed.append("prev_logprobs")
        if _beta(cfg) != 0:
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
            config=cfg,
        )
