"""The varlen sweep (compare/sweeps/varlen.toml) on the CPU: its packed batches, how the driver judges and times a
packed row and a padded one, the columns that tell them apart, and the registry's packed-batch peer."""
import pytest
import torch

from compare import backends, bench, oracle, sweeps, varlen
from compare.schema import shape_label
from varlen_reference import packed_reference


def test_the_sweep_holds_each_mix_packed_and_padded():
    cases = sweeps.load("varlen").cases
    packed = [c for c in cases if isinstance(c, varlen.SweepCase)]
    assert len(packed) == len(cases)
    keys = {(c.mix, c.head_dim, c.causal, c.padded, c.window) for c in cases}
    for mix in varlen.LENGTH_MIXES:
        for head_dim in (64, 128):
            for causal in (True, False):
                assert {(mix, head_dim, causal, p, (-1, -1)) for p in (False, True)} <= keys
    assert ("longtail", 128, True, False, (4096, -1)) in keys
    assert all(sum(c.case.seqlens_q) == 65536 and c.heads_q * c.head_dim == 2048 for c in cases)


def test_packed_keys_are_checked(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[[shapes]]\nlengths = "uniform"\ntokens = 64\nheads_q = 2\nhead_dim = 64\npacking = "ragged"\n')
    with pytest.raises(ValueError, match="packing must be one of"):
        sweeps.load(str(bad))
    bad.write_text('[[shapes]]\nlengths = "zipf"\ntokens = 64\nheads_q = 2\nhead_dim = 64\n')
    with pytest.raises(ValueError, match="length mix 'zipf'"):
        sweeps.load(str(bad))


def _reference_backend(**changes) -> backends.Backend:
    """A backend whose varlen call is the float64 reference and whose dense call is SDPA's math kernel."""
    def run_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, return_lse=False, **kw):
        out, lse = packed_reference(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                    max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, return_lse=True, **kw)
        return (out, lse) if return_lse else out
    math_kernel = backends.get("sdpa:math")
    return backends.Backend(**{**dict(name="test:reference", family="peer", formats=("fp32",), head_dims=None,
                                      run=math_kernel.run, availability=lambda: None, returns_lse=False,
                                      varlen=True, run_varlen=run_varlen, local=True), **changes})


def test_a_packed_row_and_a_padded_row_are_judged_then_timed_on_the_packed_flops():
    batch = varlen.SweepCase(oracle.VarlenCase((5, 40, 0, 23), (5, 40, 0, 23), 2, 2, 16, causal=True, fmt="fp32"),
                             mix="uniform")
    reference = _reference_backend()
    rows = {padded: bench.measure(reference, batch.replace() if not padded else
                                  varlen.SweepCase(batch.case, batch.mix, padded=True), "cpu", {}, 1, 2)
            for padded in (False, True)}
    for padded, row in rows.items():
        assert row["oracle"] == "pass", row
        assert (row["lengths"], row["packing"]) == ("uniform", "padded" if padded else "packed")
        assert (row["batch"], row["seqlen_q"], row["seqlen_k"]) == (4, 40, 40)
        pairs = sum(bench.attention_pairs(n, n, True) for n in (5, 40, 0, 23))
        assert row["tflops"] == pytest.approx(2 * 2 * 32 * pairs / (row["ms_p50"] * 1e-3) / 1e12)
    assert rows[False]["oracle_rows"] == 68 and rows[True]["oracle_rows"] == 40
    assert shape_label(bench.csv_cells(rows[False])).endswith("d16 causal uniform packed")


def test_a_wrong_varlen_call_fails_its_row_and_is_not_timed():
    def shifted(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, return_lse=False, **kw):
        return packed_reference(q, k, v, cu_seqlens_q=cu_seqlens_q, cu_seqlens_k=cu_seqlens_k,
                                max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, shift_keys=1, return_lse=True,
                                **kw)[0]
    batch = varlen.SweepCase(oracle.VarlenCase((9, 30), (9, 30), 2, 2, 16, fmt="fp32"), mix="uniform")
    row = bench.measure(_reference_backend(run_varlen=shifted), batch, "cpu", {}, 1, 2)
    assert row["oracle"] == "fail" and "ms_p50" not in row


def test_capabilities_separate_packed_padded_and_dense_cases():
    batch = varlen.SweepCase(oracle.VarlenCase((9, 30), (9, 30), 2, 2, 64), mix="uniform")
    padded = varlen.SweepCase(batch.case, batch.mix, padded=True)
    dense = oracle.Case(1, 2, 2, 64, 64, 64)
    peer = backends.get("torch:varlen_attn")
    assert peer.unsupported_reason(batch) is None and peer.unsupported_reason(dense) == "packed batches only"
    assert peer.unsupported_reason(padded).startswith("packed batches only")
    assert backends.get("sdpa:cudnn").unsupported_reason(batch) == "no packed batches (no attention_varlen)"
    assert backends.get("sdpa:cudnn").unsupported_reason(padded) is None
    for name in ("cuda:hopper", "triton:fa2"):
        assert backends.get(name).unsupported_reason(batch) is None, name
    assert peer.unsupported_reason(varlen.SweepCase(oracle.VarlenCase((9,), (9,), 2, 2, 64, softcap=5.0), "equal")) \
        == "softcap (no softcap= argument)"


def test_the_peer_refuses_what_its_torch_cannot_express():
    if peer_problem := backends.get("torch:varlen_attn").unavailable_reason():
        assert "GPU" in peer_problem or "varlen_attn" in peer_problem
    q = torch.zeros(4, 2, 64, dtype=torch.bfloat16)
    cu = torch.tensor([0, 4], dtype=torch.int32)
    with pytest.raises(NotImplementedError, match="softcap"):
        backends.get("torch:varlen_attn").run_varlen(q, q, q, cu, cu, 4, 4, softcap=3.0)
