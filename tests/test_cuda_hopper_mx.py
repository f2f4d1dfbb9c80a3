"""cuda_impl variants "hopper-mxfp8" and "hopper-nvfp4" (sm_90a, exact block scaling).

CPU part:
* the exact scheme, emulated in torch/fractions with no kernel: every MXFP8 / NVFP4 value is exact
  in the 16-bit tile type (bf16 / fp16) the kernel runs on; the kernel's P quantizers (MX exponent
  from the bits, e4m3 round trip; NVFP4 scale with a true division, the quotient by one reciprocal
  and a Markstein correction, e2m1 rounding by magic numbers) give compare.formats.quantize_p's
  values bit for bit; rounding the scaled scores once makes P's row maximum exactly 1;
* machine code: the kernels build without spills or serialised wgmmas, the sm_90a cubin holds
  HGMMA for both products (P V with A from registers), TMA and the P conversions;
* the registry entries and the input checks refuse bad input before launch.
GPU part (skipped without one): compare.oracle.check on the cases the pipeline can get wrong.
"""

from __future__ import annotations

import ctypes
import dataclasses
import re
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import cuda_impl
from conftest import skip_unless_required
from compare import backends, formats, oracle
from cuda_impl import _lib, toolchain, sass

FORMATS = ("mxfp8", "nvfp4")
TILE_DTYPE = {"mxfp8": torch.bfloat16, "nvfp4": torch.float16}


