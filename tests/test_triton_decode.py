"""triton_impl.decode.forward (flash-decoding against a KV cache) held to compare.oracle.check_kvcache.

Interpreter tests: as in test_triton_interpret.py, TRITON_INTERPRET must be set before any @triton.jit runs, so
`test_decode_interpreter_suite` runs this file in a subprocess with TRITON_INTERPRET=1, where the `interpreted`
tests run on the CPU (fp16/fp32 queries, tiny shapes; the interpreter uses 16-key tiles, query tiles of at most 32
rows and 3 splits by default, so these shapes span several tiles, splits and pages). GPU tests (bf16, realistic
sizes) are marked `gpu` and skip cleanly without one.
"""
import math

import pytest
import torch

from compare import oracle
from conftest import (check_interpreter_run, interpreted, outside_interpreter, run_interpreter_subprocess,
                      skip_inside_interpreter, sm90_compile, triton_gpu_or_skip)


def test_decode_interpreter_suite():
    skip_inside_interpreter()
    pytest.importorskip("triton")
    check_interpreter_run(run_interpreter_subprocess(__file__, "-rs", "-m", "not gpu", timeout=600), globals())


def _public():
    import triton_impl
    return triton_impl


def _forward(**split):
    """forward() with check_kvcache's calling convention."""
    from triton_impl.decode import forward

    def run(q, k_cache, v_cache, *, cache_seqlens, block_table, causal, scale, return_lse, k_descale=None,
            v_descale=None, window=(-1, -1)):
        assert return_lse
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
        return forward(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal, scale=scale,
                       k_descale=k_descale, v_descale=v_descale, window=window, **split)
    return run


def _inputs(case, device="cpu"):
    return oracle.make_kvcache_inputs(case, device)


def _call(inputs, case, **split):
    return _forward(**split)(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case), return_lse=True)


def _check(case, device="cpu", **split):
    verdict = oracle.check_kvcache(_forward(**split), case, device=device, inputs=_inputs(case, device))
    assert verdict.passed, f"{case.shape_str()} {split}: {verdict.summary()}"


KV = oracle.KVCase
# (heads_q / heads_kv = g) x Sq x paging x lengths (0, 1, odd) x causal with L < Sq
CASES = [
    KV(3, 2, 2, 1, (0, 1, 37), 64, page_size=16, fmt="fp16"),                       # g1, lengths 0 and 1
    KV(2, 8, 2, 1, (130, 5), 64, page_size=64, fmt="fp16", hostile=True),           # g4, hostile table tail
    KV(3, 8, 1, 1, (17, 0, 64), 64, fmt="fp16"),                                    # g8, contiguous
    KV(2, 8, 2, 3, (2, 50), 64, page_size=16, causal=True, fmt="fp16", hostile=True),  # Sq3, causal L < Sq
    KV(2, 2, 2, 16, (7, 41), 64, page_size=16, causal=True, fmt="fp16"),            # Sq16, causal L < Sq
    KV(1, 8, 2, 16, (45,), 64, causal=True, fmt="fp16"),                            # 64 rows: two query tiles
    KV(2, 8, 1, 3, (33, 20), 128, page_size=16, causal=True, fmt="fp16"),           # D128, g8 x Sq3 = 24 rows
    KV(2, 4, 1, 1, (50, 19), 64, page_size=64, fmt="fp32", dist="large"),           # fp32, peaky softmax
    KV(2, 8, 2, 3, (2, 50), 64, page_size=16, causal=True, fmt="fp16", kv_fmt="fp8"),  # e4m3 cache
    KV(1, 4, 1, 1, (77,), 64, page_size=32, capacity=128, fmt="fp16", scale=0.3, dist="shifted"),
]


@interpreted
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.shape_str().replace(" ", "-"))
def test_matches_the_oracle(case):
    _check(case)


@interpreted
@pytest.mark.parametrize("split", [dict(num_splits=1), dict(num_splits=2), dict(num_splits=3),
                                   dict(num_splits=100), dict(split_size=16), dict(split_size=40)],
                         ids=lambda s: "-".join(f"{k}{v}" for k, v in s.items()))
