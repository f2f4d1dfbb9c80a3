"""The one definition of the quantized layouts (fp8, MXFP8, NVFP4) used by every backend and the oracle.

Pure torch ops, device-agnostic: quantizing the same tensor on CPU and GPU gives bit-identical
containers. Every value is converted to float32 first (exact for bf16/fp16, one rounding for fp64)
and every scale computation below is done in float32, in the order written, so that kernels can
mirror it bit for bit. Every division is a true IEEE division (never a multiply by a rounded
reciprocal such as 1/448 or 1/6); NaN payloads are not part of the contract, only NaN-ness.

Elements
--------
* e4m3 is OCP e4m3fn (``torch.float8_e4m3fn``): max 448, no Inf, one NaN pattern per sign.
  Rounding is round-to-nearest-even. Values are clamped to +-448 before the cast (saturating),
  so +-Inf becomes +-448; NaN stays NaN. (``round_to_e4m3``)
* e2m1 (FP4): codes 0..7 are the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6; bit 3 is the sign, taken
  from ``signbit`` (so -0.1 encodes as -0, code 8). Round-to-nearest-even on the code, i.e. ties
  go to the even code: 0.25->0, 0.75->1, 1.25->1, 1.75->2, 2.5->2, 3.5->4, 5->4. Magnitudes above
  6 (and Inf) saturate to 6. NaN encodes as code 0 (e2m1 has no NaN; the quantizers below keep NaN
  in the scale instead). Two codes per byte: ``byte = code[2i] | code[2i+1] << 4`` (low nibble is
  the even element). (``e2m1_encode``, ``e2m1_decode``, ``pack_e2m1``, ``unpack_e2m1``)

fp8 (FA3-style descales)
------------------------
Input is 4-D (B, H, S, D). ``descale = amax / 448`` per (B, H) (granularity "head") or over the
whole tensor (granularity "tensor", stored repeated as shape (B, H)). amax is taken over finite
values only, so one Inf or NaN does not poison its head. If ``amax / 448`` is 0 (all-zero head, or
amax so small that the division underflows) the descale is 1. ``data = e4m3(x / descale)``, and
``x ~= data.float() * descale[..., None, None]``.

MXFP8 (OCP MX v1.0)
-------------------
Blocks of 32 along the last stored dim, e4m3 elements, one E8M0 scale per block (``e8m0_encode``):
* shared exponent ``e = floor(log2(amax_block)) - 8`` (8 = exponent of e4m3's largest power of two,
  256; the spec's "floor" rule, not round-up). floor(log2) is computed exactly from the float's
  exponent with ``torch.frexp``; a float ``log2`` rounds up just below large powers of two
  (log2(2**20 - 1 ulp) == 20.0 in fp32).
* ``e`` is clamped to [-127, 127]; code = e + 127; value 2**(code - 127).
* a block whose amax is 0 or below 2**-127 gets code 0, which decodes to exactly 2**-127 (an fp32
  subnormal: a kernel that builds the scale as ``code << 23`` gets 0 there and must special-case it).
* a block with a NaN or +-Inf gets code 0xFF (NaN); its elements are stored as 0 and the whole
  block dequantizes to NaN. (torchao gives Inf blocks a finite code instead; we keep them visible.)
* ``elements = e4m3(x * 2**-e)``, with 2**-e built exactly from bits. Because of the floor rule
  the scaled amax lies in [256, 512): values above 448 saturate to 448 (up to 12.5% error on the
  block's largest elements, as the spec accepts).

NVFP4
-----
Blocks of 16 along the last stored dim, e2m1 elements, e4m3 block scale, fp32 tensor scale:
* ``tensor_scale = amax_tensor / (6 * 448)`` over finite values; 1.0 if that is 0.
* ``block_scale = e4m3(amax_block / (6 * tensor_scale))`` (RNE, saturating). A block with a NaN
  or +-Inf gets block scale NaN (elements stored as 0), so it dequantizes to NaN.
* ``elements = e2m1(x / (float(block_scale) * tensor_scale))``; a zero block scale (zero block, or
  a scale that underflows e4m3) gives zero elements.
* value = e2m1 * block_scale * tensor_scale.

Layout and padding
------------------
Blocks run along the last *stored* dim, which is zero-padded to a multiple of the block (zeros do
not change any amax). ``QuantTensor.shape`` is the stored shape before padding; ``transposed``
says the stored tensor is ``x.transpose(-1, -2)`` (V is stored as (B, H, D, Sk) so that its blocks
run along the key axis, the reduction axis of P @ V). ``dequantize`` removes the padding and undoes
the transpose.

P inside the kernels (``quantize_p``)
-------------------------------------
fp8: ``e4m3(p)`` with no scale (P is in [0, 1]). mxfp8: MX blocks of 32 along the last dim, as
above. nvfp4: blocks of 16 along the last dim, tensor scale 1.0, block scale ``e4m3(amax / 6)``.
Returns the dequantized float32 values, same shape as p.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
E4M3_EMAX = 8  # exponent of the largest power of two in e4m3 (256)
E8M0_BIAS = 127
E8M0_NAN = 0xFF
MX_BLOCK = 32
NVFP4_BLOCK = 16
QUANTIZED_FORMATS = ("fp8", "mxfp8", "nvfp4")
GRANULARITIES = ("head", "tensor")

_E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


@dataclass(frozen=True)
class FormatSpec:
    name: str
    quantized: bool
    element: str  # element encoding
    block: int  # elements per scale along the blocked axis; 0 = no blocks
    scale: str  # what the scale is
    torch_dtype: torch.dtype | None  # the tensor dtype of a 16-bit format, None for quantized ones


FORMATS: dict[str, FormatSpec] = {
    "bf16": FormatSpec("bf16", False, "bf16", 0, "none", torch.bfloat16),
    "fp16": FormatSpec("fp16", False, "fp16", 0, "none", torch.float16),
    "fp8": FormatSpec("fp8", True, "e4m3", 0, "fp32 per (batch, head) or per tensor", None),
    "mxfp8": FormatSpec("mxfp8", True, "e4m3", MX_BLOCK, "e8m0 per block", None),
    "nvfp4": FormatSpec("nvfp4", True, "e2m1", NVFP4_BLOCK, "e4m3 per block x fp32 per tensor", None),
}


# ---------------------------------------------------------------- element and scale codecs


def round_to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """float -> torch.float8_e4m3fn, RNE, saturating at +-448 (Inf too); NaN stays NaN."""
    return x.float().clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """float -> uint8 e2m1 codes (0..15), ties to the even code, saturating at +-6, NaN -> 0."""
    a = x.float().abs()
    # One comparison per midpoint between neighbouring magnitudes; '>' where the lower code is
    # even (the tie stays down), '>=' where the upper code is even (the tie goes up).
    code = (
        (a > 0.25).to(torch.uint8)
        + (a >= 0.75)
        + (a > 1.25)
        + (a >= 1.75)
        + (a > 2.5)
        + (a >= 3.5)
        + (a > 5.0)
    ).to(torch.uint8)
    code = code | (torch.signbit(x).to(torch.uint8) << 3)
    return torch.where(torch.isnan(x), torch.zeros_like(code), code)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 e2m1 codes (0..15) -> float32."""
    table = torch.tensor(_E2M1_MAGNITUDES, dtype=torch.float32, device=codes.device)
    magnitude = table[(codes & 0x7).long()]
    return torch.where((codes & 0x8) != 0, -magnitude, magnitude)


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """(..., 2n) uint8 codes -> (..., n) bytes, even element in the low nibble."""
    if codes.shape[-1] % 2:
        raise ValueError(f"pack_e2m1 needs an even last dim, got {codes.shape[-1]}")
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """(..., n) bytes -> (..., 2n) uint8 codes."""
    low, high = packed & 0xF, packed >> 4
    return torch.stack((low, high), dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])


