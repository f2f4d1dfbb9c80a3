"""Variant "fa2": FlashAttention-2 forward with plain pointer loads.

Every tensor is addressed through its strides, so non-contiguous inputs need no copy, and the
kernel runs on any arch Triton supports (sm_80+) and under TRITON_INTERPRET=1. Grid: one program per
(query block, batch*head), flattened to one dimension (common.program_tile); the query blocks of one head run
side by side so its K/V stay in L2. Offsets: each slice's base and each tile's first row in 64 bits (strided
views put rows H * D elements apart), offsets within a tile in 32, key offsets within a slice in 64 only where
they could pass 2**31 (WIDE_OFFSETS). Local attention (LOCAL: a window around the bottom-right diagonal, only the
key blocks it touches, every one masked) and softcap (SOFTCAP) are compile-time options, and so is VARLEN: packed
sequences (q (total_q, H, D), k / v (total_k, Hkv, D)) at the offsets CU_Q / CU_K, the grid's rows the longest
sequence's, each program reading its sequence's rows and lengths (a block past them skips its keys); without
them the kernel is the plain one.

Head dims: any multiple of 8 from 32 to 256, and V's may differ from Q/K's (192 / 128). tl.arange needs a power of
two, so a head_dim runs as one or two power-of-two column blocks (column_blocks): d80 as 64 + 16 columns, d96 as
64 + 32, d192 as 128 + 64, each Q K^T the sum of two dots and O two accumulators; where two blocks save nothing
(d112 is 64 + 64) one block is padded to the next power of two. Columns past the head_dim are masked: loaded as
zeros, which add nothing to Q K^T, and never stored. A power-of-two head_dim is one block with no mask.
"""
import triton
import triton.language as tl

from triton_impl.kernels.common import capped, finish_rows, local_key_range, program_tile, softmax_step, start_rows
from triton_impl.kernels import tuning


@triton.jit
def _columns_ok(offs, HEAD_DIM: tl.constexpr, END: tl.constexpr):
    """offs < HEAD_DIM for a column block ending at column END; None (no mask at all) when it ends inside the
    head_dim."""
    if END <= HEAD_DIM:
        ok = None
    else:
        ok = offs < HEAD_DIM
    return ok


@triton.jit
def _both(a, b):
    """a & b of two masks, either of which may be None (nothing masked)."""
    if a is None:
        mask = b
    elif b is None:
        mask = a
    else:
        mask = a & b
    return mask


@triton.jit
def _load(ptrs, mask):
    """The tile at ptrs, zeros where mask is False; mask None: an unmasked load."""
    if mask is None:
        tile = tl.load(ptrs)
    else:
        tile = tl.load(ptrs, mask=mask, other=0.0)
    return tile


@triton.jit
def _column_offsets(BLOCK: tl.constexpr, TAIL: tl.constexpr):
    """The column offsets of a head_dim's blocks (column_blocks): (BLOCK columns,) or (BLOCK, the TAIL past it)."""
    if TAIL == 0:
        cols = (tl.arange(0, BLOCK),)
    else:
        cols = (tl.arange(0, BLOCK), BLOCK + tl.arange(0, TAIL))
    return cols


@triton.jit
def _block_ptrs(ptrs, cols, col_stride, TRANSPOSED: tl.constexpr):
    """The pointers of each column block of the rows at ptrs ((rows, 1), or (1, rows) TRANSPOSED, as K^T), a tuple
    like cols; built once, outside the key loop, which only adds its key offset to them."""
    if TRANSPOSED:
        blocks = (ptrs + cols[0][:, None] * col_stride,)
        if len(cols) == 2:
            blocks = (blocks[0], ptrs + cols[1][:, None] * col_stride)
    else:
        blocks = (ptrs + cols[0][None, :] * col_stride,)
        if len(cols) == 2:
            blocks = (blocks[0], ptrs + cols[1][None, :] * col_stride)
    return blocks


@triton.jit
def _load_blocks(ptrs, offset, cols, mask, HEAD_DIM: tl.constexpr, BLOCK: tl.constexpr, TAIL: tl.constexpr,
                 TRANSPOSED: tl.constexpr):
    """One tile per column block (ptrs from _block_ptrs, each moved by offset); columns past HEAD_DIM, and rows where
    mask is False (mask None: every row), read as zeros."""
    if TRANSPOSED:
        lead = cols[0][:, None]
    else:
        lead = cols[0][None, :]
    if TAIL == 0:
        tiles = (_load(ptrs[0] + offset, _both(mask, _columns_ok(lead, HEAD_DIM, BLOCK))),)
    else:
        if TRANSPOSED:
            tail = cols[1][:, None]
        else:
            tail = cols[1][None, :]
        tiles = (_load(ptrs[0] + offset, mask),
                 _load(ptrs[1] + offset, _both(mask, _columns_ok(tail, HEAD_DIM, BLOCK + TAIL))))
    return tiles


