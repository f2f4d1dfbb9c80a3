"""Variant "fa2-tma": FlashAttention-2 forward with tensor-descriptor (TMA) loads, for sm_90.

Each program builds 2-D descriptors of shape (seqlen, head_dim) over its own (batch, head) slice.
TMA then zero-fills rows past the sequence end and clips the output store, so query and key tails
need no pointer masks and no row offset can run into the next head or batch (the flattened
(batch*heads*seqlen, head_dim) view of Triton's tutorial gets batch > 1 wrong and reads across heads
at tails). Descriptors built on the device need a scratch allocation: `triton.set_allocator`.
"""
import torch
import triton
import triton.language as tl

from triton_impl.kernels.common import finish_rows, program_tile, softmax_step, start_rows
from triton_impl.kernels import tuning


# integers that only bound loops or index heads: one binary for all their values
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "group_size"])
def _fa2_fwd_tma(
    Q, K, V, O, LSE,
    qk_scale, seqlen_q, seqlen_k, heads_q, group_size,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m, bh = program_tile(seqlen_q, CAUSAL, BLOCK_M)
    batch = (bh // heads_q).to(tl.int64)
    head = bh % heads_q
    head_kv = (head // group_size).to(tl.int64)
    head = head.to(tl.int64)

    q_desc = tl.make_tensor_descriptor(Q + batch * sqb + head * sqh, shape=[seqlen_q, HEAD_DIM],
                                       strides=[sqs, 1], block_shape=[BLOCK_M, HEAD_DIM])
    k_desc = tl.make_tensor_descriptor(K + batch * skb + head_kv * skh, shape=[seqlen_k, HEAD_DIM],
                                       strides=[sks, 1], block_shape=[BLOCK_N, HEAD_DIM])
    v_desc = tl.make_tensor_descriptor(V + batch * svb + head_kv * svh, shape=[seqlen_k, HEAD_DIM],
                                       strides=[svs, 1], block_shape=[BLOCK_N, HEAD_DIM])
    o_desc = tl.make_tensor_descriptor(O + bh.to(tl.int64) * seqlen_q * HEAD_DIM, shape=[seqlen_q, HEAD_DIM],
                                       strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    q = q_desc.load([start_m * BLOCK_M, 0])

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seqlen_q, seqlen_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, HEAD_DIM)

    for start_n in range(0, full_end, BLOCK_N):
        k = k_desc.load([start_n, 0])
        qk = tl.dot(q, k.T)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seqlen_k,
                                          diagonal, False, CAUSAL)
        v = v_desc.load([start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])

    for start_n in range(full_end, end, BLOCK_N):
        k = k_desc.load([start_n, 0])
        qk = tl.dot(q, k.T)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_n, seqlen_k,
                                          diagonal, True, CAUSAL)
        v = v_desc.load([start_n, 0])
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])

    out, lse = finish_rows(acc, m_i, l_i)
    o_desc.store([start_m * BLOCK_M, 0], out.to(O.dtype.element_ty))
    tl.store(LSE + bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)


_fa2_fwd_tma_tuned = tuning.autotuned(_fa2_fwd_tma, "fa2-tma")


def _scratch(size, alignment, stream):
    return torch.empty(size, dtype=torch.int8, device="cuda")


def set_descriptor_allocator():
    """Device-side descriptors are written to global scratch that Triton asks this allocator for."""
    if not tuning.interpreting():
        triton.set_allocator(_scratch)


def _launch_args(q, k, v, out, lse, causal, scale):
    """(kernel args, meta, grid rows, grid slices, shape) of a launch."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    args = (q, k, v, out, lse,
            scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_q // heads_kv,
            *tuning.strides(q)[:3], *tuning.strides(k)[:3], *tuning.strides(v)[:3])
    meta = dict(HEAD_DIM=head_dim, CAUSAL=causal)
    return args, meta, seqlen_q, batch * heads_q, (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)


def launch(q, k, v, out, lse, causal, scale, config=None):
    """Run the kernel; q/k/v need unit last stride and 16-byte aligned base and strides (checked by
    the caller), out/lse are fresh contiguous tensors."""
    set_descriptor_allocator()
    args, meta, rows, slices, shape = _launch_args(q, k, v, out, lse, causal, scale)

    def proxy_args(proxy):
        return _launch_args(*tuning.proxy_16bit(q, proxy), causal, scale)[0], proxy[2], proxy[0] * proxy[1]

    return tuning.run(_fa2_fwd_tma, _fa2_fwd_tma_tuned, args, meta, config, rows, slices,
                      shape=shape, dtypes=(q.dtype,), proxy_args=proxy_args)
