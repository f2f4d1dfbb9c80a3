"""The varlen (packed sequences) mode of the oracle and the shared checks of attention_varlen (compare.varlen), on
the CPU: a correct packed implementation passes, one with a fault at a sequence boundary or an unwritten row fails
and names the sequence, and bad offsets get a clear error."""
import re

import pytest
import torch

from compare import oracle, varlen
from varlen_reference import packed_reference


CASES = [
    oracle.VarlenCase((5, 1, 17), (5, 9, 30), 4, 4, 32, fmt="fp32"),
    oracle.VarlenCase((3, 0, 8, 2), (4, 2, 8, 0), 4, 2, 32, causal=True, fmt="fp32"),   # empty query / key sets
    oracle.VarlenCase((9, 6), (6, 9), 8, 2, 64, causal=True, fmt="fp16"),               # Sq > Sk and Sq < Sk
    oracle.VarlenCase((12, 7), (12, 20), 4, 1, 32, fmt="fp32", window=(3, 2)),
    oracle.VarlenCase((6, 6), (6, 6), 2, 2, 32, fmt="fp32", dist="large", softcap=4.0),
    oracle.VarlenCase((5, 9), (7, 4), 4, 2, 48, causal=True, fmt="fp32", head_dim_v=32),  # V narrower than Q/K
]


@pytest.mark.parametrize("case", CASES, ids=[c.shape_str() for c in CASES])
def test_a_correct_packed_implementation_passes(case):
    verdict = oracle.check_varlen(packed_reference, case)
    assert verdict.passed, verdict.summary()
    assert verdict.rows_checked == sum(case.seqlens_q)


def test_a_fault_at_a_sequence_boundary_fails_and_names_the_sequence():
    case = oracle.VarlenCase((5, 7, 4), (6, 9, 5), 4, 2, 32, fmt="fp32")
    verdict = oracle.check_varlen(lambda *a, **kw: packed_reference(*a, **kw, shift_keys=1), case)
    assert not verdict.passed and "sequence 1" in verdict.reason and "sequence 0" not in verdict.reason


def test_an_unwritten_row_and_a_wrong_empty_sequence_fail():
    case = oracle.VarlenCase((4, 3, 2), (4, 0, 6), 2, 2, 32, fmt="fp32")

    def leaves_a_row(*a, **kw):
        out, lse = packed_reference(*a, **kw)
        out[8] = float("nan")  # the last sequence's second row
        out[4:7] = 1.0        # the sequence without keys must be 0
        return out, lse
    verdict = oracle.check_varlen(leaves_a_row, case)
    assert "sequence 2" in verdict.reason and "NaN" in verdict.reason
    assert "sequence 1 (no keys)" in verdict.reason


def test_the_sequences_are_drawn_apart_and_packed_in_order():
    case = oracle.VarlenCase((3, 3), (3, 3), 2, 2, 32, fmt="fp32")
    inputs = oracle.make_varlen_inputs(case)
    assert inputs.cu_seqlens_q.dtype == torch.int32 and inputs.cu_seqlens_q.tolist() == [0, 3, 6]
    assert not torch.equal(inputs.q[:3], inputs.q[3:])  # a seed per sequence
    assert torch.equal(inputs.q[3:6], inputs.sequences[1].q[0].transpose(0, 1))
    assert oracle.make_varlen_inputs(case).q.equal(inputs.q)  # and the same again for the same case


# ---------------------------------------------------------------- compare.varlen: the API's checks

def _call(**change):
    case = oracle.VarlenCase((3, 5), (4, 6), 4, 2, 32, fmt="fp16")
    inputs = oracle.make_varlen_inputs(case)
    args = dict(q=inputs.q, k=inputs.k, v=inputs.v, cu_seqlens_q=inputs.cu_seqlens_q,
                cu_seqlens_k=inputs.cu_seqlens_k, max_seqlen_q=5, max_seqlen_k=6)
    args.update(change)
    layout = varlen.check_inputs(**args)
    varlen.check_values(layout, args["cu_seqlens_q"], args["cu_seqlens_k"], args["max_seqlen_q"],
                        args["max_seqlen_k"])
    return layout