@triton.jit
def _scores(qs, kts, DOT_PRECISION: tl.constexpr):
    """Q K^T of one key block: a dot per column block, summed in the accumulator."""
    qk = tl.dot(qs[0], kts[0], input_precision=DOT_PRECISION)
    if len(qs) == 2:
        qk = tl.dot(qs[1], kts[1], qk, input_precision=DOT_PRECISION)
    return qk


@triton.jit
def _accumulate(p, vs, accs, alpha, DOT_PRECISION: tl.constexpr):
    """accs * alpha + P V, one accumulator per column block of V."""
    p = p.to(vs[0].dtype)
    lead = tl.dot(p, vs[0], accs[0] * alpha[:, None], input_precision=DOT_PRECISION)
    if len(vs) == 1:
        accs = (lead,)
    else:
        accs = (lead, tl.dot(p, vs[1], accs[1] * alpha[:, None], input_precision=DOT_PRECISION))
    return accs


# integers that only bound loops or index heads: one binary for all their values
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "group_size", "window_left", "window_right",
                               "lse_rows"])
def _fa2_fwd_pointer(
    Q, K, V, O, LSE, CU_Q, CU_K,
    qk_scale, seqlen_q, seqlen_k, heads_q, group_size,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos,
    window_left, window_right, softcap_in, softcap_out, lse_rows,
    HEAD_DIM: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_D: tl.constexpr, TAIL_D: tl.constexpr,
    BLOCK_DV: tl.constexpr, TAIL_DV: tl.constexpr,
    CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, WIDE_OFFSETS: tl.constexpr,
    LOCAL: tl.constexpr, SOFTCAP: tl.constexpr, VARLEN: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m, bh = program_tile(seqlen_q, CAUSAL, BLOCK_M)  # VARLEN: seqlen_q / seqlen_k are the longest lengths
    batch = (bh // heads_q).to(tl.int64)
    head = bh % heads_q
    head_kv = (head // group_size).to(tl.int64)
    head = head.to(tl.int64)
    if VARLEN:  # sequence `batch` of the packed tensors: rows from its offsets, lengths from their gaps
        q_first = tl.load(CU_Q + batch).to(tl.int64)
        k_first = tl.load(CU_K + batch).to(tl.int64)
        seq_q = tl.load(CU_Q + batch + 1) - q_first.to(tl.int32)
        seq_k = tl.load(CU_K + batch + 1) - k_first.to(tl.int32)
        q_base, o_base = Q + q_first * sqs, O + q_first * sos
        k_base, v_base = K + k_first * sks, V + k_first * svs
        lse_base = LSE + head * lse_rows + q_first  # LSE (Hq, total_q)
    else:
        seq_q, seq_k = seqlen_q, seqlen_k
        q_base, o_base = Q + batch * sqb, O + batch * sob
        k_base, v_base = K + batch * skb, V + batch * svb
        lse_base = LSE + bh.to(tl.int64) * seqlen_q

    row0 = (start_m * BLOCK_M).to(tl.int64)
    offs_tile = tl.arange(0, BLOCK_M)
    offs_m = start_m * BLOCK_M + offs_tile
    offs_n = tl.arange(0, BLOCK_N)
    cols_d = _column_offsets(BLOCK_D, TAIL_D)
    cols_dv = _column_offsets(BLOCK_DV, TAIL_DV)
    row_ok = offs_m < seq_q

    q_ptrs = _block_ptrs(q_base + head * sqh + row0 * sqs + offs_tile[:, None] * sqs, cols_d, sqd, False)
    qs = _load_blocks(q_ptrs, 0, cols_d, row_ok[:, None], HEAD_DIM, BLOCK_D, TAIL_D, False)
    kt_ptrs = _block_ptrs(k_base + head_kv * skh + offs_n[None, :] * sks, cols_d, skd, True)
    v_ptrs = _block_ptrs(v_base + head_kv * svh + offs_n[:, None] * svs, cols_dv, svd, False)
    if WIDE_OFFSETS:  # a key's offset in its slice can pass 2**31 (long strided views): 64-bit, one more register
        sks_n, svs_n = tl.cast(sks, tl.int64), tl.cast(svs, tl.int64)
    else:
        sks_n, svs_n = sks, svs

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seq_q, seq_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, BLOCK_DV)
    if TAIL_DV == 0:
        accs = (acc,)
    else:
        accs = (acc, tl.zeros([BLOCK_M, TAIL_DV], tl.float32))
    if VARLEN:  # a query block past its sequence's rows visits no key
        full_end = tl.where(row0 < seq_q, full_end, 0)
        end = tl.where(row0 < seq_q, end, 0)

    if LOCAL:  # every visited block masked; the blocks outside every row's window skipped
        first_masked, end = local_key_range(start_m, seq_q, seq_k, window_left, window_right, BLOCK_M,
                                            BLOCK_N)
        if VARLEN:
            end = tl.where(row0 < seq_q, end, 0)
    else:
        first_masked = full_end
        for start_n in range(0, full_end, BLOCK_N):
            kts = _load_blocks(kt_ptrs, start_n * sks_n, cols_d, None, HEAD_DIM, BLOCK_D, TAIL_D, True)
            qk = _scores(qs, kts, DOT_PRECISION)
            if SOFTCAP:
                qk = capped(qk, softcap_in, softcap_out)
            p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seq_k,
                                              diagonal, False, CAUSAL)
            vs = _load_blocks(v_ptrs, start_n * svs_n, cols_dv, None, HEAD_DIM_V, BLOCK_DV, TAIL_DV, False)
            accs = _accumulate(p, vs, accs, alpha, DOT_PRECISION)

    for start_n in range(first_masked, end, BLOCK_N):
        key_ok = (start_n + offs_n) < seq_k
        kts = _load_blocks(kt_ptrs, start_n * sks_n, cols_d, key_ok[None, :], HEAD_DIM, BLOCK_D, TAIL_D, True)
        qk = _scores(qs, kts, DOT_PRECISION)
        if SOFTCAP:
            qk = capped(qk, softcap_in, softcap_out)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seq_k,
                                          diagonal, True, CAUSAL, LOCAL, window_left, window_right)
        vs = _load_blocks(v_ptrs, start_n * svs_n, cols_dv, key_ok[:, None], HEAD_DIM_V, BLOCK_DV, TAIL_DV, False)
        accs = _accumulate(p, vs, accs, alpha, DOT_PRECISION)

    out, lse = finish_rows(accs[0], m_i, l_i)
    o_ptrs = o_base + head * soh + row0 * sos + offs_tile[:, None] * sos
    lead = cols_dv[0][None, :]
    if TAIL_DV == 0:
        tl.store(o_ptrs + lead, out.to(O.dtype.element_ty),
                 mask=_both(row_ok[:, None], _columns_ok(lead, HEAD_DIM_V, BLOCK_DV)))
    else:
        tail = cols_dv[1][None, :]
        out_tail, _ = finish_rows(accs[1], m_i, l_i)
        tl.store(o_ptrs + lead, out.to(O.dtype.element_ty), mask=row_ok[:, None])
        tl.store(o_ptrs + tail, out_tail.to(O.dtype.element_ty),
                 mask=_both(row_ok[:, None], _columns_ok(tail, HEAD_DIM_V, BLOCK_DV + TAIL_DV)))
    tl.store(lse_base + offs_m, lse, mask=row_ok)


