"""compare.formats against hand-computed vectors, error bounds, torchao's MX quantizer and the GPU."""

import math
import zlib

import pytest
import torch

from compare.formats import (
    FORMATS,
    QuantTensor,
    e2m1_decode,
    e2m1_encode,
    e8m0_decode,
    e8m0_encode,
    is_quantized,
    pack_e2m1,
    quantize,
    quantize_attention_inputs,
    quantize_p,
    round_to_e4m3,
    unpack_e2m1,
)

NAN, INF = float("nan"), float("inf")
QUANTIZED = ("fp8", "mxfp8", "nvfp4")


@pytest.fixture(autouse=True)
def fixed_seed():
    torch.manual_seed(0)


def row(values):
    """A (1, 1, 1, n) float32 tensor: one stored row, blocks along the last dim."""
    return torch.tensor(values, dtype=torch.float32).reshape(1, 1, 1, -1)


def below(x):
    return torch.nextafter(torch.tensor(x, dtype=torch.float32), torch.tensor(0.0)).item()


# ---------------------------------------------------------------- e2m1


def test_e2m1_rounds_ties_to_even_and_saturates():
    x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, INF, 0.26, 0.74, 5.01])
    expected = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 0.5, 0.5, 6.0])
    assert torch.equal(e2m1_decode(e2m1_encode(x)), expected)
    assert torch.equal(e2m1_decode(e2m1_encode(-x)), -expected)


def test_e2m1_codes_and_signs():
    grid = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])
    assert torch.equal(e2m1_encode(grid), torch.arange(8, dtype=torch.uint8))
    assert torch.equal(e2m1_encode(-grid), torch.arange(8, 16, dtype=torch.uint8))
    assert torch.equal(e2m1_decode(torch.arange(16, dtype=torch.uint8)), torch.cat((grid, -grid)))
    # -0.1 rounds to -0 (sign kept); NaN has no e2m1 code and encodes as +0.
    assert e2m1_encode(torch.tensor([-0.1, NAN])).tolist() == [8, 0]


def test_e2m1_packing_puts_the_even_element_in_the_low_nibble():
    codes = torch.tensor([[1, 2, 15, 8, 7, 0]], dtype=torch.uint8)
    packed = pack_e2m1(codes)
    assert packed.tolist() == [[0x21, 0x8F, 0x07]]
    assert torch.equal(unpack_e2m1(packed), codes)
    with pytest.raises(ValueError, match="even"):
        pack_e2m1(codes[:, :5])


# ---------------------------------------------------------------- e4m3 and e8m0


def test_e4m3_rounds_to_nearest_even_and_saturates():
    x = torch.tensor([1.0625, 1.1875, 448.0, 449.0, 464.0, 1e6, INF, -INF, -500.0, 2.0**-10, 3 * 2.0**-10])
    expected = [1.0, 1.25, 448.0, 448.0, 448.0, 448.0, 448.0, -448.0, -448.0, 0.0, 2.0**-8]
    assert round_to_e4m3(x).dtype == torch.float8_e4m3fn
    assert round_to_e4m3(x).float().tolist() == expected
    assert math.isnan(round_to_e4m3(torch.tensor([NAN])).float().item())


def test_e8m0_exponent_exact_at_and_just_below_powers_of_two():
    # floor(log2(amax)) - 8, computed from the float's bits: at 2**20 - 1 ulp a float32 log2
    # already returns 20.0, which would give one exponent too many.
    for k in (-3, 0, 1, 8, 9, 20, 100):
        assert e8m0_encode(torch.tensor([2.0**k])).item() == k - 8 + 127
        assert e8m0_encode(torch.tensor([below(2.0**k)])).item() == k - 9 + 127
    assert e8m0_encode(torch.tensor([448.0, 3.0, 0.6])).tolist() == [127, 120, 118]


def test_e8m0_clamps_and_marks_zero_nan_inf():
    amax = torch.tensor([0.0, 1e-40, 2.0**-119, below(2.0**-119), 3e38, NAN, INF])
    assert e8m0_encode(amax).tolist() == [0, 0, 0, 0, 246, 255, 255]
    assert e8m0_encode(torch.tensor([2.0**-118])).item() == 1
    decoded = e8m0_decode(torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8))
    assert decoded[:5].tolist() == [math.ldexp(1.0, -127), 2.0**-126, 1.0, 2.0, 2.0**127]
    assert math.isnan(decoded[5].item())


