"""The varlen sweep (compare/sweeps/varlen.toml) on the CPU: its packed batches, how the driver judges and times a
packed row and a padded one, the columns that tell them apart, and the registry's packed-batch peer."""
import pytest
import torch

from compare import backends, bench, oracle, sweeps, varlen
from compare.schema import shape_label
from conftest import load_shapes_table
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
    with pytest.raises(ValueError, match="packing must be one of"):
        load_shapes_table(tmp_path, 'lengths = "uniform"\ntokens = 64\nheads_q = 2\nhead_dim = 64\npacking = "ragged"')
    with pytest.raises(ValueError, match="length mix 'zipf'"):
        load_shapes_table(tmp_path, 'lengths = "zipf"\ntokens = 64\nheads_q = 2\nhead_dim = 64')


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


# --- the finding and figure 8, from synthetic rows ---------------------------------------------------------------

def _varlen_csv(path, rates: dict) -> None:
    """A varlen-sweep CSV: one passing row per ((backend, variant, packing), lengths, head_dim, causal) at its
    TFLOP/s (its time the rate's inverse)."""
    import csv
    from compare.schema import COLUMNS
    rows = []
    for ((backend, variant, packing), lengths, head_dim, causal), tflops in rates.items():
        row = {c: "" for c in COLUMNS}
        row.update(timestamp="2026-12-02T00:00:00+00:00", sweep="varlen", git_commit="0" * 40, gpu="NVIDIA H200",
                   driver="1", cuda="13.0", torch="2.11", triton="3.6.0", backend=backend,
                   family="peer" if backend in ("sdpa", "torch") else backend, variant=variant, format="bf16",
                   batch=32, heads_q=2048 // head_dim, heads_kv=2048 // head_dim, seqlen_q=16384, seqlen_k=16384,
                   head_dim=head_dim, causal=causal, head_dim_v=head_dim, window_left=-1, window_right=-1, softcap=0,
                   lengths=lengths, packing=packing, ms_p20=1 / tflops, ms_p50=1 / tflops, ms_p80=1 / tflops,
                   tflops=tflops, rel_l2_unquantized=0.001, oracle="pass")
        rows.append(row)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        writer.writerows(rows)


OURS, PADDED = ("cuda", "hopper", "packed"), ("cuda", "hopper", "padded")
TORCH, TRITON, CUDNN = ("torch", "varlen_attn", "packed"), ("triton", "fa2", "packed"), ("sdpa", "cudnn", "padded")
VARLEN_RATES = {
    (OURS, "longtail", 128, True): 510.0, (TORCH, "longtail", 128, True): 300.0, (TRITON, "longtail", 128, True): 255.0,
    (CUDNN, "longtail", 128, True): 34.0, (PADDED, "longtail", 128, True): 36.0,
    (OURS, "equal", 64, False): 380.0, (TORCH, "equal", 64, False): 304.0, (TRITON, "equal", 64, False): 400.0,
    (PADDED, "equal", 64, False): 475.0, (CUDNN, "equal", 64, False): 500.0,
}


def test_varlen_finding_is_computed_from_the_rows(tmp_path):
    from compare import report, results
    _varlen_csv(tmp_path / "varlen.csv", VARLEN_RATES)
    (text,) = report.varlen_findings(results.load_results(tmp_path))
    # 510 / 300 = 1.70, 380 / 304 = 1.25; against Triton 2.00 and 0.95; equal against its padded self 0.80;
    # longtail against cuDNN padded 15.00
    assert "`cuda:hopper` is 1.25–1.70× torch's `varlen_attn` (FlashAttention-2; ahead in all 2)" in text
    assert "0.95–2.00× `triton:fa2`'s varlen path (ahead in 1 of 2; Triton is ahead in 1, most at equal d64: 0.95×)" \
        in text
    assert "on equal lengths 0.80× its own dense kernel on the same batch" in text
    assert "on the long-tailed mix 15.00× cuDNN on the batch padded to its longest sequence" in text
    assert "longtail, equal length mixes, d64/d128" in text and "2 cases of one run" in text


def test_varlen_finding_and_figure_need_their_rows(tmp_path):
    from compare import figures, report, results
    assert report.varlen_findings(results.load_results(tmp_path)) == []
    with pytest.raises(figures.NothingToDraw):
        figures.fig_varlen(results.load_results(tmp_path))


def test_figure_8_is_drawn_from_the_varlen_folder(tmp_path):
    from compare import figures, results
    data = tmp_path / "data"
    (data / "varlen").mkdir(parents=True)
    fixture = results.REPO_ROOT / "tests" / "fixtures" / "results-h200.csv"
    (data / fixture.name).write_bytes(fixture.read_bytes())
    _varlen_csv(data / "varlen" / "varlen.csv", VARLEN_RATES)
    written = figures.generate(data, tmp_path / "figs", results.REPO_ROOT / "figures" / "reference", log=lambda _: None)
    assert {p.name for p in written} >= {"fig8_varlen.png", "fig8_varlen.pdf"}
    labels = set(results.varlen_data(results.load_results(data / "varlen"))["label"])
    assert {"cuda:hopper", "cuda:hopper (padded)", "sdpa:cudnn (padded)", "torch:varlen_attn"} <= labels
