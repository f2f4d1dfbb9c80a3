"""cuda_impl.quant: GPU quantizers that must give compare.formats containers bit for bit.

CPU (no GPU needed): the library compiles for every target without spills; its SASS holds the
hardware e4m3 cast on sm_90a/sm_120 and one atomic per CTA in the amax pass; the kernels'
per-block code, run serially on the host (quantize_on_host), matches compare.formats on random
and edge-case inputs; bad input is refused with the constraint named.
GPU (marked gpu): quantize() against compare.formats.quantize on random shapes with tails, strided
inputs, the edge cases, and the attention triple.
"""

from __future__ import annotations

import math

import pytest
import torch

from compare import formats
from cuda_impl import toolchain, quant, sass

FORMAT_GRANULARITIES = [("fp8", "head"), ("fp8", "tensor"), ("mxfp8", "head"), ("nvfp4", "head")]


@pytest.fixture(scope="module")
def quant_library(build_or_skip):
    return build_or_skip(quant.library_spec())


# --- comparing containers ----------------------------------------------------------------


def _bits(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.float8_e4m3fn:
        return t.view(torch.uint8)
    if t.dtype == torch.float32:
        return t.view(torch.int32)
    return t


def assert_same_tensor(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Same dtype, shape and bits; NaN only has to be NaN in both (payloads are not the contract)."""
    got, want = got.cpu(), want.cpu()
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if got.dtype.is_floating_point:
        nan = want.float().isnan()
        assert torch.equal(got.float().isnan(), nan), f"{what}: NaN positions differ"
        got, want = _bits(got).masked_fill(nan, 0), _bits(want).masked_fill(nan, 0)
    differ = (got != want).nonzero()
    assert differ.numel() == 0, (
        f"{what}: {len(differ)} elements differ, first at {differ[0].tolist()}: "
        f"got {got[tuple(differ[0])].item():#x}, want {want[tuple(differ[0])].item():#x}"
    )


def assert_same_container(got: formats.QuantTensor, want: formats.QuantTensor, what: str = "") -> None:
    assert (got.fmt, got.shape, got.transposed, got.block) == (want.fmt, want.shape, want.transposed, want.block), what
    assert_same_tensor(got.data, want.data, f"{what} data")
    assert_same_tensor(got.scale, want.scale, f"{what} scale")
    assert (got.tensor_scale is None) == (want.tensor_scale is None), what
    if want.tensor_scale is not None:
        assert_same_tensor(got.tensor_scale, want.tensor_scale, f"{what} tensor_scale")


# --- inputs --------------------------------------------------------------------------------


def random_input(shape, dtype, seed=0) -> torch.Tensor:
    """Normal values whose magnitude varies by ~2**+-8 between rows, so blocks differ in scale."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g, dtype=torch.float64)
    x = x * torch.exp2(torch.randint(-8, 9, (*shape[:-1], 1), generator=g).double())
    return x.to(dtype)


def edge_input() -> torch.Tensor:
    """(1, 6, 16, 64) float32: each head one family of edge cases, each row two MX / four NVFP4 blocks.

    head 0: ties and saturation at scale 1 (its amax is exactly 2688, so the NVFP4 tensor scale is 1,
            and a row of amax 6 has NVFP4 block scale 1; a row of amax in [256, 512) has E8M0 scale 1)
    head 1: NaN, +Inf, -Inf inside otherwise normal blocks, and signed zeros
    head 2: all zero (fp8 descale 1)
    head 3: tiny values: fp32 subnormals, amax below 2**-127 (E8M0 code 0), e4m3 underflow to +-0
    head 4: amax so small that amax / 448 underflows to 0 (fp8 descale 1)
    head 5: large values near the fp32 limit (no overflow to Inf in any scale); it sets the
            NVFP4 tensor scale, so EDGE_SMALL_HEADS leaves it out to keep head 0's unit tensor scale
    """
    x = torch.zeros(1, 6, 16, 64)
    h0 = x[0, 0]
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 5.5, 4.5, 3.0, 2.25, 0.1, 0.5, 1.0, 6.0])
    h0[0, :16], h0[0, 16:32] = ties, -ties          # e2m1 ties at NVFP4 block scale 1
    h0[1, :16], h0[1, 16:32] = 2 * ties, -2 * ties  # block scale 2: the same ties, scaled
    e4m3_ties = torch.tensor([17.0, 19.0, 33.0, 35.0, 447.0, 449.0, 460.0, 464.0, 470.0, 480.0, 500.0, 511.0,
                              257.0, 264.0, 272.0, 300.0])
    h0[2, :16], h0[2, 16:32] = e4m3_ties, -e4m3_ties  # MX block of amax 511: scale 1, saturation at 448
    h0[3, :32] = torch.linspace(-300, 300, 32)
    h0[4, 0] = 2688.0                                 # tensor amax: NVFP4 tensor scale exactly 1
    h0[5, :32] = torch.tensor([2.0**-9 * k / 2 for k in range(32)])  # e4m3 subnormal ties after scaling
    h0[6:, :] = torch.randn(10, 64) * 100
    h1 = x[0, 1]
    h1[:] = torch.randn(16, 64)
    h1[0, 3] = math.nan
    h1[1, 40] = math.inf
    h1[2, 7] = -math.inf
    h1[3, 50] = math.nan
    h1[3, 10] = math.inf
    h1[4, :] = -0.0
    h1[5, ::2] = -0.0
    h3 = x[0, 3]
    h3[0, :] = torch.randn(64) * 1e-40            # fp32 subnormals
    h3[1, :] = torch.randn(64) * 2.0**-128
    h3[2, :] = torch.randn(64) * 2.0**-119        # around the E8M0 clamp at -127
    h3[3, :] = torch.randn(64) * 2.0**-100
    h3[4, :] = torch.randn(64) * 1e-3
    h3[4, 0] = 1.0                                 # tiny neighbours underflow in e4m3 / e2m1
    h3[5, :] = torch.tensor([(-1.0) ** k * 2.0**-149 * k for k in range(64)])
    x[0, 4, :, :] = torch.randn(16, 64) * 1e-44
    x[0, 5, :, :] = torch.randn(16, 64) * 1e37
    x[0, 5, 0, 0] = 3.4e38
    return x