def test_split_choices_match_the_oracle(split):
    _check(KV(2, 8, 2, 2, (61, 33), 64, page_size=16, causal=True, fmt="fp16", hostile=True), **split)


@interpreted
def test_many_splits_merge_in_blocks_and_stay_batch_invariant():
    """More splits than the merge takes at once (several blocks, the last one partial; one sequence covering
    fewer splits than the other): the oracle, and the same bits alone as inside the batch."""
    from triton_impl.kernels.decode import MERGE_BLOCK_S
    case = KV(2, 8, 2, 1, (600, 129), 64, page_size=16, fmt="fp16")
    assert -(-600 // 16) > 2 * MERGE_BLOCK_S and -(-129 // 16) % MERGE_BLOCK_S
    _check(case, num_splits=100)
    inputs = _inputs(case)
    out, lse = _call(inputs, case, split_size=16)
    from triton_impl.decode import forward
    alone = forward(inputs.q[1:2], inputs.k_cache, inputs.v_cache, inputs.cache_seqlens[1:2],
                    inputs.block_table[1:2], causal=False, scale=1 / 8, split_size=16)
    assert torch.equal(alone[0], out[1:2]) and torch.equal(alone[1], lse[1:2])


WINDOW_CASES = [
    KV(2, 8, 2, 1, (600, 129), 64, page_size=16, fmt="fp16", window=(100, -1)),     # most chunks see nothing
    KV(2, 8, 2, 3, (70, 2), 64, page_size=16, causal=True, fmt="fp16", window=(20, -1), hostile=True),
    KV(2, 4, 1, 2, (90, 40), 64, fmt="fp16", window=(30, 10)),                        # both sides, contiguous
    KV(2, 4, 1, 4, (2, 50), 64, page_size=16, fmt="fp32", window=(0, 0)),             # rows that see no key
    KV(2, 4, 1, 3, (45, 7), 64, page_size=16, fmt="fp16", window=(1 << 40, 1 << 40)),  # wider than the cache
    KV(1, 2, 2, 32, (90,), 64, page_size=16, fmt="fp16", causal=True, window=(5, -1)),  # tiles start apart
]


@interpreted
@pytest.mark.parametrize("case", WINDOW_CASES, ids=lambda c: c.shape_str().replace(" ", "-"))
@pytest.mark.parametrize("split", [dict(), dict(num_splits=100), dict(split_size=32)],
                         ids=["auto", "many-splits", "split32"])
def test_windows_match_the_oracle(case, split):
    _check(case, **split)


@interpreted
def test_a_window_keeps_split_size_batch_invariant():
    case = KV(3, 8, 2, 2, (200, 9, 120), 64, page_size=16, causal=True, fmt="fp16", window=(40, -1))
    inputs = _inputs(case)
    out, lse = _call(inputs, case, split_size=32)
    from triton_impl.decode import forward
    alone = forward(inputs.q[2:3], inputs.k_cache, inputs.v_cache, inputs.cache_seqlens[2:3], inputs.block_table[2:3],
                    causal=True, scale=1 / 8, split_size=32, window=(40, -1))
    assert torch.equal(alone[0], out[2:3]) and torch.equal(alone[1], lse[2:3])


@interpreted
def test_plan_chunks_to_the_key_tile():
    from triton_impl.decode import plan
    # interpreter tiles: 16 keys; 100 keys -> 7 key tiles
    assert plan(1, 1, 4, 100, 64)[1:] == (48, 3)                  # auto: 3 splits of 3 tiles
    assert plan(1, 1, 4, 100, 64, num_splits=1)[1:] == (112, 1)
    assert plan(1, 1, 4, 100, 64, num_splits=4)[1:] == (32, 4)
    assert plan(1, 1, 4, 100, 64, num_splits=50)[1:] == (16, 7)   # at most one chunk per key tile
    assert plan(1, 1, 4, 100, 64, split_size=20)[1:] == (32, 4)   # rounded up to the tile
    assert plan(1, 1, 40, 100, 64)[0][0] == 32 and plan(1, 1, 3, 100, 64)[0][0] == 16  # query tile


@interpreted
def test_plan_covers_the_window_span():
    from triton_impl.decode import plan
    # interpreter tiles: 16 keys. 600 keys, window 100 at Sq 1: the span's 117 keys, not the capacity's 600
    assert plan(1, 1, 4, 608, 64, split_size=32, window_keys=101)[1:] == (32, 4)
    assert plan(1, 1, 4, 608, 64, split_size=32)[1:] == (32, 19)
    assert plan(1, 1, 4, 608, 64, window_keys=101)[1:] == (48, 3)  # auto: 3 splits over 8 key tiles
    assert plan(1, 1, 4, 100, 64, window_keys=500)[1:] == plan(1, 1, 4, 100, 64)[1:]  # wider than the cache


@outside_interpreter
def test_gpu_plan_follows_the_window_not_the_capacity():
    """The split plan for an H200 (132 SMs; pure Python): b1 Hkv8 Sq1 bf16 d128 with window 4096 on 32k keys is
    planned as a cache of its span (4096 + 1 + one 64-key tile), so its grid is the one of a 4097-key cache, and
    under split_size only the grid shrinks; the chunks from the kernel's start cover every length's window."""
    pytest.importorskip("triton")
    from triton_impl.decode import _plan
    def gpu_plan(capacity, split_size=None, window_keys=None, seqlen_q=1):
        return _plan(1, 8, 4 * seqlen_q, capacity, 128, None, split_size, 132, 2, window_keys)
    tile, split_keys, n_splits = gpu_plan(32768, window_keys=4097)
    assert tile[1] == 64 and (split_keys, n_splits) == gpu_plan(4097 + 64)[1:]
    assert n_splits * split_keys < 32768 // 4
    assert gpu_plan(32768, split_size=512, window_keys=4097)[1:] == (512, 9)
    assert gpu_plan(1000, window_keys=5000) == gpu_plan(1000)
    for seqlen_q, left in ((1, 4096), (4, 100), (16, 0)):
        _, split_keys, n_splits = gpu_plan(8192, window_keys=left + seqlen_q, seqlen_q=seqlen_q)
        for length in range(8193):
            start = max(0, length - seqlen_q - left) // 64 * 64  # kernels.decode._chunk_start
            assert start + n_splits * split_keys >= length, (seqlen_q, left, length)


@interpreted
@pytest.mark.parametrize("paged", [True, False])
def test_split_size_is_batch_invariant(paged):
    """With split_size, a sequence gives the same bits alone, inside a batch, in another order, and with a
    cache only as large as it needs (one chunk: the direct path without a merge)."""
    case = KV(3, 8, 2, 2, (70, 9, 33), 64, page_size=16 if paged else None, causal=True, fmt="fp16")
    inputs = _inputs(case)
    out, lse = _call(inputs, case, split_size=32)
    from triton_impl.decode import forward
    for b in range(case.batch):
        sub = slice(b, b + 1)
        table = inputs.block_table[sub] if paged else None
        k_cache, v_cache = (inputs.k_cache, inputs.v_cache) if paged else (inputs.k_cache[sub], inputs.v_cache[sub])
        alone = forward(inputs.q[sub], k_cache, v_cache, inputs.cache_seqlens[sub], table, causal=True,
                        scale=1 / 8, split_size=32)
        assert torch.equal(alone[0], out[sub]) and torch.equal(alone[1], lse[sub]), b
    order = torch.tensor([2, 0, 1])
    table = inputs.block_table[order] if paged else None
    k_cache, v_cache = (inputs.k_cache, inputs.v_cache) if paged else (inputs.k_cache[order], inputs.v_cache[order])
    shuffled = forward(inputs.q[order], k_cache, v_cache, inputs.cache_seqlens[order], table, causal=True,
                       scale=1 / 8, split_size=32)
    assert torch.equal(shuffled[0], out[order]) and torch.equal(shuffled[1], lse[order])
    if paged:  # sequence 1 (9 keys) with a one-page table: capacity 16 <= 32, one chunk, no merge
        short = forward(inputs.q[1:2], inputs.k_cache, inputs.v_cache, inputs.cache_seqlens[1:2],
                        inputs.block_table[1:2, :1], causal=True, scale=1 / 8, split_size=32)
        assert torch.equal(short[0], out[1:2]) and torch.equal(short[1], lse[1:2])


@interpreted
def test_repeated_calls_give_the_same_bits():
    case = KV(2, 8, 2, 1, (70, 41), 64, page_size=16, fmt="fp16")
    inputs = _inputs(case)
    first, second = _call(inputs, case, num_splits=3), _call(inputs, case, num_splits=3)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def _poison_cases():
    def bad_page(inputs):
        inputs.block_table[1, 1] = inputs.k_cache.shape[0]       # needed page, one past the last
    def negative_page(inputs):
        inputs.block_table[1, 0] = -1
    def too_long(inputs):
        inputs.cache_seqlens[1] = inputs.block_table.shape[1] * inputs.k_cache.shape[1] + 1
    def negative_length(inputs):
        inputs.cache_seqlens[1] = -3
    return [bad_page, negative_page, too_long, negative_length]


@interpreted
@pytest.mark.parametrize("split", [dict(num_splits=1), dict(num_splits=3)], ids=["one-split", "three-splits"])
@pytest.mark.parametrize("spoil", _poison_cases(), ids=lambda f: f.__name__)
def test_a_bad_table_entry_or_length_poisons_that_batch_only(spoil, split):
    """NaN in every out and lse element of the spoiled sequence; the others give the same bits as before.
    The bad page itself is NaN in the cache (oracle), so a kernel that read it could not tell either way;
    out-of-range page numbers would fault or read outside the cache."""
    case = KV(3, 8, 2, 2, (40, 37, 20), 64, page_size=16, fmt="fp16", hostile=True)
    inputs = _inputs(case)
    clean = _call(inputs, case, **split)
    spoil(inputs)
    out, lse = _call(inputs, case, **split)
    assert torch.isnan(out[1]).all() and torch.isnan(lse[1]).all()
    keep = torch.tensor([0, 2])
    assert torch.equal(out[keep], clean[0][keep]) and torch.equal(lse[keep], clean[1][keep])


@interpreted
def test_strided_query_view():
    """q as a (B, Sq, Hq, D) view of (B, Hq, Sq, D) storage, as attention() routes small-Sq calls."""
    case = KV(2, 8, 2, 3, (29, 50), 64, page_size=16, causal=True, fmt="fp16")
    inputs = _inputs(case)
    q_view = inputs.q.transpose(1, 2).contiguous().transpose(1, 2)
    assert not q_view.is_contiguous()
    from triton_impl.decode import forward
    got = forward(q_view, inputs.k_cache, inputs.v_cache, inputs.cache_seqlens, inputs.block_table, causal=True,
                  scale=1 / 8)
    want = _call(inputs, case)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])


