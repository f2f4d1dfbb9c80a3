"""cuda_impl.decode (csrc/fwd_decode.cu): split-KV decode against a paged or contiguous KV cache.

CPU part: the library exports the decode entry points, DecodeParams in _lib.py matches the C struct, every decode
kernel is built for every target without spills and its machine code holds mma.sync (HMMA), ldmatrix (LDSM) and
cp.async (LDGSTS) and no local memory; bad parameters come back as messages; the split plan (pure Python).
CPU part, windows: the kernel's window range check, the host's folding of sides wider than every row into -1, and
the split plan over the window's span (its chunks cover every row's window from the kernel's chunk start).
GPU part (skipped without one): compare.oracle.check_kvcache over query lengths, GQA groups, head dims, page sizes
and the contiguous cache, odd and empty lengths, causal with L < Sq, hostile block tables, e4m3 K/V, forced and
heuristic splits; poison of a bad sequence only; batch invariance under split_size; determinism; CUDA graphs; local
windows (tails, causal, both sides, GQA, Sq > 1, pages, wider than the cache, rows that see no key) against the
oracle, poison and batch invariance with a window.
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

from cuda_impl import _lib, decode, sass, toolchain

MANGLED_DTYPE = {"bf16": "I13__nv_bfloat16", "fp16": "I6__half"}
HMMA = {"bf16": "HMMA.16816.F32.BF16", "fp16": "HMMA.16816.F32"}
HEAD_DIMS = (64, 128, 256)


# --- build and machine code (CPU) ----------------------------------------------------------


def test_library_exports_decode_and_its_params_block(fa_library):
    lib = _lib.load()
    for name in ("cuda_fa_decode", "cuda_fa_decode_params_size", "cuda_fa_decode_block_n",
                 "cuda_fa_decode_ctas_per_sm"):
        assert hasattr(lib, name), name
    size = lib.cuda_fa_decode_params_size
    size.restype = ctypes.c_int
    assert size() == ctypes.sizeof(_lib.DecodeParams)
    assert _lib.decode_block_n(64, False) == 128 and _lib.decode_block_n(128, False) == 64
    assert _lib.decode_block_n(256, False) == 64
    # e4m3: twice the keys per stage at d64 / d128 (32 KB of K+V, as the 16-bit rings)
    assert [_lib.decode_block_n(d, True) for d in (64, 128, 256)] == [256, 128, 64]
    assert _lib.decode_block_n(96, False) == -1


def _decode_rows():
    return [r for r in toolchain.ptxas_report(_lib.library_spec()) if r["kernel"].startswith("fwd_decode")]


def test_every_decode_kernel_builds_for_every_target_without_spills(fa_library):
    rows = _decode_rows()
    archs: dict[str, set] = {}
    for r in rows:
        archs.setdefault(r["kernel"], set()).add(r["arch"])
        assert max(r["stack"], r["spill_stores"], r["spill_loads"]) == 0, r
    expected = {f"sm_{t}" for t in toolchain.ARCH_TARGETS}
    for fmt in ("bf16", "fp16"):
        for d in HEAD_DIMS:
            for name in (f"fwd_decode_kernel<{fmt},{d}>", f"fwd_decode_kernel<{fmt},{d},kv-fp8>",
                         f"fwd_decode_merge_kernel<{fmt},{d}>"):
                assert archs.get(name) == expected, name


@pytest.fixture(scope="module")
def decode_sass(fa_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    return {key: ins for key, ins in sass.dump_sass(fa_library).items() if "fwd_decode_kernel" in key[1]}


@pytest.mark.parametrize("fmt", ["bf16", "fp16"])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("kv", ["same", "fp8"])
def test_decode_kernel_uses_intended_instructions(decode_sass, fmt, head_dim, kv):
    kv_tag = "13__nv_fp8_e4m3" if kv == "fp8" else "S1_"
    tag = f"fwd_decode_kernel{MANGLED_DTYPE[fmt]}{kv_tag}Li{head_dim}E"
    per_arch = {arch: ins for (arch, fn), ins in decode_sass.items() if tag in fn}
    assert len(per_arch) == len(toolchain.ARCH_TARGETS), tag
    for arch, instructions in per_arch.items():
        ops = sass.opcode_counts(instructions)
        mma = HMMA["fp16" if kv == "fp8" else fmt]  # e4m3 K/V: fp16 MMAs whatever q's type
        assert ops[mma] > 0, f"{arch}: no {mma}"
        assert not any(op.startswith("HMMA") and op != mma for op in ops), f"{arch}: MMAs other than {mma}"
        assert any(op.startswith("LDGSTS") for op in ops), f"{arch}: no cp.async (LDGSTS)"
        assert ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.MT88.4"] > 0, f"{arch}: K via ldmatrix.x4, V via .trans"
        assert not any(op.startswith(("LDL", "STL")) for op in ops), f"{arch}: local memory"
        if kv == "fp8" and arch == "sm_90":  # e4m3 -> f16 in hardware on sm_90 (cuobjdump names sm_90a sm_90)
            assert any("E4M3" in op for op in ops), f"{arch}: no e4m3 unpack"
            # each register's high pair unpacked from its half in place (R.H1), not after a shift
            unpacks = [i for i in instructions if sass.opcode(i) == "F2FP.F16.E4M3.UNPACK_B"]
            assert unpacks and 2 * sum(".H1" in i for i in unpacks) == len(unpacks), f"{arch}: e4m3 high pairs"
            # straight from the ring into registers: no widened copy stored to shared memory per key tile (the
            # few STS are the Q tile's conversion and the warps' merge)
            stores = sum(n for op, n in ops.items() if op.startswith("STS"))
            assert stores <= head_dim // 8 + 12, f"{arch}: {stores} shared-memory stores"


def test_bad_parameters_come_back_as_messages(fa_library):
    lib = _lib.load()
    fn = _lib._typed_entry(lib, "cuda_fa_decode", _lib.DecodeParams)
    err = ctypes.create_string_buffer(256)
    good = dict(batch=1, seqlen_q=1, heads_q=8, heads_kv=2, head_dim=128, head_dim_v=128, page_size=16, num_pages=4,
                max_pages=4, num_splits=1, split_keys=256, scale=0.1, dtype=0, kv_dtype=0, window_left=-1,
                window_right=-1)  # split_keys: a multiple of every key tile
    for change, word in ((dict(head_dim=96), b"head_dim"), (dict(heads_q=7), b"heads"),
                         (dict(split_keys=100), b"splits"), (dict(num_splits=2), b"workspace"),
                         (dict(scale=-1.0), b"scale"), (dict(kv_dtype=1), b"dtype"),
                         (dict(kv_dtype=2), b"descale"), (dict(page_size=0), b"cache"),
                         (dict(head_dim_v=64), b"head_dim_v"), (dict(head_dim_v=0), b"head_dim_v"),
                         # window sides: -1 or within what a row reaches (capacity 64 keys, seqlen_q 1)
                         (dict(window_left=-2), b"window"), (dict(window_left=65), b"window"),
                         (dict(window_right=-5), b"window"), (dict(window_right=2), b"window")):
        params = _lib.DecodeParams(**{**good, **change})
        assert fn(ctypes.byref(params), None, err, 256) != 0, change
        assert word in err.value, (change, err.value)


# --- the split plan (pure Python) ------------------------------------------------------------


def test_split_plan():
    # Enough CTAs for the slots: one chunk over the whole capacity.
    assert decode.plan_splits(8192, 64, ctas=256, sms=132, per_sm=2) == (1, 8192)
    # Few CTAs: enough chunks for a nearly full last wave, each a multiple of the tile.
    n, chunk = decode.plan_splits(131072, 64, ctas=8, sms=132, per_sm=2)
    assert 20 <= n <= decode.MAX_SPLITS and chunk % 64 == 0 and (n - 1) * chunk < 131072 <= n * chunk
    assert decode.plan_splits(32768, 64, ctas=64, sms=132, per_sm=2)[0] >= 4
    # Two CTAs per SM only while that leaves chunks of MIN_SHARED_CHUNK keys; else one per SM, or none split.
    assert decode.plan_splits(4096, 64, ctas=64, sms=132, per_sm=2) == (4, 1024)
    assert decode.plan_splits(8192, 64, ctas=8, sms=132, per_sm=2) == (16, 512)
    assert decode.plan_splits(1024, 64, ctas=128, sms=132, per_sm=2) == (1, 1024)
    # num_splits: ceil(capacity / n) rounded up to the tile; no more chunks than hold keys.
    assert decode.plan_splits(1000, 64, ctas=8, sms=132, per_sm=2, num_splits=3) == (3, 384)
    assert decode.plan_splits(100, 64, ctas=8, sms=132, per_sm=2, num_splits=5) == (2, 64)
    # split_size: rounded up to the tile, independent of the batch around a sequence.
    assert decode.plan_splits(1000, 64, ctas=8, sms=132, per_sm=2, split_size=100) == (8, 128)
    assert decode.plan_splits(0, 64, ctas=1, sms=132, per_sm=2) == (1, 64)
    with pytest.raises(ValueError, match="mutually exclusive"):
        decode.plan_splits(100, 64, ctas=1, sms=1, per_sm=1, num_splits=2, split_size=64)
    with pytest.raises(ValueError, match="num_splits"):
        decode.plan_splits(100, 64, ctas=1, sms=1, per_sm=1, num_splits=0)


def test_kernel_window_folds_sides_past_every_row_into_unbounded():
    assert decode.kernel_window((-1, -1), 4096, 1) == (-1, -1)
    assert decode.kernel_window((4095, 0), 4096, 4) == (4095, 0)
    # left >= capacity: every row's window starts at key 0 or before; right >= Sq - 1: ends at the last key or after
    assert decode.kernel_window((4096, 3), 4096, 4) == (-1, -1)
    assert decode.kernel_window((1 << 40, 1 << 40), 4096, 4) == (-1, -1)  # beyond int32: packed as -1
    assert decode.kernel_window((7, 0), 4096, 1) == (7, -1)  # one query: right 0 is its last key already
    assert decode.kernel_window((0, 0), 0, 2) == (-1, 0)  # no capacity: nothing to bound


def _chunk_start(length: int, seqlen_q: int, left: int, block_n: int) -> int:
    """decode_chunk0's start (csrc/decode/params.cuh), for the plan tests."""
    return max(0, length - seqlen_q - left) // block_n * block_n if left >= 0 else 0


