"""Variants "mxfp8-dequant" and "nvfp4-dequant": block-scaled inputs dequantized exactly in registers,
then 16-bit tensor-core dots.

Each Q (once), K and V^T tile is decoded to fp32 (element times block scale) and cast to TILE (bf16
on the GPU). Both casts are exact: an e4m3 value (4 significant bits) times a power of two (E8M0)
and an e2m1 value (2 bits) times an e4m3 block scale (4 bits, product at most 6 bits) fit bf16's 8
bits, and bf16 has fp32's exponent range. The only exception: an MXFP8 block with scale below
2**-117 (amax below 2**-109) can have products under bf16's normal range, where bits may be lost;
NVFP4 products are at least 0.5 * 2**-9. nvfp4's fp32 tensor scales are not folded into the tiles:
Q's and K's multiply the softmax scale, V's the output, in fp32.

P is quantized per the format (kernels/mx_blocks.py) against the running max of the online softmax
and kept as its exact dequantized values in TILE for the P.V dot; the row sum uses the unrounded P,
as compare.oracle.plain_attention does. Everything is read with pointer loads from contiguous
tensors. Output bf16, LSE natural log fp32.
"""
import triton
import triton.language as tl

from triton_impl.kernels import tuning
from triton_impl.kernels.common import finish_rows, program_tile, softmax_step, start_rows
from triton_impl.kernels.mx_blocks import (INTERPRETER_CONFIG, load_blocked_tile, quantize_p_mxfp8, quantize_p_nvfp4,
                                            scaled_scores)

SCALE_BLOCK = {"mxfp8": 32, "nvfp4": 16}


