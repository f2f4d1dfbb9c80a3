"""Triton kernels on the CPU under TRITON_INTERPRET=1, against a float64 reference written here.

TRITON_INTERPRET must be set before any @triton.jit decorator runs, and other test modules may import
Triton kernels first, so the interpreter tests run in a subprocess of their own: in the normal run
`test_interpreter_suite` starts `pytest` on this file with TRITON_INTERPRET=1 and fails with its
output if anything inside fails; inside that subprocess the `interpreted` tests run. fp16/fp32 only:
Triton 3.6's interpreter multiplies bf16 dots on raw bits.
"""
import importlib.util
import math

import pytest
import torch

from conftest import (INSIDE_INTERPRETER, check_interpreter_run, interpreted, outside_interpreter,
                      run_interpreter_subprocess, skip_inside_interpreter)


def test_interpreter_suite():
    skip_inside_interpreter()
    pytest.importorskip("triton")
    check_interpreter_run(run_interpreter_subprocess(__file__, "-rs"), globals())


@outside_interpreter
def test_interpreter_run_check_catches_a_skipped_or_missing_test():
    """check_interpreter_run counts a module's items from its marks: here two interpreted tests (one of three
    parametrisations), one outer test, one GPU test and the suite itself."""
    def suite():
        pass

    @interpreted
    @pytest.mark.parametrize("n", [1, 2, 3])
    def inner(n):
        pass

    @outside_interpreter
    def outer():
        pass

    @pytest.mark.gpu
    def on_gpu():
        pass

    module = {"test_suite": suite, "test_inner": inner, "test_also_inner": lambda: None, "test_outer": outer,
              "test_gpu": on_gpu, "helper": outer}
    skips = ("SKIPPED [1] tests/x.py:26: this is the subprocess\n"
             "SKIPPED [1] tests/x.py:36: runs outside the interpreter\n")
    check_interpreter_run("....\n" + skips + "4 passed, 2 skipped, 1 deselected in 1.5s", module)
    for bad in (skips + "SKIPPED [1] tests/x.py:120: no triton\n3 passed, 3 skipped in 1s",  # a test skipped inside
                skips + "3 passed, 2 skipped in 1s",  # one not collected
                skips + "3 passed, 1 failed, 2 skipped in 1s"):
        with pytest.raises(AssertionError):
            check_interpreter_run(bad, module)