# --- the scheme, emulated (CPU, no kernel) ---------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_block_scaled_values_are_exact_in_the_tile_type(fmt):
    """dequant_blocked.cu: element * block scale formed in fp32, rounded to bf16 / fp16, loses
    nothing; times nvfp4's tensor scale (applied in the attention kernel) it is the formats value."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 70, 128, generator=g) * torch.logspace(-30, 30, 128)  # wide block ranges
    x[0, 0, 0, :32] = 0.0  # a zero block (E8M0 code 0: 2**-127)
    t = formats.quantize(x, fmt)
    if fmt == "mxfp8":
        scale = formats.e8m0_decode(t.scale)
        product = (t.data.float().reshape(*t.data.shape[:-1], -1, 32) * scale[..., None]).reshape(t.data.shape)
        expected = t.dequantize()
    else:
        elements = formats.e2m1_decode(formats.unpack_e2m1(t.data))
        product = (elements.reshape(*elements.shape[:-1], -1, 16) * t.scale.float()[..., None]).reshape(elements.shape)
        expected = t.dequantize() / t.tensor_scale
    tile = product.to(TILE_DTYPE[fmt]).float()
    assert torch.equal(tile, product)
    # the tensor scale applied after the 16-bit product: the same value up to fp32 rounding
    assert torch.allclose(tile[..., : x.shape[-1]], expected, rtol=2**-22, atol=0)


# The P quantizers and the exact softmax step are read from the kernel's own headers: each statement that
# decides a rounding is taken out of the C++ source, translated to torch (or to exact fractions) and
# evaluated, so an edit to a header is an edit to what these tests check, never a drifted copy.
HOPPER_CSRC = Path(cuda_impl.__file__).resolve().parent / "csrc" / "hopper"
QUANTIZE_P_CUH = HOPPER_CSRC / "quantize_p.cuh"
SOFTMAX_CUH = HOPPER_CSRC / "softmax.cuh"
SM90_CUH = HOPPER_CSRC / "sm90.cuh"


def _source(path: Path) -> str:
    """The header without comments."""
    return re.sub(r"//[^\n]*", "", path.read_text())


def _function(path: Path, name: str) -> str:
    """The body of the (device) function `name` in `path`, braces matched."""
    text = _source(path)

    def closing(i: int, pair: str) -> int:  # index after the bracket that closes the one at text[i]
        depth = 0
        while True:
            depth += {pair[0]: 1, pair[1]: -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                return i

    for found in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        after = closing(found.end() - 1, "()")
        brace = re.match(r"\s*\{", text[after:])
        if brace:  # a definition, not a call
            start = after + brace.end() - 1
            return text[start + 1: closing(start, "{}") - 1]
    raise AssertionError(f"{name} not defined in {path.name}")


def _statement(body: str, variable: str) -> str:
    """The right-hand side of `const <type> variable = ...;` in `body` (whitespace folded)."""
    found = re.findall(rf"const\s+\w+\s+{re.escape(variable)}\s*=\s*(.*?);", body, flags=re.S)
    assert len(found) == 1, f"expected one definition of {variable}, found {found}"
    return " ".join(found[0].split())


_C_TO_PY = [(r"\b__float_as_int\(", "_as_bits("), (r"\b__int_as_float\(", "_from_bits("), (r"\bmax\(", "_imax("),
            (r"\bfminf\(", "_fmin("), (r"\b__fadd_rn\(", "_add("), (r"\b__fsub_rn\(", "_sub("),
            (r"\b__fmul_rn\(", "_mul("), (r"\b__fmaf_rn\(", "_fma("), (r"\b__frcp_rn\(", "_rcp("),
            (r"\b__fdiv_rn\(", "_div("), (r"(\d+)\.f\b", r"\1.0"), (r"(\d+\.\d+)f\b", r"\1")]


def _py(expression: str) -> str:
    """A C expression of the headers in Python: the intrinsics by name, `c ? a : b` as _select(c, a, b)."""
    for pattern, replacement in _C_TO_PY:
        expression = re.sub(pattern, replacement, expression)
    ternary = re.fullmatch(r"(.+?)\?(.+?):(.+)", expression)
    if ternary:
        expression = "_select({}, {}, {})".format(*(part.strip() for part in ternary.groups()))
    assert not re.search(r"\b__\w+\(|[?:]", expression), f"no translation for {expression!r}"
    return expression


def _int(x):
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=torch.int32)


TORCH_FP32 = {  # the intrinsics as fp32 torch operations (each one correctly rounded on the CPU)
    "_as_bits": lambda x: x.float().view(torch.int32),
    "_from_bits": lambda b: _int(b).to(torch.int32).view(torch.float32),
    "_imax": lambda a, b: torch.maximum(_int(a), _int(b)),
    "_fmin": lambda a, b: torch.minimum(a, torch.as_tensor(b, dtype=torch.float32)),
    "_add": lambda a, b: a + b, "_sub": lambda a, b: a - b, "_mul": lambda a, b: a * b,
    "_fma": lambda a, b, c: (a.double() * b.double() + c.double()).float(),  # a*b is exact in double
    "_rcp": lambda a: torch.where(a != 0, 1.0 / a, 0.0).float(), "_div": lambda a, b: a / b,
    "_select": torch.where,
}


def _eval(expression: str, **values):
    return eval(_py(expression), {"__builtins__": {}}, {**TORCH_FP32, **values})


def _e4m3_satfinite(x: torch.Tensor) -> torch.Tensor:
    """cvt.rn.satfinite.e4m3x2.f32: round to nearest even, saturating at +-448."""
    return x.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).float()


def test_the_headers_convert_p_as_emulated():
    """The conversions around the parsed statements: P is rounded to e4m3 by cvt.rn.satfinite (pack_e4m3x2)
    and packed as bf16 (MXFP8) / fp16 (NVFP4) A fragments."""
    assert "cvt.rn.satfinite.e4m3x2.f32" in _function(SM90_CUH, "pack_e4m3x2")
    mx = " ".join(_function(QUANTIZE_P_CUH, "quantize_p_mxfp8").split())
    assert "sm90::pack_e4m3x2(S[i] * down, S[i + 1] * down)" in mx
    assert "pack2<__nv_bfloat16>(v.x * up, v.y * up)" in mx
    nv = " ".join(_function(QUANTIZE_P_CUH, "quantize_p_nvfp4").split())
    assert "v[2 * j + c] = round_to_e2m1(q) * s;" in nv and nv.count("pack2<__half>(") == 2
    assert re.search(r"sm90::pack_e4m3x2\(__fdiv_rn\(amax\[0\], 6\.f\), __fdiv_rn\(amax\[1\], 6\.f\)\)", nv)


def _kernel_quantize_p_mxfp8(p: torch.Tensor) -> torch.Tensor:
    """hopper/quantize_p.cuh quantize_p_mxfp8 on (rows, keys) fp32 p in [0, 1]: its exponent and scale
    statements as written there, then its e4m3 round trip and bf16 pack."""
    body = _function(QUANTIZE_P_CUH, "quantize_p_mxfp8")
    blocks = p.reshape(p.shape[0], -1, formats.FORMATS["mxfp8"].block)
    amax = blocks.amax(dim=-1)
    e = _eval(_statement(body, "e"), amax=amax)
    down = _eval(_statement(body, "down"), e=e)
    up = _eval(_statement(body, "up"), e=e)
    elements = _e4m3_satfinite(blocks * down[..., None])
    values = (elements * up[..., None]).to(torch.bfloat16)  # pack2<bf16> (round to nearest)
    return values.float().reshape(p.shape)


def _round_to_e2m1(x: torch.Tensor) -> torch.Tensor:
    """hopper/quantize_p.cuh round_to_e2m1, its two statements evaluated in fp32."""
    body = _function(QUANTIZE_P_CUH, "round_to_e2m1")
    magic = _eval(_statement(body, "magic"), x=x)
    (returned,) = re.findall(r"return\s+(.*?);", body, flags=re.S)
    return _eval(" ".join(returned.split()), x=x, magic=magic)


def _kernel_quantize_p_nvfp4(p: torch.Tensor) -> torch.Tensor:
    """hopper/quantize_p.cuh quantize_p_nvfp4: the block scale e4m3(amax / 6), then its reciprocal, quotient
    and Markstein-correction statements as written there, e2m1 rounding by round_to_e2m1, the fp16 pack."""
    body = _function(QUANTIZE_P_CUH, "quantize_p_nvfp4")
    blocks = p.reshape(p.shape[0], -1, formats.FORMATS["nvfp4"].block)
    (divisor,) = set(re.findall(r"__fdiv_rn\(amax\[\d\], ([\d.]+)f\)", body))
    s = _e4m3_satfinite(blocks.amax(dim=-1) / torch.tensor(float(divisor)))[..., None].expand_as(blocks)
    r = _eval(_statement(body, "r"), s=s)
    q0 = _eval(_statement(body, "q0"), p=blocks, r=r)
    q = _eval(_statement(body, "q"), p=blocks, r=r, s=s, q0=q0)
    values = (_round_to_e2m1(q) * s).to(torch.float16)
    return values.float().reshape(p.shape)


def _probabilities(rows=64, keys=256, seed=0) -> torch.Tensor:
    """p = exp2(x - max x) over rows with a wide spread, masked (zero) keys, all-zero blocks and a block so small
    that the MX scale is clamped."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, keys, generator=g) * torch.linspace(0.1, 40, rows)[:, None]
    p = torch.exp2(x - x.amax(dim=-1, keepdim=True))
    p[:, -40:] = 0.0  # masked keys, one block entirely
    p[1, :] = 0.0  # a row that saw no key yet
    p[2, :16] = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0] * 2) / 6 * 0.171875  # e2m1 ties
    p[3, :32] = 2.0 ** -125 * (1 + torch.arange(32) / 32)  # one 32-key block below 2^-119: E8M0's clamp at -127
    return p