def _exact_pow2(e: torch.Tensor) -> torch.Tensor:
    """int32 exponents in [-127, 127] -> float32 2**e, built from the bit pattern (exact)."""
    normal_bits = (e.clamp(min=-126) + 127) << 23
    subnormal_bits = torch.full_like(e, 1 << 22)  # 2**-127
    return torch.where(e == -127, subnormal_bits, normal_bits).view(torch.float32)


def e8m0_encode(block_amax: torch.Tensor) -> torch.Tensor:
    """MX shared scale of blocks with this amax -> uint8 E8M0 codes (rule in the module docstring)."""
    amax = block_amax.float()
    # frexp: amax = m * 2**k with m in [0.5, 1), so floor(log2(amax)) = k - 1, exactly.
    _, k = torch.frexp(amax)
    e = torch.where(amax > 0, k - 1 - E4M3_EMAX, torch.full_like(k, -E8M0_BIAS))
    code = (e.clamp(-E8M0_BIAS, E8M0_BIAS) + E8M0_BIAS).to(torch.uint8)
    return torch.where(torch.isfinite(amax), code, torch.full_like(code, E8M0_NAN))


def e8m0_decode(codes: torch.Tensor) -> torch.Tensor:
    """uint8 E8M0 codes -> float32 2**(code - 127); 0xFF -> NaN."""
    c = codes.to(torch.int32)
    value = _exact_pow2((c - E8M0_BIAS).clamp(max=E8M0_BIAS))
    return torch.where(c == E8M0_NAN, torch.full_like(value, float("nan")), value)