@pytest.mark.parametrize("seqlen_q, left, block_n", [(1, 4096, 64), (4, 100, 64), (64, 0, 128), (3, 1000, 256),
                                                      (1, 5000, 64)])
def test_split_plan_covers_the_window_from_the_chunk_start(seqlen_q, left, block_n):
    """The plan over the window's span: for every length up to the capacity, the chunks from the kernel's start
    cover the sequence's last key, and the start is at or before every row's first key; every split choice."""
    capacity = 4160
    left = decode.kernel_window((left, -1), capacity, seqlen_q)[0]
    keys = decode.planned_keys(capacity, block_n, seqlen_q, left)
    assert keys == (capacity if left < 0 else min(capacity, left + seqlen_q + block_n))
    for split in (dict(), dict(num_splits=3), dict(num_splits=200), dict(split_size=block_n)):
        n, chunk = decode.plan_splits(keys, block_n, ctas=8, sms=132, per_sm=2, **split)
        for length in range(capacity + 1):
            start = _chunk_start(length, seqlen_q, left, block_n)
            assert start <= max(0, length - seqlen_q - left) and start % block_n == 0
            assert start + n * chunk >= length, (split, length)


def test_split_plan_follows_the_window_not_the_capacity():
    """b1 Hkv8 Sq1 L32k with window 4096 (8 CTAs a chunk): planned as a cache of 4161 keys (the span), so its grid
    is the one of a 4097-key cache (65 pages of 64), not 32k keys' chunks that mostly find nothing."""
    keys = decode.planned_keys(32768, 64, 1, 4096)
    assert keys == 4161
    windowed = decode.plan_splits(keys, 64, ctas=8, sms=132, per_sm=2)
    full = decode.plan_splits(4160, 64, ctas=8, sms=132, per_sm=2)
    assert windowed[1] == full[1] and windowed[0] in (full[0], full[0] + 1)
    assert decode.plan_splits(32768, 64, ctas=8, sms=132, per_sm=2) == (32, 1024)  # the capacity's: 5 see the window
    # split_size keeps its chunk; only the grid shrinks to the span
    assert decode.plan_splits(keys, 64, ctas=8, sms=132, per_sm=2, split_size=512) == (9, 512)
    # no left bound, or one wider than the cache: the capacity
    assert decode.planned_keys(32768, 64, 1, -1) == 32768
    assert decode.planned_keys(1000, 64, 4, 999) == 1000