# ---------------------------------------------------------------- MXFP8


def test_mxfp8_hand_vector():
    x = torch.zeros(32)
    x[:4] = torch.tensor([3.0, 0.1, -1.0, 2.0**-10])
    qt = quantize(row(x.tolist()), "mxfp8")
    # amax 3 -> floor(log2 3) = 1 -> e = -7 -> code 120; elements scaled by 2**7.
    assert qt.scale.flatten().tolist() == [120]
    assert qt.data.float().flatten()[:4].tolist() == [384.0, 13.0, -128.0, 0.125]
    assert qt.dequantize().flatten()[:4].tolist() == [3.0, 13 / 128, -1.0, 2.0**-10]


def test_mxfp8_saturates_just_below_a_power_of_two():
    x = torch.ones(32)
    x[0] = below(512.0)
    x[1] = 480.0
    qt = quantize(row(x.tolist()), "mxfp8")
    assert qt.scale.item() == 127  # floor rule: exponent 0, scaled amax ~512 saturates
    assert qt.dequantize().flatten()[:3].tolist() == [448.0, 448.0, 1.0]
    x[0] = 512.0
    assert quantize(row(x.tolist()), "mxfp8").scale.item() == 128


def test_mxfp8_zero_nan_and_inf_blocks():
    x = torch.randn(4 * 32)
    x[:32] = 0.0
    x[40] = NAN
    x[70] = -INF
    qt = quantize(row(x.tolist()), "mxfp8")
    assert qt.scale.flatten().tolist()[:3] == [0, 255, 255]
    out = qt.dequantize().flatten()
    assert torch.equal(out[:32], torch.zeros(32))
    assert torch.isnan(out[32:96]).all()
    assert torch.isfinite(out[96:]).all()
    assert torch.equal(qt.data.float().flatten()[32:96], torch.zeros(64))


# ---------------------------------------------------------------- NVFP4


def test_nvfp4_hand_vector():
    # Block 0 has the tensor amax 2688 = 6 * 448, so tensor_scale = 1 and block scale 448.
    block0 = [448.0 * v for v in (6, 3, 1.25, -0.7, 0.25, -5, 2.5, 0)] + [0.0] * 8
    block1 = [1.5, -0.75, 0.2, 0.8] + [0.0] * 12  # amax 1.5 -> block scale e4m3(0.25)
    qt = quantize(row(block0 + block1), "nvfp4")
    assert qt.tensor_scale.item() == 1.0
    assert qt.scale.float().flatten().tolist() == [448.0, 0.25]
    assert qt.data.shape == (1, 1, 1, 16)
    assert qt.data[0, 0, 0, 0].item() == 0x57  # code(6)=7 low, code(3)=5 high
    out = qt.dequantize().flatten()
    assert out[:8].tolist() == [448.0 * v for v in (6, 3, 1, -0.5, 0, -4, 2, 0)]
    assert out[16:20].tolist() == [1.5, -0.75, 0.25, 0.75]  # 0.2/0.25 = 0.8 -> 1, 0.8/0.25 = 3.2 -> 3


def test_nvfp4_tensor_scale_zero_nan_and_inf_blocks():
    x = torch.randn(4 * 16)
    x[16:32] = 0.0
    x[33] = NAN
    x[50] = INF
    qt = quantize(row(x.tolist()), "nvfp4")
    finite = torch.where(torch.isfinite(x), x.abs(), 0).max()
    assert qt.tensor_scale.item() == pytest.approx(finite.item() / 2688, rel=1e-6)
    assert qt.scale.float()[0, 0, 0, 1].item() == 0.0
    out = qt.dequantize().flatten()
    assert torch.equal(out[16:32], torch.zeros(16))
    assert torch.isnan(out[32:64]).all() and torch.isfinite(out[:32]).all()
    assert torch.equal(qt.data[..., 16:32], torch.zeros(1, 1, 1, 16, dtype=torch.uint8))  # NaN blocks store 0
    assert quantize(torch.zeros(1, 1, 2, 16), "nvfp4").tensor_scale.item() == 1.0


# ---------------------------------------------------------------- fp8


