"""rlnb.nemo.loss: NeMo-RL's loss classes in their current and older call forms, their enums and
metric normalisations, input preparation and sequence packing, on hand-made tensors."""

import math

import pytest
import torch

from rlnb.nemo.batched_data_dict import BatchedDataDict


def pg_data():
    # stored [1, 3]; with logits of zeros over V = 2 every log-prob is -ln 2
    return {"input_ids": torch.tensor([[0, 1, 0]]), "advantages": torch.tensor([[0.0, 2.0, 2.0]]),
            "prev_logprobs": torch.full((1, 3), -math.log(2)),
            "generation_logprobs": torch.full((1, 3), -math.log(2)),
            "reference_policy_logprobs": torch.full((1, 3), -math.log(2)),
            "token_mask": torch.tensor([[0.0, 1.0, 1.0]]), "sample_mask": torch.tensor([1.0])}


def test_clipped_pg_loss_takes_logprobs_logits_and_the_worker_call():
    from rlnb.nemo.loss import (
        ClippedPGLossConfig,
        ClippedPGLossFn,
        LossInputType,
        LossType,
        prepare_loss_input,
    )

    fn = ClippedPGLossFn(ClippedPGLossConfig())
    assert fn.loss_type is LossType.TOKEN_LEVEL and fn.input_type is LossInputType.LOGPROB
    data, n_seq, n_tok = pg_data(), torch.tensor(1.0), torch.tensor(2.0)
    logprobs = torch.full((1, 2), -math.log(2))
    logits = torch.zeros(1, 3, 2)
    # ratio 1, A = 2 on both tokens, β·KL = 0 (same log-probs): L = -(2 + 2)/2 = -2
    loss, metrics = fn(logprobs, data, n_seq, n_tok)
    assert loss.item() == pytest.approx(-2.0) and metrics["probs_ratio"] == pytest.approx(1.0)
    assert fn(logits, data, n_seq, n_tok)[0].item() == pytest.approx(-2.0)  # the older form
    assert fn(next_token_logits=logits, data=data, global_valid_seqs=n_seq,
              global_valid_toks=n_tok)[0].item() == pytest.approx(-2.0)
    loss_input, same = prepare_loss_input(logits, data, fn)
    assert same is data and set(loss_input) == {"next_token_logprobs"}
    assert fn(data=data, global_valid_seqs=n_seq, global_valid_toks=n_tok,
              **loss_input)[0].item() == pytest.approx(-2.0)
    with pytest.raises(TypeError, match="not both"):
        fn(logprobs, data, n_seq, n_tok, next_token_logits=logits)
    # deliberate: a positive log-prob is refused (NeMo-RL would train on it)
    with pytest.raises(ValueError, match="logprobs"):
        fn(torch.full((1, 2), 0.5), data, n_seq, n_tok)
    with pytest.raises(ValueError, match="global_valid_toks"):
        fn(logprobs, data, n_seq, torch.tensor(0.0))


def test_metric_normalizations_follow_the_config():
    from rlnb.nemo.loss import ClippedPGLossConfig, ClippedPGLossFn, MetricNormalizer, NLLLossFn

    T, S, N = MetricNormalizer.TOKENS, MetricNormalizer.SEQUENCES, MetricNormalizer.NONE
    norms = ClippedPGLossFn(ClippedPGLossConfig()).metric_normalizations
    assert (norms["loss"], norms["kl_penalty"], norms["sampling_importance_ratio"]) == (T, T, T)
    assert (norms["num_valid_samples"], norms["probs_ratio_min"]) == (N, N)
    assert "is_oob_ratio" not in norms
    gspo = ClippedPGLossFn(ClippedPGLossConfig(
        token_level_loss=False, sequence_level_importance_ratios=True,
        use_importance_sampling_correction=True)).metric_normalizations
    assert (gspo["loss"], gspo["sampling_importance_ratio"], gspo["probs_ratio"]) == (S, S, T)
    tis = ClippedPGLossFn(ClippedPGLossConfig(
        use_importance_sampling_correction=True, truncated_importance_sampling_type="seq-mask-tis",
        truncated_importance_sampling_ratio=2.0, truncated_importance_sampling_ratio_min=0.5))
    assert tis.metric_normalizations["is_oob_ratio"] is S
    # every metric the loss returns is advertised
    _, metrics = tis(torch.full((1, 2), -math.log(2)), pg_data(), 1.0, 2.0)
    assert set(metrics) <= set(tis.metric_normalizations)
    assert NLLLossFn().metric_normalizations == {"loss": T, "num_unmasked_tokens": N,
                                                 "num_valid_samples": N}