def test_fake_op_shapes():
    q = torch.empty(2, 3, 8, 64, device="meta", dtype=torch.bfloat16)
    k = torch.empty(5, 16, 2, 64, device="meta", dtype=torch.bfloat16)
    out, lse = decode.ops._decode_fake(q, k, k, None, None, None, None, False, 0.1, 1, 64, 100, -1)
    assert out.shape == (2, 3, 8, 64) and out.dtype == torch.bfloat16
    assert lse.shape == (2, 8, 3) and lse.dtype == torch.float32


# --- GPU: the oracle -------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")


def _oracle():
    from compare import oracle

    return oracle


def run_forward(**fixed):
    """fn(q, k_cache, v_cache, **kwargs) for compare.oracle.check_kvcache: decode.forward with `fixed` options."""

    def fn(q, k_cache, v_cache, *, cache_seqlens, block_table, causal, scale, return_lse, k_descale=None,
           v_descale=None, window=(-1, -1)):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        out, lse = decode.forward(q, k_cache, v_cache, cache_seqlens, block_table, causal=causal, scale=scale,
                                  k_descale=k_descale, v_descale=v_descale, window=window, **fixed)
        return (out, lse) if return_lse else out

    return fn


def _case(**kw):
    oracle = _oracle()
    base = dict(batch=2, heads_q=8, heads_kv=2, seqlen_q=1, cache_seqlens=(300, 77), head_dim=128, page_size=16)
    return oracle.KVCase(**{**base, **kw})


