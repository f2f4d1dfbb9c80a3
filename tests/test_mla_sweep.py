"""The MLA sweep (compare/sweeps/mla.toml) on the CPU: its cases, which backends take them, how the driver judges and
times an MLA row (attention_mla_decode on a paged latent cache), the columns that mark it, figure 10 and the README
finding computed from the rows."""
import inspect

import pytest

from compare import backends, bench, cache_sweep, figures, report, results, schema, sweeps
from conftest import load_shapes_table
from kv_reference import kv_reference
import results_rows


def test_the_sweep_spans_the_issue_grid():
    cases = sweeps.load("mla").cases
    assert cases and all(isinstance(c, cache_sweep.SweepCase) and c.mla for c in cases)
    assert {(c.head_dim, c.v_dim, c.heads_kv, c.page_size, c.fmt) for c in cases} == {(576, 512, 1, 64, "bf16")}
    assert {c.heads_q for c in cases} == {16, 64, 128}
    assert (min(c.batch for c in cases), max(c.batch for c in cases)) == (1, 128)
    assert (min(c.seqlen_k for c in cases), max(c.seqlen_k for c in cases)) == (1024, 65536)
    assert {(c.seqlen_q, c.causal) for c in cases} == {(1, False), (2, True)}
    # every tile of the CUDA kernels: 16 rows (16 heads x 1), 32 (16 x 2: mma.sync's wider tile), 64 and up (wgmma)
    assert {c.heads_q * c.seqlen_q for c in cases} == {16, 32, 64, 128, 256}


def test_only_the_decode_kernels_take_an_mla_case():
    case = sweeps.load("mla").cases[0]
    takers = {name for name, b in backends.registry().items() if not b.unsupported_reason(case)}
    assert takers == {"cuda:decode", "triton:decode"}
    assert "attention_mla_decode" in backends.get("cuda:hopper").unsupported_reason(case)
    for name in takers:  # the driver's call binds to each package's attention_mla_decode
        run_mla = backends.get(name).run_mla
        inspect.signature(run_mla).bind("q", "kv_cache", cache_seqlens=0, block_table=0, causal=False, scale=None,
                                        return_lse=True)


@pytest.mark.parametrize("table, message", [
    ("latent = true\nbatch = 1\nheads_q = 16\nseqlen_q = 1\nseqlen_k = 64",
     "an MLA case is latent = true with page_size"),
    ("latent = true\npage_size = 64\nbatch = 1\nheads_q = 16\nseqlen_q = 1\nseqlen_k = 64\nhead_dim = 128",
     "head_dim is 576 in an MLA case, got 128"),
    ("latent = true\npage_size = 64\nbatch = 1\nheads_q = 16\nseqlen_q = 1\nseqlen_k = 64\nwindow_left = 8",
     "window_left is not a key of an MLA case"),
    ("latent = true\npage_size = 64\nbatch = 1\nheads_q = 16\nseqlen_q = 1", "seqlen_k"),
])
def test_bad_mla_tables_say_what_is_wrong(tmp_path, table, message):
    with pytest.raises(ValueError, match=message):
        load_shapes_table(tmp_path, table)


def _reference_backend(run_mla) -> backends.Backend:
    math_kernel = backends.get("sdpa:math")
    return backends.Backend(name="test:reference", family="peer", formats=("fp32",), head_dims=None,
                            run=math_kernel.run, availability=lambda: None, run_mla=run_mla)


def _latent_reference(q, kv_cache, *, head_dim_v=512, **kw):
    return kv_reference(q, kv_cache, kv_cache[..., :head_dim_v], **kw)


def test_an_mla_row_is_judged_then_timed_on_its_flops():
    case = cache_sweep.mla_case(batch=3, heads_q=4, seqlen_q=2, seqlen_k=40, page_size=16, causal=True, fmt="fp32")
    row = bench.measure(_reference_backend(_latent_reference), case, "cpu", {}, 1, 2)
    assert row["oracle"] == "pass", row
    assert (row["packing"], row["page_size"], row["head_dim"], row["head_dim_v"], row["heads_kv"]) == \
        ("latent", 16, 576, 512, 1)
    pairs = 3 * (39 + 40)  # bottom-right causal: the first query sees 39 keys, the second 40
    assert bench.flops(case) == 2 * 4 * (576 + 512) * pairs
    assert row["tflops"] == pytest.approx(bench.flops(case) / (row["ms_p50"] * 1e-3) / 1e12)
    assert schema.shape_label(bench.csv_cells(row)) == "fp32 b3 h4/1 q2 k40 d576v512 causal latent page16"