# ---------------------------------------------------------------- block quantizers (last dim)


def _finite_abs(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isfinite(x), x.abs(), torch.zeros_like(x))


def _divide(x: torch.Tensor, constant: float) -> torch.Tensor:
    # torch on CUDA turns `tensor / python_scalar` into a multiply by the rounded reciprocal, which
    # can differ from the CPU's true division by one ulp; a same-device divisor keeps true division.
    return x / torch.tensor(constant, dtype=x.dtype, device=x.device)


def _scale_or_one(scale: torch.Tensor) -> torch.Tensor:
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def _pad_last(x: torch.Tensor, block: int) -> torch.Tensor:
    pad = -x.shape[-1] % block
    return torch.nn.functional.pad(x, (0, pad)) if pad else x


def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    return x.reshape(*x.shape[:-1], x.shape[-1] // block, block)


def _mx_quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (..., n*32) -> e4m3 data (..., n*32), E8M0 codes (..., n)."""
    xb = _blocks(x, MX_BLOCK)
    codes = e8m0_encode(xb.abs().amax(dim=-1))
    usable = codes != E8M0_NAN
    e = (codes.to(torch.int32) - E8M0_BIAS).clamp(max=E8M0_BIAS)  # NaN blocks are zeroed below
    scaled = xb * _exact_pow2(-e)[..., None]
    scaled = torch.where(usable[..., None], scaled, torch.zeros_like(scaled))
    return round_to_e4m3(scaled).reshape(x.shape), codes


def _mx_dequantize(data: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    values = _blocks(data.float(), MX_BLOCK) * e8m0_decode(codes)[..., None]
    return values.reshape(data.shape)


def _nvfp4_quantize(x: torch.Tensor, tensor_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 (..., n*16) -> packed bytes (..., n*8), e4m3 block scales (..., n)."""
    xb = _blocks(x, NVFP4_BLOCK)
    amax = xb.abs().amax(dim=-1)
    block_scale = round_to_e4m3(amax / (E2M1_MAX * tensor_scale))
    # round_to_e4m3 would saturate an Inf amax to 448; a non-finite block must stay visible.
    block_scale = torch.where(torch.isfinite(amax), block_scale, torch.full_like(block_scale, float("nan")))
    denominator = block_scale.float() * tensor_scale
    usable = (denominator != 0) & torch.isfinite(denominator)
    scaled = xb / torch.where(usable, denominator, torch.ones_like(denominator))[..., None]
    scaled = torch.where(usable[..., None], scaled, torch.zeros_like(scaled))
    return pack_e2m1(e2m1_encode(scaled).reshape(x.shape)), block_scale


def _nvfp4_dequantize(packed: torch.Tensor, block_scale: torch.Tensor, tensor_scale: torch.Tensor) -> torch.Tensor:
    elements = e2m1_decode(unpack_e2m1(packed))
    scale = block_scale.float() * tensor_scale
    return (_blocks(elements, NVFP4_BLOCK) * scale[..., None]).reshape(elements.shape)


# ---------------------------------------------------------------- container


@dataclass(frozen=True, eq=False)
class QuantTensor:
    """A quantized tensor in the attention layout; see the module docstring for each field's meaning."""

    fmt: str
    data: torch.Tensor
    scale: torch.Tensor
    tensor_scale: torch.Tensor | None
    shape: tuple
    transposed: bool
    block: int

    @property
    def logical_shape(self) -> tuple:
        """(B, H, S, D): the shape of the tensor that was quantized."""
        if self.transposed:
            return (*self.shape[:-2], self.shape[-1], self.shape[-2])
        return tuple(self.shape)

    def to(self, device) -> QuantTensor:
        tensor_scale = None if self.tensor_scale is None else self.tensor_scale.to(device)
        return QuantTensor(self.fmt, self.data.to(device), self.scale.to(device), tensor_scale,
                           self.shape, self.transposed, self.block)

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """Back to the logical (untransposed, unpadded) tensor."""
        if self.fmt == "fp8":
            stored = self.data.float() * self.scale[..., None, None]
        elif self.fmt == "mxfp8":
            stored = _mx_dequantize(self.data, self.scale)
        else:
            stored = _nvfp4_dequantize(self.data, self.scale, self.tensor_scale)
        stored = stored[..., : self.shape[-1]]
        if self.transposed:
            stored = stored.transpose(-1, -2)
        return stored.contiguous().to(dtype)


# ---------------------------------------------------------------- public quantizers


def is_quantized(x) -> bool:
    return isinstance(x, QuantTensor)


def _check_fmt(fmt: str) -> None:
    if fmt not in QUANTIZED_FORMATS:
        raise ValueError(f"unknown quantized format {fmt!r}; valid: {', '.join(QUANTIZED_FORMATS)}")


def _check_floating(x, what: str) -> None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point():
        kind = x.dtype if isinstance(x, torch.Tensor) else type(x).__name__
        raise TypeError(f"{what} must be a floating-point torch.Tensor, got {kind}")
    if x.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz):
        raise TypeError(f"{what} is already fp8 ({x.dtype}); pass the high-precision tensor")
    if x.numel() == 0:
        raise ValueError(f"{what} is empty (shape {tuple(x.shape)})")