_fa2_fwd_pointer_tuned = tuning.autotuned(_fa2_fwd_pointer, "fa2")


def wide_offsets(seqlen_k, key_stride_k, key_stride_v):
    """True when a key's 32-bit offset in its (batch, head) slice could overflow (the kernel's WIDE_OFFSETS):
    the slice bases and the query rows are 64-bit always; the key loop's offsets only where needed, since
    64-bit ones cost the 128x128 d128 config a spill (sm_90 compile)."""
    return seqlen_k * max(abs(key_stride_k), abs(key_stride_v)) >= 2 ** 31


def column_blocks(head_dim):
    """(block, tail) of a head_dim: its columns as one power-of-two block (tail 0), or as the largest power of two
    below it and a power-of-two tail of at least 16 columns (a dot's depth) past it, where the two hold fewer columns
    than the power of two above (80 = 64 + 16, 96 = 64 + 32, 192 = 128 + 64, 72 = 64 + 16 with 8 masked; 112 = 128)."""
    padded = triton.next_power_of_2(head_dim)
    block = padded // 2
    tail = triton.next_power_of_2(max(head_dim - block, 16))
    return (block, tail) if padded != head_dim and block + tail < padded else (padded, 0)


def split_dims(head_dim, head_dim_v):
    """The kernel's head_dim constexprs: Q/K's and V's head_dim and their column blocks (column_blocks)."""
    (block_d, tail_d), (block_dv, tail_dv) = column_blocks(head_dim), column_blocks(head_dim_v)
    return dict(HEAD_DIM=head_dim, HEAD_DIM_V=head_dim_v, BLOCK_D=block_d, TAIL_D=tail_d, BLOCK_DV=block_dv,
                TAIL_DV=tail_dv)


