"""cuda_impl v1..v5 against a float64 reference on the GPU (skipped without one).

Acceptance follows the FlashAttention rule: the kernel's error against float64 may be at most
twice that of a plain PyTorch implementation in the kernel's own precision (16-bit matmuls,
fp32 softmax, P rounded to 16 bits), plus a small floor for output rounding. Outputs and LSE
are NaN-poisoned before each launch so that an unwritten element fails.
"""

from __future__ import annotations

import math

import pytest
import torch

import cuda_impl
from cuda_impl import _lib

pytestmark = pytest.mark.gpu

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Dense variants that take 16-bit tensors (quantized-input ones have their own tests:
# tests/test_cuda_hopper_fp8.py, tests/test_cuda_sm120.py; the decode kernels, which launch_forward does not run,
# tests/test_cuda_decode.py).
SIXTEEN_BIT = [name for name, spec in cuda_impl.VARIANTS.items()
               if "bf16" in spec["formats"] and "max_seqlen_q" not in spec]


@pytest.fixture(autouse=True)
def _needs_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")


def visible_keys(sq: int, sk: int, causal: bool, device) -> torch.Tensor:
    """(sq, sk) bool: bottom-right aligned causal mask (query i sees keys j <= i + sk - sq)."""
    i = torch.arange(sq, device=device)[:, None]
    j = torch.arange(sk, device=device)[None, :]
    return (j <= i + sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool, device=device)


def attention_reference(q, k, v, causal, scale, *, low_precision=False):
    """float64 attention (or the kernel's precision with low_precision) -> (out, lse) float64."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    if low_precision:  # exact 16-bit products, fp32 accumulation, as the tensor cores do
        s = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    else:
        s = torch.matmul(q.double(), k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~visible_keys(q.shape[2], k.shape[2], causal, q.device), -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)  # rows that see no key: 0, not NaN
    if low_precision:
        out = torch.matmul(p.to(q.dtype), v).double()
    else:
        out = torch.matmul(p, v.double())
    return out, lse.double()


def run_poisoned(variant, q, k, v, causal, scale, extra_flags=()):
    out = torch.full(q.shape, math.nan, dtype=q.dtype, device=q.device)
    lse = torch.full(q.shape[:-1], math.nan, dtype=torch.float32, device=q.device)
    _lib.launch_forward(variant, q, k, v, out, lse, causal=causal, scale=scale, extra_flags=extra_flags)
    torch.cuda.synchronize()
    return out, lse


def check_against_reference(variant, q, k, v, causal, scale, extra_flags=()):
    """extra_flags selects another build of the library (scripts/dev.py: ablations, the baseline)."""
    out, lse = run_poisoned(variant, q, k, v, causal, scale, extra_flags)
    ref_out, ref_lse = attention_reference(q, k, v, causal, scale)
    lp_out, lp_lse = attention_reference(q, k, v, causal, scale, low_precision=True)
    assert not out.isnan().any(), "unwritten or NaN output"
    assert not lse.isnan().any(), "unwritten or NaN lse"
    err = (out.double() - ref_out).abs().max().item()
    lp_err = (lp_out - ref_out).abs().max().item()
    floor = torch.finfo(q.dtype).eps  # about two output ulps at |out| = 1
    assert err <= 2 * lp_err + floor, f"out error {err:.3g} > 2 x {lp_err:.3g} + {floor:.3g}"
    # LSE: -inf exactly where the reference has no visible key, close elsewhere.
    empty = torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), empty)
    assert (out[empty.nonzero(as_tuple=True)] == 0).all()
    finite = ~empty
    if finite.any():
        lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item()
        lp_lse_err = (lp_lse[finite] - ref_lse[finite]).abs().max().item()
        assert lse_err <= 2 * lp_lse_err + 2e-4, f"lse error {lse_err:.3g}"


def make_inputs(b, hq, hkv, sq, sk, d, dtype, *, shift=0.0, magnitude=1.0, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def draw(*shape):
        return (torch.randn(*shape, generator=g, device="cuda") * magnitude + shift).to(dtype)

    return draw(b, hq, sq, d), draw(b, hkv, sk, d), draw(b, hkv, sk, d)


SHAPES = [
    # b, hq, hkv, sq, sk
    (1, 2, 2, 128, 128),
    (2, 4, 4, 200, 333),  # tails on both axes, Sq < Sk
    (1, 4, 4, 300, 97),  # Sq > Sk: under causal, the first rows see no key
    (2, 8, 2, 64, 256),  # GQA
    (1, 4, 1, 1, 77),  # MQA, one query
    (1, 1, 1, 1, 1),
]


@pytest.mark.parametrize("variant", SIXTEEN_BIT)
@pytest.mark.parametrize("fmt", list(DTYPES))
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_float64_reference(variant, fmt, head_dim, causal, shape):
    b, hq, hkv, sq, sk = shape
    q, k, v = make_inputs(b, hq, hkv, sq, sk, head_dim, DTYPES[fmt], seed=sq * 7 + sk)
    check_against_reference(variant, q, k, v, causal, 1.0 / math.sqrt(head_dim))


@pytest.mark.parametrize("variant", SIXTEEN_BIT)
@pytest.mark.parametrize("case", ["shifted_mean", "large_magnitude", "custom_scale"])
def test_hard_inputs(variant, case):
    kwargs = {"shifted_mean": dict(shift=2.0), "large_magnitude": dict(magnitude=4.0), "custom_scale": {}}[
        case
    ]
    q, k, v = make_inputs(1, 4, 2, 257, 513, 128, torch.bfloat16, seed=3, **kwargs)
    scale = 0.3 if case == "custom_scale" else 1.0 / math.sqrt(128)
    for causal in (False, True):
        check_against_reference(variant, q, k, v, causal, scale)


@pytest.mark.parametrize("variant", SIXTEEN_BIT)
def test_strided_inputs(variant):
    """q, k, v as (B, S, H, D) storage viewed as (B, H, S, D), and a sliced head_dim."""
    b, h, sq, sk, d = 2, 4, 150, 190, 64
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.float16).transpose(1, 2)
    kv = torch.randn(b, sk, 2, h, d + 8, device="cuda", dtype=torch.float16)
    k, v = kv[:, :, 0, :, :d].transpose(1, 2), kv[:, :, 1, :, :d].transpose(1, 2)
    assert not q.is_contiguous() and not k.is_contiguous()
    check_against_reference(variant, q, k, v, True, 1.0 / math.sqrt(d))


def test_public_api_matches_launch_and_lse_flag():
    q, k, v = make_inputs(1, 2, 2, 96, 160, 128, torch.bfloat16)
    out = cuda_impl.attention(q, k, v, causal=True)
    out2, lse = cuda_impl.attention(q, k, v, causal=True, return_lse=True)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert lse.shape == q.shape[:-1] and lse.dtype == torch.float32
    assert torch.equal(out, out2)
    ref, _ = attention_reference(q, k, v, True, 1.0 / math.sqrt(128))
    assert (out.double() - ref).abs().max().item() < 2e-2


def test_decode_route_returns_contiguous_rows():
    """variant="decode" through attention() with Sq > 1: a contiguous (B, H, Sq, D) output like every other path."""
    from compare import oracle
    case = oracle.Case(2, 8, 2, 3, 300, 128, causal=True)
    inputs = oracle.make_inputs(case, "cuda")
    out = cuda_impl.attention(inputs.q, inputs.k, inputs.v, causal=True, variant="decode")
    assert out.shape == (2, 8, 3, 128) and out.is_contiguous()
    verdict = oracle.check(lambda q, k, v, **kw: cuda_impl.attention(q, k, v, variant="decode", **kw), case,
                           device="cuda")
    assert verdict.passed, verdict.summary()


def test_custom_op_under_torch_compile():
    q, k, v = make_inputs(1, 2, 2, 64, 64, 64, torch.float16)
    eager = cuda_impl.attention(q, k, v, causal=True)
    op = torch.compile(lambda a, b, c: torch.ops.cuda_fa.fwd(a, b, c, True, 0.125, "v5")[0], fullgraph=True)
    assert torch.equal(op(q, k, v), eager)
    api = torch.compile(lambda a, b, c: cuda_impl.attention(a, b, c, causal=True))
    assert torch.equal(api(q, k, v), eager)


def test_unaligned_pointer_refused():
    base = torch.randn(1, 1, 64 * 64 + 1, device="cuda", dtype=torch.bfloat16)
    q = base[..., 1:].view(1, 1, 64, 64)  # starts 2 bytes past a 16-byte boundary
    with pytest.raises(ValueError, match="alignment"):
        cuda_impl.attention(q, q, q)