EDGE_SMALL_HEADS = slice(0, 5)


def edge_inputs() -> list[torch.Tensor]:
    x = edge_input()
    return [x, x[:, EDGE_SMALL_HEADS].contiguous()]


# --- build and machine code (CPU) ---------------------------------------------------------


def test_library_compiles_for_every_target_without_spills(quant_library):
    report = toolchain.ptxas_report(quant.library_spec())
    archs = {row["arch"] for row in report}
    assert archs == {f"sm_{t}" for t in quant.TARGETS}
    kernels = {row["kernel"] for row in report}
    # 4 input dtypes x 3 formats quantize kernels + 4 amax kernels
    assert len(kernels) == 16, sorted(kernels)
    spilling = [r for r in report if r["spill_stores"] or r["spill_loads"] or r["stack"]]
    assert not spilling, toolchain.format_report(spilling)


def test_sass_uses_hardware_e4m3_cast_and_one_atomic(quant_library):
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    functions = sass.dump_sass(quant_library)
    for arch in ("sm_90a", "sm_120"):
        for fmt_code in (0, 1):  # fp8, mxfp8: two elements per cvt.rn.satfinite.e4m3x2
            (ins,) = [i for (a, fn), i in functions.items()
                      if a == arch.rstrip("a") and f"quantize_kernelI13__nv_bfloat16Li{fmt_code}E" in fn]
            ops = sass.opcode_counts(ins)
            casts = sum(n for op, n in ops.items() if op.startswith("F2FP.SATFINITE.E4M3"))
            assert casts == 16 if fmt_code == 1 else casts == 8, (arch, fmt_code, ops)
            assert not any(op.startswith(("LDL", "STL")) for op in ops), f"{arch}: local memory"
        (amax,) = [i for (a, fn), i in functions.items() if a == arch.rstrip("a") and "amax_kernelI13__nv_bfloat16" in fn]
        atomics = [op for op in sass.opcode_counts(amax) if op.startswith(("RED", "ATOM"))]
        assert len(atomics) == 1 and "MAX" in atomics[0], atomics


