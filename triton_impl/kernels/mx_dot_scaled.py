"""Variant "mxfp8-dot-scaled": MXFP8 forward through Triton's block-scaled dot, `tl.dot_scaled`.

Both products are dot_scaled with e4m3 operands and E8M0 scales as stored: S = Q K^T takes Q (M, D)
with its (M, D/32) codes and K^T (D, N) with K's (N, D/32) codes; O += P V takes P (M, N) with
(M, N/32) codes computed in the kernel (kernels/mx_blocks.py, the rule of formats.quantize_p) and V
(N, D) = (V^T)^T with V^T's (D, N/32) codes, which is the scale layout dot_scaled wants for its
right operand. Triton 3.6 has no native block-scaled MMA on sm_90: it decomposes dot_scaled into
upcasts (e4m3 -> bf16, times the scale) and a bf16 wgmma (see docs/journal/2026-11-29_triton.md).

Decoding differences with compare.formats, both on blocks that do not matter: Triton decodes E8M0
code 0 as 0 rather than 2**-127 (blocks with amax below 2**-119), and its bf16 upcast of such tiny
values may flush. Triton 3.6's interpreter has no dot_scaled: there the variant is refused, unless a
dot_scaled has been given to the interpreter (the tests install an emulation of its documented
semantics to check this kernel's indexing).
"""
import triton
import triton.language as tl

from triton_impl.kernels import tuning
from triton_impl.kernels.common import finish_rows, program_tile, softmax_step, start_rows
from triton_impl.kernels.mx_blocks import INTERPRETER_CONFIG, quantize_p_mxfp8_codes, scaled_scores

# a constexpr rather than a literal: the interpreter hands literals to dot_scaled as plain str
E4M3 = tl.constexpr("e4m3")