def _launch_args(q, k, v, out, lse, causal, scale, window=(-1, -1), softcap=0.0):
    """(kernel args, meta, grid rows, grid slices, shape) of a launch. window (left, right) as
    compare.oracle.visible_range (-1: unbounded; causal makes right 0), softcap 0: none."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    left, right = window
    right = 0 if causal else right
    local = (left, right) != (-1, -1)
    unbounded = seqlen_q + seqlen_k  # a side of -1: no key is that far from the diagonal
    args = (q, k, v, out, lse, out, out,  # no offsets (VARLEN off): any pointer stands in
            1.0 if softcap else scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_q // heads_kv,
            *tuning.strides(q), *tuning.strides(k), *tuning.strides(v), *out.stride()[:3],
            left if left >= 0 else unbounded, right if right >= 0 else unbounded,
            scale / softcap if softcap else 0.0, softcap * tuning.LOG2E, 0)
    meta = dict(**split_dims(head_dim, v.shape[3]), CAUSAL=causal,
                DOT_PRECISION="ieee" if q.dtype.itemsize == 4 else "tf32",
                WIDE_OFFSETS=wide_offsets(seqlen_k, tuning.strides(k)[2], tuning.strides(v)[2]),
                LOCAL=local, SOFTCAP=bool(softcap), VARLEN=False)
    return args, meta, seqlen_q, batch * heads_q, (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)


def launch(q, k, v, out, lse, causal, scale, config=None, window=(-1, -1), softcap=0.0):
    """Run the kernel; q/k/v may be strided (v's head_dim may differ from q's and k's), out (B, Hq, Sq, Dv) and
    lse are fresh contiguous tensors."""
    args, meta, rows, slices, shape = _launch_args(q, k, v, out, lse, causal, scale, window, softcap)

    def proxy_args(proxy):
        return (_launch_args(*tuning.proxy_16bit(q, proxy, v.shape[-1]), causal, scale, window, softcap)[0],
                proxy[2], proxy[0] * proxy[1])

    return tuning.run(_fa2_fwd_pointer, _fa2_fwd_pointer_tuned, args, meta, config, rows, slices,
                      shape=shape, dtypes=(q.dtype,), proxy_args=proxy_args)


# A fixed tile per head_dim for packed batches (not autotuned: the autotuner's proxies are dense problems); other
# head dims take the one of tuning.table_head_dim.
VARLEN_CONFIGS = {64: dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3),
                  128: dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
                  256: dict(BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2)}


def launch_varlen(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale,
                  window=(-1, -1), softcap=0.0):
    """Packed sequences: q (total_q, Hq, D), k (total_k, Hkv, D), v (total_k, Hkv, Dv), out (total_q, Hq, Dv),
    lse (Hq, total_q); the offsets (B + 1,) int32 on the device (no host sync)."""
    batch, heads_q, head_dim = cu_seqlens_q.numel() - 1, q.shape[1], q.shape[2]
    as_bshd = lambda x: x.unsqueeze(0).transpose(1, 2)  # (1, H, total, D): the dense layout's strides
    args, meta, _, _, _ = _launch_args(as_bshd(q), as_bshd(k), as_bshd(v), as_bshd(out), lse, causal, scale, window,
                                       softcap)
    args = (*args[:5], cu_seqlens_q, cu_seqlens_k, args[7], max_seqlen_q, max_seqlen_k, *args[10:-1], q.shape[0])
    meta.update(VARLEN=True, WIDE_OFFSETS=wide_offsets(k.shape[0], k.stride(0), v.stride(0)))
    config = None if tuning.interpreting() else VARLEN_CONFIGS[tuning.table_head_dim(head_dim)]
    return tuning.run(_fa2_fwd_pointer, _fa2_fwd_pointer_tuned, args, meta, config, max(max_seqlen_q, 1),
                      batch * heads_q)