# (case overrides, forward options)
CASES = [
    # query lengths x GQA groups, both head dims
    *[(dict(seqlen_q=sq, heads_q=2 * g, heads_kv=2, head_dim=d), {})
      for sq in (1, 3, 16, 64) for g in (1, 4, 8, 16) for d in (64, 128)
      if not (sq == 64 and g == 16 and d == 64)],
    # page sizes and the contiguous cache, odd lengths with 0 and 1
    *[(dict(page_size=p, batch=4, cache_seqlens=(0, 1, 333, 1025)), {}) for p in (16, 64, 256, None)],
    *[(dict(page_size=p, batch=3, cache_seqlens=(513, 0, 1), seqlen_q=3, head_dim=64), {}) for p in (32, 128)],
    # causal, also with L < Sq (rows that see no key)
    *[(dict(causal=True, seqlen_q=sq, batch=4, cache_seqlens=(5, 0, 16, 700)), {}) for sq in (1, 3, 16, 64)],
    (dict(causal=True, seqlen_q=16, heads_q=16, heads_kv=1, cache_seqlens=(9, 2000), page_size=None), {}),
    # hostile tables (entries past the needed pages -1 / huge)
    (dict(hostile=True, batch=3, cache_seqlens=(17, 0, 300), capacity=1024), {}),
    (dict(hostile=True, batch=3, cache_seqlens=(17, 0, 300), capacity=1024, page_size=64, causal=True, seqlen_q=4),
     dict(num_splits=3)),
    # splits: one, three, the heuristic, a split size
    *[(dict(batch=3, cache_seqlens=(1000, 3, 4097), page_size=64), opt)
      for opt in (dict(num_splits=1), dict(num_splits=3), {}, dict(split_size=256))],
    (dict(batch=1, cache_seqlens=(20000,), heads_q=32, heads_kv=8, page_size=None), {}),
    # the merge's shapes: 1, 2, 4 and 8 warps per row, and more than one batch of loads per warp (over 64 splits),
    # a sequence shorter than most chunks and a poisoned one beside them
    *[(dict(batch=3, cache_seqlens=(9000, 130, 6000), heads_q=16, heads_kv=4, page_size=64), dict(num_splits=n))
      for n in (2, 7, 13, 40, 100, 140)],
    (dict(batch=2, cache_seqlens=(9000, 5), hostile=True, capacity=9216, page_size=64, head_dim=256, seqlen_q=2),
     dict(num_splits=33)),
    # dtypes, distributions, d256
    (dict(fmt="fp16", dist="large", cache_seqlens=(1500, 640)), {}),
    (dict(dist="shifted", cache_seqlens=(1500, 640), head_dim=64), dict(num_splits=4)),
    (dict(head_dim=256, cache_seqlens=(700, 1), seqlen_q=3), {}),
    (dict(head_dim=256, fmt="fp16", page_size=None, causal=True, seqlen_q=5, cache_seqlens=(3, 900)),
     dict(num_splits=2)),
    # e4m3 K/V with per-(batch, KV head) descales
    *[(dict(kv_fmt="fp8", head_dim=d, fmt=f, page_size=p, cache_seqlens=(900, 33)), opt)
      for d, f, p, opt in ((128, "bf16", 16, {}), (64, "fp16", None, dict(num_splits=3)),
                           (256, "bf16", 64, {}), (128, "fp16", 256, dict(split_size=128)))],
    (dict(kv_fmt="fp8", causal=True, seqlen_q=8, heads_q=16, heads_kv=2, cache_seqlens=(5, 400)), {}),
]