@interpreted
def test_dense_route_returns_contiguous_rows():
    """attention(variant="decode") on (B, H, Sq, D) tensors with Sq > 1 gives a contiguous (B, H, Sq, D) output, as
    every other path does, equal to the decode kernel's rows."""
    import triton_impl
    from compare import oracle as orc
    case = orc.Case(2, 8, 2, 3, 40, 64, causal=True, fmt="fp16")
    inputs = orc.make_inputs(case)
    out, lse = triton_impl.attention(inputs.q, inputs.k, inputs.v, causal=True, variant="decode", return_lse=True)
    assert out.shape == (2, 8, 3, 64) and out.is_contiguous()
    verdict = orc.check(lambda q, k, v, **kw: triton_impl.attention(q, k, v, variant="decode", **kw), case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_custom_op_fake_and_opcheck():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from triton_impl import decode
    case = KV(1, 4, 1, 1, (20,), 64, page_size=16, fmt="fp16")
    inputs = _inputs(case)
    args = (inputs.q, inputs.k_cache, inputs.v_cache, inputs.cache_seqlens, inputs.block_table, None, None,
            False, 0.125, 2, 0, 8, -1)
    torch.library.opcheck(decode._decode_op, args, test_utils=("test_schema", "test_faketensor"))
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(t) if isinstance(t, torch.Tensor) else t for t in args]
        out, lse = decode._decode_op(*fake)
    assert out.shape == (1, 1, 4, 64) and out.dtype == torch.float16
    assert lse.shape == (1, 4, 1) and lse.dtype == torch.float32