@outside_interpreter
def test_without_gpu_or_interpreter_the_reason_is_given():
    import triton_impl
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    pytest.importorskip("triton")
    for variant in triton_impl.VARIANTS:
        assert "no CUDA GPU" in triton_impl.unavailable_reason(variant)
    q = torch.randn(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(RuntimeError, match="no CUDA GPU"):
        triton_impl.attention(q, q, q, variant="fa2")


# ---------------------------------------------------------------- reference

def reference(q, k, v, causal, scale):
    """float64 attention with GQA and bottom-right causal mask; empty rows give 0 and -inf."""
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    s = q @ k.transpose(-1, -2) * scale
    seqlen_q, seqlen_k = q.shape[2], k.shape[2]
    if causal:
        i = torch.arange(seqlen_q)[:, None]
        j = torch.arange(seqlen_k)[None, :]
        s = s.masked_fill(j > i + seqlen_k - seqlen_q, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    return p @ v, lse


def assert_close(out, lse, ref_out, ref_lse, atol, lse_atol, rtol=0.0):
    """|out - ref| <= atol + rtol * |ref| everywhere, |lse - ref| <= lse_atol on rows that see a key."""
    assert torch.isfinite(out).all()
    seen = torch.isfinite(ref_lse)
    excess = ((out.double() - ref_out).abs() - atol - rtol * ref_out.abs()).max().item()
    assert excess <= 0, f"|out - ref| exceeds {atol} + {rtol} * |ref| by {excess:.3g}"
    lse_err = (lse.double()[seen] - ref_lse[seen]).abs().max().item() if seen.any() else 0.0
    assert lse_err <= lse_atol, f"max |lse - ref| = {lse_err:.3g} > {lse_atol}"
    # rows that see no key: exactly 0 and -inf
    assert (out[~seen] == 0).all()
    assert (lse[~seen] == float("-inf")).all()


TOLERANCE = {torch.float16: (4e-3, 1e-4), torch.float32: (2e-5, 2e-5)}

# (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal); the interpreter uses
# BLOCK_M=32, BLOCK_N=16, so these cover several blocks, partial blocks and the diagonal band.
CASES = [
    (1, 2, 2, 37, 53, 64, False),   # tails on both axes, Sq < Sk
    (2, 2, 1, 64, 64, 64, True),    # causal, square, GQA, batch > 1
    (1, 4, 1, 40, 77, 64, True),    # causal Sq < Sk, MQA
    (1, 2, 2, 70, 45, 64, True),    # causal Sq > Sk: the first 25 rows see no key
    (1, 1, 1, 1, 33, 64, True),     # one query (decode-like)
    (1, 1, 1, 33, 1, 64, False),    # one key
    (1, 2, 1, 20, 29, 128, True),
    (1, 1, 1, 24, 40, 256, False),
]


def _inputs(case, dtype, seed=0):
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, _ = case
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads_q, seqlen_q, head_dim, generator=gen)
    k = torch.randn(batch, heads_kv, seqlen_k, head_dim, generator=gen)
    v = torch.randn(batch, heads_kv, seqlen_k, head_dim, generator=gen) + 0.5
    return q.to(dtype), k.to(dtype), v.to(dtype)


@interpreted
@pytest.mark.parametrize("variant,dtype", [("fa2", torch.float16), ("fa2-tma", torch.float16),
                                           ("fa2", torch.float32)])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}h{}/{}q{}k{}d{}{}".format(*c[:6], "c" * c[6]))
def test_16bit_matches_reference(variant, dtype, case):
    from triton_impl import attention
    q, k, v = _inputs(case, dtype)
    causal = case[-1]
    out, lse = attention(q, k, v, causal=causal, variant=variant, return_lse=True)
    assert out.dtype == dtype and out.shape == q.shape
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    assert_close(out, lse, *reference(q, k, v, causal, 1 / math.sqrt(q.shape[-1])), *TOLERANCE[dtype])


@interpreted
@pytest.mark.parametrize("variant", ["fa2", "fa2-tma"])
@pytest.mark.parametrize("scale", [0.05, 0.3, 1.7])
def test_custom_scale(variant, scale):
    from triton_impl import attention
    q, k, v = _inputs((1, 2, 2, 33, 47, 64, True), torch.float16, seed=1)
    out, lse = attention(q, k, v, causal=True, scale=scale, variant=variant, return_lse=True)
    assert_close(out, lse, *reference(q, k, v, True, scale), *TOLERANCE[torch.float16])


@interpreted
@pytest.mark.parametrize("variant", ["fa2", "fa2-tma"])
def test_strided_inputs(variant):
    """(B, S, H, D) storage viewed as (B, H, S, D): no copy needed, result as for contiguous inputs."""
    from triton_impl import attention
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(2, 41, 4, 64, generator=gen).half().transpose(1, 2)
    k = torch.randn(2, 50, 2, 64, generator=gen).half().transpose(1, 2)
    v = torch.randn(2, 50, 2, 64, generator=gen).half().transpose(1, 2)
    out, lse = attention(q, k, v, causal=True, variant=variant, return_lse=True)
    assert_close(out, lse, *reference(q, k, v, True, 1 / 8), *TOLERANCE[torch.float16])


