"""Decode (flash-decoding): a few query rows against a long, optionally paged, KV cache.

Plain pointer loads, so it runs on sm_80+ and under TRITON_INTERPRET=1.

* Grid of the main kernel: ((batch * KV heads + KV head) * splits + split) * m_tiles + m_tile, one dimension
  (gridDim.y/z stop at 65535, which batch passes; `program` takes it apart). A program owns one query tile of one
  KV head and one chunk of keys (a split). GQA packing: the tile's rows are the Sq * g (query position,
  query head) pairs of that KV head, row r = query head hk * g + r % g at query position r // g, padded to
  BLOCK_M >= 16 for tl.dot; each K/V tile is read once for all g query heads.
* K/V rows are gathered through the block table: key j lives in page block_table[b, j // PAGE_SIZE], row
  j % PAGE_SIZE. When a page holds whole key tiles (PAGE_SIZE % BLOCK_N == 0) one table entry serves the
  tile; smaller pages are gathered per key. A contiguous cache is the page of index b, PAGE_SIZE = capacity.
  Table entries past the pages that cache_seqlens[b] needs are never loaded; a needed entry outside
  [0, num_blocks) is never dereferenced and poisons (NaN) every row of that batch, as do L < 0 or
  L > capacity.
* Online softmax in exp2 with the scale (and fp8's K descale) folded into one multiplier; every tile is
  masked (key tail, page validity, bottom-right causal per row): decode is memory-bound.
* A local window (LOCAL; window_left / window_right, -1 unbounded, around each row's bottom-right diagonal): with a
  left bound a sequence's chunks start at the first key its rows see, rounded down to the key tile (_chunk_start;
  the host plans them over the window's span, not the capacity); the chunk's key range is narrowed to the tiles
  some row of the query tile sees, and every tile is masked per row.
* One split: the program writes out and lse directly. Several: it writes its normalised partial output and
  its LSE (log2 units) in fp32 to a workspace, and `_decode_merge` combines the splits of a row MERGE_BLOCK_S
  at a time, in order (fixed order: the same bits on every run). Chunks past a sequence's length do no work
  and write nothing; the merge reads only the chunks the length covers, so a row's result depends only on its
  own sequence and the chunk size (batch-invariant with a fixed split_size).
* fp8 e4m3 K/V (FP8): tiles are loaded as fp8 and converted in registers to fp16, the MMAs' type for a 16-bit q
  (e4m3 -> fp16 is one conversion per pair; e4m3 -> bf16 goes through fp32), a bf16 Q scaled by a power of two
  into fp16's range (`_fp16_q`); an fp32 q keeps fp32. The per-(batch, KV head) K descale is folded into the
  softmax multiplier and the V descale into the output.
* Q/K wider than V (QK_EXTRA, MLA's 576 = 512 + 64): S = Q[:, :D] K[:, :D]^T + Q[:, D:] K[:, D:]^T with D = V's
  head_dim, both chunks powers of two; V_IS_K (one latent cache, V the first D columns of K): P V reads K's tile
  again from registers, so each key row is loaded once.
"""
import triton
import triton.language as tl

from triton_impl.kernels import interpreter_compat, tuning

LOG2E = 1.4426950408889634
LN2 = tl.constexpr(0.6931471805599453)

