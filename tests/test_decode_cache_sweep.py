"""The decode sweep's KV-cache rows (compare/sweeps/decode.toml, compare.cache_sweep) on the CPU: the layouts it
holds, which backends take them, how the driver judges and times a row through attention_with_kvcache, the columns
that mark it, and the README sentence computed from the rows (pages against a contiguous cache, e4m3 against bf16)."""
import inspect

import pandas as pd
import pytest

from compare import backends, bench, cache_sweep, report, results, schema, sweeps
from conftest import load_shapes_table
from kv_reference import kv_reference
import results_rows


def _cache_cases():
    return [c for c in sweeps.load("decode").cases if isinstance(c, cache_sweep.SweepCase)]


def test_the_decode_sweep_holds_each_layout_at_each_shape():
    cases = _cache_cases()
    layouts = {(c.packing, c.page_size, c.kv_format) for c in cases}
    assert layouts == {("contiguous", None, ""), ("contiguous", None, "fp8"), ("paged", 16, ""), ("paged", 64, ""),
                       ("paged", 256, "")}
    shapes = {(c.batch, c.heads_q, c.heads_kv, c.seqlen_q, c.seqlen_k, c.head_dim) for c in cases}
    assert len(cases) == len(layouts) * len(shapes)
    # each cache of 1 GiB (K and V, bf16): the memory-bound regime the ratios are about
    assert {2 * b * hk * sk * d * 2 for b, _, hk, _, sk, d in shapes} == {2 ** 30}


def test_only_the_decode_kernels_take_a_cache_case():
    case = _cache_cases()[0]
    takers = {name for name, b in backends.registry().items() if not b.unsupported_reason(case)}
    assert takers == {"cuda:decode", "triton:decode"}
    assert "attention_with_kvcache" in backends.get("sdpa:cudnn").unsupported_reason(case)
    for name in takers:  # the driver's call binds to each package's attention_with_kvcache
        inspect.signature(backends.get(name).run_kvcache).bind(
            "q", "k_cache", "v_cache", cache_seqlens=0, block_table=None, k_descale=None, v_descale=None,
            causal=False, scale=None, window=(-1, -1), return_lse=True)


BASE = "batch = 1\nheads_q = 4\nheads_kv = 2\nseqlen_q = 1\nseqlen_k = 64\nhead_dim = 64\n"


@pytest.mark.parametrize("table, message", [
    (BASE + 'cache = "ring"', "cache must be one of"),
    (BASE + 'cache = "paged"', 'page_size goes with cache = "paged"'),
    (BASE + 'cache = "contiguous"\npage_size = 16', 'page_size goes with cache = "paged"'),
    (BASE + 'kv_format = "fp8"', "cache must be one of"),
    (BASE + 'cache = "contiguous"\nsoftcap = 30.0', "softcap is not a key of a KV-cache case"),
    (BASE + 'cache = "contiguous"\nhead_dim_v = 32', "V's head_dim equal to Q/K's"),
    (BASE + 'cache = "contiguous"\nkv_format = "fp4"', "KVCase formats"),
])
def test_bad_cache_tables_say_what_is_wrong(tmp_path, table, message):
    with pytest.raises(ValueError, match=message):
        load_shapes_table(tmp_path, table)


def _reference_backend(run_kvcache) -> backends.Backend:
    math_kernel = backends.get("sdpa:math")
    return backends.Backend(name="test:reference", family="peer", formats=("fp32", "bf16"), head_dims=None,
                            run=math_kernel.run, availability=lambda: None, run_kvcache=run_kvcache)


@pytest.mark.parametrize("page_size, kv_fmt, label", [
    (16, "same", "fp32 b3 h4/2 q1 k40 d32 paged16"),
    (None, "same", "fp32 b3 h4/2 q1 k40 d32 cache"),
    (None, "fp8", "bf16 b3 h4/2 q1 k40 d32 cache kv-fp8"),
])
def test_a_cache_row_is_judged_then_timed_on_its_flops(page_size, kv_fmt, label):
    fmt = "bf16" if kv_fmt == "fp8" else "fp32"
    case = cache_sweep.cache_case(batch=3, heads_q=4, heads_kv=2, seqlen_q=1, seqlen_k=40, head_dim=32,
                                  page_size=page_size, kv_fmt=kv_fmt, causal=False, fmt=fmt)
    row = bench.measure(_reference_backend(kv_reference), case, "cpu", {}, 1, 2)
    assert row["oracle"] == "pass", row
    packing = "paged" if page_size else "contiguous"
    assert (row["packing"], row["page_size"], row["kv_format"]) == (packing, page_size or "",
                                                                     "" if kv_fmt == "same" else kv_fmt)
    assert bench.flops(case) == 2 * 4 * (32 + 32) * 3 * 40
    assert row["tflops"] == pytest.approx(bench.flops(case) / (row["ms_p50"] * 1e-3) / 1e12)
    assert schema.shape_label(bench.csv_cells(row)) == label