def test_fp8_per_head_and_per_tensor_descales():
    x = torch.randn(2, 3, 5, 8)
    x[0, 1] *= 100
    x[1, 2] = 0.0
    x[1, 0, 0, 0] = INF
    x[1, 0, 0, 1] = NAN
    qt = quantize(x, "fp8")
    finite_amax = torch.where(torch.isfinite(x), x.abs(), 0).amax(dim=(-2, -1))
    expected = torch.where(finite_amax > 0, finite_amax / 448, torch.ones(()))
    assert qt.scale.shape == (2, 3) and torch.equal(qt.scale, expected)
    out = qt.dequantize()
    assert out[1, 0, 0, 0] == 448 * qt.scale[1, 0]  # Inf saturates
    assert math.isnan(out[1, 0, 0, 1].item())
    assert torch.equal(out[1, 2], torch.zeros(5, 8))
    per_tensor = quantize(x, "fp8", granularity="tensor")
    assert torch.equal(per_tensor.scale, torch.full((2, 3), finite_amax.max().item() / 448))


# ---------------------------------------------------------------- round-trip bounds


def error_bound(qt: QuantTensor, x: torch.Tensor) -> torch.Tensor:
    """Half an ulp of the element format times the element's scale, plus any saturation excess."""
    stored = x.float().transpose(-1, -2) if qt.transposed else x.float()
    n = stored.shape[-1]
    if qt.fmt == "fp8":
        scale = qt.scale[..., None, None].expand_as(stored)
        half_ulp, subnormal_half_ulp, max_element = 2.0**-4, 2.0**-10, 448.0
    else:
        block_scale = e8m0_decode(qt.scale) if qt.fmt == "mxfp8" else qt.scale.float() * qt.tensor_scale
        scale = block_scale.repeat_interleave(qt.block, dim=-1)[..., :n]
        if qt.fmt == "mxfp8":
            half_ulp, subnormal_half_ulp, max_element = 2.0**-4, 2.0**-10, 448.0
        else:
            half_ulp, subnormal_half_ulp, max_element = 0.25, 0.25, 6.0
    a = stored.abs()
    bound = torch.maximum(half_ulp * a, subnormal_half_ulp * scale) * (1 + 1e-5)
    bound = bound + (a - max_element * scale).clamp(min=0)
    return bound.transpose(-1, -2) if qt.transposed else bound


@pytest.mark.parametrize("fmt", QUANTIZED)
@pytest.mark.parametrize("case", ["normal", "shifted", "large", "small", "bf16"])
@pytest.mark.parametrize("transpose", [False, True])
def test_round_trip_within_half_ulp(fmt, case, transpose):
    gen = torch.Generator().manual_seed(zlib.crc32(f"{fmt}-{case}-{transpose}".encode()))
    x = torch.randn(2, 3, 45, 64, generator=gen)
    x = {"normal": x, "shifted": x + 4, "large": x * 3e4, "small": x * 1e-3, "bf16": x.bfloat16()}[case]
    qt = quantize(x, fmt, transpose=transpose)
    out = qt.dequantize()
    assert out.shape == x.shape and out.dtype == torch.float32
    err = (out - x.float()).abs()
    assert (err <= error_bound(qt, x)).all(), (err - error_bound(qt, x)).max()
    assert qt.dequantize(torch.bfloat16).dtype == torch.bfloat16


# ---------------------------------------------------------------- layout