@interpreted
def test_bad_arguments_are_refused():
    from triton_impl.decode import forward
    case = KV(1, 4, 1, 1, (20,), 64, page_size=16, fmt="fp16")
    inputs = _inputs(case)
    args = (inputs.q, inputs.k_cache, inputs.v_cache, inputs.cache_seqlens, inputs.block_table)
    with pytest.raises(ValueError, match="mutually exclusive"):
        forward(*args, causal=False, scale=0.1, num_splits=2, split_size=32)
    with pytest.raises(ValueError, match="num_splits"):
        forward(*args, causal=False, scale=0.1, num_splits=0)
    with pytest.raises(ValueError, match="scale"):
        forward(*args, causal=False, scale=-1.0)


# ---------------------------------------------------------------- GPU (bf16, realistic sizes)

gpu = pytest.mark.gpu


GPU_CASES = [
    KV(4, 32, 8, 1, (4096, 1, 2777, 0), 128, page_size=64),
    KV(3, 32, 8, 1, (3001, 517, 4096), 128),
    KV(2, 32, 8, 4, (1500, 3), 128, page_size=16, causal=True, hostile=True),
    KV(2, 16, 1, 8, (999, 2048), 128, page_size=256, causal=True),                  # MQA, 128 rows
    KV(3, 8, 8, 1, (5000, 77, 1), 64, page_size=32),
    KV(2, 32, 4, 2, (2000, 33), 256, page_size=128, causal=True),
    KV(2, 32, 8, 1, (4000, 2500), 128, page_size=64, kv_fmt="fp8"),
    KV(2, 16, 2, 3, (1200, 700), 128, causal=True, fmt="fp16", kv_fmt="fp8"),
    KV(2, 32, 8, 1, (3000, 17), 128, page_size=64, fmt="fp32"),                    # fp32: its own tiles
    KV(2, 8, 2, 2, (900, 5), 256, causal=True, fmt="fp32"),
    KV(2, 16, 4, 1, (700, 64), 64, page_size=16, fmt="fp32"),
]


@gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=lambda c: c.shape_str().replace(" ", "-"))
def test_gpu_matches_the_oracle(case):
    triton_gpu_or_skip()
    _check(case, "cuda")


@gpu
@pytest.mark.parametrize("split", [dict(num_splits=1), dict(num_splits=7), dict(split_size=512)],
                         ids=["one", "seven", "size512"])
def test_gpu_split_choices_match_the_oracle(split):
    triton_gpu_or_skip()
    _check(KV(2, 32, 8, 1, (6000, 2049), 128, page_size=64), "cuda", **split)


@sm90_compile
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_local_paths_compile_for_sm90(causal):
    """The window's masks and tile bounds go through Triton's front end and sm_90's backend (the interpreter
    accepts shapes the compiler refuses: a mask whose shape changes inside a runtime branch passed there)."""
    pytest.importorskip("triton")
    from triton_impl.kernels import offline
    usage = offline.report(offline.compile_decode(128, causal=causal, local=True))
    assert usage["HGMMA"] > 0, usage  # both products became wgmma: the whole kernel went through


@sm90_compile
def test_the_offline_compile_pipelines_k_and_v_as_the_launched_kernel_does():
    """offline.compile_decode specialises the strides as the JIT does at the launches (multiples of 16 elements):
    K and V tiles then go through cp.async into one shared-memory buffer per stage. Without it the loads are of two
    bytes, nothing is pipelined, and registers and shared memory are unlike the launched kernel's."""
    pytest.importorskip("triton")
    from triton_impl.kernels import offline
    two, three = (offline.report(offline.compile_decode(128, dict(BLOCK_M=16, BLOCK_N=64, num_warps=4,
                                                                   num_stages=stages))) for stages in (2, 3))
    assert three["smem"] - two["smem"] == 64 * 128 * 2 * 2, (two, three)  # one more stage: a K and a V tile of bf16
    assert three["LDGSTS"] > two["LDGSTS"] > 0 and three["STL"] == 0, three