@pytest.mark.parametrize("fmt", FORMATS)
def test_kernel_p_quantization_matches_quantize_p(fmt):
    for seed in range(4):
        p = _probabilities(seed=seed)
        emulated = _kernel_quantize_p_mxfp8(p) if fmt == "mxfp8" else _kernel_quantize_p_nvfp4(p)
        expected = formats.quantize_p(p, fmt)
        # MXFP8 values below 2**-126 (bf16 subnormals) may lose bits: none occur for p >= 2**-117
        exact = expected >= 2**-117 if fmt == "mxfp8" else torch.ones_like(p, dtype=torch.bool)
        assert torch.equal(emulated[exact], expected[exact]), (fmt, (emulated != expected).sum())
        diff = (emulated[~exact] - expected[~exact]).abs()
        assert diff.numel() == 0 or diff.max() <= 2**-126


def test_round_to_e2m1_matches_formats_on_ties_and_a_dense_grid():
    x = torch.cat([torch.arange(0, 8, 2**-6), torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 100.0])])
    x = torch.cat([x, torch.nextafter(x, torch.tensor(0.0)), torch.nextafter(x, torch.tensor(9.0))]).abs()
    assert torch.equal(_round_to_e2m1(x), formats.e2m1_decode(formats.e2m1_encode(x)))


def _rn32(x: Fraction) -> Fraction:
    """Round a rational to the nearest fp32 (ties to even), normal range."""
    if x < 0:
        return -_rn32(-x)
    if x == 0:
        return x
    e = x.numerator.bit_length() - x.denominator.bit_length()
    while Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    ulp = Fraction(2) ** (e - 23)
    n, rest = divmod(x, ulp)
    if rest > ulp / 2 or (rest == ulp / 2 and n % 2):
        n += 1
    return n * ulp