def test_transposed_v_layout_and_padding():
    v = torch.randn(1, 2, 40, 64)  # Sk = 40: not a multiple of 32 or 16
    for fmt, data_last, n_blocks in (("mxfp8", 64, 2), ("nvfp4", 24, 3)):
        qt = quantize(v, fmt, transpose=True)
        assert qt.transposed and qt.shape == (1, 2, 64, 40) and qt.logical_shape == (1, 2, 40, 64)
        assert qt.data.shape == (1, 2, 64, data_last) and qt.scale.shape == (1, 2, 64, n_blocks)
        plain = quantize(v.transpose(-1, -2).contiguous(), fmt)
        assert torch.equal(qt.data.view(torch.uint8), plain.data.view(torch.uint8))
        assert torch.equal(qt.scale.view(torch.uint8), plain.scale.view(torch.uint8))
        assert qt.dequantize().shape == v.shape
    mx = quantize(v, "mxfp8", transpose=True)
    assert torch.equal(mx.data[..., 40:].float(), torch.zeros(1, 2, 64, 24))
    nv = quantize(v, "nvfp4", transpose=True)
    assert torch.equal(unpack_e2m1(nv.data)[..., 40:], torch.zeros(1, 2, 64, 8, dtype=torch.uint8))
    fp8 = quantize(v, "fp8", transpose=True)
    assert fp8.data.shape == (1, 2, 64, 40) and fp8.block == 0


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_quantize_attention_inputs_shapes(fmt):
    q, k, v = torch.randn(2, 4, 33, 64), torch.randn(2, 2, 50, 64), torch.randn(2, 2, 50, 64)
    qq, kq, vq = quantize_attention_inputs(q, k, v, fmt)
    assert all(is_quantized(t) and t.fmt == fmt for t in (qq, kq, vq))
    assert (qq.transposed, kq.transposed, vq.transposed) == (False, False, True)
    assert qq.logical_shape == q.shape and kq.logical_shape == k.shape and vq.logical_shape == v.shape
    assert vq.shape == (2, 2, 64, 50)
    block = FORMATS[fmt].block
    assert qq.block == kq.block == vq.block == block
    if block:
        per_byte = 2 if fmt == "nvfp4" else 1
        assert vq.data.shape[-1] * per_byte == 64 and vq.scale.shape == (2, 2, 64, 2 if block == 32 else 4)
        assert qq.scale.shape == (2, 4, 33, 64 // block)
    else:
        assert qq.scale.shape == (2, 4) and vq.scale.shape == (2, 2)


# ---------------------------------------------------------------- P


def test_quantize_p_hand_vectors():
    p = torch.zeros(2, 16)
    p[:, :3] = torch.tensor([0.6, 0.3, 0.1])
    # fp8: plain cast. 0.6 -> 0.625 is not on the e4m3 grid step 1/16 in [0.5, 1): 0.625 is.
    assert quantize_p(p, "fp8")[0, :3].tolist() == [0.625, 0.3125, 0.1015625]
    # mxfp8: amax 0.6 -> e = -1 - 8 = -9; 0.6 * 512 = 307.2 -> 320 (step 32) -> 0.625.
    assert quantize_p(p, "mxfp8")[0, :3].tolist() == [0.625, 0.3125, 0.1015625]
    # nvfp4: block scale e4m3(0.6 / 6) = 0.1015625; 0.6/s = 5.91 -> 6, 0.3/s = 2.95 -> 3, 0.1/s -> 1.
    s = 0.1015625
    assert quantize_p(p, "nvfp4")[0, :3].tolist() == [6 * s, 3 * s, s]


def _keys(n, values):
    """(n,) float32 p: `values` at the front, zeros behind."""
    p = torch.zeros(n)
    p[: len(values)] = torch.tensor(values, dtype=torch.float32)
    return p


def test_quantize_p_fp8_hand_vector():
    """Plain e4m3 cast (no scale): step 1/16 in [0.5, 1), 1/32 in [0.25, 0.5), 2**-7 in [2**-4, 2**-3),
    subnormal step 2**-9; ties to the even mantissa."""
    p = _keys(8, [1.0, 0.6, 0.3, 0.0732421875, 0.53125, 0.001, 0.0009, 0.0])
    #            1.0, 9.6/16->10/16, 9.6/32->10/32, 9.375*2**-7 -> 9, 8.5/16 tie -> 8 (even), 0.512 sub-steps -> 1, 0.46 -> 0
    want = [1.0, 0.625, 0.3125, 0.0703125, 0.5, 2**-9, 0.0, 0.0]
    assert quantize_p(p, "fp8").tolist() == want


def test_quantize_p_mxfp8_hand_vector():
    """E8M0 exponent e = floor(log2 amax) - 8 per block of 32 keys, elements e4m3(p * 2**-e) RNE."""
    a = _keys(32, [0.75, 0.3, 0.01, 2**-20, 3 * 2**-19, 0.7])
    b = _keys(32, [0.999, 1.0, 0.515625])
    c = _keys(32, [0.95, 0.9, 0.8])
    p = torch.cat([a, b, c, torch.zeros(32), _keys(20, [0.75])])  # a zero block, a 20-key tail block
    got = quantize_p(p, "mxfp8")
    # block a: amax 0.75 -> floor(log2) = -1, e = -9: p * 512 = 384 | 153.6 -> 160 (step 16) | 5.12 -> 5 (step 0.5)
    # | 2**-11 -> 0 (below half the least subnormal 2**-9) | 1.5 * 2**-9, a tie -> 2 * 2**-9 (even) | 358.4 -> 352 (step 32)
    assert got[:6].tolist() == [0.75, 0.3125, 5 / 512, 0.0, 2**-17, 0.6875] and not got[6:32].any()
    # block b: amax 1.0 -> e = -8: 255.744 -> 256 (step 16) | 256 | 132 -> 128 (step 16)
    assert got[32:35].tolist() == [1.0, 1.0, 0.5] and not got[35:64].any()
    # block c: amax 0.95 -> e = -9: 486.4 and 460.8 saturate at 448 (the floor rule's price), 409.6 -> 416 (step 32)
    assert got[64:67].tolist() == [0.875, 0.875, 0.8125] and not got[67:96].any()
    assert not got[96:128].any()
    assert got.shape == (148,) and got[128] == 0.75 and not got[129:].any()
    # the scales themselves: E8M0 codes 127 + e
    assert quantize(p[:96].reshape(1, 1, 1, 96), "mxfp8").scale.flatten().tolist() == [127 - 9, 127 - 8, 127 - 9]


def test_quantize_p_nvfp4_hand_vector():
    """NVFP4 P (tensor scale 1): block scale e4m3(amax / 6) per 16 keys, elements e2m1(p / scale) with ties to
    the even code (grid 0 .5 1 1.5 2 3 4 6 = codes 0..7)."""
    s1 = 0.1015625  # e4m3(0.6 / 6 = 0.1): step 2**-7 in [2**-4, 2**-3), 12.8 -> 13
    s2 = 0.171875   # e4m3(1 / 6): step 2**-6 in [2**-3, 2**-2), 10.67 -> 11
    a = _keys(16, [0.6, 0.3, 0.05, 0.127, 1.25 * s1, 0.45, 2.5 * s1])
    b = _keys(16, [1.0, 0.26, 0.5 * s2, 0.25 * s2])
    got = quantize_p(torch.cat([a, b, torch.zeros(16)]), "nvfp4")
    # a / s1: 5.91 -> 6 | 2.95 -> 3 | 0.49 -> 0.5 | 1.2505 -> 1.5 | 1.25 tie -> 1 (code 2) | 4.43 -> 4 | 2.5 tie -> 2 (code 4)
    elements_a = [6, 3, 0.5, 1.5, 1, 4, 2]
    # b / s2: 5.82 -> 6 (the value 1.03125 > p) | 1.51 -> 1.5 | 0.5 | 0.25 tie -> 0 (code 0)
    elements_b = [6, 1.5, 0.5, 0]
    assert got[:7].tolist() == [e * s1 for e in elements_a] and not got[7:16].any()
    assert got[16:20].tolist() == [e * s2 for e in elements_b] and not got[20:].any()
    assert e2m1_encode(torch.tensor(elements_a)).tolist() == [7, 5, 1, 3, 2, 6, 4]
    assert e2m1_encode(torch.tensor(elements_b)).tolist() == [7, 3, 1, 0]


@pytest.mark.parametrize("fmt", QUANTIZED)
def test_quantize_p_keeps_shape_and_dtype(fmt):
    p = torch.softmax(torch.randn(2, 3, 7, 50), dim=-1)
    out = quantize_p(p, fmt)
    assert out.shape == p.shape and out.dtype == torch.float32
    assert quantize_p(p[0, 0, 0], fmt).shape == (50,)
    assert torch.equal(quantize_p(p[0, 0, 0], fmt), out[0, 0, 0])  # rows are independent


# ---------------------------------------------------------------- registry and validation


def test_formats_registry():
    assert set(FORMATS) == {"bf16", "fp16", "fp8", "mxfp8", "nvfp4"}
    assert FORMATS["bf16"].torch_dtype is torch.bfloat16 and not FORMATS["fp16"].quantized
    assert (FORMATS["mxfp8"].block, FORMATS["nvfp4"].block, FORMATS["fp8"].block) == (32, 16, 0)
    assert FORMATS["nvfp4"].element == "e2m1" and FORMATS["nvfp4"].torch_dtype is None
    assert not is_quantized(torch.zeros(1))


def test_invalid_inputs_are_refused():
    x = torch.randn(1, 1, 4, 32)
    with pytest.raises(ValueError, match="fp8, mxfp8, nvfp4"):
        quantize(x, "int4")
    with pytest.raises(ValueError, match="fp8, mxfp8, nvfp4"):
        quantize_p(x, "bf16")
    with pytest.raises(TypeError, match="floating"):
        quantize(torch.ones(1, 1, 4, 32, dtype=torch.int32), "fp8")
    with pytest.raises(TypeError, match="floating"):
        quantize_p([0.5], "fp8")
    with pytest.raises(TypeError, match="already fp8"):
        quantize(x.to(torch.float8_e4m3fn), "mxfp8")
    with pytest.raises(ValueError, match="4-D"):
        quantize(x[0], "nvfp4")
    with pytest.raises(ValueError, match="granularity"):
        quantize(x, "fp8", granularity="row")
    with pytest.raises(ValueError, match="fp8 only"):
        quantize(x, "mxfp8", granularity="tensor")
    with pytest.raises(ValueError, match="empty"):
        quantize(torch.zeros(1, 1, 0, 32), "fp8")


# ---------------------------------------------------------------- torchao


def test_mxfp8_matches_torchao():
    pytest.importorskip("torchao")
    mx_tensor = pytest.importorskip("torchao.prototype.mx_formats.mx_tensor")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, 128, generator=gen) * torch.logspace(-6, 6, 8).reshape(1, 8, 1)
    x[0, 0, 0] = below(512.0)  # exercises the floor rule and saturation
    x[0, 1, 5] = NAN
    x = x.reshape(1, 4, 8, 128)
    codes_ref, data_ref = mx_tensor.to_mx(x, torch.float8_e4m3fn, 32)
    qt = quantize(x, "mxfp8")
    assert torch.equal(qt.scale, codes_ref.view(torch.uint8).reshape(qt.scale.shape))
    finite = (qt.scale != 255).repeat_interleave(32, dim=-1)
    assert torch.equal(qt.data.view(torch.uint8)[finite], data_ref.view(torch.uint8).reshape(qt.data.shape)[finite])