@interpreted
def test_pointer_variant_takes_any_strides_and_tma_refuses_them():
    from triton_impl import attention
    gen = torch.Generator().manual_seed(3)
    # head_dim is not the contiguous axis here
    q = torch.randn(1, 2, 64, 30, generator=gen).half().transpose(-1, -2)
    k = torch.randn(1, 2, 64, 36, generator=gen).half().transpose(-1, -2)
    v = torch.randn(1, 2, 36, 64, generator=gen).half()
    out, lse = attention(q, k, v, variant="fa2", return_lse=True)
    assert_close(out, lse, *reference(q, k, v, False, 1 / 8), *TOLERANCE[torch.float16])
    with pytest.raises(ValueError, match="TMA"):
        attention(q, k, v, variant="fa2-tma")


@interpreted
@pytest.mark.parametrize("module", ["fa2_pointer", "fa2_tma"])
@pytest.mark.parametrize("block_m,block_n", [(16, 32), (16, 16), (64, 16)])
@pytest.mark.parametrize("seqlens", [(45, 70), (70, 45)])
def test_block_shapes_causal(module, block_m, block_n, seqlens):
    """The diagonal split must hold for any BLOCK_M/BLOCK_N, including BLOCK_N > BLOCK_M."""
    import importlib
    kernels = importlib.import_module(f"triton_impl.kernels.{module}")
    q, k, v = _inputs((1, 2, 1, *seqlens, 64, True), torch.float16, seed=4)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype)
    lse = torch.full(q.shape[:3], float("nan"))
    kernels.launch(q, k, v, out, lse, True, 0.125, config=dict(BLOCK_M=block_m, BLOCK_N=block_n))
    assert_close(out, lse, *reference(q, k, v, True, 0.125), *TOLERANCE[torch.float16])


# ---------------------------------------------------------------- fp8

def online_quantized_reference(q, k, v, causal, scale, block_n):
    """What the quantized kernels (fp8, and the MXFP8/NVFP4 dequant variants) compute, in fp32:
    formats' dequantized inputs, the online softmax over key blocks of block_n, each block's P
    quantized by compare.formats.quantize_p(p, q.fmt) against the running max."""
    from compare.formats import quantize_p
    qd, kd, vd = (x.dequantize() for x in (q, k, v))
    group = qd.shape[1] // kd.shape[1]
    kd, vd = kd.repeat_interleave(group, 1), vd.repeat_interleave(group, 1)
    log2e = 1.4426950408889634
    s = (qd @ kd.transpose(-1, -2)) * (scale * log2e)
    seqlen_q, seqlen_k = s.shape[-2:]
    if causal:
        i = torch.arange(seqlen_q)[:, None]
        j = torch.arange(seqlen_k)[None, :]
        s = s.masked_fill(j > i + seqlen_k - seqlen_q, float("-inf"))
    m = torch.full(s.shape[:-1], float("-inf"))
    l = torch.zeros(s.shape[:-1])
    acc = torch.zeros(*s.shape[:-1], qd.shape[-1])
    for start in range(0, seqlen_k, block_n):
        m_new = torch.maximum(m, s[..., start:start + block_n].amax(-1))
        shift = torch.where(m_new == float("-inf"), 0.0, m_new)
        p = torch.exp2(s[..., start:start + block_n] - shift[..., None])
        alpha = torch.exp2(m - shift)
        l = l * alpha + p.sum(-1)
        acc = acc * alpha[..., None] + quantize_p(p, q.fmt) @ vd[..., start:start + block_n, :]
        m = m_new
    out = torch.where(l[..., None] > 0, acc / l.clamp_min(1e-30)[..., None], 0.0)
    return out, (m + torch.log2(l)) / log2e