# (head_dim, bytes per K/V element) -> (BLOCK_N, num_warps, num_stages) of the main kernel on a GPU. One fixed
# entry each, no autotuning (decode runs at the user's size; autotuning on the first call is a known bug here).
# Memory-bound: what decides it is the K/V bytes in flight per SM (programs per SM x buffered stages x tile).
# H200 probe (scripts/triton_decode_probe.py, bf16 d128 Sq1 Hq32/Hk8, page 64, 2026-12-01): 64 keys x 4 warps x
# 3 stages (two 32 KB K+V tiles buffered, ~72 KB shared memory, three programs per SM) ran B8 Sk32k in 261 us
# (4.12 TB/s) and B1 Sk128k in 136 us (3.94), the best of nine configs there; B32 Sk8k ran 248 us (4.33) with 4
# stages and one split. d64, d256 and the fp8 rows are set from their sm_90 compiles (shared memory, registers,
# no spills), not timed.
CONFIGS = {
    # MLA (Q/K 576, V 512 from K): 32 query rows x 32 keys, 8 warps for the 32 x 512 fp32 accumulator: the sm_90
    # compiles that do not spill (156 / 188 registers bf16 / e4m3). 64 rows (wgmma) fit 8 warps too (no spills,
    # 147 KB of shared memory at 32 keys) but are not timed: MAX_BLOCK_M keeps 32. bf16 takes ROW_TILE_CONFIGS'
    # instead; the e4m3 one is not timed.
    (576, 2): (32, 8, 3),
    (576, 1): (32, 8, 3),
    (64, 2): (64, 4, 4),
    (128, 2): (64, 4, 3),
    (256, 2): (32, 4, 3),
    (64, 1): (128, 4, 4),
    (128, 1): (64, 4, 4),
    (256, 1): (32, 4, 4),
    # fp32 q and cache (ieee dots, no tensor cores; a correctness path, not tuned): the 16-bit tiles' shared memory,
    # half their keys
    (576, 4): (16, 8, 3),
    (64, 4): (32, 4, 4),
    (128, 4): (32, 4, 3),
    (256, 4): (16, 4, 3),
}
# (BLOCK_N, num_warps, num_stages) by the query tile's BLOCK_M where it beats CONFIGS' (H200, graph replays, the
# same call; all spill-free on sm_90): MLA bf16 16 rows (16 heads) on 4 warps: b1 h16 L64k 105 -> 101 us, b32 h16
# L8k 146 -> 125 us; 32 rows (32-128 heads) on 64-key tiles, two stages: b32 h128 L8k 727 -> 531 us (32 rows on 4
# warps spill 128 bytes)
ROW_TILE_CONFIGS = {(576, 2, 16): (32, 4, 3), (576, 2, 32): (64, 8, 2)}
# pages smaller than the key tile: K/V rows gathered through per-key table entries, which Triton's pipeliner
# places one stage later; two more stages give the same number of buffered tiles (sm_90 compile: 2 buffers
# at 3 + 2 stages for d128, 1 at 3 or 4)
GATHER_EXTRA_STAGES = 2
# largest query tile per head_dim (accumulator registers: BLOCK_M * HEAD_DIM fp32)
MAX_BLOCK_M = {64: 64, 128: 64, 256: 32, 576: 32}
# the merge's tile (merge_tile): up to 16 packed rows x 32 of V's columns, up to 16 splits' loads in flight
# together. H200, bf16 d128 Hq32 (journal 2026-12-03 decode merge, call 4): 16 x 32 the fastest of 4/8/16 splits
# x 32/64 columns at batch 1 (B1 Hkv4 Sk8k 32 chunks 24.5 us at 8 x 64, 18.6 at 16 x 32); 3 chunks (B32 Hkv4 Sk1k)
# 33.7 at 4 splits a block, 36.5 at 16: hence no more than the chunks, rounded up to a power of two
MERGE_BLOCK_M, MERGE_BLOCK_D, MERGE_BLOCK_S, MERGE_WARPS = 16, 32, 16, 4
SMEM_PER_SM = 232448  # sm_90: the most shared memory one SM gives its blocks
# under TRITON_INTERPRET=1: small tiles so that tiny test shapes span several tiles and splits
INTERPRETER_CONFIG = dict(BLOCK_N=16, MAX_BLOCK_M=32)


@triton.jit
def _program(heads_kv, tiles):
    """(tile, KV head, batch) of this program in the flattened grid of `grid`: `tiles` programs per (batch, KV
    head), side by side."""
    pid = tl.program_id(0)
    tile = pid % tiles
    bh = pid // tiles
    return tile, bh % heads_kv, bh // heads_kv