@triton.jit
def _attend_keys(acc, m_i, l_i, q, k_data, k_scales, vt_data, vt_scales, start_n, qk_scale, offs_m, offs_n,
                 offs_d, seqlen_k, keys_stored, diagonal, FORMAT: tl.constexpr, HEAD_DIM: tl.constexpr,
                 CAUSAL: tl.constexpr, MASKED: tl.constexpr, TILE: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 EMULATED_ROUNDING: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key block: S = Q K^T, online softmax, P quantized, acc += P V."""
    keys = start_n + offs_n
    k = load_blocked_tile(k_data, k_scales, keys, 0, HEAD_DIM, seqlen_k, HEAD_DIM, BLOCK_N, HEAD_DIM, FORMAT, MASKED)
    qk = tl.dot(q, tl.trans(k.to(TILE)), input_precision=DOT_PRECISION)
    qk = scaled_scores(qk, qk_scale, EMULATED_ROUNDING)
    p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, 1.0, offs_m, keys, seqlen_k, diagonal, MASKED, CAUSAL)
    if FORMAT == "mxfp8":
        p = quantize_p_mxfp8(p, BLOCK_M, BLOCK_N, EMULATED_ROUNDING)
    else:
        p = quantize_p_nvfp4(p, BLOCK_M, BLOCK_N, EMULATED_ROUNDING)
    vt = load_blocked_tile(vt_data, vt_scales, offs_d, start_n, keys_stored, HEAD_DIM, seqlen_k, HEAD_DIM, BLOCK_N,
                           FORMAT, MASKED)
    acc = tl.dot(p.to(TILE), tl.trans(vt.to(TILE)), acc * alpha[:, None], input_precision=DOT_PRECISION)
    return acc, m_i, l_i


# integers that only bound loops or index heads: one binary for all their values. keys_stored (V^T's
# padded row length, a multiple of 16) stays specialised: its divisibility lets V^T loads vectorise.
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size"])
def _blocked_dequant_fwd(
    Q, QS, K, KS, VT, VS, Q_TS, K_TS, V_TS, O, LSE,
    softmax_scale_log2, seqlen_q, seqlen_k, keys_stored, heads_q, heads_kv, group_size,
    FORMAT: tl.constexpr, HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, TILE: tl.constexpr,
    DOT_PRECISION: tl.constexpr, EMULATED_ROUNDING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m, bh = program_tile(seqlen_q, CAUSAL, BLOCK_M)  # heaviest query blocks first
    bh_kv = ((bh // heads_q) * heads_kv + (bh % heads_q) // group_size).to(tl.int64)
    bh = bh.to(tl.int64)
    PACK: tl.constexpr = 2 if FORMAT == "nvfp4" else 1
    BLOCK: tl.constexpr = 16 if FORMAT == "nvfp4" else 32

    q_data = Q + bh * seqlen_q * (HEAD_DIM // PACK)
    q_scales = QS + bh * seqlen_q * (HEAD_DIM // BLOCK)
    k_data = K + bh_kv * seqlen_k * (HEAD_DIM // PACK)
    k_scales = KS + bh_kv * seqlen_k * (HEAD_DIM // BLOCK)
    vt_data = VT + bh_kv * HEAD_DIM * (keys_stored // PACK)
    vt_scales = VS + bh_kv * HEAD_DIM * (keys_stored // BLOCK)

    qk_scale = softmax_scale_log2
    if FORMAT == "nvfp4":
        qk_scale = qk_scale * tl.load(Q_TS) * tl.load(K_TS)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = load_blocked_tile(q_data, q_scales, offs_m, 0, HEAD_DIM, seqlen_q, HEAD_DIM, BLOCK_M, HEAD_DIM, FORMAT,
                          True).to(TILE)

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seqlen_q, seqlen_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, HEAD_DIM)
    for start_n in range(0, full_end, BLOCK_N):
        acc, m_i, l_i = _attend_keys(acc, m_i, l_i, q, k_data, k_scales, vt_data, vt_scales, start_n, qk_scale,
                                     offs_m, offs_n, offs_d, seqlen_k, keys_stored, diagonal, FORMAT, HEAD_DIM,
                                     CAUSAL, False, TILE, DOT_PRECISION, EMULATED_ROUNDING, BLOCK_M, BLOCK_N)
    for start_n in range(full_end, end, BLOCK_N):
        acc, m_i, l_i = _attend_keys(acc, m_i, l_i, q, k_data, k_scales, vt_data, vt_scales, start_n, qk_scale,
                                     offs_m, offs_n, offs_d, seqlen_k, keys_stored, diagonal, FORMAT, HEAD_DIM,
                                     CAUSAL, True, TILE, DOT_PRECISION, EMULATED_ROUNDING, BLOCK_M, BLOCK_N)

    if FORMAT == "nvfp4":
        acc = acc * tl.load(V_TS)
    out, lse = finish_rows(acc, m_i, l_i)
    row_ok = offs_m < seqlen_q
    tl.store(O + bh * seqlen_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(tl.bfloat16),
             mask=row_ok[:, None])
    tl.store(LSE + bh * seqlen_q + offs_m, lse, mask=row_ok)


_TUNED = {fmt: tuning.autotuned(_blocked_dequant_fwd, f"{fmt}-dequant") for fmt in SCALE_BLOCK}


def proxy_inputs(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, proxy):
    """Zero block-scaled inputs (zero codes and scales), out and lse of the autotuner's proxy (tuning.proxy_shape)
    in the layouts of compare.formats, V^T's rows padded to the scale block; the tensor scales as given."""
    import torch
    slices, group, seqlen_q, seqlen_k = proxy
    head_dim, heads, block = q_scale.shape[-1] * SCALE_BLOCK[fmt], slices * group, SCALE_BLOCK[fmt]
    per_byte = head_dim // q.shape[-1]
    padded = -(-seqlen_k // block) * block
    zeros = tuning.proxy_zeros
    return (zeros(q, 1, heads, seqlen_q, head_dim // per_byte), zeros(q_scale, 1, heads, seqlen_q, head_dim // block),
            zeros(k, 1, slices, seqlen_k, head_dim // per_byte), zeros(k_scale, 1, slices, seqlen_k, head_dim // block),
            zeros(vt, 1, slices, head_dim, padded // per_byte), zeros(vt_scale, 1, slices, head_dim, padded // block),
            tensor_scales, zeros(q, 1, heads, seqlen_q, head_dim, dtype=torch.bfloat16),
            zeros(q, 1, heads, seqlen_q, dtype=torch.float32))


def _launch_args(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, out, lse, causal, scale, tile_dtype):
    """(kernel args, meta, grid rows, grid slices, shape) of a launch."""
    import torch
    batch, heads_q, seqlen_q, head_dim = out.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    keys_stored = vt_scale.shape[-1] * SCALE_BLOCK[fmt]
    tuning.check_int32_rows(f"{fmt}-dequant", max(seqlen_q, keys_stored), head_dim)
    interpreting = tuning.interpreting()
    tile = tile_dtype or (torch.float32 if interpreting else torch.bfloat16)
    tile = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}[tile]
    args = (q, q_scale, k, k_scale, vt, vt_scale, *tensor_scales, out, lse,
            scale * tuning.LOG2E, seqlen_q, seqlen_k, keys_stored, heads_q, heads_kv, heads_q // heads_kv)
    meta = dict(FORMAT=fmt, HEAD_DIM=head_dim, CAUSAL=causal, TILE=tile,
                DOT_PRECISION="ieee" if tile == tl.float32 else "tf32", EMULATED_ROUNDING=interpreting)
    return args, meta, seqlen_q, batch * heads_q, (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)


def launch(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, out, lse, causal, scale, config=None,
           tile_dtype=None):
    """Block-scaled q (B, Hq, Sq, D*), k (B, Hkv, Sk, D*), vt (B, Hkv, D, Sk_padded*) and their block
    scales, all contiguous (* = D/2 bytes for nvfp4); tensor_scales (q, k, v) 0-dim fp32 for nvfp4,
    else None. out (B, Hq, Sq, D) bf16 and lse (B, Hq, Sq) fp32, fresh and contiguous. tile_dtype:
    the dot operands' dtype, bf16 by default (fp32 under the interpreter, whose bf16 dots are wrong)."""
    args, meta, rows, slices, shape = _launch_args(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, out,
                                                   lse, causal, scale, tile_dtype)
    if tuning.interpreting() and config is None:
        config = INTERPRETER_CONFIG

    def proxy_args(proxy):
        inputs = proxy_inputs(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, proxy)
        return _launch_args(fmt, *inputs, causal, scale, tile_dtype)[0], proxy[2], proxy[0] * proxy[1]

    return tuning.run(_blocked_dequant_fwd, _TUNED[fmt], args, meta, config, rows, slices,
                      shape=shape, dtypes=(q.dtype, q_scale.dtype), proxy_args=proxy_args)
