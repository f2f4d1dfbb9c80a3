"""MLA decode (DeepSeek's multi-head latent attention, FlashMLA's shapes) in triton_impl: Q/K head_dim 576 against
one latent cache whose first 512 columns are V, through attention_mla_decode and attention_with_kvcache, held to
compare.oracle.check_kvcache (KVCase.latent: v_cache a view of k_cache, the fp64 reference on the gathered pages).

Interpreter tests run in a TRITON_INTERPRET=1 subprocess (`test_mla_interpreter_suite`); the refusals need no
interpreter; GPU tests (bf16, realistic sizes) are marked `gpu` and skip cleanly without one.
"""
import pytest
import torch

from compare import backends, kvcache, oracle
from conftest import (check_interpreter_run, interpreted, run_interpreter_subprocess, skip_inside_interpreter,
                      sm90_compile, triton_gpu_or_skip)

pytest.importorskip("triton")

gpu = pytest.mark.gpu


def test_mla_interpreter_suite():
    skip_inside_interpreter()
    check_interpreter_run(run_interpreter_subprocess(__file__, "-rs", "-m", "not gpu"), globals())


def _mla(q, k_cache, v_cache, *, return_lse, k_descale=None, v_descale=None, **kw):
    """attention_mla_decode with check_kvcache's calling convention (v_cache is k_cache's view: not passed on)."""
    import triton_impl
    assert v_cache.data_ptr() == k_cache.data_ptr() and v_cache.shape[-1] == 512
    return triton_impl.attention_mla_decode(q, k_cache, return_lse=return_lse, kv_descale=k_descale, **kw)


KV = oracle.KVCase
MLA = dict(head_dim=576, head_dim_v=512, latent=True)
# query heads 16 (one query tile) and 32 (two under the interpreter's 32-row tiles) against the single latent head,
# Sq 1 and 2 (speculative), mixed lengths with 0 and odd ones, pages and a contiguous cache, hostile tables, e4m3
CASES = [
    KV(2, 16, 1, 1, (37, 70), page_size=16, fmt="fp16", scale=0.06, **MLA),
    KV(3, 32, 1, 2, (0, 5, 61), page_size=16, causal=True, fmt="fp16", hostile=True, scale=0.06, **MLA),
    KV(2, 16, 1, 2, (1, 40), causal=True, fmt="fp16", scale=0.06, **MLA),                      # contiguous
    KV(1, 16, 1, 1, (45,), page_size=32, capacity=96, fmt="fp32", dist="large", scale=0.06, **MLA),
    KV(2, 16, 1, 1, (23, 50), page_size=16, fmt="fp16", kv_fmt="fp8", scale=0.06, **MLA),
]


@interpreted
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.shape_str().replace(" ", "-"))
def test_mla_matches_the_oracle(case):
    verdict = oracle.check_kvcache(_mla, case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_kvcache_entry_with_a_separate_v_and_with_the_view_agree():
    """attention_with_kvcache with V a view of K's first 512 columns (each row read once) and with V a copy of them
    (read again) give the same bits; both are the oracle's answer."""
    import triton_impl
    case = CASES[0]
    inputs = oracle.make_kvcache_inputs(case)
    kw = inputs.kwargs(case)
    view = triton_impl.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache, **kw)
    copy = triton_impl.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache.contiguous(), **kw)
    assert view.shape == (2, 1, 16, 512) and torch.equal(view, copy)


