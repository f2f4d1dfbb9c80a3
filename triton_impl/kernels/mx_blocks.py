"""In-kernel codecs of the block-scaled formats (MXFP8, NVFP4), mirroring compare.formats bit for bit.

* Stored tensors (Q, K blocked along head_dim; V^T blocked along the keys) are read as tiles of
  bytes and of block scales in their stored shapes; nibbles are split with tl.join and scales
  widened over their blocks with a broadcast (`load_blocked_tile`).
* P (0 <= p <= 1, key axis last) is quantized in blocks of 32 (mxfp8) or 16 (nvfp4) keys of the
  tile, which lines up with quantize_p's blocks because key tiles start at multiples of BLOCK_N and
  BLOCK_N is a multiple of the block. The rules are those of compare.formats:
  mxfp8: e = floor(log2(amax)) - 8 (from the exponent bits, exact), clamped at -127; elements
  e4m3(p * 2**-e), RNE, saturating at 448. nvfp4: block scale e4m3(amax / 6) (true division),
  elements e2m1(p / scale) with ties to the even code, 0 where the scale is 0; tensor scale 1.
* `EMULATED` rounding replaces the fp32 -> e4m3 cast by arithmetic on the fp32 bits: Triton 3.6's
  interpreter rounds that cast wrongly. The GPU uses the hardware cast (cvt.rn, same result).
"""
import triton
import triton.language as tl
from triton.language.extra import libdevice

from triton_impl.kernels.common import round_to_e4m3_grid

E4M3_MAX = tl.constexpr(448.0)
# Under TRITON_INTERPRET=1: one MX block per key tile, so small test shapes span several key tiles.
INTERPRETER_CONFIG = dict(BLOCK_M=16, BLOCK_N=32)


