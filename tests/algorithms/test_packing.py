"""Sequence packing: pack_sequences, wrapper slicing and metric reduction, packed == unpacked."""

import math

import pytest
import torch

from rlnb.algorithms.packing import SequencePackingLossWrapper, pack_sequences
from rlnb.algorithms.policy_loss import ClippedPGLossFn
from rlnb.algorithms.preference import DPOLossFn, NLLLoss

# --- pack_sequences ------------------------------------------------------------------------------

IDS = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0], [6, 7, 8, 9]])


def test_pack_sequences_hand_checked():
    packed, cu, cu_pad = pack_sequences(IDS, [3, 2, 4])
    assert packed.tolist() == [[1, 2, 3, 4, 5, 6, 7, 8, 9]]
    assert cu.tolist() == [0, 3, 5, 9] and cu_pad.tolist() == [0, 3, 5, 9]
    assert cu.dtype == torch.int32

    packed, cu, cu_pad = pack_sequences(IDS, torch.tensor([3, 2, 4]), 4, pad_token_id=-1)
    assert packed.tolist() == [[1, 2, 3, -1, 4, 5, -1, -1, 6, 7, 8, 9]]
    assert cu.tolist() == [0, 3, 5, 9] and cu_pad.tolist() == [0, 4, 8, 12]


@pytest.mark.parametrize(
    "lengths, multiple, name",
    [([3, 2], 1, "lengths"), ([3, 2, 5], 1, "lengths"), ([3, 2, 4], 0, "pad_to_multiple_of")],
)
def test_pack_sequences_bad_input(lengths, multiple, name):
    with pytest.raises(ValueError, match=name):
        pack_sequences(IDS, lengths, multiple)


# --- wrapper mechanics with a recording stub ----------------------------------------------------


class Recorder:
    """Stub loss: records what it is called with, returns a loss and min/max metrics."""

    def __init__(self, mins, maxs):
        self.calls, self.mins, self.maxs = [], list(mins), list(maxs)

    def __call__(self, logits, data, n_seq, n_tok):
        self.calls.append((logits, data, n_seq, n_tok))
        k = len(self.calls) - 1
        loss = logits.sum()
        return loss, {"n": 1.0, "ratio_min": self.mins[k], "ratio_max": self.maxs[k]}


def test_wrapper_slices_rows_positions_and_logits():
    V = 2
    _, cu, cu_pad = pack_sequences(IDS, [3, 2, 4], 4)
    logits = torch.arange(12 * V, dtype=torch.float32).reshape(1, 12, V)
    rec = Recorder([0.5, math.inf, 0.2], [-math.inf, 3.0, 2.0])
    data = {
        "input_ids": IDS,
        "sample_mask": torch.tensor([1.0, 0.0, 1.0]),
        "score": torch.tensor([[1.0], [2.0], [3.0]]),
        "note": "passed through",
    }
    loss, m = SequencePackingLossWrapper(rec, cu, cu_pad)(logits, data, 7, 11)
    assert len(rec.calls) == 3
    for i, (start, n) in enumerate([(0, 3), (4, 2), (8, 4)]):
        lg, d, n_seq, n_tok = rec.calls[i]
        torch.testing.assert_close(lg, logits[:, start : start + n])  # [1, L_i, V]
        assert d["input_ids"].tolist() == [IDS[i, :n].tolist()]
        assert d["sample_mask"].shape == (1,) and d["score"].shape == (1, 1)
        assert d["note"] == "passed through" and (n_seq, n_tok) == (7, 11)
    expected = sum(logits[0, s : s + n].sum() for s, n in [(0, 3), (4, 2), (8, 4)])
    assert loss.item() == expected.item()
    # summed, except *_min / *_max: min / max ignoring ±inf
    assert m == {"n": 3.0, "ratio_min": 0.2, "ratio_max": 3.0}


def test_wrapper_all_inf_min_keeps_sentinel():
    _, cu, _ = pack_sequences(IDS[:2], [3, 2])
    rec = Recorder([math.inf, math.inf], [-math.inf, -math.inf])
    _, m = SequencePackingLossWrapper(rec, cu)(torch.zeros(1, 5, 2), {"x": IDS[:2]}, 2, 3)
    assert m["ratio_min"] == math.inf and m["ratio_max"] == -math.inf