def _id(entry):
    over, opt = entry
    return "-".join(f"{k}{v}" for k, v in {**over, **opt}.items()).replace(" ", "").replace("(", "").replace(")", "")


@gpu
@needs_gpu
@pytest.mark.parametrize("entry", CASES, ids=[_id(e) for e in CASES])
def test_decode_matches_the_oracle(entry):
    over, opt = entry
    case = _case(**over)
    verdict = _oracle().check_kvcache(run_forward(**opt), case, device="cuda")
    assert verdict.passed, f"{case.shape_str()} {opt}: {verdict.reason}"


@gpu
@needs_gpu
def test_q_as_a_permuted_view():
    """attention() routes small-Sq calls here as a (B, Sq, Hq, D) view of (B, Hq, Sq, D) storage."""
    case = _case(seqlen_q=5, cache_seqlens=(200, 31))
    plain = run_forward()

    def fn(q, *args, **kw):
        return plain(q.transpose(1, 2).contiguous().transpose(1, 2), *args, **kw)

    verdict = _oracle().check_kvcache(fn, case, device="cuda")
    assert verdict.passed, verdict.reason


def _inputs(case):
    return _oracle().make_kvcache_inputs(case, "cuda")


def _call(inputs, case, **opt):
    return run_forward(**opt)(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case), return_lse=True)


@gpu
@needs_gpu
@pytest.mark.parametrize("opt", [dict(num_splits=1), dict(num_splits=3), {}])
@pytest.mark.parametrize("page_size", [16, None])
def test_bad_sequence_is_poisoned_alone(opt, page_size):
    """A used block-table entry outside the cache, or a length outside [0, capacity], makes that sequence's rows
    NaN; the other sequences' results are the same bits as without it."""
    case = _case(batch=4, cache_seqlens=(300, 500, 77, 1000), page_size=page_size, seqlen_q=2)
    inputs = _inputs(case)
    clean_out, clean_lse = _call(inputs, case, **opt)
    bad = {1, 3} if page_size else {3}
    if page_size:
        inputs.block_table[1, 5] = inputs.k_cache.shape[0] + 3  # in range of sequence 1 (500 keys, 32 pages)
    lengths = inputs.cache_seqlens.clone()
    capacity = case.keys_capacity
    inputs.cache_seqlens[3] = capacity + 1
    out, lse = _call(inputs, case, **opt)
    for b in range(case.batch):
        if b in bad:
            assert out[b].isnan().all() and lse[b].isnan().all(), b
        else:
            assert torch.equal(out[b], clean_out[b]) and torch.equal(lse[b], clean_lse[b]), b
    inputs.cache_seqlens.copy_(lengths)
    inputs.cache_seqlens[0] = -1
    out, lse = _call(inputs, case, **opt)
    assert out[0].isnan().all() and lse[0].isnan().all()
    assert torch.equal(out[2], clean_out[2])