@interpreted
@pytest.mark.parametrize("case", [
    (1, 2, 1, 37, 53, 64, False),   # key tail, V^T through pointer loads (53 % 16 != 0)
    (2, 2, 2, 70, 48, 64, True),    # Sq > Sk, V^T through TMA (48 % 16 == 0)
    (1, 4, 2, 40, 77, 128, True),   # GQA, Sq < Sk
    (1, 4, 2, 40, 96, 128, False),  # GQA, K tiles key-permuted (96 % 16 == 0) over six key blocks
], ids=lambda c: "b{}h{}/{}q{}k{}d{}{}".format(*c[:6], "c" * c[6]))
def test_fp8_matches_its_definition(case):
    from compare.formats import quantize_attention_inputs
    from triton_impl import attention
    from triton_impl.kernels.tuning import INTERPRETER_CONFIG
    q, k, v = _inputs(case, torch.float32, seed=5)
    k = k * 3  # per-head descales that differ between tensors
    qq, kq, vq = quantize_attention_inputs(q, k, v, "fp8")
    causal, scale = case[-1], 0.11
    out, lse = attention(qq, kq, vq, causal=causal, scale=scale, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    want_out, want_lse = online_quantized_reference(qq, kq, vq, causal, scale, INTERPRETER_CONFIG["BLOCK_N"])
    # one bf16 ulp (2**-7 relative): the interpreter truncates fp32 -> bf16 where the GPU rounds
    assert_close(out.float(), lse, want_out.double(), want_lse.double(), 1e-3, 1e-4, rtol=2**-7)
    # and against exact attention on the dequantized inputs: P's e4m3 rounding is a few percent
    exact_out, exact_lse = reference(qq.dequantize(), kq.dequantize(), vq.dequantize(), causal, scale)
    assert_close(out.float(), lse, exact_out, exact_lse, 0.1, 1e-4)


# ---------------------------------------------------------------- API surface and refusals

@interpreted
def test_variant_table_follows_the_contract():
    import triton_impl
    for name, spec in triton_impl.VARIANTS.items():
        assert {"formats", "head_dims", "min_cc", "max_cc", "description", "kernels", "op"} <= set(spec) <= {
            "formats", "head_dims", "min_cc", "max_cc", "description", "kernels", "op", "tma", "gluon", "max_seqlen_q",
            "local", "softcap", "varlen", "head_dim_pairs"}
        assert spec["op"] in ("fwd", "fwd_fp8", "fwd_blocked", "decode")
        assert not (spec.get("local") or spec.get("softcap") or spec.get("varlen")) or spec["op"] == "fwd", name
        assert (spec["op"] == "decode") == ("max_seqlen_q" in spec), name
        assert importlib.util.find_spec(spec["kernels"]) is not None, spec["kernels"]
        reason = triton_impl.unavailable_reason(name)
        if "Gluon" in spec["description"]:  # Gluon kernels need a GPU: the interpreter refuses them by name
            assert reason is not None and "Gluon" in reason and name in reason, reason
        else:
            assert reason is None, reason  # the interpreter runs every Triton-language variant
    for low, high, formats, head_dims, longest, name in triton_impl.DEFAULT_VARIANTS:
        spec = triton_impl.VARIANTS[name]
        assert set(formats) <= set(spec["formats"]) and spec["min_cc"] <= low, name
        assert head_dims is None or set(head_dims) <= set(spec["head_dims"]), name
    with pytest.raises(ValueError, match="unknown"):
        triton_impl.unavailable_reason("fa5")


@interpreted
def test_custom_op_under_torch_compile():
    from triton_impl import attention
    q, k, v = _inputs((1, 2, 1, 24, 40, 64, True), torch.float16, seed=6)
    eager = attention(q, k, v, causal=True, variant="fa2")
    compiled = torch.compile(lambda a, b, c: attention(a, b, c, causal=True, variant="fa2"),
                             backend="aot_eager", fullgraph=True)
    assert torch.equal(compiled(q, k, v), eager)
    torch.library.opcheck(torch.ops.triton_fa.fwd.default, (q, k, v, True, 0.125, "fa2"))


def _bad_calls():
    half = dict(dtype=torch.float16)
    q = torch.randn(1, 2, 8, 64, **half)
    kv = torch.randn(1, 2, 8, 64, **half)
    return [
        ("int dtype", lambda a: a(q.int(), kv.int(), kv.int()), TypeError, "dtype"),
        ("mixed dtypes", lambda a: a(q, kv.float(), kv), TypeError, "one dtype"),
        ("fp32 with fa2-tma", lambda a: a(q.float(), kv.float(), kv.float(), variant="fa2-tma"),
         TypeError, "formats"),
        ("16-bit to fp8 variant", lambda a: a(q, kv, kv, variant="fp8"), TypeError, "formats"),
        ("unknown variant", lambda a: a(q, kv, kv, variant="fa5"), ValueError, "unknown"),
        ("head_dim 36", lambda a: a(q[..., :36], kv[..., :36], kv[..., :36]), ValueError, "head_dim"),
        ("3-D input", lambda a: a(q[0], kv[0], kv[0]), ValueError, "4-D"),
        ("heads not divisible", lambda a: a(torch.randn(1, 3, 8, 64, **half), kv, kv), ValueError, "multiple"),
        ("k/v mismatch", lambda a: a(q, kv, kv[:, :, :5]), ValueError, "same"),
        ("empty seqlen", lambda a: a(q[:, :, :0], kv, kv), ValueError, "empty"),
        ("zero scale", lambda a: a(q, kv, kv, scale=0.0), ValueError, "scale"),
        ("tensor and QuantTensor mixed", lambda a: a(_fp8(q), kv, kv), TypeError, "QuantTensor"),
        ("V not transposed", lambda a: a(_fp8(q), _fp8(kv), _fp8(kv)), ValueError, "transposed"),
        ("misaligned for TMA", lambda a: a(_misaligned(q), kv, kv, variant="fa2-tma"), ValueError, "16-byte"),
        ("head_dim 256 to fp8-ws", lambda a: a(*_fp8_inputs(torch.randn(1, 1, 8, 256)), variant="fp8-ws"),
         ValueError, "head_dim 256"),
        ("Gluon variant in the interpreter", lambda a: a(q, kv, kv, variant="fa2-ws"), RuntimeError, "Gluon"),
        ("mxfp8 input to the fp8 variant", lambda a: a(*(_quantized(x, "mxfp8") for x in (q, kv, kv)), variant="fp8"),
         TypeError, "format"),
        ("fp8 variant through the 16-bit op", lambda a: torch.ops.triton_fa.fwd(q, kv, kv, False, 0.1, "fp8"),
         ValueError, "runs variants"),
    ]


def _fp8(x):
    return _quantized(x, "fp8")


def _fp8_inputs(x):
    """q, k, v (v stored transposed) quantized to fp8 from the same values."""
    from compare.formats import quantize_attention_inputs
    return quantize_attention_inputs(x, x, x, "fp8")


def _quantized(x, fmt):
    from compare.formats import quantize
    return quantize(x.float(), fmt)


def _misaligned(x):
    """Same values, base address 2 bytes off a 16-byte boundary."""
    flat = torch.empty(x.numel() + 1, dtype=x.dtype)[1:]
    return flat.view(x.shape).copy_(x)


@interpreted
@pytest.mark.parametrize("name,call,error,match", _bad_calls(), ids=[c[0] for c in _bad_calls()])
def test_bad_input_is_refused(name, call, error, match):
    from triton_impl import attention
    with pytest.raises(error, match=match):
        call(attention)


# ---------------------------------------------------------------- MXFP8 / NVFP4


BLOCKED_CASES = [
    (1, 2, 1, 37, 53, 64, False),   # tails on both axes (V^T padded 53 -> 64), GQA
    (2, 2, 2, 70, 45, 64, True),    # causal Sq > Sk: rows that see no key, batch > 1
    (1, 4, 2, 40, 77, 128, True),   # causal Sq < Sk, GQA
]


@interpreted
@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
@pytest.mark.parametrize("case", BLOCKED_CASES, ids=lambda c: "b{}h{}/{}q{}k{}d{}{}".format(*c[:6], "c" * c[6]))
def test_blocked_dequant_matches_its_definition(fmt, case):
    """Dequantization of every tile and the in-kernel quantization of P follow compare.formats (fp32 tiles:
    the interpreter's bf16 dots are wrong); and the quantization of P is really there."""
    from compare.formats import quantize_attention_inputs
    from triton_impl import attention
    from triton_impl.kernels.mx_blocks import INTERPRETER_CONFIG
    q, k, v = _inputs(case, torch.float32, seed=7)
    qq, kq, vq = quantize_attention_inputs(q, k * 3, v, fmt)
    causal, scale = case[-1], 0.11
    out, lse = attention(qq, kq, vq, causal=causal, scale=scale, return_lse=True)
    assert out.dtype == torch.bfloat16 and out.shape == q.shape
    want_out, want_lse = online_quantized_reference(qq, kq, vq, causal, scale, INTERPRETER_CONFIG["BLOCK_N"])
    # one bf16 ulp (2**-7 relative): the interpreter truncates fp32 -> bf16 where the GPU rounds
    assert_close(out.float(), lse, want_out.double(), want_lse.double(), 1e-3, 1e-4, rtol=2**-7)
    exact_out, _ = reference(qq.dequantize(), kq.dequantize(), vq.dequantize(), causal, scale)
    seen = torch.isfinite(want_lse)
    assert (out.double() - exact_out)[seen].abs().max() > 1e-2, "P does not look quantized"


@interpreted
def test_blocked_dequant_fp16_tiles():
    """The tile dtype is a parameter: fp16 tiles (the interpreter's stand-in for bf16) give the same result
    within fp16's rounding of P and the dot inputs."""
    from compare.formats import quantize_attention_inputs
    from triton_impl.kernels import mx_dequant
    q, k, v = _inputs((1, 2, 2, 33, 64, 64, True), torch.float32, seed=8)
    qq, kq, vq = quantize_attention_inputs(q, k, v, "mxfp8")
    results = []
    for tile in (torch.float32, torch.float16):
        out = torch.full(q.shape, float("nan"), dtype=torch.bfloat16)
        lse = torch.full(q.shape[:3], float("nan"))
        mx_dequant.launch("mxfp8", qq.data, qq.scale, kq.data, kq.scale, vq.data, vq.scale, (None,) * 3,
                          out, lse, True, 0.125, tile_dtype=tile)
        results.append((out.double(), lse.double()))
    (out32, lse32), (out16, lse16) = results
    assert (out16 - out32).abs().max() <= 2e-2 and (lse16 - lse32).abs().max() <= 1e-2


@interpreted
@pytest.mark.parametrize("variant", ["mxfp8-dequant", "nvfp4-dequant"])
def test_blocked_dequant_passes_the_shared_oracle_with_several_blocks_per_tile(variant, monkeypatch):
    """The shared oracle (final-max emulation of P's quantization) accepts the running-max kernels when a
    key tile holds several P blocks, as on the GPU (BLOCK_N 128 = four MX blocks, eight NVFP4 blocks)."""
    from compare import oracle
    from triton_impl import attention
    from triton_impl.kernels import mx_blocks
    monkeypatch.setitem(mx_blocks.INTERPRETER_CONFIG, "BLOCK_M", 64)
    monkeypatch.setitem(mx_blocks.INTERPRETER_CONFIG, "BLOCK_N", 128)
    fmt = variant.split("-")[0]
    for case in (oracle.Case(1, 2, 2, 97, 203, 64, fmt=fmt, seed=1000),
                 oracle.Case(1, 4, 2, 130, 64, 64, causal=True, fmt=fmt, dist="large", seed=1003)):
        verdict = oracle.check(lambda q, k, v, **kw: attention(q, k, v, variant=variant, **kw), case)
        assert verdict.passed, verdict.summary()

if INSIDE_INTERPRETER:
    import triton
    import triton.language as tl

    from triton_impl.kernels import mx_blocks

    @triton.jit
    def _quantize_p_kernel(P, OUT, FORMAT: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
        offs = tl.arange(0, ROWS)[:, None] * COLS + tl.arange(0, COLS)[None, :]
        p = tl.load(P + offs)
        if FORMAT == "mxfp8":
            p = mx_blocks.quantize_p_mxfp8(p, ROWS, COLS, True)
        else:
            p = mx_blocks.quantize_p_nvfp4(p, ROWS, COLS, True)
        tl.store(OUT + offs, p)


def _p_with_edge_cases(fmt):
    """Random P rows plus rows that hit every rounding rule: ties, saturation, power-of-two amax, zero
    and tiny blocks."""
    gen = torch.Generator().manual_seed(9)
    p = torch.exp2(-(torch.randn(16, 64, generator=gen) * 4).abs())
    p[1] = 0.0
    p[2] = 2.0 ** -125  # MX code 0 (2**-127), NVFP4 scale 0
    if fmt == "mxfp8":
        # amax 480 / 2**11 -> e = -11: p * 2**11 hits the e4m3 ties 272 (down to 256) and 304 (up to 320),
        # and 480 saturates to 448
        p[3, :32] = torch.tensor([256.0, 272.0, 304.0, 480.0, 1.0, 0.5] + [100.0] * 26) / 2048
        p[4, :32] = 2.0 ** -3  # amax exactly a power of two
    else:
        # amax 0.75 -> block scale e4m3(0.125) = 0.125: e2m1 ties at 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5
        ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 0.1, 7.0 / 8]) * 0.125
        p[3, :16] = torch.cat([ties, torch.full((6,), 0.05)])
        # amax 0.7725 -> block scale e4m3(0.12875) = 0.125, so 0.7725 / 0.125 = 6.18 saturates to 6
        p[4, :16] = torch.tensor([0.7725] + [0.3] * 15)
    return p