def quantize(x: torch.Tensor, fmt: str, *, transpose: bool = False, granularity: str = "head") -> QuantTensor:
    """Quantize a (B, H, S, D) tensor; blocks run along D, or along S when transpose=True."""
    _check_fmt(fmt)
    _check_floating(x, "x")
    if x.dim() != 4:
        raise ValueError(f"x must be 4-D (B, H, S, D), got shape {tuple(x.shape)}")
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    if fmt != "fp8" and granularity != "head":
        raise ValueError(f"granularity applies to fp8 only; {fmt} scales per block")
    stored = x.float()
    if transpose:
        stored = stored.transpose(-1, -2)
    stored = stored.contiguous()
    shape = tuple(stored.shape)

    if fmt == "fp8":
        amax = _finite_abs(stored)
        amax = amax.amax(dim=(-2, -1)) if granularity == "head" else amax.amax().expand(shape[:2])
        descale = _scale_or_one(_divide(amax, E4M3_MAX)).contiguous()
        data = round_to_e4m3(stored / descale[..., None, None])
        return QuantTensor(fmt, data, descale, None, shape, transpose, 0)

    block = FORMATS[fmt].block
    padded = _pad_last(stored, block)
    if fmt == "mxfp8":
        data, codes = _mx_quantize(padded)
        return QuantTensor(fmt, data, codes, None, shape, transpose, block)
    tensor_scale = _scale_or_one(_divide(_finite_abs(stored).amax(), E2M1_MAX * E4M3_MAX))
    data, block_scale = _nvfp4_quantize(padded, tensor_scale)
    return QuantTensor(fmt, data, block_scale, tensor_scale, shape, transpose, block)


def quantize_attention_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, fmt: str, *,
                              granularity: str = "head") -> tuple[QuantTensor, QuantTensor, QuantTensor]:
    """Q and K blocked along head_dim; V stored transposed (B, H, D, Sk), blocked along the keys."""
    return (
        quantize(q, fmt, granularity=granularity),
        quantize(k, fmt, granularity=granularity),
        quantize(v, fmt, transpose=True, granularity=granularity),
    )


def quantize_p(p: torch.Tensor, fmt: str) -> torch.Tensor:
    """fp32 emulation of the in-kernel quantization of P (last dim = key axis); dequantized values."""
    _check_fmt(fmt)
    _check_floating(p, "p")
    if p.dim() < 1:
        raise ValueError("p must have at least one dim (the key axis)")
    x = p.float()
    if fmt == "fp8":
        return round_to_e4m3(x).float()
    n = x.shape[-1]
    padded = _pad_last(x, FORMATS[fmt].block)
    if fmt == "mxfp8":
        values = _mx_dequantize(*_mx_quantize(padded))
    else:
        one = torch.ones((), dtype=torch.float32, device=x.device)
        values = _nvfp4_dequantize(*_nvfp4_quantize(padded, one), one)
    return values[..., :n].contiguous()