def test_a_wrong_cache_call_fails_its_row_and_is_not_timed():
    def values_from_the_keys(q, k_cache, v_cache, **kw):
        return kv_reference(q, k_cache, k_cache, **kw)
    case = cache_sweep.cache_case(batch=2, heads_q=2, heads_kv=1, seqlen_q=1, seqlen_k=64, head_dim=32,
                                  page_size=16, kv_fmt="same", causal=False, fmt="fp32")
    row = bench.measure(_reference_backend(values_from_the_keys), case, "cpu", {}, 1, 2)
    assert row["oracle"] == "fail" and "ms_p50" not in row


def _row(label, ms, batch=8, seqlen_k=32768, packing="", page_size="", kv_format=""):
    backend, variant = label.split(":")
    row = results_rows.row(timestamp="2026-12-07T00:00:00+00:00", sweep="decode", backend=backend, variant=variant,
                           family="peer" if backend == "sdpa" else backend, format="bf16", batch=batch, heads_q=32,
                           heads_kv=8, seqlen_q=1, seqlen_k=seqlen_k, head_dim=128, causal=False, ms_p20=ms, ms_p50=ms,
                           ms_p80=ms, tflops=1.0, oracle="pass", head_dim_v=128, window_left=-1, window_right=-1,
                           softcap=0, packing=packing, page_size=page_size, kv_format=kv_format)
    return row


ROWS = [_row("cuda:decode", 0.250), _row("sdpa:cudnn", 0.245),  # the dense call, against the peer
        _row("cuda:decode", 0.240, packing="contiguous"), _row("cuda:decode", 0.130, packing="contiguous",
                                                               kv_format="fp8"),
        _row("cuda:decode", 0.300, packing="paged", page_size=16), _row("cuda:decode", 0.246, packing="paged",
                                                                        page_size=64),
        _row("cuda:decode", 0.240, packing="paged", page_size=256),
        _row("triton:decode", 0.260, packing="contiguous"), _row("triton:decode", 0.289, packing="paged",
                                                                 page_size=64)]


def _results(folder, rows=ROWS):
    return results_rows.write_and_load(folder, rows, "decode")


def test_cache_ratios_and_the_decode_finding_read_the_rows(tmp_path):
    df = _results(tmp_path)
    paged, fp8 = results.cache_ratios(df, "cuda:decode")
    # contiguous 0.240 over pages: 16 0.80, 64 0.9756, 256 1.00; bf16 0.240 over e4m3 0.130: 1.846
    assert {size: round(float(r.iloc[0]), 3) for size, r in paged.items()} == {16: 0.8, 64: 0.976, 256: 1.0}
    assert [round(float(r), 3) for r in fp8] == [1.846]
    paged, fp8 = results.cache_ratios(df, "triton:decode")
    assert set(paged) == {64} and fp8.empty
    # the dense call's rows alone make the decode finding's first sentences and figure 6
    assert len(results.decode_data(df)) == 2
    (text,) = report.decode_findings(df)
    assert "1 cases of one run" in text and "runs at 0.98× cuDNN's speed" in text
    sentence = ("Through `attention_with_kvcache` in the same run: `cuda:decode` runs pages of 16/64/256 keys at "
                "0.80–1.00× the contiguous cache's speed (0.98–1.00× from 64 keys up; target 0.95×: met) and an "
                "e4m3 cache at 1.85× the bf16 cache's speed (target 1.8×: met) (1 case); `triton:decode` runs pages "
                "of 64 keys at 0.90× the contiguous cache's speed (0.90× from 64 keys up; target 0.95×: missed) "
                "(1 case).")
    assert sentence in text
    # a target is judged on the ratios as printed (two decimals)
    assert report._verdict(pd.Series([0.9, 1.0]), 0.95) == "missed in 1 of 2"
    assert report._verdict(pd.Series([0.949, 1.0]), 0.95) == "met"


def test_without_cache_rows_the_finding_has_no_cache_sentence(tmp_path):
    df = _results(tmp_path, ROWS[:2])
    paged, fp8 = results.cache_ratios(df, "cuda:decode")
    assert paged == {} and fp8.empty
    (text,) = report.decode_findings(df)
    assert "attention_with_kvcache" not in text


def test_kv_cache_calls_of_another_gpu_give_the_sentence_and_name_their_run(tmp_path):
    """The decode finding of one GPU's run without KV-cache calls quotes another GPU's run that has them, named; its
    own calls, once it has them, win."""
    other = [{**r, "gpu": "NVIDIA H100 80GB HBM3", "git_commit": "1" * 40} for r in ROWS]
    everything = _results(tmp_path, ROWS[:2] + other)
    here = everything["gpu"] == "NVIDIA H200"
    mine, elsewhere = everything[here], everything[~here]
    (text,) = report.decode_findings(mine, elsewhere=elsewhere)
    assert (f"Through `attention_with_kvcache` in another run (NVIDIA H100 80GB HBM3, driver 1, CUDA 13.0, torch 2.11, "
            f"triton 3.6.0, commit(s) {'1' * 40}), each ratio within it: `cuda:decode` runs pages of 16/64/256 keys "
            "at 0.80–1.00×") in text
    (text,) = report.decode_findings(_results(tmp_path / "own", ROWS), elsewhere=elsewhere)
    assert "in the same run: `cuda:decode`" in text and "another run" not in text
    (text,) = report.decode_findings(mine, elsewhere=elsewhere[elsewhere["packing"] == ""])
    assert "attention_with_kvcache" not in text