@gpu
@needs_gpu
@pytest.mark.parametrize("page_size", [64, None])
def test_split_size_is_batch_invariant(page_size):
    """With split_size the chunks follow key positions alone: a sequence alone gives the same bits as inside a
    batch of other lengths."""
    case = _case(batch=4, cache_seqlens=(3000, 10, 1777, 4096), page_size=page_size, heads_q=16, heads_kv=4,
                 seqlen_q=3, capacity=4096)
    inputs = _inputs(case)
    out, lse = _call(inputs, case, split_size=512)
    for b in range(case.batch):
        k = inputs.k_cache if page_size else inputs.k_cache[b:b + 1]
        v = inputs.v_cache if page_size else inputs.v_cache[b:b + 1]
        table = inputs.block_table[b:b + 1] if page_size else None
        alone = decode.forward(inputs.q[b:b + 1], k, v, inputs.cache_seqlens[b:b + 1], table, causal=False,
                               scale=case.softmax_scale, split_size=512)
        assert torch.equal(alone[0][0], out[b]) and torch.equal(alone[1][0], lse[b]), b


@gpu
@needs_gpu
def test_runs_are_deterministic():
    case = _case(batch=2, cache_seqlens=(20000, 9000), heads_q=32, heads_kv=8, page_size=64)
    inputs = _inputs(case)
    first = _call(inputs, case)
    for _ in range(3):
        again = _call(inputs, case)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@gpu
@needs_gpu
def test_cuda_graph_replay_matches_eager():
    case = _case(batch=3, cache_seqlens=(5000, 1, 777), page_size=16)
    inputs = _inputs(case)
    eager = _call(inputs, case, num_splits=5)
    _call(inputs, case, num_splits=5)  # warm: library loaded, attributes set
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _call(inputs, case, num_splits=5)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], eager[0]) and torch.equal(captured[1], eager[1])
    # A new (shorter: the cache past each length is NaN) length on the device, no new capture: the replay follows it.
    inputs.cache_seqlens[2] = 500
    graph.replay()
    fresh = _call(inputs, case, num_splits=5)
    torch.cuda.synchronize()
    assert torch.equal(captured[0], fresh[0])


# Local windows: (case overrides, forward options), each also with forced splits and a split size
WINDOW_CASES = [
    # a window far shorter than the cache: the chunks follow it (tails 6000 / 2049, page 64)
    dict(batch=2, heads_q=32, heads_kv=8, cache_seqlens=(6000, 2049), page_size=64, window=(1024, -1)),
    # causal, Sq 4, page 16, one sequence shorter than the window
    dict(batch=2, heads_q=32, heads_kv=8, seqlen_q=4, cache_seqlens=(9000, 300), causal=True, window=(4096, -1)),
    # both sides, contiguous, d64
    dict(batch=1, heads_q=16, heads_kv=2, seqlen_q=2, cache_seqlens=(5000,), head_dim=64, page_size=None,
         window=(700, 300)),
    # causal overrides the right side; GQA 8 x Sq 16: query tiles of two positions, edges inside a tile
    dict(batch=2, heads_q=32, heads_kv=4, seqlen_q=16, cache_seqlens=(4000, 100), causal=True, page_size=64,
         window=(256, 50)),
    # Sq 64 without GQA: each query tile's window starts elsewhere; a left bound of 63 keys
    dict(batch=1, heads_q=2, heads_kv=2, seqlen_q=64, cache_seqlens=(3000,), head_dim=64, window=(63, 0)),
    # a window wider than the cache (the plan over the capacity), lengths 1 and 0
    dict(batch=4, heads_q=8, heads_kv=2, seqlen_q=3, cache_seqlens=(1000, 1, 0, 77), head_dim=64, window=(5000, -1)),
    # rows that see no key (L 2 < Sq 4 with a zero window) beside a long sequence
    dict(batch=2, heads_q=8, heads_kv=2, seqlen_q=4, cache_seqlens=(2, 500), page_size=64, window=(0, 0)),
    # hostile table tail, d256, e4m3 K/V
    dict(batch=3, cache_seqlens=(17, 0, 3000), capacity=4096, page_size=64, hostile=True, window=(500, -1)),
    dict(batch=2, heads_q=16, heads_kv=4, seqlen_q=2, cache_seqlens=(3000, 129), head_dim=256, page_size=64,
         window=(600, -1)),
    dict(batch=2, heads_q=32, heads_kv=8, cache_seqlens=(4000, 2500), kv_fmt="fp8", page_size=16, window=(2000, -1)),
    # tiles off page boundaries: e4m3 d128's 128-key tiles over pages of 64 (three pages where the window starts
    # inside a page: the per-row copies; two on page boundaries: the per-tile ones), bf16 d128's 64 over pages of 32
    dict(batch=2, heads_q=32, heads_kv=8, cache_seqlens=(4000, 2500), kv_fmt="fp8", page_size=64, window=(1500, -1)),
    dict(batch=2, heads_q=16, heads_kv=4, seqlen_q=2, cache_seqlens=(3000, 1000), page_size=32, window=(777, -1)),
    dict(batch=2, heads_q=16, heads_kv=2, seqlen_q=3, cache_seqlens=(1200, 700), fmt="fp16", kv_fmt="fp8",
         head_dim=64, page_size=None, causal=True, window=(129, -1)),
]
WINDOW_SPLITS = [{}, dict(num_splits=7), dict(split_size=256)]