@triton.jit
def _chunk_start(seqlen, seqlen_q, window_left, BLOCK_N: tl.constexpr):
    """First key of a sequence's chunk 0: 0, or with a left window bound the first key any of its rows sees
    (seqlen - seqlen_q - window_left, at least 0) rounded down to the split kernel's key tile BLOCK_N."""
    start = (tl.maximum(seqlen - seqlen_q - window_left, 0) // BLOCK_N) * BLOCK_N
    return tl.where(window_left >= 0, start, 0)


@triton.jit
def _fp8_operand(x, Q_TYPE: tl.constexpr):
    """An e4m3 tile as an MMA operand: fp16 for a 16-bit q (one conversion per pair of values), fp32 for an fp32 q."""
    if Q_TYPE == tl.float32:
        y = x.to(tl.float32)
    else:
        y = x.to(tl.float16)
    return y


@triton.jit
def _fp16_shift(amax):
    """log2 of the power of two that takes a bf16 Q tile whose largest magnitude is amax into [2^13, 2^14): inside
    fp16's range at its full precision; 0 for an all-zero tile."""
    shift = tl.where(amax > 0, 13.0 - tl.floor(tl.math.log2(tl.maximum(amax, 1e-30))), 0.0)
    return tl.minimum(tl.maximum(shift, -64.0), 64.0)


@triton.jit
def _fp16_q(q, shift):
    """q * 2^shift in fp16: the scaling is exact and fp16's 11-bit significand holds bf16's 8 bits (elements more than
    2^27 below the largest fall into fp16's subnormals and keep fewer)."""
    return (q.to(tl.float32) * tl.math.exp2(shift)).to(tl.float16)


@triton.jit(do_not_specialize=["seqlen_q", "group", "capacity", "num_blocks", "split_keys", "heads_kv", "n_splits",
                               "window_left", "window_right"])
def _decode_split(
    Q, K, V, O, LSE, WS_O, WS_LSE, SEQLENS, BT, KDS, VDS,
    qk_scale, seqlen_q, group, capacity, num_blocks, split_keys, heads_kv, n_splits, window_left, window_right,
    sqb, sqs, sqh, skp, sks, skh, svp, svs, svh, sob, sos, soh, slb, slh, sbt,
    swb, swh, sws, swr, slwb, slwh, slws,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, M_TILES: tl.constexpr,
    PAGED: tl.constexpr, PAGE_SIZE: tl.constexpr, HAS_SEQLENS: tl.constexpr, CAUSAL: tl.constexpr,
    SPLIT: tl.constexpr, FP8: tl.constexpr, DOT_PRECISION: tl.constexpr, QK_EXTRA: tl.constexpr,
    V_IS_K: tl.constexpr, LOCAL: tl.constexpr,
):
    pid, hk, b = _program(heads_kv, n_splits * M_TILES)
    split = pid // M_TILES
    m_tile = pid % M_TILES
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)

    rows = seqlen_q * group
    offs_r = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_r < rows
    q_pos = offs_r // group
    q_head = hk * group + offs_r % group
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)

    q_rows = Q + b64 * sqb + q_pos[:, None].to(tl.int64) * sqs + q_head[:, None].to(tl.int64) * sqh
    q = tl.load(q_rows + offs_d[None, :], mask=row_ok[:, None], other=0.0)
    if QK_EXTRA > 0:  # Q / K columns past V's (MLA's rotary part)
        offs_e = HEAD_DIM + tl.arange(0, QK_EXTRA)
        q_extra = tl.load(q_rows + offs_e[None, :], mask=row_ok[:, None], other=0.0)

    if HAS_SEQLENS:
        seqlen = tl.load(SEQLENS + b)
    else:
        seqlen = capacity
    bad = (seqlen < 0) | (seqlen > capacity)
    seqlen = tl.where(bad, 0, seqlen)  # a bad length reads nothing
    chunk = split * split_keys
    if LOCAL:
        chunk += _chunk_start(seqlen, seqlen_q, window_left, BLOCK_N)
    lo = chunk
    hi = tl.minimum(seqlen, chunk + split_keys)
    diagonal = seqlen - seqlen_q  # causal, bottom-right: row at q_pos sees keys j <= q_pos + diagonal
    if LOCAL:  # keys q_pos + diagonal - left .. + right (-1: unbounded); the tiles no row of this tile sees skipped
        first_pos = (m_tile * BLOCK_M) // group
        last_pos = (tl.minimum(m_tile * BLOCK_M + BLOCK_M, rows) - 1) // group
        if window_left >= 0:
            lo = tl.maximum(lo, (tl.maximum(first_pos + diagonal - window_left, 0) // BLOCK_N) * BLOCK_N)
        if window_right >= 0:
            hi = tl.minimum(hi, last_pos + diagonal + window_right + 1)
        # each row's own bounds, as row vectors (a branch inside the loop could not change the mask's shape)
        row_lo = tl.where(window_left >= 0, q_pos + diagonal - window_left, 0)
        row_hi = tl.where(window_right >= 0, q_pos + diagonal + window_right, seqlen)

    scale = qk_scale
    if FP8:
        scale = scale * tl.load(KDS + b64 * heads_kv + hk64)
        if Q.dtype.element_ty == tl.bfloat16:  # the MMAs run in fp16 (_fp8_operand), the scores scaled back
            amax = tl.max(tl.max(tl.abs(q.to(tl.float32)), 1), 0)
            if QK_EXTRA > 0:
                amax = tl.maximum(amax, tl.max(tl.max(tl.abs(q_extra.to(tl.float32)), 1), 0))
            shift = _fp16_shift(amax)
            q = _fp16_q(q, shift)
            if QK_EXTRA > 0:
                q_extra = _fp16_q(q_extra, shift)
            scale = scale * tl.math.exp2(-shift)

    k_base = K + hk64 * skh
    v_base = V + hk64 * svh
    if not PAGED:
        k_base += b64 * skp
        v_base += b64 * svp
    bt_row = BT + b64 * sbt

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    n_bad = tl.zeros([BLOCK_N], tl.int32)

    for start in range(lo, hi, BLOCK_N):
        pos = start + offs_n
        key_ok = pos < hi
        if PAGED:
            if PAGE_SIZE % BLOCK_N == 0:
                # the whole tile is in one page: one table entry
                page = tl.load(bt_row + start // PAGE_SIZE)
                page_ok = (page >= 0) & (page < num_blocks)
                n_bad += (key_ok & (page_ok == 0)).to(tl.int32)
                key_ok = key_ok & page_ok
                row_off = page.to(tl.int64) * skp + (pos % PAGE_SIZE).to(tl.int64) * sks
                vrow_off = page.to(tl.int64) * svp + (pos % PAGE_SIZE).to(tl.int64) * svs
            else:
                page = tl.load(bt_row + pos // PAGE_SIZE, mask=key_ok, other=0)
                page_ok = (page >= 0) & (page < num_blocks)
                n_bad += (key_ok & (page_ok == 0)).to(tl.int32)
                key_ok = key_ok & page_ok
                row_off = page.to(tl.int64) * skp + (pos % PAGE_SIZE).to(tl.int64) * sks
                vrow_off = page.to(tl.int64) * svp + (pos % PAGE_SIZE).to(tl.int64) * svs
        else:
            row_off = pos.to(tl.int64) * sks
            vrow_off = pos.to(tl.int64) * svs
        k = tl.load(k_base + row_off[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0)
        if FP8:
            k = _fp8_operand(k, Q.dtype.element_ty)
        qk = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if QK_EXTRA > 0:
            k_extra = tl.load(k_base + row_off[:, None] + offs_e[None, :], mask=key_ok[:, None], other=0.0)
            if FP8:
                k_extra = _fp8_operand(k_extra, Q.dtype.element_ty)
            qk = tl.dot(q_extra, tl.trans(k_extra), qk, input_precision=DOT_PRECISION)
        visible = key_ok[None, :]
        if CAUSAL:
            visible = visible & (pos[None, :] <= q_pos[:, None] + diagonal)
        if LOCAL:
            visible = visible & (pos[None, :] >= row_lo[:, None]) & (pos[None, :] <= row_hi[:, None])
        s = tl.where(visible, qk * scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        # a row that has seen no key keeps max -inf; shifting by 0 makes its p and alpha 0, not NaN
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_shift[:, None])
        alpha = tl.math.exp2(m_i - m_shift)
        l_i = l_i * alpha + tl.sum(p, 1)
        if V_IS_K:
            v = k
        else:
            v = tl.load(v_base + vrow_off[:, None] + offs_d[None, :], mask=key_ok[:, None], other=0.0)
            if FP8:
                v = _fp8_operand(v, Q.dtype.element_ty)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)
        m_i = m_new

    bad = bad | (tl.sum(n_bad, 0) > 0)
    empty = l_i == 0.0
    safe_l = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / safe_l)[:, None]
    lse2 = tl.where(empty, float("-inf"), m_i + tl.math.log2(safe_l))  # log2 units
    nan = float("nan")
    if SPLIT:
        lse2 = tl.where(bad, nan, lse2)
        ws = b64 * swb + hk64 * swh + split.to(tl.int64) * sws + offs_r.to(tl.int64) * swr
        active = chunk < seqlen  # every chunk the length covers writes a partial (the merge reads them all)
        tl.store(WS_LSE + b64 * slwb + hk64 * slwh + split.to(tl.int64) * slws + offs_r, lse2,
                 mask=row_ok & active)
        tl.store(WS_O + ws[:, None] + offs_d[None, :], out, mask=(row_ok & active)[:, None])
    else:
        if FP8:
            out = out * tl.load(VDS + b64 * heads_kv + hk64)
        out = tl.where(bad, nan, out)
        lse = tl.where(bad, nan, lse2 * LN2)
        tl.store(O + b64 * sob + q_pos[:, None].to(tl.int64) * sos + q_head[:, None].to(tl.int64) * soh
                 + offs_d[None, :], out.to(O.dtype.element_ty), mask=row_ok[:, None])
        tl.store(LSE + b64 * slb + q_head.to(tl.int64) * slh + q_pos, lse, mask=row_ok)


@triton.jit(do_not_specialize=["seqlen_q", "group", "capacity", "split_keys", "heads_kv", "m_tiles", "window_left"])
def _decode_merge(
    WS_O, WS_LSE, O, LSE, SEQLENS, VDS,
    seqlen_q, group, capacity, split_keys, heads_kv, m_tiles, window_left,
    sob, sos, soh, slb, slh, swb, swh, sws, swr, slwb, slwh, slws,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
    HAS_SEQLENS: tl.constexpr, FP8: tl.constexpr, KEY_BLOCK: tl.constexpr,
):
    """One program: BLOCK_M packed rows x BLOCK_D of V's HEAD_DIM columns (tile = row tile x column slice), the
    splits BLOCK_S at a time: their loads do not depend on one another, so one memory round trip serves BLOCK_S
    splits (a loop over single splits waits for each in turn). KEY_BLOCK: the split kernel's key tile, which the
    chunks' start follows under a left window bound (_chunk_start)."""
    tile, hk, b = _program(heads_kv, m_tiles * (HEAD_DIM // BLOCK_D))
    m_tile = tile // (HEAD_DIM // BLOCK_D)
    d_slice = tile % (HEAD_DIM // BLOCK_D)
    b64 = b.to(tl.int64)
    hk64 = hk.to(tl.int64)
    rows = seqlen_q * group
    offs_r = m_tile * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_r < rows
    q_pos = offs_r // group
    q_head = hk * group + offs_r % group
    offs_d = d_slice * BLOCK_D + tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, BLOCK_S)

    if HAS_SEQLENS:
        seqlen = tl.load(SEQLENS + b)
    else:
        seqlen = capacity
    bad = (seqlen < 0) | (seqlen > capacity)
    seqlen = tl.where(bad, 0, seqlen)
    n_active = tl.cdiv(seqlen - _chunk_start(seqlen, seqlen_q, window_left, KEY_BLOCK), split_keys)

    ws = b64 * swb + hk64 * swh + offs_r.to(tl.int64) * swr  # [M]
    wl = b64 * slwb + hk64 * slwh + offs_r
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    n_nan = tl.zeros([BLOCK_M], tl.int32)
    # blocks of splits in order, each reduced by the same tree: the same bits on every run. Splits past n_active
    # are masked to weight 0 and O 0, so a row's bits depend only on its own sequence (and the chunk size).
    for s0 in range(0, n_active, BLOCK_S):
        split = s0 + offs_s
        ok = (split[:, None] < n_active) & row_ok[None, :]  # [S, M]
        lse_s = tl.load(WS_LSE + wl[None, :] + split[:, None].to(tl.int64) * slws, mask=ok, other=float("-inf"))
        o_s = tl.load(WS_O + ws[None, :, None] + split[:, None, None].to(tl.int64) * sws + offs_d[None, None, :],
                      mask=ok[:, :, None], other=0.0)  # [S, M, D]
        n_nan += tl.sum((lse_s != lse_s).to(tl.int32), 0)
        m_new = tl.maximum(m_i, tl.max(lse_s, 0))
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        alpha = tl.math.exp2(m_i - m_shift)
        w = tl.math.exp2(lse_s - m_shift[None, :])  # [S, M]
        acc = acc * alpha[:, None] + tl.sum(w[:, :, None] * o_s, 0)
        l_i = l_i * alpha + tl.sum(w, 0)
        m_i = m_new

    bad = bad | (tl.sum(n_nan, 0) > 0)
    empty = l_i == 0.0
    safe_l = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / safe_l)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(safe_l)) * LN2)
    if FP8:
        out = out * tl.load(VDS + b64 * heads_kv + hk64)
    nan = float("nan")
    out = tl.where(bad, nan, out)
    lse = tl.where(bad, nan, lse)
    tl.store(O + b64 * sob + q_pos[:, None].to(tl.int64) * sos + q_head[:, None].to(tl.int64) * soh
             + offs_d[None, :], out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + b64 * slb + q_head.to(tl.int64) * slh + q_pos, lse, mask=row_ok & (d_slice == 0))


def merge_tile(rows: int, head_dim_v: int, n_splits: int) -> tuple[int, int, int]:
    """(BLOCK_M, BLOCK_D, BLOCK_S) of the merge: the packed rows up to MERGE_BLOCK_M (a power of two, no padding
    to 16: nothing here feeds tl.dot); V's columns up to MERGE_BLOCK_D (wider ones in slices, so that a small
    batch's merge runs on several programs; each recomputes the splits' weights, the same on every slice); the
    splits a block takes, up to MERGE_BLOCK_S."""
    return (min(MERGE_BLOCK_M, triton.next_power_of_2(max(rows, 1))), min(head_dim_v, MERGE_BLOCK_D),
            min(MERGE_BLOCK_S, triton.next_power_of_2(max(n_splits, 1))))


def grid(tiles, heads_kv, batch):
    """The one-dimensional grid of `tiles` programs per (batch, KV head) (_program takes it apart)."""
    return tuning.flat_grid(tiles, heads_kv, batch)


def tiles(head_dim, rows, kv_element_size=2, config=None):
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) for a query tile of `rows` packed rows; config overrides
    BLOCK_N / num_warps / num_stages / MAX_BLOCK_M."""
    config = config or {}
    if tuning.interpreting():
        block_n, warps, stages = INTERPRETER_CONFIG["BLOCK_N"], 1, 1
        max_m = config.get("MAX_BLOCK_M", INTERPRETER_CONFIG["MAX_BLOCK_M"])
        block_m = min(max(16, triton.next_power_of_2(rows)), max_m)
    else:
        max_m = config.get("MAX_BLOCK_M", MAX_BLOCK_M[head_dim])
        block_m = min(max(16, triton.next_power_of_2(rows)), max_m)
        block_n, warps, stages = ROW_TILE_CONFIGS.get((head_dim, kv_element_size, block_m),
                                                      CONFIGS[(head_dim, kv_element_size)])
    block_n = config.get("BLOCK_N", block_n)
    warps = config.get("num_warps", warps)
    stages = config.get("num_stages", stages)
    return block_m, block_n, warps, stages


def programs_per_sm(tile, head_dim, kv_element_size):
    """About how many main-kernel programs one SM holds: shared memory of the buffered K/V tiles
    ((stages - 1) x BLOCK_N x D x 2 tensors) plus the query tile, as the sm_90 compiles measure it within a
    few KB; fp8 tiles are capped by the registers their conversions take."""
    block_m, block_n, warps, stages = tile
    smem = max(stages - 1, 1) * block_n * head_dim * 2 * kv_element_size + block_m * head_dim * 2 + 2048
    per_sm = max(1, SMEM_PER_SM // smem)
    if kv_element_size == 1:  # registers: ~145 a thread at BLOCK_N 64, ~210 at 128 (sm_90 compiles)
        per_sm = min(per_sm, 3 if block_n <= 64 else 2)
    return min(per_sm, 64 // warps)


def v_is_k(k_cache, v_cache) -> bool:
    """Whether V is K's first columns (one latent cache, v_cache a view of k_cache): the kernel then reads each
    key row once."""
    return (v_cache.data_ptr() == k_cache.data_ptr() and v_cache.stride() == k_cache.stride()
            and v_cache.dtype == k_cache.dtype)


class _Kernel:
    """One kernel at a fixed grid, int arguments, constexprs and launch options: launched by its pointer and float
    arguments. The first launch of each pointer-alignment pattern (and Triton debug / instrumentation setting)
    goes through Triton's JIT (kernel[grid](...): binding and specialising every argument, compiling or finding the
    kernel), which returns the compiled kernel; later ones call that kernel's launcher directly with the same
    arguments (addresses for the pointers), as the JIT's run would. What the JIT specialises on is fixed for this
    object (argument dtypes and ints by triton_impl.decode's key of its Launch, the device by `device`) but for the
    pointers' 16-byte alignment, which is this object's cache key. (The JIT's check on every launch that the
    globals a kernel read have not changed since it compiled is left to the first: this module's constants do not
    change.) Under the interpreter every launch goes through Triton."""

    __slots__ = ("kernel", "grid", "grid3", "ints", "constexprs", "constexpr_values", "options", "device",
                 "interpreted", "compiled", "records")

    def __init__(self, kernel, grid, ints: tuple, constexprs: dict, options: dict, device: int | None):
        self.kernel, self.grid, self.ints, self.constexprs, self.options = kernel, grid, ints, constexprs, options
        self.device = device  # the inputs' CUDA device, current during the launch (the stream is its current one)
        self.grid3 = (*grid, 1, 1)[:3]
        self.constexpr_values = None  # in the kernel's parameter order, once it has compiled
        self.interpreted = tuning.interpreting()
        self.compiled = {}
        self.records = {}  # record()'s answers by the compiled kernels' key

    def _key(self, addresses) -> tuple:
        return (tuple([address % 16 == 0 for address in addresses]), triton.knobs.runtime.debug,
                triton.knobs.compilation.instrumentation_mode)

    def __call__(self, pointers: tuple, addresses: list, floats: tuple) -> None:
        if self.interpreted:
            interpreter_compat.apply()
            self.kernel[self.grid](*pointers, *floats, *self.ints, **self.constexprs, **self.options)
            return
        key = self._key(addresses)
        compiled = self.compiled.get(key)
        if compiled is None:
            compiled = self.kernel[self.grid](*pointers, *floats, *self.ints, **self.constexprs, **self.options)
            if compiled is not None:  # (None: a jit_cache_hook skipped the launch)
                kernel = self.kernel
                self.constexpr_values = tuple(self.constexprs[kernel.arg_names[i]] for i in kernel.constexprs)
                self.compiled[key] = compiled
            return
        # the JIT's launch (JITFunction.run) past its binding and cache lookup: the C launcher takes every argument
        # in the kernel's parameter order, the pointers as addresses, the constexprs too (it skips them)
        stream = triton.runtime.driver.active.get_current_stream(self.device)
        args = (*addresses, *floats, *self.ints, *self.constexpr_values)
        runtime = triton.knobs.runtime
        compiled.run(*self.grid3, stream, compiled.function, compiled.packed_metadata,
                     compiled.launch_metadata(self.grid, stream, *args), runtime.launch_enter_hook,
                     runtime.launch_exit_hook, *args)


    def record(self, slots: tuple, addresses: list) -> list | None:
        """This kernel's compiled launch for pointers at `addresses` (the tensors `slots` of Launch.SLOTS), as
        triton_impl/csrc/kvcache_launch.cpp takes it: [CUfunction, grid x, y, z, threads, shared bytes, parameter
        count, (kind, value) per parameter]; the parameters are the kernel's in order but the constexprs (and the
        ints Triton specialised on as 1), which the launcher skips too. None where this launch has not compiled,
        runs under the interpreter, or needs what the op does not do (scratch memory, clusters, programmatic or
        cooperative launch)."""
        if self.interpreted:
            return None
        key = self._key(addresses)
        if key in self.records:
            return self.records[key]
        compiled = self.compiled.get(key)
        if compiled is None:
            return None
        meta = compiled.metadata
        if (meta.num_ctas != 1 or meta.launch_pdl or meta.launch_cooperative_grid or meta.global_scratch_size
                or meta.profile_scratch_size or getattr(meta, "tensordesc_meta", None)):
            return None
        kinds = {"fp32": RECORD_SCALE, "i32": RECORD_I32, "i64": RECORD_I64}
        values = (*slots, *([0] * (len(compiled.src.signature) - len(slots) - len(self.ints)
                                - len(self.constexpr_values))), *self.ints, *self.constexpr_values)
        params = []
        for ty, value in zip(compiled.src.signature.values(), values):
            if ty == "constexpr":
                continue
            if ty.startswith("*"):
                params += (RECORD_POINTER, value)
            elif ty in kinds:
                params += (kinds[ty], value)
            else:
                return None
        record = [compiled.function, *self.grid3, 32 * meta.num_warps, meta.shared, len(params) // 2, *params]
        self.records[key] = record
        return record


# Parameter kinds of a record (triton_impl/csrc/kvcache_launch.cpp's Kind): a tensor's address, the float scale
# the call gives, an int32 or int64 value.
RECORD_POINTER, RECORD_SCALE, RECORD_I32, RECORD_I64 = range(4)


class Launch:
    """The split kernel's (and with several splits the merge's) launches of one call shape, everything read off
    the tensors but their addresses and the scale (`prepare`); called with the tensors of each call, which must
    have the shapes, strides and dtypes of those it was prepared with (and V must be K's view or not as then)."""

    # The tensors a launch takes, in __call__'s order (triton_impl/csrc/kvcache_launch.cpp's Slot); the kernels'
    # pointer arguments are these tensors, an absent one's pointing at lse (never dereferenced).
    SLOTS = ("q", "k_cache", "v_cache", "out", "lse", "ws_o", "ws_lse", "cache_seqlens", "block_table", "k_descale",
             "v_descale")

    __slots__ = ("split", "merge", "slots", "merge_slots")

    def __init__(self, split: _Kernel, merge: _Kernel | None, has_seqlens: bool, paged: bool, fp8: bool):
        self.split, self.merge = split, merge
        present = (True, True, True, True, True, merge is not None, merge is not None, has_seqlens, paged, fp8, fp8)
        self.slots = tuple(i if there else self.SLOTS.index("lse") for i, there in enumerate(present))
        self.merge_slots = tuple(self.slots[i] for i in _MERGE_POINTERS)

    def __call__(self, q, k_cache, v_cache, out, lse, ws_o, ws_lse, cache_seqlens, block_table, k_descale, v_descale,
                 scale) -> list:
        """Launches; returns the pointer arguments' addresses (what record() takes)."""
        tensors = (q, k_cache, v_cache, out, lse, ws_o, ws_lse, cache_seqlens, block_table, k_descale, v_descale)
        pointers = tuple([tensors[i] for i in self.slots])
        addresses = [t.data_ptr() for t in pointers]
        self.split(pointers, addresses, (scale * LOG2E,))
        if self.merge is not None:  # ws_o, ws_lse, out, lse, seqlens, v descale
            self.merge(tuple([pointers[i] for i in _MERGE_POINTERS]), [addresses[i] for i in _MERGE_POINTERS], ())
        return addresses

    def record(self, addresses: list) -> list | None:
        """Both kernels' records (_Kernel.record) one after the other, for the call whose launches returned
        `addresses`; None where either has none."""
        split = self.split.record(self.slots, addresses)
        if split is None or self.merge is None:
            return split
        merge = self.merge.record(self.merge_slots, [addresses[i] for i in _MERGE_POINTERS])
        return None if merge is None else split + merge


_MERGE_POINTERS = (5, 6, 3, 4, 7, 10)  # the merge's pointer arguments among the split kernel's


def prepare(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, out, lse, ws_o, ws_lse,
            causal, split_keys, n_splits, tile, window=(-1, -1)) -> Launch:
    """The Launch of these tensors (as launch() takes them): the grids, int arguments, constexprs and options of
    the split kernel and the merge. It launches on q's device, which must be the current one then (as Triton's
    JIT launches on the current device)."""
    batch, seqlen_q, heads_q = q.shape[:3]
    head_dim = out.shape[3]  # V's, the kernels' HEAD_DIM
    qk_extra = q.shape[3] - head_dim
    heads_kv = k_cache.shape[2]
    group = heads_q // heads_kv
    rows = seqlen_q * group
    block_m, block_n, warps, stages = tile
    m_tiles = triton.cdiv(rows, block_m)
    paged = block_table is not None
    if paged:
        num_blocks, page_size = k_cache.shape[0], k_cache.shape[1]
        capacity = block_table.shape[1] * page_size
    else:
        num_blocks, page_size = batch, 1
        capacity = k_cache.shape[1]
    split = n_splits > 1
    fp8 = k_cache.dtype != q.dtype
    if paged and page_size % block_n and not tuning.interpreting():
        stages += GATHER_EXTRA_STAGES
    ws_strides = (*ws_o.stride()[:4], *ws_lse.stride()[:3]) if split else (0,) * 7
    device = q.device.index
    split_kernel = _Kernel(
        _decode_split, grid(n_splits * m_tiles, heads_kv, batch),
        (seqlen_q, group, capacity, num_blocks, split_keys, heads_kv, n_splits, *window,
         *q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], *out.stride()[:3], *lse.stride()[:2],
         block_table.stride(0) if paged else 0, *ws_strides),
        dict(HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=block_n, M_TILES=m_tiles, PAGED=paged, PAGE_SIZE=page_size,
             HAS_SEQLENS=cache_seqlens is not None, CAUSAL=causal, SPLIT=split, FP8=fp8,
             DOT_PRECISION="ieee" if q.dtype.itemsize == 4 else "tf32", QK_EXTRA=qk_extra,
             V_IS_K=qk_extra > 0 and v_is_k(k_cache, v_cache), LOCAL=tuple(window) != (-1, -1)),
        dict(num_warps=warps, num_stages=stages), device)
    merge_kernel = None
    if split:
        merge_m, merge_d, merge_s = merge_tile(rows, head_dim, n_splits)
        merge_kernel = _Kernel(
            _decode_merge, grid(triton.cdiv(rows, merge_m) * (head_dim // merge_d), heads_kv, batch),
            (seqlen_q, group, capacity, split_keys, heads_kv, triton.cdiv(rows, merge_m), window[0],
             *out.stride()[:3], *lse.stride()[:2], *ws_strides),
            dict(HEAD_DIM=head_dim, BLOCK_M=merge_m, BLOCK_D=merge_d, BLOCK_S=merge_s,
                 HAS_SEQLENS=cache_seqlens is not None, FP8=fp8, KEY_BLOCK=block_n),
            dict(num_warps=1 if tuning.interpreting() else MERGE_WARPS, num_stages=1), device)
    return Launch(split_kernel, merge_kernel, cache_seqlens is not None, paged, fp8)


def launch(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, out, lse, ws_o, ws_lse,
           causal, scale, split_keys, n_splits, tile, window=(-1, -1)):
    """Run the split kernel (and the merge when n_splits > 1). q (B, Sq, Hq, D) strided; out (B, Sq, Hq, Dv)
    and lse (B, Hq, Sq) fresh; ws_o (B, Hkv, n_splits, R, Dv) and ws_lse (B, Hkv, n_splits, R) fp32
    contiguous (None with one split); tile from tiles(). Dv < D: Q/K's columns past Dv (QK_EXTRA) add to S only.
    window (left, right): each row sees keys row + L - Sq - left .. + right (-1: unbounded; causal: right 0).
    (triton_impl.decode keeps the prepared Launch of each call shape instead.)"""
    prepare(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, out, lse, ws_o, ws_lse, causal,
            split_keys, n_splits, tile, window)(q, k_cache, v_cache, out, lse, ws_o, ws_lse, cache_seqlens, block_table,
                                                k_descale, v_descale, scale)
