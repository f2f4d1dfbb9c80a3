"""Variant "fp8": e4m3 forward in the FlashAttention-3 style, for sm_90.

Inputs are e4m3 with one fp32 descale per (batch, head): x ~= data * descale. The descales of Q and K
fold into the softmax scale, V's into the final normalisation. V arrives transposed, (B, H, D, Sk), so
that both operands of P @ V are K-major, which Hopper's fp8 wgmma requires. P (in [0, 1]) is cast to
e4m3 with no scale, round-to-nearest-even, exactly as compare.formats.quantize_p(p, "fp8") defines;
the row sum l uses the unrounded fp32 P (as FlashAttention-3 does). Output is bf16.

V^T is read through a descriptor when its key stride is a 16-byte multiple (seqlen_k % 16 == 0 for
contiguous data); otherwise through masked pointer loads, since TMA cannot address such rows.

K tiles arrive key-permuted when seqlen_k % 16 == 0 (PERMUTED_K, see _load_k): the same reordering as the
CUDA kernel's (cuda_impl/csrc/fwd_hopper_fp8.cu), which puts each score in the thread and register that
the e4m3 A operand of P @ V needs, so P is relabelled instead of moved by shuffles (SASS: no SHFL.IDX and
no PRMT in the loop). Other lengths load K in key order.

Precision: Hopper's fp8 wgmma adds its products with reduced precision (no full fp32 accumulation),
so the scores, and with them the LSE, carry an error of about 2e-4 for N(0, 1) inputs at head_dim 128
(measured on an H200) where an fp32 matmul of the dequantized inputs gives ~1e-6. Promoting the Q.K^T
partial sums to fp32 every 64 (32) products, Triton's max_num_imprecise_acc, halves (quarters) that
error but costs 12% of the speed at 64 and spills registers at 32, so it is not used.
Each tile's P V goes into a fresh accumulator and is added to O in fp32: the wgmma aligns its products to
the accumulator's exponent and keeps about 14 bits, so summed into O itself a tile's products are cut
relative to O, which grows with the keys; with V's mean not zero that error is one-signed and grew past
the oracle's bound from about 1.5k keys (docs/journal/2026-12-02_fp8-decode-and-fuzz.md). The second
O-sized block of registers costs nothing measurable at head_dim 64 and 128; at 256 every config spills
and the kernel runs at about 0.7x its in-place speed (docs/journal/2026-12-02_fp8-accumulation.md).
"""
import torch
import triton
import triton.language as tl

from triton_impl.kernels.common import finish_rows, program_tile, round_to_e4m3_grid, softmax_step, start_rows
from triton_impl.kernels import tuning
from triton_impl.kernels.fa2_tma import set_descriptor_allocator


@triton.jit
def _load_vt(vt_desc, vt_ptrs, start_n, seqlen_k, offs_n, svs,
             VT_VIA_TMA: tl.constexpr, MASKED: tl.constexpr):
    """A (HEAD_DIM, BLOCK_N) tile of V^T."""
    if VT_VIA_TMA:
        vt = vt_desc.load([0, start_n])
    elif MASKED:
        vt = tl.load(vt_ptrs + start_n * svs, mask=(start_n + offs_n)[None, :] < seqlen_k, other=0.0)
    else:
        vt = tl.load(vt_ptrs + start_n * svs)
    return vt