@pytest.mark.parametrize(
    "cu, cu_pad, name",
    [
        ([1, 3, 5, 9], None, "cu_seqlens_q must start at 0"),
        ([0, 3, 2, 9], None, "cu_seqlens_q must be non-decreasing"),
        ([0.0, 3.0, 5.0, 9.0], None, "cu_seqlens_q must be an integer"),
        ([[0, 3, 5, 9]], None, "cu_seqlens_q must be 1-D"),
        ([0, 3, 5, 9], [0, 4, 8], "cu_seqlens_q_padded must have the length"),
        ([0, 3, 5, 9], [0, 2, 8, 12], "at least the sequence lengths"),
        ([0, 3, 5, 9], [0, 4, 8, 16], "past the 12 positions"),
        ([0, 3, 9], None, "data has 3 rows"),
    ],
)
def test_wrapper_rejects_bad_cu_seqlens(cu, cu_pad, name):
    with pytest.raises(ValueError, match=name):
        wrapper = SequencePackingLossWrapper(Recorder([0] * 3, [0] * 3), cu, cu_pad)
        wrapper(torch.zeros(1, 12, 2), {"input_ids": IDS}, 3, 9)


def test_wrapper_rejects_unpacked_logits():
    wrapper = SequencePackingLossWrapper(Recorder([0] * 3, [0] * 3), [0, 3, 5, 9])
    with pytest.raises(ValueError, match="next_token_logits"):
        wrapper(torch.zeros(3, 4, 2), {"input_ids": IDS}, 3, 9)


# --- packed == unpacked for the real losses ------------------------------------------------------

B, S, V = 4, 7, 5
LENGTHS = [4, 7, 2, 5]


def make_batch(seed=0):
    """Right-padded batch: prompt token 0 masked, response tokens 1..L_i-1, pads beyond L_i."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1, V, (B, S), generator=g)
    tm = torch.zeros(B, S)
    for b, n in enumerate(LENGTHS):
        ids[b, n:] = 0
        tm[b, 1:n] = (torch.rand(n - 1, generator=g) > 0.2).float()
    stored = {
        k: torch.randn(B, S, generator=g) * 0.3 - 1.0
        for k in ("prev_logprobs", "generation_logprobs", "reference_policy_logprobs")
    }
    data = {
        "input_ids": ids,
        "token_mask": tm,
        "sample_mask": torch.tensor([1.0, 1.0, 0.0, 1.0]),
        "advantages": torch.randn(B, 1, generator=g).expand(B, S).clone(),
        **stored,
    }
    logits = torch.randn(B, S, V, generator=g)
    return logits, data


def pack_logits(logits, cu_pad):
    """[B, S, V] -> [1, T, V] at the packed positions, garbage in the slot padding."""
    pieces = []
    for b, n in enumerate(LENGTHS):
        pieces.append(logits[b, :n])
        pad = int(cu_pad[b + 1] - cu_pad[b]) - n
        pieces.append(torch.full((pad, V), 1e4))  # must never be read
    return torch.cat(pieces).unsqueeze(0)


def global_counts(data):
    sm, tm = data["sample_mask"], data["token_mask"][:, 1:]
    return sm.sum(), (tm * sm[:, None]).sum()


@pytest.mark.parametrize(
    "loss_fn",
    [
        NLLLoss(),
        DPOLossFn({"sft_loss_weight": 0.5, "preference_average_log_probs": True}),
        ClippedPGLossFn(),
        ClippedPGLossFn({"token_level_loss": False, "ratio_clip_max": 0.28}),
    ],
    ids=["nll", "dpo", "clipped_pg", "clipped_pg_seq_level"],
)
@pytest.mark.parametrize("multiple", [1, 4])
def test_packed_equals_unpacked(loss_fn, multiple):
    logits, data = make_batch()
    n_seq, n_tok = global_counts(data)

    x = logits.clone().requires_grad_(True)
    ref_loss, ref_m = loss_fn(x, data, n_seq, n_tok)
    ref_loss.backward()

    _, cu, cu_pad = pack_sequences(data["input_ids"], LENGTHS, multiple)
    y = logits.clone().requires_grad_(True)
    wrapper = SequencePackingLossWrapper(loss_fn, cu, cu_pad)
    loss, m = wrapper(pack_logits(y, cu_pad), data, n_seq, n_tok)
    loss.backward()

    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5, abs=1e-7)
    assert list(m) == list(ref_m)
    for k in ref_m:
        assert float(m[k]) == pytest.approx(float(ref_m[k]), rel=1e-5, abs=1e-6), k
    torch.testing.assert_close(y.grad, x.grad, rtol=1e-5, atol=1e-7)
    assert y.grad.abs().sum() > 0


def test_dpo_needs_pairs_per_call():
    """NeMo-RL's one-sequence-per-call cannot pack DPO; rlnb's rows_per_call=2 can (above)."""
    logits, data = make_batch()
    _, cu, _ = pack_sequences(data["input_ids"], LENGTHS)
    wrapper = SequencePackingLossWrapper(DPOLossFn(), cu, rows_per_call=1)
    with pytest.raises(ValueError, match="even number of rows"):
        wrapper(pack_logits(logits, cu), data, *global_counts(data))
    with pytest.raises(ValueError, match="rows_per_call"):
        SequencePackingLossWrapper(DPOLossFn(), [0, 2, 5, 7])  # 3 sequences, pairs of 2