@triton.jit
def exact_pow2(e):
    """int32 exponents in [-127, 127] -> fp32 2**e from the bit pattern; 2**-127 is a subnormal."""
    bits = tl.where(e == -127, 1 << 22, (e + 127) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def e8m0_value(code):
    """uint8 E8M0 codes -> fp32 2**(code - 127); 0xFF is NaN (formats.e8m0_decode)."""
    c = code.to(tl.int32)
    return tl.where(c == 255, float("nan"), exact_pow2(c - 127))


@triton.jit
def e2m1_value(code):
    """e2m1 codes in the low 4 bits -> fp32: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign."""
    c = code.to(tl.int32)
    exponent = (c >> 1) & 3
    mantissa = c & 1
    normal = (((exponent + 126) << 23) | (mantissa << 22)).to(tl.float32, bitcast=True)
    magnitude = tl.where(exponent == 0, mantissa.to(tl.float32) * 0.5, normal)
    return tl.where((c & 8) != 0, -magnitude, magnitude)


@triton.jit
def round_to_e4m3(x, EMULATED: tl.constexpr):
    """Non-negative fp32 -> nearest e4m3 value as fp32 (RNE, saturating at 448)."""
    x = tl.minimum(x, E4M3_MAX)
    if EMULATED:
        # the bit rounding in round_to_e4m3_grid holds for any value up to 448, not only [0, 1]
        return round_to_e4m3_grid(x)
    else:
        return x.to(tl.float8e4nv).to(tl.float32)


@triton.jit
def scaled_scores(qk, qk_scale, EMULATED: tl.constexpr):
    """qk * qk_scale rounded once, never fused into the exponent's subtraction.

    The row maximum of P must come out as exactly 1. softmax_step's fast path computes
    exp2(qk * scale - max) and the compiler contracts that into one FMA whose unrounded product
    differs from the rounded max by up to half an ulp: P's largest element becomes 1 - 2**-24
    about half the time, and the MX floor rule then gives its block the exponent below, where
    1 - 2**-24 scales to just under 512 and saturates to 448: the row's dominant weight drops to
    0.875. Pre-scaling with mul.rn (which PTX never contracts) and passing scale 1 to softmax_step
    makes the subtraction exact for the maximum. The interpreter (numpy) never contracts."""
    if EMULATED:
        return qk * qk_scale
    else:
        return libdevice.mul_rn(qk, tl.zeros_like(qk) + qk_scale)


@triton.jit
def round_to_e2m1(x):
    """Non-negative fp32 -> nearest e2m1 magnitude, ties to the even code, saturating at 6
    (the thresholds of formats.e2m1_encode: '>' where the lower code is even, '>=' where the upper is)."""
    return tl.where(x > 5.0, 6.0, tl.where(x >= 3.5, 4.0, tl.where(x > 2.5, 3.0, tl.where(
        x >= 1.75, 2.0, tl.where(x > 1.25, 1.5, tl.where(x >= 0.75, 1.0, tl.where(x > 0.25, 0.5, 0.0)))))))


@triton.jit
def mx_exponent(amax):
    """MX shared exponent floor(log2(amax)) - 8, clamped at -127, for 0 <= amax <= 1.

    The biased exponent field is floor(log2) + 127 for normal floats; zero and subnormal amax give
    -135 and clamp to -127 like formats.e8m0_encode. amax <= 1 keeps e <= -8, so no upper clamp."""
    return tl.maximum(((amax.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127 - 8, -127)


@triton.jit
def quantize_p_mxfp8(p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EMULATED: tl.constexpr):
    """formats.quantize_p(p, "mxfp8") of a (BLOCK_M, BLOCK_N) tile: the dequantized fp32 values."""
    blocks = tl.reshape(p, (BLOCK_M, BLOCK_N // 32, 32))
    e = mx_exponent(tl.max(blocks, axis=2))
    elements = round_to_e4m3(blocks * exact_pow2(-e)[:, :, None], EMULATED)
    return tl.reshape(elements * exact_pow2(e)[:, :, None], (BLOCK_M, BLOCK_N))


@triton.jit
def quantize_p_mxfp8_codes(p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EMULATED: tl.constexpr):
    """The same quantization as stored operands for tl.dot_scaled: e4m3 elements (BLOCK_M, BLOCK_N)
    and uint8 E8M0 codes (BLOCK_M, BLOCK_N // 32)."""
    blocks = tl.reshape(p, (BLOCK_M, BLOCK_N // 32, 32))
    e = mx_exponent(tl.max(blocks, axis=2))
    scaled = blocks * exact_pow2(-e)[:, :, None]
    if EMULATED:  # on the e4m3 grid already, so the interpreter's cast below cannot round wrongly
        scaled = round_to_e4m3(scaled, True)
    else:
        scaled = tl.minimum(scaled, E4M3_MAX)
    return tl.reshape(scaled, (BLOCK_M, BLOCK_N)).to(tl.float8e4nv), (e + 127).to(tl.uint8)


@triton.jit
def quantize_p_nvfp4(p, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EMULATED: tl.constexpr):
    """formats.quantize_p(p, "nvfp4") of a (BLOCK_M, BLOCK_N) tile: the dequantized fp32 values."""
    blocks = tl.reshape(p, (BLOCK_M, BLOCK_N // 16, 16))
    scale = round_to_e4m3(tl.math.div_rn(tl.max(blocks, axis=2), 6.0), EMULATED)
    usable = scale != 0.0
    divisor = tl.broadcast_to(tl.where(usable, scale, 1.0)[:, :, None], (BLOCK_M, BLOCK_N // 16, 16))
    elements = tl.where(usable[:, :, None], round_to_e2m1(tl.math.div_rn(blocks, divisor)), 0.0)
    return tl.reshape(elements * scale[:, :, None], (BLOCK_M, BLOCK_N))


@triton.jit
def _widen_blocks(x, ROWS: tl.constexpr, COLS: tl.constexpr, BLOCK: tl.constexpr):
    """(ROWS, COLS // BLOCK) -> (ROWS, COLS), each value repeated over its block."""
    return tl.reshape(tl.broadcast_to(x[:, :, None], (ROWS, COLS // BLOCK, BLOCK)), (ROWS, COLS))


@triton.jit
def load_blocked_tile(data, scales, rows, col_start, row_len, row_limit, col_limit, ROWS: tl.constexpr,
                      COLS: tl.constexpr, FORMAT: tl.constexpr, MASKED: tl.constexpr):
    """Dequantized fp32 values of the (ROWS, COLS) tile at rows `rows`, columns col_start + [0, COLS) of a
    row-major block-scaled tensor with row_len (padded) elements per row, blocks along the row
    (col_start and COLS multiples of the block). MASKED: elements at rows >= row_limit or columns >=
    col_limit read as 0. nvfp4's tensor scale is not applied."""
    BLOCK: tl.constexpr = 32 if FORMAT == "mxfp8" else 16
    PACK: tl.constexpr = 1 if FORMAT == "mxfp8" else 2
    offs_byte = col_start // PACK + tl.arange(0, COLS // PACK)
    offs_blk = col_start // BLOCK + tl.arange(0, COLS // BLOCK)
    data_ptrs = data + rows[:, None] * (row_len // PACK) + offs_byte[None, :]
    scale_ptrs = scales + rows[:, None] * (row_len // BLOCK) + offs_blk[None, :]
    if MASKED:
        row_ok = (rows < row_limit)[:, None]
        # fp8 and uint8 zero bits both read as 0; a block that starts before col_limit is valid
        raw = tl.load(data_ptrs, mask=row_ok & (offs_byte * PACK < col_limit)[None, :],
                      other=0.0 if FORMAT == "mxfp8" else 0)
        scale = tl.load(scale_ptrs, mask=row_ok & (offs_blk * BLOCK < col_limit)[None, :],
                        other=0 if FORMAT == "mxfp8" else 0.0)
    else:
        raw = tl.load(data_ptrs)
        scale = tl.load(scale_ptrs)
    if FORMAT == "mxfp8":
        return raw.to(tl.float32) * _widen_blocks(e8m0_value(scale), ROWS, COLS, BLOCK)
    else:
        # two codes per byte, the even element in the low nibble
        codes = tl.reshape(tl.join(raw & 0xF, raw >> 4), (ROWS, COLS))
        return e2m1_value(codes) * _widen_blocks(scale.to(tl.float32), ROWS, COLS, BLOCK)