# ---------------------------------------------------------------- GPU


def awkward_tensor(gen):
    x = torch.randn(2, 3, 77, 64, generator=gen) * torch.logspace(-30, 30, 3).reshape(1, 3, 1, 1)
    x[0, 0, 0, :40] = 0.0
    x[0, 0, 1, 3] = NAN
    x[0, 0, 2, 9] = -INF
    x[1, 1, 4, :] = 1e-41  # float32 subnormals
    return x


def assert_bit_identical(a, b):
    """Same dtype, same bits; NaNs only need to sit in the same places (payloads differ by device)."""
    if a is None or b is None:
        assert a is None and b is None
        return
    a, b = a.cpu().reshape(-1), b.cpu().reshape(-1)
    assert a.dtype == b.dtype
    nan_a, nan_b = torch.isnan(a.float()), torch.isnan(b.float())
    assert torch.equal(nan_a, nan_b)
    assert torch.equal(a[~nan_a].view(torch.uint8), b[~nan_b].view(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", QUANTIZED)
@pytest.mark.parametrize("transpose", [False, True])
def test_gpu_matches_cpu_bit_for_bit(fmt, transpose):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    x = awkward_tensor(torch.Generator().manual_seed(1))
    on_cpu = quantize(x, fmt, transpose=transpose)
    on_gpu = quantize(x.cuda(), fmt, transpose=transpose)
    assert on_gpu.data.is_cuda
    for field in ("data", "scale", "tensor_scale"):
        assert_bit_identical(getattr(on_cpu, field), getattr(on_gpu, field))
    assert_bit_identical(on_cpu.dequantize(), on_gpu.dequantize())
    assert_bit_identical(on_cpu.dequantize(), on_cpu.to("cuda").dequantize())
    p = torch.softmax(torch.randn(3, 5, 70), dim=-1)
    assert_bit_identical(quantize_p(p, fmt), quantize_p(p.cuda(), fmt))