@triton.jit
def _attend_keys(acc, m_i, l_i, q, q_codes, k_data, k_scales, vt_data, vt_scales, start_n, qk_scale, offs_m,
                 offs_n, offs_d, offs_dblk, offs_nblk, seqlen_k, keys_stored, diagonal, HEAD_DIM: tl.constexpr,
                 CAUSAL: tl.constexpr, MASKED: tl.constexpr, EMULATED_ROUNDING: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One key block: S = Q K^T, online softmax, P quantized to MXFP8, acc += P V (both dot_scaled)."""
    keys = start_n + offs_n
    kt_ptrs = k_data + keys[None, :] * HEAD_DIM + offs_d[:, None]
    k_code_ptrs = k_scales + keys[:, None] * (HEAD_DIM // 32) + offs_dblk[None, :]
    vt_ptrs = vt_data + offs_d[:, None] * keys_stored + keys[None, :]
    v_code_ptrs = vt_scales + offs_d[:, None] * (keys_stored // 32) + (start_n // 32 + offs_nblk)[None, :]
    if MASKED:
        key_ok = keys < seqlen_k
        kt = tl.load(kt_ptrs, mask=key_ok[None, :], other=0.0)
        k_codes = tl.load(k_code_ptrs, mask=key_ok[:, None], other=0)
        vt = tl.load(vt_ptrs, mask=key_ok[None, :], other=0.0)
        v_codes = tl.load(v_code_ptrs, mask=(start_n + offs_nblk * 32 < seqlen_k)[None, :], other=0)
    else:
        kt = tl.load(kt_ptrs)
        k_codes = tl.load(k_code_ptrs)
        vt = tl.load(vt_ptrs)
        v_codes = tl.load(v_code_ptrs)
    qk = tl.dot_scaled(q, q_codes, E4M3, kt, k_codes, E4M3)
    qk = scaled_scores(qk, qk_scale, EMULATED_ROUNDING)
    p, alpha, m_i, l_i = softmax_step(qk, m_i, l_i, 1.0, offs_m, keys, seqlen_k, diagonal, MASKED, CAUSAL)
    p_elements, p_codes = quantize_p_mxfp8_codes(p, BLOCK_M, BLOCK_N, EMULATED_ROUNDING)
    acc = tl.dot_scaled(p_elements, p_codes, E4M3, tl.trans(vt), v_codes, E4M3, acc * alpha[:, None])
    return acc, m_i, l_i


# integers that only bound loops or index heads: one binary for all their values. keys_stored (V^T's
# padded row length, a multiple of 16) stays specialised: its divisibility lets V^T loads vectorise.
@triton.jit(do_not_specialize=["seqlen_q", "seqlen_k", "heads_q", "heads_kv", "group_size"])
def _mxfp8_dot_scaled_fwd(
    Q, QS, K, KS, VT, VS, O, LSE,
    softmax_scale_log2, seqlen_q, seqlen_k, keys_stored, heads_q, heads_kv, group_size,
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, EMULATED_ROUNDING: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    start_m, bh = program_tile(seqlen_q, CAUSAL, BLOCK_M)  # heaviest query blocks first
    bh_kv = ((bh // heads_q) * heads_kv + (bh % heads_q) // group_size).to(tl.int64)
    bh = bh.to(tl.int64)
    k_data = K + bh_kv * seqlen_k * HEAD_DIM
    k_scales = KS + bh_kv * seqlen_k * (HEAD_DIM // 32)
    vt_data = VT + bh_kv * HEAD_DIM * keys_stored
    vt_scales = VS + bh_kv * HEAD_DIM * (keys_stored // 32)

    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    offs_dblk = tl.arange(0, HEAD_DIM // 32)
    offs_nblk = tl.arange(0, BLOCK_N // 32)
    row_ok = offs_m < seqlen_q
    q = tl.load(Q + bh * seqlen_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)
    q_codes = tl.load(QS + bh * seqlen_q * (HEAD_DIM // 32) + offs_m[:, None] * (HEAD_DIM // 32)
                      + offs_dblk[None, :], mask=row_ok[:, None], other=0)

    m_i, l_i, acc, diagonal, full_end, end = start_rows(start_m, seqlen_q, seqlen_k, CAUSAL,
                                                        BLOCK_M, BLOCK_N, HEAD_DIM)
    for start_n in range(0, full_end, BLOCK_N):
        acc, m_i, l_i = _attend_keys(acc, m_i, l_i, q, q_codes, k_data, k_scales, vt_data, vt_scales, start_n,
                                     softmax_scale_log2, offs_m, offs_n, offs_d, offs_dblk, offs_nblk, seqlen_k,
                                     keys_stored, diagonal, HEAD_DIM, CAUSAL, False, EMULATED_ROUNDING, BLOCK_M,
                                     BLOCK_N)
    for start_n in range(full_end, end, BLOCK_N):
        acc, m_i, l_i = _attend_keys(acc, m_i, l_i, q, q_codes, k_data, k_scales, vt_data, vt_scales, start_n,
                                     softmax_scale_log2, offs_m, offs_n, offs_d, offs_dblk, offs_nblk, seqlen_k,
                                     keys_stored, diagonal, HEAD_DIM, CAUSAL, True, EMULATED_ROUNDING, BLOCK_M,
                                     BLOCK_N)

    out, lse = finish_rows(acc, m_i, l_i)
    tl.store(O + bh * seqlen_q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :], out.to(tl.bfloat16),
             mask=row_ok[:, None])
    tl.store(LSE + bh * seqlen_q + offs_m, lse, mask=row_ok)


_mxfp8_dot_scaled_fwd_tuned = tuning.autotuned(_mxfp8_dot_scaled_fwd, "mxfp8-dot-scaled")


def _interpreter_has_dot_scaled():
    from triton.runtime.interpreter import InterpreterBuilder
    return hasattr(InterpreterBuilder, "create_dot_scaled")


def _launch_args(q, q_scale, k, k_scale, vt, vt_scale, out, lse, causal, scale):
    """(kernel args, meta, grid rows, grid slices, shape) of a launch."""
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    tuning.check_int32_rows("mxfp8-dot-scaled", max(seqlen_q, vt.shape[-1]), head_dim)
    args = (q, q_scale, k, k_scale, vt, vt_scale, out, lse,
            scale * tuning.LOG2E, seqlen_q, seqlen_k, vt.shape[-1], heads_q, heads_kv, heads_q // heads_kv)
    meta = dict(HEAD_DIM=head_dim, CAUSAL=causal, EMULATED_ROUNDING=tuning.interpreting())
    return args, meta, seqlen_q, batch * heads_q, (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim)


def launch(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, out, lse, causal, scale, config=None):
    """MXFP8 q (B, Hq, Sq, D), k (B, Hkv, Sk, D), vt (B, Hkv, D, Sk padded to 32) e4m3 with their uint8
    E8M0 codes, all contiguous; out (B, Hq, Sq, D) bf16 and lse (B, Hq, Sq) fp32, fresh and contiguous.
    fmt and tensor_scales as the frontend passes every block-scaled kernel: "mxfp8", and no tensor scales."""
    if fmt != "mxfp8" or any(t is not None for t in tensor_scales):
        raise ValueError(f"mxfp8-dot-scaled runs mxfp8 without tensor scales, got {fmt!r}")
    interpreting = tuning.interpreting()
    if interpreting and not _interpreter_has_dot_scaled():
        raise NotImplementedError("variant 'mxfp8-dot-scaled' needs tl.dot_scaled, which Triton 3.6's "
                                  "interpreter (TRITON_INTERPRET=1) does not implement; run it on a GPU")
    args, meta, rows, slices, shape = _launch_args(q, q_scale, k, k_scale, vt, vt_scale, out, lse, causal, scale)
    if interpreting and config is None:
        config = INTERPRETER_CONFIG

    def proxy_args(proxy):
        from triton_impl.kernels.mx_dequant import proxy_inputs
        inputs = proxy_inputs(fmt, q, q_scale, k, k_scale, vt, vt_scale, tensor_scales, proxy)
        return _launch_args(*inputs[:6], *inputs[7:], causal, scale)[0], proxy[2], proxy[0] * proxy[1]

    return tuning.run(_mxfp8_dot_scaled_fwd, _mxfp8_dot_scaled_fwd_tuned, args, meta, config, rows, slices,
                      shape=shape, dtypes=(q.dtype, q_scale.dtype), proxy_args=proxy_args)