@sm90_compile
def test_e4m3_tiles_meet_bf16_queries_in_fp16_mmas():
    """With bf16 queries an e4m3 cache's tiles become fp16 (one F2FP unpack per pair) and both products run as fp16
    wgmma: no e4m3 -> fp16 -> bf16 round trip (F2F.BF16.F16), no bf16 wgmma; the bf16 cache keeps bf16 wgmma."""
    pytest.importorskip("triton")
    from triton_impl.kernels import offline
    e4m3, bf16 = (offline.report(offline.compile_decode(128, fp8=fp8)) for fp8 in (True, False))
    assert e4m3["F2FP.F16.E4M3.UNPACK_B"] > 0 and e4m3["F2F.BF16.F16"] == 0, e4m3
    assert e4m3["HGMMA"] > 0 and e4m3["HGMMA.BF16"] == 0, e4m3
    assert bf16["HGMMA.BF16"] == bf16["HGMMA"] > 0, bf16


@gpu
@pytest.mark.parametrize("case", [KV(2, 32, 8, 1, (6000, 2049), 128, page_size=64, window=(1024, -1)),
                                  KV(2, 32, 8, 4, (9000, 300), 128, page_size=16, causal=True, window=(4096, -1)),
                                  KV(1, 16, 2, 2, (5000,), 64, window=(700, 300))],
                         ids=lambda c: c.shape_str().replace(" ", "-"))
def test_gpu_windows_match_the_oracle(case):
    triton_gpu_or_skip()
    _check(case, "cuda")


@gpu
@pytest.mark.parametrize("case", [KV(3, 8, 2, 3, (1000, 1, 0), 64, page_size=16, window=(5000, -1)),  # wider
                                  KV(2, 8, 2, 4, (2, 500), 128, page_size=64, window=(0, 0)),  # rows see no key
                                  KV(2, 32, 4, 16, (4000, 100), 128, page_size=64, causal=True, window=(256, 50)),
                                  KV(2, 32, 8, 1, (4000, 2500), 128, page_size=16, kv_fmt="fp8", window=(2000, -1))],
                         ids=lambda c: c.shape_str().replace(" ", "-"))
@pytest.mark.parametrize("split", [dict(), dict(num_splits=7), dict(split_size=256)], ids=["auto", "seven", "size256"])
def test_gpu_more_windows_match_the_oracle(case, split):
    triton_gpu_or_skip()
    _check(case, "cuda", **split)