@triton.jit
def _key_of_column(BLOCK_N: tl.constexpr):
    """With PERMUTED_K, the key (within the tile) whose score lands in each column of S: column
    16a + 8b + 2t + e holds key 16a + 4t + 2b + e (see _load_k)."""
    col = tl.arange(0, BLOCK_N)
    return (col // 16) * 16 + ((col // 2) % 4) * 4 + ((col // 8) % 2) * 2 + col % 2


@triton.jit
def _load_k(k_desc, start_n, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr, PERMUTED_K: tl.constexpr):
    """A (BLOCK_N, HEAD_DIM) tile of K. With PERMUTED_K its rows come key-permuted through a 5-D
    descriptor (16-key groups, then pairs of keys 2 apart, keys 4 apart, single keys): in the fp32
    accumulator of S = Q K^T each thread then holds the keys that Hopper's e4m3 A fragment of P @ V wants
    from it, so P reaches the second wgmma by relabelling registers (_keys_in_order), not by shuffles."""
    if PERMUTED_K:
        k = k_desc.load([start_n // 16, 0, 0, 0, 0]).reshape([BLOCK_N, HEAD_DIM])
    else:
        k = k_desc.load([start_n, 0])
    return k


@triton.jit
def _keys_in_order(p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PERMUTED_K: tl.constexpr):
    """P with its columns back in key order: with PERMUTED_K, column 16a + 4t + 2b + e takes column
    16a + 8b + 2t + e (the same thread's register), which lays P out as the A operand of P @ V."""
    if PERMUTED_K:
        p = p.reshape([BLOCK_M, BLOCK_N // 16, 2, 4, 2]).permute(0, 1, 3, 2, 4).reshape([BLOCK_M, BLOCK_N])
    return p


# integers that only bound loops or index heads: one binary for all their values
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size"])
def _fp8_fwd(
    Q, K, VT, Q_DESCALE, K_DESCALE, V_DESCALE, O, LSE,
    softmax_scale_log2, seqlen_q, seqlen_k, heads_q, heads_kv, group_size,
    sqb, sqh, sqs, skb, skh, sks, svb, svh, svd, svs,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, VT_VIA_TMA: tl.constexpr, PERMUTED_K: tl.constexpr,
    EXACT_P_ROUNDING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m, bh = program_tile(seqlen_q, CAUSAL, BLOCK_M)
    batch = bh // heads_q
    head = bh % heads_q
    head_kv = head // group_size
    bh_kv = batch * heads_kv + head_kv
    batch = batch.to(tl.int64)
    head = head.to(tl.int64)
    head_kv = head_kv.to(tl.int64)

    # fold the Q and K descales into the (log2-unit) softmax scale
    qk_scale = softmax_scale_log2 * tl.load(Q_DESCALE + bh) * tl.load(K_DESCALE + bh_kv)
    v_descale = tl.load(V_DESCALE + bh_kv)

    q_desc = tl.make_tensor_descriptor(Q + batch * sqb + head * sqh, shape=[seqlen_q, HEAD_DIM],
                                       strides=[sqs, 1], block_shape=[BLOCK_M, HEAD_DIM])
    k_base = K + batch * skb + head_kv * skh
    if PERMUTED_K:  # (seqlen_k % 16 == 0: the groups of 16 keys stay inside the head)
        k_desc = tl.make_tensor_descriptor(k_base, shape=[seqlen_k // 16, 2, 4, 2, HEAD_DIM],
                                           strides=[16 * sks, 2 * sks, 4 * sks, sks, 1],
                                           block_shape=[BLOCK_N // 16, 2, 4, 2, HEAD_DIM])
        offs_key = _key_of_column(BLOCK_N)
    else:
        k_desc = tl.make_tensor_descriptor(k_base, shape=[seqlen_k, HEAD_DIM], strides=[sks, 1],
                                           block_shape=[BLOCK_N, HEAD_DIM])
        offs_key = tl.arange(0, BLOCK_N)
    vt_base = VT + batch * svb + head_kv * svh
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    if VT_VIA_TMA:
        vt_desc = tl.make_tensor_descriptor(vt_base, shape=[HEAD_DIM, seqlen_k], strides=[svd, 1],
                                            block_shape=[HEAD_DIM, BLOCK_N])
    else:
        vt_desc = None
    vt_ptrs = vt_base + offs_d[:, None] * svd + offs_n[None, :] * svs
    o_desc = tl.make_tensor_descriptor(O + bh.to(tl.int64) * seqlen_q * HEAD_DIM, shape=[seqlen_q, HEAD_DIM],
                                       strides=[HEAD_DIM, 1], block_shape=[BLOCK_M, HEAD_DIM])

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q = q_desc.load([start_m * BLOCK_M, 0])

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seqlen_q, seqlen_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, HEAD_DIM)

    for start_n in range(0, full_end, BLOCK_N):
        k = _load_k(k_desc, start_n, BLOCK_N, HEAD_DIM, PERMUTED_K)
        qk = tl.dot(q, k.T)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_key, seqlen_k,
                                          diagonal, False, CAUSAL)
        if EXACT_P_ROUNDING:
            p = round_to_e4m3_grid(p)
        p = _keys_in_order(p, BLOCK_M, BLOCK_N, PERMUTED_K)
        vt = _load_vt(vt_desc, vt_ptrs, start_n, seqlen_k, offs_n, svs, VT_VIA_TMA, False)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float8e4nv), vt.T)  # a fresh accumulator: see Precision

    for start_n in range(full_end, end, BLOCK_N):
        k = _load_k(k_desc, start_n, BLOCK_N, HEAD_DIM, PERMUTED_K)
        qk = tl.dot(q, k.T)
        p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, qk_scale, offs_m, start_n + offs_key, seqlen_k,
                                          diagonal, True, CAUSAL)
        if EXACT_P_ROUNDING:
            p = round_to_e4m3_grid(p)
        p = _keys_in_order(p, BLOCK_M, BLOCK_N, PERMUTED_K)
        vt = _load_vt(vt_desc, vt_ptrs, start_n, seqlen_k, offs_n, svs, VT_VIA_TMA, True)
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.float8e4nv), vt.T)  # a fresh accumulator: see Precision

    out, lse = finish_rows(acc * v_descale, m_i, l_i)
    o_desc.store([start_m * BLOCK_M, 0], out.to(tl.bfloat16))
    tl.store(LSE + bh.to(tl.int64) * seqlen_q + offs_m, lse, mask=offs_m < seqlen_q)


_fp8_fwd_tuned = tuning.autotuned(_fp8_fwd, "fp8")


def vt_via_tma(vt):
    """True when V^T's rows can be TMA-addressed: unit key stride, 16-byte aligned row stride and base."""
    strides = tuning.strides(vt)
    return strides[3] == 1 and all(s % 16 == 0 for s in strides[:3]) and vt.data_ptr() % 16 == 0


def _launch_args(q, k, vt, q_descale, k_descale, v_descale, out, lse, causal, scale):
    """(kernel args, meta, grid rows, grid slices, shape) of a launch."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    args = (q, k, vt, q_descale, k_descale, v_descale, out, lse,
            scale * tuning.LOG2E, seqlen_q, seqlen_k, heads_q, heads_kv, heads_q // heads_kv,
            *tuning.strides(q)[:3], *tuning.strides(k)[:3], *tuning.strides(vt))
    meta = dict(HEAD_DIM=head_dim, CAUSAL=causal, VT_VIA_TMA=vt_via_tma(vt), PERMUTED_K=seqlen_k % 16 == 0,
                EXACT_P_ROUNDING=tuning.interpreting())
    return args, meta, seqlen_q, batch * heads_q, (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)


def _proxy_inputs(q, proxy):
    """Zero e4m3 q, k, vt, unit descales, out and lse of the autotuner's proxy (tuning.proxy_shape)."""
    slices, group, seqlen_q, seqlen_k = proxy
    head_dim, heads = q.shape[-1], slices * group
    zeros = tuning.proxy_zeros
    ones = [zeros(q, 1, h, dtype=torch.float32) + 1 for h in (heads, slices, slices)]
    return (zeros(q, 1, heads, seqlen_q, head_dim), zeros(q, 1, slices, seqlen_k, head_dim),
            zeros(q, 1, slices, head_dim, seqlen_k), *ones,
            zeros(q, 1, heads, seqlen_q, head_dim, dtype=torch.bfloat16), zeros(q, 1, heads, seqlen_q, dtype=torch.float32))


def launch(q, k, vt, q_descale, k_descale, v_descale, out, lse, causal, scale, config=None):
    """q (B, Hq, Sq, D), k (B, Hkv, Sk, D), vt (B, Hkv, D, Sk) e4m3; descales (B, H) fp32 contiguous;
    out (B, Hq, Sq, D) bf16 and lse (B, Hq, Sq) fp32, fresh and contiguous."""
    set_descriptor_allocator()
    args, meta, rows, slices, shape = _launch_args(q, k, vt, q_descale, k_descale, v_descale, out, lse, causal, scale)

    def proxy_args(proxy):  # run with this launch's flags (VT_VIA_TMA, PERMUTED_K); both hold for the proxy
        return _launch_args(*_proxy_inputs(q, proxy), causal, scale)[0], proxy[2], proxy[0] * proxy[1]

    return tuning.run(_fp8_fwd, _fp8_fwd_tuned, args, meta, config, rows, slices,
                      shape=shape, dtypes=(q.dtype,), proxy_args=proxy_args)