@interpreted
def test_mla_splits_agree_with_the_oracle_and_each_other():
    import triton_impl
    case = CASES[1]
    inputs = oracle.make_kvcache_inputs(case)
    kw = inputs.kwargs(case)
    outs = [triton_impl.attention_mla_decode(inputs.q, inputs.k_cache, num_splits=n, **kw) for n in (1, 3)]
    assert torch.allclose(outs[0].float(), outs[1].float(), atol=2e-3, rtol=0)
    verdict = oracle.check_kvcache(lambda *a, **k: _mla(*a, **k, num_splits=1), case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_the_kernel_reads_v_from_k_when_it_is_a_view():
    """The V-is-K path is taken for the view only: poisoning the copy's storage changes nothing for the view."""
    from triton_impl.kernels import decode as kernels
    k = torch.zeros(4, 16, 1, 576)
    assert kernels.v_is_k(k, k[..., :512])
    assert not kernels.v_is_k(k, k[..., :512].contiguous())
    assert not kernels.v_is_k(k, k[..., 64:])


BAD_CALLS = [
    ("v head_dim 256", dict(v_dim=256), ValueError, "head_dim 576 with V head_dim 256"),
    ("q head_dim 512", dict(q_dim=512), ValueError, "head_dim 512 with V head_dim 512: triton_impl decode takes"),
    ("head_dim_v 576", dict(head_dim_v=576), ValueError, "head_dim_v must be an int within"),
    ("cache not 4-D", dict(flat=True), ValueError, "kv_cache must be 4-D"),
    ("int64 lengths", dict(lengths_dtype=torch.int64), TypeError, "cache_seqlens must be int32"),
]


@pytest.mark.parametrize("kind, bad, error, message", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_mla_calls_are_refused_by_name(kind, bad, error, message):
    import triton_impl
    q = torch.zeros(1, 1, 16, bad.get("q_dim", 576), dtype=torch.float16)
    cache = torch.zeros(4, 16, 1, 576, dtype=torch.float16)
    if bad.get("flat"):
        cache = cache.flatten(0, 1)
    lengths = torch.tensor([5], dtype=bad.get("lengths_dtype", torch.int32))
    table = torch.arange(4, dtype=torch.int32)[None]
    with pytest.raises(error, match=message):
        if "v_dim" in bad:
            triton_impl.attention_with_kvcache(q, cache, cache[..., :bad["v_dim"]], cache_seqlens=lengths,
                                               block_table=table)
        else:
            triton_impl.attention_mla_decode(q, cache, cache_seqlens=lengths, block_table=table,
                                             head_dim_v=bad.get("head_dim_v", 512))


@sm90_compile
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16-cache", "e4m3-cache"])
@pytest.mark.parametrize("rows", [16, 128], ids=["16-heads", "128-heads"])
def test_the_mla_tiles_compile_for_sm90_without_spills(fp8, rows):
    """Each query tile the MLA path picks (kernels.decode.tiles: per row count, ROW_TILE_CONFIGS) fits sm_90."""
    from triton_impl.kernels import decode, offline
    block_m, block_n, warps, stages = decode.tiles(576, rows, 1 if fp8 else 2)
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    usage = offline.report(offline.compile_decode(576, config, head_dim_v=512, fp8=fp8))
    assert usage["stack"] == 0 and usage["STL"] == 0, (config, usage)
    assert usage["smem"] <= offline.SM90_SMEM_LIMIT, (config, usage)
    # fewer than 64 rows: mma.sync, not wgmma (docs/design/decode.md, "Where Triton falls short")
    assert usage["HMMA"] > 0 and usage["HGMMA"] == 0, (config, usage)


@sm90_compile
@pytest.mark.parametrize("warps, block_n, spills", [(8, 64, False), (8, 32, False), (4, 32, True)])
def test_a_wgmma_mla_tile_fits_on_eight_warps_and_spills_on_four(warps, block_n, spills):
    """The design doc's account of Triton's MLA tiles: at 64 rows Triton takes wgmma; on 8 warps the program (O's
    64 x 512 fp32 tile over all its warps, K's 576 columns) fits the register file, on 4 it spills. If a Triton
    release moves either, this fails and the doc's paragraph is out of date."""
    from triton_impl.kernels import offline
    config = dict(BLOCK_M=64, BLOCK_N=block_n, num_warps=warps, num_stages=2)
    usage = offline.report(offline.compile_decode(576, config, head_dim_v=512, fp8=False))
    assert usage["HGMMA"] > 0 and usage["HMMA"] == 0, usage
    assert (usage["stack"] > 0 and usage["STL"] > 0) == spills, usage
    assert usage["smem"] <= offline.SM90_SMEM_LIMIT, usage


def test_the_registry_declares_the_pair():
    decode = backends.get("triton:decode")
    assert decode.head_dim_pairs == ((576, 512),) and (kvcache.MLA_HEAD_DIM, kvcache.MLA_HEAD_DIM_V) == (576, 512)


# ---------------------------------------------------------------- on a GPU (skipped without one)

GPU_CASES = [
    KV(4, 128, 1, 1, (4096, 1000, 0, 777), page_size=64, fmt="bf16", scale=0.072, **MLA),
    KV(2, 16, 1, 2, (8193, 300), page_size=64, causal=True, fmt="bf16", hostile=True, scale=0.072, **MLA),
    KV(3, 64, 1, 1, (2048, 33, 5000), page_size=64, fmt="bf16", kv_fmt="fp8", scale=0.072, **MLA),
    KV(2, 16, 1, 1, (1500, 40), page_size=16, fmt="fp32", scale=0.072, **MLA),
]


@gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.shape_str().replace(" ", "-"))
def test_gpu_mla_matches_the_oracle(case):
    triton_gpu_or_skip()
    verdict = oracle.check_kvcache(_mla, case, device="cuda")
    assert verdict.passed, verdict.summary()