@gpu
@needs_gpu
@pytest.mark.parametrize("split", WINDOW_SPLITS, ids=["auto", "seven", "size256"])
@pytest.mark.parametrize("over", WINDOW_CASES, ids=[_id((o, {})) for o in WINDOW_CASES])
def test_windows_match_the_oracle(over, split):
    case = _case(**over)
    verdict = _oracle().check_kvcache(run_forward(**split), case, device="cuda")
    assert verdict.passed, f"{case.shape_str()} {split}: {verdict.reason}"


@gpu
@needs_gpu
def test_public_entry_point_takes_a_window():
    """cuda_impl.attention_with_kvcache with window=: checks, then the windowed kernel (the oracle)."""
    import cuda_impl

    case = _case(batch=2, heads_q=32, heads_kv=8, seqlen_q=2, cache_seqlens=(5000, 64), page_size=64, causal=True,
                 window=(1000, -1))
    verdict = _oracle().check_kvcache(cuda_impl.attention_with_kvcache, case, device="cuda")
    assert verdict.passed, verdict.reason


@gpu
@needs_gpu
@pytest.mark.parametrize("page_size", [64, None])
def test_a_window_keeps_split_size_batch_invariant_and_runs_deterministic(page_size):
    """With a window the chunks start at each sequence's own window (from its length on the device): under
    split_size a sequence alone gives the same bits as inside a batch of other lengths, and repeated calls agree."""
    window = (1500, -1)
    case = _case(batch=4, cache_seqlens=(3000, 10, 1777, 4096), page_size=page_size, heads_q=16, heads_kv=4,
                 seqlen_q=3, capacity=4096, causal=True, window=window)
    inputs = _inputs(case)
    out, lse = _call(inputs, case, split_size=512)
    for b in range(case.batch):
        k = inputs.k_cache if page_size else inputs.k_cache[b:b + 1]
        v = inputs.v_cache if page_size else inputs.v_cache[b:b + 1]
        table = inputs.block_table[b:b + 1] if page_size else None
        alone = decode.forward(inputs.q[b:b + 1], k, v, inputs.cache_seqlens[b:b + 1], table, causal=True,
                               scale=case.softmax_scale, split_size=512, window=window)
        assert torch.equal(alone[0][0], out[b]) and torch.equal(alone[1][0], lse[b]), b
    for opt in ({}, dict(split_size=512)):
        first = _call(inputs, case, **opt)
        for _ in range(3):
            again = _call(inputs, case, **opt)
            assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1]), opt


