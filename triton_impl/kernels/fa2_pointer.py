"""Variant "fa2": FlashAttention-2 forward with plain pointer loads.

Every tensor is addressed through its strides, so non-contiguous inputs need no copy, and the
kernel runs on any arch Triton supports (sm_80+) and under TRITON_INTERPRET=1. Grid: one program per
(query block, batch*head); the query blocks of one head run side by side so its K/V stay in L2.
"""
import triton
import triton.language as tl

from triton_impl.kernels.common import finish_rows, softmax_step, start_rows
from triton_impl.kernels import tuning


# integers that only bound loops or index heads: one binary for all their values
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "group_size", "tune_bucket"])
def _fa2_fwd_pointer(
    Q, K, V, O, LSE,
    qk_scale, seqlen_q, seqlen_k, heads_q, group_size,
    sqb, sqh, sqs, sqd, skb, skh, sks, skd, svb, svh, svs, svd, sob, soh, sos,
    tune_bucket,  # only part of the autotuning key (short vs long sequences)
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m = tl.program_id(0)
    if CAUSAL:
        # the last query blocks see the most keys: start them first so the grid drains evenly
        start_m = tl.num_programs(0) - 1 - start_m
    bh = tl.program_id(1)
    batch = (bh // heads_q).to(tl.int64)
    head = bh % heads_q
    head_kv = (head // group_size).to(tl.int64)
    head = head.to(tl.int64)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < seqlen_q

    q = tl.load(Q + batch * sqb + head * sqh + offs_m[:, None] * sqs + offs_d[None, :] * sqd,
                mask=row_ok[:, None], other=0.0)
    kt_ptrs = K + batch * skb + head_kv * skh + offs_n[None, :] * sks + offs_d[:, None] * skd
    v_ptrs = V + batch * svb + head_kv * svh + offs_n[:, None] * svs + offs_d[None, :] * svd

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seqlen_q, seqlen_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, HEAD_DIM)

    for start_n in range(0, full_end, BLOCK_N):
        kt = tl.load(kt_ptrs + start_n * sks)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seqlen_k,
                                          diagonal, False, CAUSAL)
        v = tl.load(v_ptrs + start_n * svs)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)

    for start_n in range(full_end, end, BLOCK_N):
        key_ok = (start_n + offs_n) < seqlen_k
        kt = tl.load(kt_ptrs + start_n * sks, mask=key_ok[None, :], other=0.0)
        qk = tl.dot(q, kt, input_precision=DOT_PRECISION)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seqlen_k,
                                          diagonal, True, CAUSAL)
        v = tl.load(v_ptrs + start_n * svs, mask=key_ok[:, None], other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=DOT_PRECISION)

    out, lse = finish_rows(acc, m_i, l_i)
    tl.store(O + batch * sob + head * soh + offs_m[:, None] * sos + offs_d[None, :],
             out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=row_ok)


_fa2_fwd_pointer_tuned = tuning.autotuned(_fa2_fwd_pointer, "fa2")


def launch(q, k, v, out, lse, causal, scale, config=None):
    """Run the kernel; q/k/v may be strided, out/lse are fresh contiguous tensors."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    args = (q, k, v, out, lse,
            scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_q // heads_kv,
            *tuning.strides(q), *tuning.strides(k), *tuning.strides(v), *out.stride()[:3],
            tuning.seq_bucket(seqlen_k))
    meta = dict(HEAD_DIM=head_dim, CAUSAL=causal,
                DOT_PRECISION="ieee" if q.dtype.itemsize == 4 else "tf32")
    return tuning.run(_fa2_fwd_pointer, _fa2_fwd_pointer_tuned, args, meta, config,
                      grid_rows=seqlen_q, grid_heads=batch * heads_q)