EXACT = {  # the intrinsics in exact arithmetic, each result rounded once to fp32
    "_mul": lambda a, b: _rn32(a * b), "_fma": lambda a, b, c: _rn32(a * b + c),
    "_rcp": lambda a: _rn32(1 / a) if a else Fraction(0), "_select": lambda c, a, b: a if c else b,
}


def test_markstein_quotient_is_correctly_rounded():
    """quantize_p_nvfp4's r, q0 and q statements (parsed from the header, evaluated exactly with one fp32
    rounding per intrinsic) give RN(p / s) for every e4m3 block scale an NVFP4 P can have and p in (0, 1]."""
    body = _function(QUANTIZE_P_CUH, "quantize_p_nvfp4")
    r_expr, q0_expr, q_expr = (_py(_statement(body, name)) for name in ("r", "q0", "q"))
    scales = sorted({float(v) for v in torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
                     if 2**-9 <= v <= 0.171875})
    g = torch.Generator().manual_seed(3)
    ps = torch.cat([torch.rand(60, generator=g), torch.exp2(-20 * torch.rand(60, generator=g)), torch.ones(1)])
    for s in scales:
        fs = Fraction(s)
        r = eval(r_expr, {"__builtins__": {}}, {**EXACT, "s": fs})
        for p in ps.tolist():
            fp = Fraction(p)
            q0 = eval(q0_expr, {"__builtins__": {}}, {**EXACT, "p": fp, "r": r})
            q = eval(q_expr, {"__builtins__": {}}, {**EXACT, "p": fp, "r": r, "s": fs, "q0": q0})
            assert q == _rn32(fp / fs), (p, s)


def test_rounded_scaled_scores_give_an_exact_row_max():
    """hopper_mx::softmax_exact rounds the scaled scores once (x = RN(S * scale_log2), a separate multiply),
    takes the row max m of those x, and exponentiates x - m: so the max's exponent argument is exactly 0 and
    P's row max exactly 1. Read from the header; an FMA-contracted S * scale - m would not give 0 for about
    half the rows, which the last line shows."""
    body = " ".join(_function(SOFTMAX_CUH, "softmax_exact").split())
    scaled = re.findall(r"S\[([^\]]+)\] = (\w+)\(S\[\1\], scale_log2\);", body)
    assert [op for _, op in scaled] == ["__fmul_rn", "__fmul_rn"], f"S is scaled by {scaled}"
    maxima = re.findall(r"(m[01]) = fmaxf\(\1, S\[([^\]]+)\]\);", body)
    assert sorted(index for _, index in maxima) == sorted(index for index, _ in scaled), "max not over scaled S"
    (argument,) = re.findall(r"fast_exp2\((S\[[^\]]+\]) - m_sub\)", body)
    assert "scale_log2" not in argument and "fmaf" not in body
    g = torch.Generator().manual_seed(5)
    s = torch.randn(512, 128, generator=g) * 7
    scale_log2 = torch.tensor(0.08838834764831845 * 1.4426950408889634, dtype=torch.float32)
    x = _eval(f"{scaled[0][1]}(s, scale_log2)", s=s, scale_log2=scale_log2)  # one fp32 rounding
    arg = x - x.amax(dim=-1, keepdim=True)
    assert torch.equal(arg.amax(dim=-1), torch.zeros(512))
    fused = (s.double() * scale_log2.double() - x.amax(dim=-1, keepdim=True).double()).float()  # FMA
    assert (fused.amax(dim=-1) != 0).any()


# --- build and machine code (CPU) ----------------------------------------------------------


@pytest.fixture(scope="module")
def fa_library():
    problem = toolchain.missing_toolchain()
    if problem and toolchain.cached_library(_lib.library_spec()) is None:
        pytest.skip(problem)
    return toolchain.build_library(_lib.library_spec())