def test_a_wrong_mla_call_fails_its_row_and_is_not_timed():
    def second_half(q, kv_cache, *, head_dim_v=512, **kw):  # V taken from the wrong columns
        return kv_reference(q, kv_cache, kv_cache[..., -head_dim_v:], **kw)
    case = cache_sweep.mla_case(batch=2, heads_q=2, seqlen_q=1, seqlen_k=33, page_size=16, causal=False, fmt="fp32")
    row = bench.measure(_reference_backend(second_half), case, "cpu", {}, 1, 2)
    assert row["oracle"] == "fail" and "ms_p50" not in row


def _mla_row(label, ms, batch, heads_q, seqlen_k, seqlen_q=1):
    backend, variant = label.split(":")
    row = results_rows.row(sweep="mla", backend=backend, variant=variant, family=backend, format="bf16", batch=batch,
                           heads_q=heads_q, heads_kv=1, seqlen_q=seqlen_q, seqlen_k=seqlen_k, head_dim=576,
                           head_dim_v=512, causal=seqlen_q > 1, packing="latent", page_size=64, ms_p20=ms, ms_p50=ms,
                           ms_p80=ms, tflops=2 * batch * heads_q * seqlen_q * seqlen_k * 1088 / (ms * 1e-3) / 1e12,
                           oracle="pass")
    return row


def _ceiling_row(name, value):
    row = results_rows.row(sweep="mla", backend="ceiling", family="ceiling", variant=name, format="", batch=0,
                           heads_q=0, heads_kv=0, seqlen_q=0, seqlen_k=0, head_dim=0, causal=False, ceiling=name,
                           ceiling_tflops=value, oracle="n/a")
    return row


ROWS = [("cuda:decode", 0.040, 1, 16, 65536), ("triton:decode", 0.050, 1, 16, 65536),
        ("cuda:decode", 1.000, 32, 128, 8192), ("triton:decode", 0.800, 32, 128, 8192),
        ("cuda:decode", 1.500, 32, 128, 4096, 2)]


def _results(folder):
    rows = [_mla_row(*r) for r in ROWS] + [_ceiling_row("dram.read", 4.0), _ceiling_row("wgmma.bf16", 800.0)]
    return results_rows.write_and_load(folder, rows, "mla")


def test_the_mla_finding_is_computed_from_the_rows(tmp_path):
    (text,) = report.mla_findings(_results(tmp_path))
    # 65536 keys x 576 x 2 bytes / 40 us = 1.89 TB/s = 47% of 4.0; 32 x 128 x 8192 x 2 x 1088 / 1 ms = 73 TFLOP/s
    # (the Sq = 2 row: 49)
    assert "`cuda:decode` reads the latent cache at up to 1.89 TB/s at 16 query heads, 47% of the read ceiling" in text
    assert "(b1 h16 q1 k64k)" in text and "(b32 h128 q1 k8k;" in text
    assert "reaches 73 TFLOP/s at 128 heads, 9% of the bf16 wgmma ceiling" in text
    # Triton's time over CUDA's: 50 / 40 = 1.25, 0.8 / 1.0 = 0.80
    assert "runs at 0.80–1.25× `triton:decode`'s speed (ahead in 1 of 2; Triton is ahead in 1, most " \
           "at b32 h128 q1 k8k: 0.80×)" in text
    assert "pages of 64 keys" in text and "3 cases of one run" in text


def test_figure_10_is_drawn_from_the_mla_folder(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    fixture = results.REPO_ROOT / "tests" / "fixtures" / "results-h200.csv"
    (data / fixture.name).write_bytes(fixture.read_bytes())
    rows = _results(data / "mla")
    drawn = results.mla_data(rows)
    assert sorted(drawn["tbps"].round(3)) == sorted(round(b * k * 576 * 2 / (ms * 1e-3) / 1e12, 3)
                                                    for _, ms, b, _, k, *_ in ROWS)
    fig = figures.fig_mla(rows)
    hollow = [line for ax in fig.axes for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    assert sum(len(line.get_xdata()) for line in hollow) == 2  # the Sq = 2 row, on both rows of panels
    written = figures.generate(data, tmp_path / "figs", results.REPO_ROOT / "figures" / "reference", log=lambda _: None)
    assert {p.name for p in written} >= {"fig10_mla_decode.png", "fig10_mla_decode.pdf"}


def test_the_mla_finding_and_figure_need_their_rows(tmp_path):
    assert report.mla_findings(results.load_results(tmp_path)) == []
    with pytest.raises(figures.NothingToDraw):
        figures.fig_mla(results.load_results(tmp_path))