@gpu
@pytest.mark.parametrize("paged", [True, False], ids=["page64", "contiguous"])
def test_gpu_a_window_keeps_split_size_batch_invariant_and_runs_deterministic(paged):
    """The chunks start at each sequence's window (from its own length, on the device): under split_size a sequence
    alone gives the same bits as inside the batch; repeated calls agree, with and without split_size."""
    triton_gpu_or_skip()
    from triton_impl.decode import forward
    window = (1500, -1)
    case = KV(4, 16, 4, 3, (3000, 10, 1777, 4096), 128, page_size=64 if paged else None, capacity=4096, causal=True,
              window=window)
    inputs = _inputs(case, "cuda")
    out, lse = _call(inputs, case, split_size=512)
    for b in range(case.batch):
        sub = slice(b, b + 1)
        table = inputs.block_table[sub] if paged else None
        k_cache, v_cache = (inputs.k_cache, inputs.v_cache) if paged else (inputs.k_cache[sub], inputs.v_cache[sub])
        alone = forward(inputs.q[sub], k_cache, v_cache, inputs.cache_seqlens[sub], table, causal=True,
                        scale=1 / math.sqrt(128), split_size=512, window=window)
        assert torch.equal(alone[0], out[sub]) and torch.equal(alone[1], lse[sub]), b
    for split in (dict(), dict(split_size=512)):
        first = _call(inputs, case, **split)
        for _ in range(3):
            again = _call(inputs, case, **split)
            assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1]), split


@gpu
def test_gpu_deterministic_batch_invariant_and_capturable():
    triton_gpu_or_skip()
    from triton_impl.decode import forward
    case = KV(4, 32, 8, 1, (8000, 100, 4097, 3000), 128, page_size=64)
    inputs = _inputs(case, "cuda")
    first, second = _call(inputs, case), _call(inputs, case)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    batch = _call(inputs, case, split_size=1024)
    alone = forward(inputs.q[2:3], inputs.k_cache, inputs.v_cache, inputs.cache_seqlens[2:3],
                    inputs.block_table[2:3], causal=False, scale=1 / math.sqrt(128), split_size=1024)
    assert torch.equal(alone[0], batch[0][2:3]) and torch.equal(alone[1], batch[1][2:3])
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _call(inputs, case)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], first[0]) and torch.equal(captured[1], first[1])


@gpu
def test_gpu_bad_page_poisons_that_batch_only():
    triton_gpu_or_skip()
    case = KV(3, 32, 8, 1, (3000, 2000, 1000), 128, page_size=64, hostile=True)
    inputs = _inputs(case, "cuda")
    clean = _call(inputs, case)
    inputs.block_table[1, 20] = 1 << 30
    out, lse = _call(inputs, case)
    assert torch.isnan(out[1]).all() and torch.isnan(lse[1]).all()
    keep = torch.tensor([0, 2], device="cuda")
    assert torch.equal(out[keep], clean[0][keep]) and torch.equal(lse[keep], clean[1][keep])


# ---- the public entry point, triton_impl.attention_with_kvcache (checks and append: compare.kvcache)

@pytest.mark.parametrize("case", [
    oracle.KVCase(2, 8, 2, 1, (37, 0), 64, page_size=16, hostile=True, fmt="fp16"),
    oracle.KVCase(2, 4, 4, 3, (70, 2), 64, causal=True, fmt="fp32"),
], ids=lambda c: c.shape_str())
@interpreted
def test_attention_with_kvcache_entry_point(case):
    verdict = oracle.check_kvcache(_public().attention_with_kvcache, case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_attention_with_kvcache_appends_then_attends():
    """k_new / v_new land at each sequence's end and are attended to: the same result as a cache that held them."""
    case = oracle.KVCase(2, 4, 2, 2, (20, 9), 64, page_size=16, fmt="fp16", capacity=48)
    full = oracle.make_kvcache_inputs(case)
    short = [n - 2 for n in case.cache_seqlens]
    k_cache, v_cache = full.k_cache.clone(), full.v_cache.clone()
    k_new = torch.stack([full.k_dense[b, :, n:n + 2].transpose(0, 1) for b, n in enumerate(short)])
    v_new = torch.stack([full.v_dense[b, :, n:n + 2].transpose(0, 1) for b, n in enumerate(short)])
    out, lse = _public().attention_with_kvcache(
        full.q, k_cache, v_cache, cache_seqlens=torch.tensor(short, dtype=torch.int32), block_table=full.block_table,
        k_new=k_new, v_new=v_new, return_lse=True)
    ref_out, ref_lse = _public().attention_with_kvcache(full.q, full.k_cache, full.v_cache,
                                                          **full.kwargs(case), return_lse=True)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse)