@pytest.fixture(scope="module")
def mx_sass(fa_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    return {key: ins for key, ins in sass.dump_sass(fa_library).items()
            if "fwd_hopper_mx_kernel" in key[1] or "dequant" in key[1]}


def kernel(functions: dict, arch: str, fmt: str, head_dim: int) -> list[str]:
    (found,) = [ins for (a, fn), ins in functions.items()
                if a == arch and toolchain.readable_kernel_name(fn) == f"fwd_hopper_{fmt}_kernel<{fmt},{head_dim}>"]
    return found


def test_builds_without_spills_or_serialised_wgmma(fa_library):
    spec = _lib.library_spec()
    names = {f"fwd_hopper_{f}_kernel<{f},{d}>" for f in FORMATS for d in (64, 128)}
    rows = [r for r in toolchain.ptxas_report(spec) if r["kernel"] in names or "dequant" in r["kernel"]]
    # 2 formats x 2 head dims, and the 2 dequantization kernels
    assert len([r for r in rows if r["arch"] == "sm_90a"]) == 6
    for r in rows:
        assert r["stack"] == 0 and r["spill_stores"] == 0 and r["spill_loads"] == 0, r
        if r["arch"] == "sm_90a":
            assert r["registers"] * 384 <= 65536, r
    log = (spec.build_dir / "fwd_hopper_mx.o.log").read_text()
    assert "C7508" not in log, "ptxas ignored setmaxnreg"
    assert "C7513" not in log and "wgmma" not in log.lower(), f"ptxas serialised the wgmmas:\n{log}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("head_dim", [64, 128])
def test_sm90a_machine_code(mx_sass, fmt, head_dim):
    instructions = kernel(mx_sass, "sm_90", fmt, head_dim)
    ops = sass.opcode_counts(instructions)
    tile = "F32.BF16" if fmt == "mxfp8" else "F32 "  # cuobjdump names no type for f16
    hgmma = [i for i in instructions if i.startswith("HGMMA")]
    qk = [i for i in hgmma if "gdesc" in i.split(",")[1]]  # both operands from shared memory
    pv = [i for i in hgmma if i not in qk]
    assert qk and all(f"64x128x16.{tile}" in i for i in qk) and len(qk) == head_dim // 16
    assert pv and all(f"64x{head_dim}x16.{tile}" in i for i in pv) and len(pv) == 8
    assert ops["UTMALDG.4D"] > 0, "no TMA tile loads"
    assert any(op.startswith("F2FP.SATFINITE.E4M3") for op in ops), "P is not rounded through e4m3"
    assert ops["USETMAXREG.DEALLOC.CTAPOOL"] == 1 and ops["USETMAXREG.TRY_ALLOC.CTAPOOL"] == 1
    assert not any(op.startswith(("QGMMA", "HMMA", "LDL", "STL")) for op in ops)


def test_sm80_build_holds_no_hopper_instructions(mx_sass):
    ops = sass.opcode_counts(kernel(mx_sass, "sm_80", "mxfp8", 128))
    assert not any(op.startswith(("HGMMA", "UTMALDG", "SYNCS")) for op in ops)


def test_c_entries_report_errors_before_touching_a_device(fa_library):
    lib = _lib.load()
    err = ctypes.create_string_buffer(256)
    fn = lib.cuda_fa_fwd_hopper_mx
    fn.restype = ctypes.c_int
    base = dict(batch=1, heads_q=1, heads_kv=1, seqlen_q=4, seqlen_k=4, scale=1.0, head_dim=128)
    cases = [
        (_lib.MxFwdParams(base=_lib.FwdParams(dtype=1, **base), format=0), b"dtype"),  # fp16 tiles for mxfp8
        (_lib.MxFwdParams(base=_lib.FwdParams(dtype=0, **base), format=7), b"format"),
        (_lib.MxFwdParams(base=_lib.FwdParams(dtype=1, **base), format=1), b"tensor scale"),
    ]
    for params, word in cases:
        assert fn(ctypes.byref(params), None, err, 256) != 0
        assert word in err.value, err.value
    lib.cuda_fa_mx_params_size.restype = ctypes.c_int
    assert lib.cuda_fa_mx_params_size() == ctypes.sizeof(_lib.MxFwdParams)
    dq = lib.cuda_fa_dequant_blocked
    dq.restype = ctypes.c_int
    assert dq(ctypes.byref(_lib.DequantParams(n=33, format=0)), None, err, 256) != 0 and b"multiple" in err.value
    lib.cuda_fa_dequant_params_size.restype = ctypes.c_int
    assert lib.cuda_fa_dequant_params_size() == ctypes.sizeof(_lib.DequantParams)


# --- registry and validation (CPU) -----------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_registry_entry(fmt):
    spec = cuda_impl.VARIANTS[f"hopper-{fmt}"]
    assert spec["formats"] == (fmt,) and set(spec["head_dims"]) >= {64, 128}
    assert spec["min_cc"] == spec["max_cc"] == (9, 0) and spec["ceiling"] == "wgmma"
    assert ((9, 0), (9, 0), (fmt,), f"hopper-{fmt}") in cuda_impl.DEFAULT_VARIANTS
    backend = backends.get(f"cuda:hopper-{fmt}")
    assert backend.unsupported_reason(oracle.Case(1, 2, 2, 64, 64, 128, fmt=fmt)) is None
    assert "format" in backend.unsupported_reason(oracle.Case(1, 2, 2, 64, 64, 128, fmt="fp8"))
    if not torch.cuda.is_available():
        assert "GPU" in cuda_impl.unavailable_reason(f"hopper-{fmt}")


def quantized(fmt="mxfp8", d=64, sq=40, sk=40, hq=2, hkv=2):
    q = torch.randn(1, hq, sq, d)
    k, v = torch.randn(1, hkv, sk, d), torch.randn(1, hkv, sk, d)
    return formats.quantize_attention_inputs(q, k, v, fmt)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda f: quantized(f, d=96), ValueError, "head_dim"),
        (lambda f: quantized(f, d=256), ValueError, "head_dim"),
        (lambda f: quantized(f, hq=3, hkv=2), ValueError, "heads"),
        (lambda f: (*quantized(f)[:2], formats.quantize(torch.randn(1, 2, 40, 64), f)), ValueError, "layout"),
        (lambda f: (quantized(f)[0], torch.randn(1, 2, 40, 64), quantized(f)[2]), TypeError, "QuantTensor"),
        (lambda f: (quantized(f)[0], *quantized("fp8")[1:]), TypeError, "format"),
        (lambda f: (*quantized(f)[:2], dataclasses.replace(quantized(f)[2], scale=quantized(f)[2].scale.float())),
         TypeError, "block scales"),
        (lambda f: (*quantized(f)[:2], dataclasses.replace(quantized(f)[2], data=quantized(f)[2].data[..., :-16])),
         ValueError, "padded"),
        (lambda f: quantized(f), ValueError, "device"),  # CPU tensors
    ],
)
def test_bad_input_is_refused_before_launch(fmt, make, error, match):
    q, k, v = make(fmt)
    with pytest.raises(error, match=match):
        cuda_impl.attention(q, k, v, variant=f"hopper-{fmt}")