def test_good_inputs_give_the_layout():
    layout = _call()
    assert (layout.batch, layout.heads_q, layout.heads_kv, layout.head_dim, layout.head_dim_v, layout.total_q,
            layout.total_k) == (2, 4, 2, 32, 32, 8, 10)
    assert _call(v=torch.zeros(10, 2, 16, dtype=torch.float16)).head_dim_v == 16  # V's own head_dim


@pytest.mark.parametrize("change,exc,words", [
    (dict(cu_seqlens_q=torch.tensor([0, 3, 8], dtype=torch.int64)), TypeError, "cu_seqlens_q must be int32"),
    (dict(cu_seqlens_q=torch.tensor([0, 6, 8], dtype=torch.int32).flip(0)), ValueError, "cu_seqlens_q[0] must be 0"),
    (dict(cu_seqlens_k=torch.tensor([0, 7, 6], dtype=torch.int32)), ValueError, "non-decreasing"),
    (dict(cu_seqlens_k=torch.tensor([0, 4, 9], dtype=torch.int32)), ValueError, "holds 10 tokens"),
    (dict(cu_seqlens_k=torch.tensor([0, 4, 6, 10], dtype=torch.int32)), ValueError, "the same length"),
    (dict(max_seqlen_q=4), ValueError, "below the longest sequence"),
    (dict(max_seqlen_k=6.0), TypeError, "max_seqlen_k must be an int"),
    (dict(q=torch.zeros(8, 3, 32, dtype=torch.float16)), ValueError, "multiple of the heads"),
    (dict(q=torch.zeros(8, 4, 32)), TypeError, "share a dtype"),
    (dict(v=torch.zeros(10, 1, 32, dtype=torch.float16)), ValueError, "the same (total_tokens, heads)"),
    (dict(q=torch.zeros(2, 4, 4, 32, dtype=torch.float16)), ValueError, "(total_tokens, heads, head_dim)"),
    (dict(window=(2,)), ValueError, "window"),
    (dict(softcap=-1.0), ValueError, "softcap"),
])
def test_bad_inputs_get_a_clear_error(change, exc, words):
    window = change.pop("window", (-1, -1))
    softcap = change.pop("softcap", 0.0)
    with pytest.raises(exc, match=re.escape(words)):
        if window != (-1, -1) or softcap:
            case = oracle.VarlenCase((3, 5), (4, 6), 4, 2, 32, fmt="fp16")
            inputs = oracle.make_varlen_inputs(case)
            varlen.check_inputs(inputs.q, inputs.k, inputs.v, inputs.cu_seqlens_q, inputs.cu_seqlens_k, 5, 6,
                                window=window, softcap=softcap)
        else:
            _call(**change)


@pytest.mark.parametrize("mix", sorted(varlen.LENGTH_MIXES))
def test_length_mixes_fill_the_token_budget_reproducibly(mix):
    lengths = varlen.length_mix(mix, 65536, seed=3)
    assert sum(lengths) == 65536 and min(lengths) >= 1
    assert lengths == varlen.length_mix(mix, 65536, seed=3)
    if mix == "longtail":
        assert max(lengths) == 16384 and min(lengths[:-1]) >= 64   # (the last one is cut to fit)
        assert 1000 < sum(lengths) / len(lengths) < 4000
    elif mix == "uniform":
        assert max(lengths) <= 4096 and len(set(lengths)) > len(lengths) // 2
    else:
        assert set(lengths) == {4096}


def test_length_mix_refuses_unknown_names_and_empty_budgets():
    with pytest.raises(ValueError, match="length mix 'zipf'"):
        varlen.length_mix("zipf", 100)
    with pytest.raises(ValueError, match="tokens must be >= 1"):
        varlen.length_mix("uniform", 0)
