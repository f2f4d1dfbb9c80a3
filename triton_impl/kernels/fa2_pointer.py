"""Variant "fa2": FlashAttention-2 forward with plain pointer loads.

Every tensor is addressed through its strides, so non-contiguous inputs need no copy, and the
kernel runs on any arch Triton supports (sm_80+) and under TRITON_INTERPRET=1. Grid: one program per
(query block, batch*head), flattened to one dimension (common.program_tile); the query blocks of one head run
side by side so its K/V stay in L2. Offsets: each slice's base and each tile's first row in 64 bits (strided
views put rows H * D elements apart), offsets within a tile in 32, key offsets within a slice in 64 only where
they could pass 2**31 (WIDE_OFFSETS). Local attention (LOCAL: a window around the bottom-right diagonal, only the
key blocks it touches, every one masked) and softcap (SOFTCAP) are compile-time options; without them the kernel
is the plain one.
"""
import triton
import triton.language as tl

from triton_impl.kernels.common import capped, finish_rows, local_key_range, program_tile, softmax_step, start_rows
from triton_impl.kernels import tuning


# integers that only bound loops or index heads: one binary for all their values
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "group_size", "window_left", "window_right"])
def _fa2_fwd_pointer(
    Q, K, V, O, LSE,
    qk_scale, seqlen_q, seqlen_k, heads_q, group_size,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos,
    window_left, window_right, softcap_in, softcap_out,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr, WIDE_OFFSETS: tl.constexpr,
    LOCAL: tl.constexpr, SOFTCAP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m, bh = program_tile(seqlen_q, CAUSAL, BLOCK_M)
    batch = (bh // heads_q).to(tl.int64)
    head = bh % heads_q
    head_kv = (head // group_size).to(tl.int64)
    head = head.to(tl.int64)

    row0 = (start_m * BLOCK_M).to(tl.int64)
    offs_tile = tl.arange(0, BLOCK_M)
    offs_m = start_m * BLOCK_M + offs_tile
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q

    q = tl.load(Q + batch * sqb + head * sqh + row0 * sqs + offs_tile[:, None] * sqs + offs_d[None, :] * sqd,
                mask=row_ok[:, None], other=0.0)
    kt_ptrs = K + batch * skb + head_kv * skh + offs_n[None, :] * sks + offs_d[:, None] * skd
    v_ptrs = V + batch * svb + head_kv * svh + offs_n[:, None] * svs + offs_d[None, :] * svd
    if WIDE_OFFSETS:  # a key's offset in its slice can pass 2**31 (long strided views): 64-bit, one more register
        sks_n, svs_n = tl.cast(sks, tl.int64), tl.cast(svs, tl.int64)
    else:
        sks_n, svs_n = sks, svs

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seqlen_q, seqlen_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, HEAD_DIM)

    if LOCAL:  # every visited block masked; the blocks outside every row's window skipped
        first_masked, end = local_key_range(start_m, seqlen_q, seqlen_k, window_left, window_right, BLOCK_M,
                                            BLOCK_N)
    else:
        first_masked = full_end
        for start_n in range(0, full_end, BLOCK_N):
            kt = tl.load(kt_ptrs + start_n * sks_n)
            qk = tl.dot(q, kt, input_precision=DOT_PRECISION)
            if SOFTCAP:
                qk = capped(qk, softcap_in, softcap_out)
            p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seqlen_k,
                                              diagonal, False, CAUSAL)
            v = tl.load(v_ptrs + start_n * svs_n)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)

    for start_n in range(first_masked, end, BLOCK_N):
        key_ok = (start_n + offs_n) < seqlen_k
        kt = tl.load(kt_ptrs + start_n * sks_n, mask=key_ok[None, :], other=0.0)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION)
        if SOFTCAP:
            qk = capped(qk, softcap_in, softcap_out)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seqlen_k,
                                          diagonal, True, CAUSAL, LOCAL, window_left, window_right)
        v = tl.load(v_ptrs + start_n * svs_n, mask=key_ok[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)

    out, lse = finish_rows(acc, m_i, l_i)
    tl.store(O + batch * sob + head * soh + row0 * sos + offs_tile[:, None] * sos + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=row_ok)


_fa2_fwd_pointer_tuned = tuning.autotuned(_fa2_fwd_pointer, "fa2")


def wide_offsets(seqlen_k, key_stride_k, key_stride_v):
    """True when a key's 32-bit offset in its (batch, head) slice could overflow (the kernel's WIDE_OFFSETS):
    the slice bases and the query rows are 64-bit always; the key loop's offsets only where needed, since
    64-bit ones cost the 128x128 d128 config a spill (sm_90 compile)."""
    return seqlen_k * max(abs(key_stride_k), abs(key_stride_v)) >= 2 ** 31


def _launch_args(q, k, v, out, lse, causal, scale, window=(-1, -1), softcap=0.0):
    """(kernel args, meta, grid rows, grid slices, shape) of a launch. window (left, right) as
    compare.oracle.visible_range (-1: unbounded; causal makes right 0), softcap 0: none."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    left, right = window
    right = 0 if causal else right
    local = (left, right) != (-1, -1)
    unbounded = seqlen_q + seqlen_k  # a side of -1: no key is that far from the diagonal
    args = (q, k, v, out, lse,
            1.0 if softcap else scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_q // heads_kv,
            *tuning.strides(q), *tuning.strides(k), *tuning.strides(v), *out.stride()[:3],
            left if left >= 0 else unbounded, right if right >= 0 else unbounded,
            scale / softcap if softcap else 0.0, softcap * tuning.LOG2E)
    meta = dict(HEAD_DIM=head_dim, CAUSAL=causal,
                DOT_PRECISION="ieee" if q.dtype.itemsize == 4 else "tf32",
                WIDE_OFFSETS=wide_offsets(seqlen_k, tuning.strides(k)[2], tuning.strides(v)[2]),
                LOCAL=local, SOFTCAP=bool(softcap))
    return args, meta, seqlen_q, batch * heads_q, (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)


def launch(q, k, v, out, lse, causal, scale, config=None, window=(-1, -1), softcap=0.0):
    """Run the kernel; q/k/v may be strided, out/lse are fresh contiguous tensors."""
    args, meta, rows, slices, shape = _launch_args(q, k, v, out, lse, causal, scale, window, softcap)

    def proxy_args(proxy):
        return (_launch_args(*tuning.proxy_16bit(q, proxy), causal, scale, window, softcap)[0], proxy[2],
                proxy[0] * proxy[1])

    return tuning.run(_fa2_fwd_pointer, _fa2_fwd_pointer_tuned, args, meta, config, rows, slices,
                      shape=shape, dtypes=(q.dtype,), proxy_args=proxy_args)
