"""Pieces shared by every forward kernel: which key blocks a query block visits, one online-softmax step,
and the final normalisation.

Scores are kept in log2 units (score * softmax_scale * log2(e)) so that the exponentials are exp2.
A query block visits two key ranges: `[0, full_end)` where every row of the block sees every key
(no mask is evaluated there), and `[full_end, end)`, the blocks that cut the causal diagonal or the
key tail, where the mask is applied. Only those few blocks pay for masking. With a local window (LOCAL) a query
block visits only the key blocks its rows' windows touch (local_key_range), each masked; with SOFTCAP the scaled
scores are capped (softcap * tanh(s / softcap)) before the softmax.
"""
import triton
import triton.language as tl

LN2 = tl.constexpr(0.6931471805599453)


@triton.jit
def program_tile(seqlen_q, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr):
    """(query block, batch * head) of this program in the flattened grid of tuning.forward_grid: program i is
    block i % m_tiles of slice i // m_tiles (the blocks of one head side by side, so its K/V stay in L2);
    causal grids run each head's last (heaviest) blocks first."""
    pid = tl.program_id(0)
    m_tiles = tl.cdiv(seqlen_q, BLOCK_M)
    bh = pid // m_tiles
    start_m = pid % m_tiles
    if CAUSAL:
        start_m = m_tiles - 1 - start_m
    return start_m, bh


@triton.jit
def key_ranges(start_m, seqlen_q, seqlen_k, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """Return (full_end, end): blocks below full_end need no mask, blocks in [full_end, end) do."""
    if CAUSAL:
        # bottom-right alignment: query row i sees keys j <= i + (seqlen_k - seqlen_q)
        diagonal = seqlen_k - seqlen_q
        seen_by_all_rows = tl.minimum(seqlen_k, start_m * BLOCK_M + diagonal + 1)
        end = tl.minimum(seqlen_k, (start_m + 1) * BLOCK_M + diagonal)
    else:
        seen_by_all_rows = seqlen_k
        end = seqlen_k
    full_end = tl.maximum(seen_by_all_rows, 0) // BLOCK_N * BLOCK_N
    return full_end, end


@triton.jit
def local_key_range(start_m, seqlen_q, seqlen_k, window_left, window_right, BLOCK_M: tl.constexpr,
                    BLOCK_N: tl.constexpr):
    """(begin, end) of the keys a query block's rows see under a window: row i sees i + Sk - Sq - left ..
    i + Sk - Sq + right (window_left / window_right >= 0 here; the host turns unbounded sides into Sq + Sk); begin
    rounded down to a key block, so that the blocks outside every row's window are never visited."""
    diagonal = seqlen_k - seqlen_q
    first = tl.maximum(start_m * BLOCK_M + diagonal - window_left, 0)
    last = tl.minimum((start_m + 1) * BLOCK_M - 1 + diagonal + window_right, seqlen_k - 1)
    return first // BLOCK_N * BLOCK_N, tl.maximum(last + 1, 0)


@triton.jit
def capped(qk, softcap_in, softcap_out):
    """softcap * tanh(s / softcap) of raw scores qk in log2 units: softcap_in = scale / softcap and softcap_out =
    softcap * log2(e) (tanh through exp2, which the interpreter and every arch have)."""
    x = qk * softcap_in
    return (1.0 - 2.0 / (tl.math.exp2(x * 2.8853900817779268) + 1.0)) * softcap_out  # 2.885...: 2 log2(e)


@triton.jit
def start_rows(start_m, seqlen_q, seqlen_k, CAUSAL: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """A query block's empty running state (max, sum, accumulator), the causal diagonal offset, and
    its two key ranges (see key_ranges)."""
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], tl.float32)
    full_end, end = key_ranges(start_m, seqlen_q, seqlen_k, CAUSAL, BLOCK_M, BLOCK_N)
    return m_i, l_i, acc, seqlen_k - seqlen_q, full_end, end


@triton.jit
def softmax_step(qk, m_i, l_i, qk_scale, offs_m, offs_n, seqlen_k, diagonal,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, LOCAL: tl.constexpr = False, window_left=0,
                 window_right=0):
    """One online-softmax update for a (BLOCK_M, BLOCK_N) tile of raw scores (already capped under SOFTCAP, with
    qk_scale 1 then). LOCAL: keys outside each row's window are masked too (window sides >= 0, as
    local_key_range).

    Returns p (unnormalised probabilities, fp32), alpha (rescale factor for the accumulator) and the
    new running max and sum."""
    if MASKED:
        visible = offs_n[None, :] < seqlen_k
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= offs_m[:, None] + diagonal)
        if LOCAL:
            visible = visible & (offs_n[None, :] >= offs_m[:, None] + diagonal - window_left) & (
                offs_n[None, :] <= offs_m[:, None] + diagonal + window_right)
        qk = tl.where(visible, qk * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        # a row that has seen no key yet keeps max -inf; subtracting 0 makes its p and alpha 0, not NaN
        m_shift = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(qk - m_shift[:, None])
        alpha = tl.math.exp2(m_i - m_shift)
    else:
        # qk_scale > 0 (checked on the host), so scaling commutes with the max
        m_new = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
        p = tl.math.exp2(qk * qk_scale - m_new[:, None])
        alpha = tl.math.exp2(m_i - m_new)
    l_new = l_i * alpha + tl.sum(p, 1)
    return p, alpha, m_new, l_new


@triton.jit
def finish_rows(acc, m_i, l_i):
    """Normalise the accumulator and form the natural-log LSE; rows that saw no key give 0 and -inf."""
    empty = l_i == 0.0
    safe_l = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / safe_l)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(safe_l)) * LN2)
    return out, lse


@triton.jit
def round_to_e4m3_grid(p):
    """Round p in [0, 1] to the nearest e4m3 value (ties to even), staying in fp32.

    Used only under TRITON_INTERPRET=1: Triton 3.6's interpreter casts fp32 to fp8 with a wrong
    rounding (no carry into the exponent, truncated subnormals). After this rounding the value is exact
    in e4m3, so the interpreter's cast no longer rounds. The GPU's cast (cvt.rn) needs no help."""
    bits = p.to(tl.uint32, bitcast=True)
    # keep 3 mantissa bits: add half an ulp minus one, plus the lowest kept bit (ties to even)
    bits = (bits + 0x7FFFF + ((bits >> 20) & 1)) & 0xFFF00000
    normal = bits.to(tl.float32, bitcast=True)
    # below 2**-6 e4m3 is subnormal with a fixed step of 2**-9; adding 2**14 rounds to that step
    subnormal = (p + 16384.0) - 16384.0
    return tl.where(p < 0.015625, subnormal, normal)