@interpreted
@pytest.mark.parametrize("fmt", ["mxfp8", "nvfp4"])
def test_in_kernel_p_quantization_is_bit_exact(fmt):
    from compare.formats import quantize_p
    p = _p_with_edge_cases(fmt)
    out = torch.full_like(p, float("nan"))
    _quantize_p_kernel[(1,)](p, out, FORMAT=fmt, ROWS=p.shape[0], COLS=p.shape[1])
    want = quantize_p(p, fmt)
    assert torch.equal(out, want), f"{int((out != want).sum())} of {p.numel()} differ: {out[out != want][:5]} " \
                                   f"vs {want[out != want][:5]}"


@interpreted
def test_mxfp8_dot_scaled_is_refused_by_the_interpreter():
    from compare.formats import quantize_attention_inputs
    from triton_impl import attention
    q, k, v = _inputs((1, 1, 1, 16, 32, 64, False), torch.float32)
    with pytest.raises(NotImplementedError, match="interpreter"):
        attention(*quantize_attention_inputs(q, k, v, "mxfp8"), variant="mxfp8-dot-scaled")


@interpreted
def test_blocked_op_under_opcheck():
    from compare.formats import quantize_attention_inputs
    q, k, v = _inputs((1, 2, 1, 20, 40, 64, True), torch.float32, seed=10)
    qq, kq, vq = quantize_attention_inputs(q, k, v, "nvfp4")
    args = (qq.data, qq.scale, kq.data, kq.scale, vq.data, vq.scale, qq.tensor_scale, kq.tensor_scale,
            vq.tensor_scale, True, 0.125, "nvfp4-dequant")
    # opcheck's schema test multiplies the inputs, which torch cannot do for float8 on the CPU
    torch.library.opcheck(torch.ops.triton_fa.fwd_blocked.default, args,
                          test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


def _blocked_bad_calls():
    import dataclasses
    from compare.formats import quantize_attention_inputs
    q, k, v = _inputs((1, 2, 2, 8, 40, 64, False), torch.float32)
    mx = quantize_attention_inputs(q, k, v, "mxfp8")
    nv = quantize_attention_inputs(q, k, v, "nvfp4")
    unpadded_v = dataclasses.replace(mx[2], data=mx[2].data[..., :40])
    float_scales = dataclasses.replace(mx[1], scale=mx[1].scale.float())
    no_tensor_scale = dataclasses.replace(nv[0], tensor_scale=None)
    return [
        ("nvfp4 through dot_scaled", lambda a: a(*nv, variant="nvfp4-dot-scaled"), NotImplementedError,
         "Triton 3.6 cannot lower tl.dot_scaled"),
        ("mxfp8 to an nvfp4 variant", lambda a: a(*mx, variant="nvfp4-dequant"), TypeError, "formats"),
        ("mixed mxfp8 and nvfp4", lambda a: a(mx[0], nv[1], nv[2]), TypeError, "one format"),
        ("V^T without padding", lambda a: a(mx[0], mx[1], unpadded_v), ValueError, "padded"),
        ("float scales for mxfp8", lambda a: a(mx[0], float_scales, mx[2]), TypeError, "scales"),
        ("nvfp4 without tensor scale", lambda a: a(no_tensor_scale, nv[1], nv[2]), ValueError, "tensor_scale"),
        ("head_dim 48", lambda a: a(*quantize_attention_inputs(q[..., :48], k[..., :48], v[..., :48], "mxfp8")),
         ValueError, "head_dim"),
    ]


@pytest.mark.parametrize("index", range(7))
def test_blocked_bad_input_is_refused(index):
    """Checked before any kernel or device check, so this runs with and without the interpreter."""
    pytest.importorskip("triton")
    from triton_impl import attention
    name, call, error, match = _blocked_bad_calls()[index]
    with pytest.raises(error, match=match):
        call(attention)


def _dot_scaled_e4m3_for_the_interpreter(self, lhs, lhs_scale, lhs_format, rhs, rhs_scale, rhs_format, fast_math,
                                         lhs_k_pack, rhs_k_pack, acc):
    """tl.dot_scaled as its docstring defines it, for e4m3 operands with E8M0 scales only: lhs (M, K) with
    scales (M, K/32), rhs (K, N) with scales (N, K/32), fp32 accumulate."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle
    from compare.formats import e8m0_decode

    def values(handle):
        return torch.from_numpy(np.ascontiguousarray(handle.data)).view(torch.float8_e4m3fn).float()

    def scales(handle):
        return e8m0_decode(torch.from_numpy(np.ascontiguousarray(handle.data))).repeat_interleave(32, dim=1)

    out = (values(lhs) * scales(lhs_scale)) @ (values(rhs) * scales(rhs_scale).T) + torch.from_numpy(acc.data)
    return TensorHandle(out.numpy(), tl.float32)


@interpreted
@pytest.mark.parametrize("case", BLOCKED_CASES, ids=lambda c: "b{}h{}/{}q{}k{}d{}{}".format(*c[:6], "c" * c[6]))
def test_mxfp8_dot_scaled_kernel_with_an_emulated_dot_scaled(case, monkeypatch):
    """The kernel's operands and scale tiles (orientation, masks, P's in-kernel codes) against the same
    fp32 emulation as the dequant variants, with dot_scaled emulated per its documentation."""
    from triton.runtime.interpreter import InterpreterBuilder
    from compare.formats import quantize_attention_inputs
    from triton_impl import attention
    from triton_impl.kernels.mx_blocks import INTERPRETER_CONFIG
    monkeypatch.setattr(InterpreterBuilder, "create_dot_scaled", _dot_scaled_e4m3_for_the_interpreter, raising=False)
    q, k, v = _inputs(case, torch.float32, seed=11)
    qq, kq, vq = quantize_attention_inputs(q, k * 3, v, "mxfp8")
    causal, scale = case[-1], 0.11
    out, lse = attention(qq, kq, vq, causal=causal, scale=scale, variant="mxfp8-dot-scaled", return_lse=True)
    want_out, want_lse = online_quantized_reference(qq, kq, vq, causal, scale, INTERPRETER_CONFIG["BLOCK_N"])
    assert_close(out.float(), lse, want_out.double(), want_lse.double(), 1e-3, 1e-4, rtol=2**-7)