def test_nll_dpo_preference_and_value_losses_in_their_nemo_rl_call_forms():
    from rlnb.nemo.loss import (
        DPOLossConfig,
        DPOLossFn,
        MseValueLossConfig,
        MseValueLossFn,
        NLLLossFn,
        PreferenceLossFn,
        prepare_loss_input,
    )

    data = {"input_ids": torch.tensor([[0, 1, 2]]), "token_mask": torch.tensor([[0.0, 1.0, 1.0]]),
            "sample_mask": torch.tensor([1.0])}
    nll = NLLLossFn()
    logits = torch.zeros(1, 3, 4)  # uniform over V = 4: every token costs ln 4
    loss, metrics = nll(data=data, global_valid_seqs=1, global_valid_toks=2,
                        **prepare_loss_input(logits, data, nll)[0])
    assert loss.item() == pytest.approx(math.log(4)) and metrics["num_unmasked_tokens"] == 2
    rows, _ = nll(next_token_logprobs=torch.tensor([[-1.0, -3.0]]), data=data,
                  global_valid_seqs=1, global_valid_toks=2, dpo_loss=True,
                  dpo_average_log_probs=True)
    assert rows.tolist() == [2.0]  # per row, averaged over its 2 tokens
    pairs = {"input_ids": torch.zeros(2, 2, dtype=torch.long),
             "token_mask": torch.tensor([[0.0, 1.0], [0.0, 1.0]]),
             "sample_mask": torch.ones(2), "reference_policy_logprobs": torch.zeros(2, 2)}
    dpo = DPOLossFn(DPOLossConfig(reference_policy_kl_penalty=0.05))
    loss, metrics = dpo(torch.tensor([[-1.0], [-2.0]]), pairs, torch.tensor(2.0), None)
    # implicit rewards -1 (chosen) and -2 (rejected): -log σ(0.05 · 1) over one pair
    assert loss.item() == pytest.approx(math.log1p(math.exp(-0.05)))
    assert metrics["accuracy"] == 1.0 and metrics["rewards_chosen_mean"] == pytest.approx(-1.0)
    pref = PreferenceLossFn()
    loss, _ = pref(logits=torch.tensor([[1.0], [0.0]]), data={"sample_mask": torch.ones(2)},
                   global_valid_seqs=torch.tensor(2.0), global_valid_toks=None)
    assert loss.item() == pytest.approx(math.log1p(math.exp(-1.0)))
    assert [t.tolist() for t in pref.split_output_tensor(torch.arange(4))] == [[0, 2], [1, 3]]
    value = MseValueLossFn(MseValueLossConfig())
    loss, _ = value(logits=torch.tensor([[[0.0], [1.0]]]), data={
        "returns": torch.tensor([[0.0, 3.0]]), "values": torch.tensor([[0.0, 1.0]]),
        "token_mask": torch.tensor([[0.0, 1.0]]), "sample_mask": torch.tensor([1.0])},
        global_valid_seqs=1, global_valid_toks=torch.tensor(1.0))
    assert loss.item() == pytest.approx(0.5 * (1.0 - 3.0) ** 2)


def test_packed_losses_equal_the_unpacked_loss():
    from rlnb.nemo.loss import (
        ClippedPGLossFn,
        SequencePackingFusionLossWrapper,
        SequencePackingLossWrapper,
        prepare_loss_input,
        prepare_packed_loss_input,
        wrap_loss_fn_with_input_preparation,
    )

    g = torch.Generator().manual_seed(0)
    B, S, V = 2, 4, 5
    lengths = [4, 3]
    data = BatchedDataDict(
        input_ids=torch.randint(0, V, (B, S), generator=g),
        advantages=torch.randn(B, S, generator=g),
        prev_logprobs=-torch.rand(B, S, generator=g) - 1,
        generation_logprobs=-torch.rand(B, S, generator=g) - 1,
        reference_policy_logprobs=-torch.rand(B, S, generator=g) - 1,
        token_mask=torch.tensor([[0.0, 1, 1, 1], [0, 1, 1, 0]]), sample_mask=torch.ones(B))
    logits = torch.randn(B, S, V, generator=g)
    fn = ClippedPGLossFn()
    want, _ = wrap_loss_fn_with_input_preparation(logits, data, 2, 5, fn, prepare_loss_input)
    # pack: sequence i's real positions at cu_padded[i], slots of 5 (one position of padding)
    cu, cu_pad = torch.tensor([0, 4, 7]), torch.tensor([0, 5, 10])
    packed = torch.zeros(1, 10, V)
    for i, n in enumerate(lengths):
        packed[0, cu_pad[i]: cu_pad[i] + n] = logits[i, :n]
    per_seq, _ = SequencePackingLossWrapper(fn, prepare_loss_input, cu, cu_pad)(packed, data, 2, 5)
    fused, _ = SequencePackingFusionLossWrapper(fn, prepare_packed_loss_input, cu, cu_pad)(
        packed, data, 2, 5)
    assert per_seq.item() == pytest.approx(want.item(), abs=1e-6)
    assert fused.item() == pytest.approx(want.item(), abs=1e-6)
    with pytest.raises(ValueError, match="vocab_parallel_group: rlnb has no tensor"):
        SequencePackingLossWrapper(fn, prepare_loss_input, cu, vocab_parallel_group=object())
    with pytest.raises(ValueError, match="top_k=20"):
        prepare_loss_input(logits, data, fn, sampling_params={"top_k": 20, "top_p": 1.0})