# --- the kernels' code on the host (CPU) ----------------------------------------------------


@pytest.mark.parametrize("fmt, granularity", FORMAT_GRANULARITIES)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_host_run_matches_formats_on_random_input(quant_library, fmt, granularity, transpose, dtype):
    for shape in [(2, 3, 37, 64), (1, 2, 40, 128), (1, 1, 5, 24)]:
        x = random_input(shape, dtype)
        want = formats.quantize(x, fmt, transpose=transpose, granularity=granularity)
        got = quant.quantize_on_host(x, fmt, transpose=transpose, granularity=granularity)
        assert_same_container(got, want, f"{shape} {dtype}")


@pytest.mark.parametrize("fmt, granularity", FORMAT_GRANULARITIES)
@pytest.mark.parametrize("transpose", [False, True])
def test_host_run_matches_formats_on_edge_cases(quant_library, fmt, granularity, transpose):
    for x in edge_inputs():
        want = formats.quantize(x, fmt, transpose=transpose, granularity=granularity)
        assert_same_container(quant.quantize_on_host(x, fmt, transpose=transpose, granularity=granularity), want)


def test_edge_cases_cover_what_they_claim():
    """The edge input really produces NaN blocks, E8M0 code 0, saturation and a unit tensor scale."""
    x = edge_input()
    mx = formats.quantize(x, "mxfp8")
    assert (mx.scale == formats.E8M0_NAN).sum() >= 4 and (mx.scale[0, 3] == 0).any()
    assert (mx.data.float().abs() == 448).any()
    nv = formats.quantize(x[:, EDGE_SMALL_HEADS], "nvfp4")
    assert nv.tensor_scale.item() == 1.0 and nv.scale[0, 0, 0, 0].float().item() == 1.0
    assert nv.scale.float().isnan().sum() >= 4
    fp8 = formats.quantize(x, "fp8")
    assert fp8.scale[0, 2].item() == 1.0 and fp8.scale[0, 4].item() == 1.0


def test_host_run_of_strided_input(quant_library):
    x = random_input((2, 40, 3, 64), torch.bfloat16).transpose(1, 2)  # (B, H, S, D) view of BSHD storage
    for fmt in formats.QUANTIZED_FORMATS:
        for transpose in (False, True):
            assert_same_container(quant.quantize_on_host(x, fmt, transpose=transpose),
                                  formats.quantize(x, fmt, transpose=transpose), f"{fmt} {transpose}")


# --- validation (CPU) ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, kwargs, error, match",
    [
        (lambda: torch.randn(1, 1, 4, 32), {"fmt": "int4"}, ValueError, "format"),
        (lambda: torch.randn(1, 1, 4, 32).to(torch.float8_e4m3fn), {}, TypeError, "dtype"),
        (lambda: torch.ones(1, 1, 4, 32, dtype=torch.int32), {}, TypeError, "dtype"),
        (lambda: [1.0], {}, TypeError, "type"),
        (lambda: torch.randn(4, 32), {}, ValueError, "shape"),
        (lambda: torch.randn(1, 0, 4, 32), {}, ValueError, "empty"),
        (lambda: torch.randn(1, 1, 4, 32), {"fmt": "mxfp8", "granularity": "tensor"}, ValueError, "granularity"),
        (lambda: torch.randn(1, 1, 4, 32), {"granularity": "row"}, ValueError, "granularity"),
        (lambda: torch.randn(1, 1, 4, 32), {}, ValueError, "device"),  # valid, but on the CPU
    ],
)
def test_bad_input_is_refused_with_the_constraint_named(make, kwargs, error, match):
    kwargs = {"fmt": "fp8", **kwargs}
    with pytest.raises(error, match=match):
        quant.quantize(make(), kwargs.pop("fmt"), **kwargs)


def test_grid_limit_is_checked_before_launch():
    x = torch.empty(1, 70000, 1, 32, device="meta")
    with pytest.raises(ValueError, match="grid limit"):
        quant.check_input(x, "mxfp8")