@gpu
@needs_gpu
@pytest.mark.parametrize("opt", [dict(num_splits=1), dict(num_splits=5), {}])
def test_a_bad_page_inside_the_window_poisons_that_sequence_alone(opt):
    """A block-table entry the window's keys use, outside the cache: that sequence's rows are NaN, the others keep
    their bits."""
    case = _case(batch=3, cache_seqlens=(3000, 2500, 900), page_size=16, seqlen_q=2, window=(1000, -1))
    inputs = _inputs(case)
    clean_out, clean_lse = _call(inputs, case, **opt)
    inputs.block_table[1, 2400 // 16] = inputs.k_cache.shape[0] + 5  # key 2400: inside sequence 1's window
    out, lse = _call(inputs, case, **opt)
    assert out[1].isnan().all() and lse[1].isnan().all()
    for b in (0, 2):
        assert torch.equal(out[b], clean_out[b]) and torch.equal(lse[b], clean_lse[b]), b


@gpu
@needs_gpu
def test_a_windowed_call_replays_in_a_cuda_graph():
    """The window's chunk start comes from the lengths on the device: a replay follows a new length."""
    case = _case(batch=2, cache_seqlens=(5000, 777), page_size=16, window=(900, -1))
    inputs = _inputs(case)
    eager = _call(inputs, case, num_splits=3)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _call(inputs, case, num_splits=3)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], eager[0]) and torch.equal(captured[1], eager[1])
    inputs.cache_seqlens[0] = 3000
    graph.replay()
    fresh = _call(inputs, case, num_splits=3)
    torch.cuda.synchronize()
    assert torch.equal(captured[0], fresh[0]) and torch.equal(captured[1], fresh[1])


def test_decode_params_are_packed_field_for_field(monkeypatch):
    """launch_decode packs DecodeParams with struct_packer (the host-time path): the bytes equal a Structure built
    from keywords, field by field, for a paged fp8 call and a contiguous 16-bit one."""
    from cuda_impl import _lib

    captured = []

    def entry(params, stream, err, err_len):  # (a copy: the block is reused by the next launch)
        captured.append(_lib.DecodeParams.from_buffer_copy(params))
        return 0

    monkeypatch.setattr(_lib, "_decode_entry", lambda extra_flags, mla: entry)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(_lib, "_raw_stream", lambda index: 0)
    q = torch.empty(3, 2, 8, 128, dtype=torch.bfloat16)[:, :, :, :]
    out = torch.empty_like(q)
    lse = torch.empty(3, 8, 2)
    for paged in (True, False):
        cache = torch.empty((7, 64, 2, 128) if paged else (3, 300, 2, 128),
                            dtype=torch.float8_e4m3fn if paged else torch.bfloat16)
        table = torch.zeros(3, 5, dtype=torch.int32) if paged else None
        lengths = torch.zeros(3, dtype=torch.int32)
        descale = torch.ones(3, 2) if paged else None
        work = torch.empty(10) if paged else None
        window = (300, -1) if paged else (-1, -1)
        _lib.launch_decode(q, cache, cache, out, lse, lengths, table, descale, descale, work, causal=paged,
                           scale=0.125, num_splits=4 if paged else 1, split_keys=128, window=window)
        expected = _lib.DecodeParams(
            q=q.data_ptr(), k=cache.data_ptr(), v=cache.data_ptr(), out=out.data_ptr(), lse=lse.data_ptr(),
            block_table=table.data_ptr() if paged else None, seqlens=lengths.data_ptr(),
            k_descale=descale.data_ptr() if paged else None, v_descale=descale.data_ptr() if paged else None,
            workspace=work.data_ptr() if paged else None, q_stride=_lib._strides(q), k_stride=_lib._strides(cache),
            v_stride=_lib._strides(cache), block_table_stride=5 if paged else 0, batch=3, seqlen_q=2, heads_q=8,
            heads_kv=2, head_dim=128, head_dim_v=128, page_size=64 if paged else 300, num_pages=7 if paged else 3,
            max_pages=5 if paged else 1, num_splits=4 if paged else 1, split_keys=128, scale=0.125,
            causal=int(paged), dtype=0, kv_dtype=_lib.E4M3_CODE if paged else 0, window_left=window[0],
            window_right=window[1])
        assert bytes(captured[-1]) == bytes(expected)