def test_nvfp4_needs_its_tensor_scale():
    q, k, v = quantized("nvfp4")
    with pytest.raises(ValueError, match="tensor scale"):
        cuda_impl.attention(q, k, dataclasses.replace(v, tensor_scale=None), variant="hopper-nvfp4")


def test_wrong_variant_for_the_format_is_refused():
    q, k, v = quantized("mxfp8")
    with pytest.raises(TypeError, match="format"):
        cuda_impl.attention(q, k, v, variant="hopper-nvfp4")
    with pytest.raises(TypeError, match="format"):
        cuda_impl.attention(q, k, v, variant="hopper-fp8")


# --- GPU: the oracle ----------------------------------------------------------------------------

GPU_CASES = [  # b, hq, hkv, sq, sk, d, causal, dist
    (1, 2, 2, 128, 128, 128, False, "normal"),
    (2, 4, 4, 200, 333, 64, True, "normal"),  # tails on both axes, V^T padded to the block
    (1, 4, 4, 300, 97, 128, True, "normal"),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 128, True, "shifted"),  # GQA, several rounds of the ring
    (1, 4, 2, 700, 900, 64, False, "large"),  # peaky softmax: P's max must be exactly 1
]


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", GPU_CASES)
def test_oracle_on_gpu(fmt, case):
    variant = f"hopper-{fmt}"
    skip_unless_required("cuda", variant, cuda_impl.unavailable_reason(variant))
    b, hq, hkv, sq, sk, d, causal, dist = case
    c = oracle.Case(b, hq, hkv, sq, sk, d, causal=causal, fmt=fmt, dist=dist, seed=sq + sk)
    verdict = oracle.check(lambda q, k, v, **kw: cuda_impl.attention(q, k, v, variant=variant, **kw), c,
                           device="cuda")
    assert verdict.passed, verdict.summary()