def test_params_struct_matches_the_library(quant_library):
    lib = quant.load()  # raises if sizeof(QuantParams) differs between C and ctypes
    params = quant.QuantParams(batch=1, heads=1, seqlen=4, head_dim=32, format=7)
    err = __import__("ctypes").create_string_buffer(256)
    assert lib.cuda_fa_quantize_host(params, err, 256) != 0 and b"format" in err.value


# --- GPU -----------------------------------------------------------------------------------

gpu = pytest.mark.gpu
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

# The last shape spreads each head's amax over 32 CTAs (atomics); the CPU reference bounds its size.
GPU_SHAPES = [(2, 3, 100, 64), (1, 4, 257, 128), (2, 2, 1000, 128), (1, 1, 1, 64), (1, 8, 2048, 128)]


@gpu
@needs_gpu
@pytest.mark.parametrize("fmt, granularity", FORMAT_GRANULARITIES)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gpu_matches_formats_bit_for_bit(fmt, granularity, transpose, dtype):
    for i, shape in enumerate(GPU_SHAPES):
        x = random_input(shape, dtype, seed=i)
        want = formats.quantize(x, fmt, transpose=transpose, granularity=granularity)  # CPU oracle
        got = quant.quantize(x.cuda(), fmt, transpose=transpose, granularity=granularity)
        assert got.data.is_cuda
        assert_same_container(got, want, f"{shape} {dtype}")


@gpu
@needs_gpu
@pytest.mark.parametrize("fmt, granularity", FORMAT_GRANULARITIES)
@pytest.mark.parametrize("transpose", [False, True])
def test_gpu_edge_cases(fmt, granularity, transpose):
    for x in edge_inputs():
        want = formats.quantize(x, fmt, transpose=transpose, granularity=granularity)
        assert_same_container(quant.quantize(x.cuda(), fmt, transpose=transpose, granularity=granularity), want)


@gpu
@needs_gpu
@pytest.mark.parametrize("fmt, granularity", FORMAT_GRANULARITIES)
def test_gpu_scattered_non_finite_values_in_a_large_tensor(fmt, granularity):
    """NaN/Inf and zero rows spread over many CTAs of the amax pass and many blocks."""
    x = random_input((2, 4, 1500, 128), torch.float32, seed=7)
    g = torch.Generator().manual_seed(8)
    flat = x.view(-1)
    for value in (math.nan, math.inf, -math.inf):
        flat[torch.randint(0, flat.numel(), (40,), generator=g)] = value
    x[:, :, 100:140] = 0.0
    for transpose in (False, True):
        want = formats.quantize(x, fmt, transpose=transpose, granularity=granularity)
        assert_same_container(quant.quantize(x.cuda(), fmt, transpose=transpose, granularity=granularity), want)


@gpu
@needs_gpu
def test_gpu_strided_and_fp64_input():
    base = random_input((2, 300, 4, 128), torch.bfloat16).cuda()
    x = base.transpose(1, 2)  # BSHD storage seen as (B, H, S, D)
    for fmt in formats.QUANTIZED_FORMATS:
        for transpose in (False, True):
            assert_same_container(quant.quantize(x, fmt, transpose=transpose),
                                  formats.quantize(x.cpu(), fmt, transpose=transpose), f"{fmt} {transpose}")
    x64 = random_input((1, 2, 70, 64), torch.float64)
    for fmt in formats.QUANTIZED_FORMATS:
        assert_same_container(quant.quantize(x64.cuda(), fmt), formats.quantize(x64, fmt), fmt)


@gpu
@needs_gpu
@pytest.mark.parametrize("fmt", formats.QUANTIZED_FORMATS)
def test_gpu_attention_inputs_and_round_trip(fmt):
    q, k, v = (random_input((2, 4, 333, 128), torch.bfloat16, seed=s).cuda() for s in range(3))
    got = quant.quantize_attention_inputs(q, k, v, fmt)
    want = formats.quantize_attention_inputs(q.cpu(), k.cpu(), v.cpu(), fmt)
    for name, g, w in zip("qkv", got, want):
        assert_same_container(g, w, name)
    assert got[2].data.shape[-2] == 128 and got[2].transposed  # V stored (B, H, D, Sk)
    assert torch.equal(got[2].dequantize().cpu(), want[2].dequantize())
