"""Triton variants on a CUDA GPU against compare.oracle (float64 reference, FlashAttention acceptance
rule). Skipped cleanly without a GPU; each variant is skipped where it cannot run (arch)."""
import pytest
import torch

from compare import oracle
from conftest import skip_unless_required

pytestmark = pytest.mark.gpu

SHAPES = [  # (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal)
    (2, 8, 2, 300, 517, 128, True),    # GQA, tails, Sq < Sk
    (1, 4, 4, 517, 300, 128, True),    # Sq > Sk: rows that see no key
    (2, 4, 1, 256, 256, 64, False),    # MQA
    (1, 2, 2, 333, 448, 256, False),
    (1, 2, 1, 129, 1024, 256, True),
]


def _runner(variant, head_dim=None):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    import triton_impl
    skip_unless_required("triton", variant, triton_impl.unavailable_reason(variant))
    if head_dim is not None and head_dim not in triton_impl.VARIANTS[variant]["head_dims"]:
        pytest.skip(f"{variant} does not take head_dim {head_dim} (refused before launch)")

    def run(q, k, v, **kw):
        return triton_impl.attention(q, k, v, variant=variant, **kw)
    return run


def _case(shape, fmt, **kw):
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal = shape
    return oracle.Case(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
                       head_dim=head_dim, causal=causal, fmt=fmt, **kw)


@pytest.mark.parametrize("variant,fmt", [(variant, fmt) for variant in ("fa2", "fa2-tma", "fa2-ws")
                                          for fmt in ("bf16", "fp16")])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_16bit_passes_the_oracle(variant, fmt, shape):
    verdict = oracle.check(_runner(variant, shape[5]), _case(shape, fmt, dist="shifted"), device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.parametrize("variant", ["fp8", "fp8-ws"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_fp8_output_passes_the_oracle(variant, shape):
    """Output and LSE meet the oracle's rule; the LSE bound is twice the plain fp8 reference's error,
    since Hopper's fp8 wgmma accumulates Q.K^T with reduced precision (triton_impl/kernels/fp8_tma.py;
    a fixed 2e-3 here failed at d256, 2.4e-3 within the oracle's 4.9e-3)."""
    verdict = oracle.check(_runner(variant, shape[5]), _case(shape, "fp8", scale=0.1), device="cuda")
    assert verdict.passed, verdict.summary()
    assert verdict.lse_bound is not None and verdict.lse_err <= verdict.lse_bound, verdict.summary()


@pytest.mark.parametrize("variant", ["fa2", "fa2-tma", "fa2-ws"])
def test_strided_views(variant):
    """(B, S, H, D) storage viewed as (B, H, S, D) gives the same result as contiguous inputs."""
    run = _runner(variant)
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(2, 700, 8, 128, device="cuda", generator=gen, dtype=torch.bfloat16).transpose(1, 2)
               for _ in range(3))
    strided = run(q, k, v, causal=True)
    contiguous = run(q.contiguous(), k.contiguous(), v.contiguous(), causal=True)
    torch.testing.assert_close(strided, contiguous, atol=1e-2, rtol=0)


def test_torch_compile_fullgraph():
    run = _runner("fa2-tma")
    import triton_impl
    gen = torch.Generator(device="cuda").manual_seed(1)
    q, k, v = (torch.randn(1, 4, 512, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    compiled = torch.compile(lambda a, b, c: triton_impl.attention(a, b, c, causal=True, variant="fa2-tma") * 2,
                             fullgraph=True)
    assert torch.equal(compiled(q, k, v), run(q, k, v, causal=True) * 2)


def test_gluon_variants_name_their_config():
    """The driver writes last_config into each timed row's note: the Gluon variants report their table's
    config (and fp8-ws whether K came key-permuted)."""
    run = _runner("fa2-ws")
    import triton_impl
    from compare import formats
    gen = torch.Generator(device="cuda").manual_seed(2)
    q, k, v = (torch.randn(1, 2, 256, 128, device="cuda", generator=gen, dtype=torch.bfloat16) for _ in range(3))
    run(q, k, v)
    assert triton_impl.last_config("fa2-ws") == "128x128 ws s3 overlap"
    triton_impl.attention(*formats.quantize_attention_inputs(q, k, v, "fp8"), variant="fp8-ws")
    assert triton_impl.last_config("fp8-ws") == "128x128 ws s4 k-permuted"
    q64, k64, v64 = (t[..., :64].contiguous() for t in (q, k, v))  # head_dim 64: three consumers, 192 rows
    run(q64, k64, v64)
    assert triton_impl.last_config("fa2-ws") == "192x128 ws s3"
