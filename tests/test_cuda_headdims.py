"""Every head_dim in cuda_impl's "hopper" variant (issue 32): every multiple of 8 from 32 to 256 runs on the kernel of
the next of 64 / 80 / 96 / 128 / 192 / 256 (hopper/config.cuh hopper_kernel_dim; d80 and d96 in panels of 32- and
64-byte rows), Q, K and V loaded through TMA maps of their own head_dim, which fill the columns past it with zeros, and
the epilogue writing head_dim columns. Q/K 192 with V 128 runs dense launches on kernels of its own (P V at 128
columns, 128-key tiles), local and varlen ones on the d192 kernels, V's map 128 columns wide. Dense, local (window,
softcap) and varlen launches, held to compare.oracle on an sm_90 GPU; the refusals and the output shapes run on the
CPU."""
import dataclasses

import pytest
import torch

import cuda_impl
from compare import backends, oracle
from cuda_impl import _lib
from conftest import hopper_or_skip

# Each kernel width padded (32-56 on 64, 72 on 80, 88 on 96, 104-120 on 128, 136-184 on 192, 200-248 on 256) and the
# kernels of d80, d96, d192, tails of the 128- / 192-row query tiles and of the key tiles (128 keys at d64, 96 at d80
# / d96, 128 / 176 at d128, 112 at d192, 80 at d256), GQA and MQA, Sq != Sk both ways, causal and not (two and three
# consumers at d80 / d96), the cluster pairs of non-causal d128-d256 (more than one query tile a head) and the split
# last round.
CASES = [
    oracle.Case(2, 4, 2, 300, 300, 32),
    oracle.Case(1, 8, 2, 257, 900, 40, causal=True, fmt="fp16"),
    oracle.Case(1, 4, 1, 700, 333, 72, causal=True),                     # Sq > Sk: rows that see no key
    oracle.Case(2, 8, 4, 1000, 1500, 80),
    oracle.Case(1, 16, 16, 600, 4500, 96, fmt="fp16"),                   # three consumers, split last round
    oracle.Case(2, 4, 2, 513, 1025, 96, causal=True, dist="large"),
    oracle.Case(1, 4, 4, 129, 2000, 112),
    oracle.Case(2, 8, 2, 640, 5000, 88, causal=True),
    oracle.Case(1, 16, 4, 500, 4500, 80, fmt="fp16"),                    # a 84-key last tile, split round
    oracle.Case(1, 4, 2, 1300, 1400, 80, causal=True),                   # three consumers, causal
    oracle.Case(2, 2, 1, 1100, 1100, 96, causal=True, fmt="fp16"),
    oracle.Case(2, 4, 4, 512, 700, 72, dist="shifted"),
    oracle.Case(1, 6, 3, 400, 777, 136, causal=True, fmt="fp16"),
    oracle.Case(2, 4, 2, 512, 1000, 160),                                # clusters of two query tiles
    oracle.Case(1, 8, 2, 1100, 1100, 192, causal=True),
    oracle.Case(1, 4, 1, 333, 5000, 192, fmt="fp16", dist="shifted"),
    oracle.Case(1, 2, 2, 250, 250, 248),
    oracle.Case(1, 4, 2, 900, 1300, 208, causal=True, fmt="fp16"),
    oracle.Case(2, 4, 4, 400, 1009, 176),                                 # 112-key tiles: a 1-key last tile
    oracle.Case(2, 8, 2, 700, 900, 192, head_dim_v=128),                  # Q/K 192 with V 128: cluster pairs
    oracle.Case(1, 4, 1, 333, 1000, 192, fmt="fp16", head_dim_v=128),     # ... one CTA (three query tiles)
    oracle.Case(1, 4, 4, 600, 400, 192, causal=True, fmt="fp16", head_dim_v=128),
]
LOCAL_CASES = [
    oracle.Case(1, 4, 2, 700, 700, 96, window=(100, 50)),
    oracle.Case(1, 4, 4, 513, 1025, 80, causal=True, dist="large", softcap=5.0, window=(200, 0)),
    oracle.Case(2, 2, 2, 400, 900, 192, fmt="fp16", window=(300, -1), softcap=30.0),
    oracle.Case(1, 4, 2, 500, 500, 192, causal=True, head_dim_v=128, window=(128, 0), softcap=15.0),
    oracle.Case(2, 4, 2, 700, 900, 192, fmt="fp16", head_dim_v=128, window=(200, 100)),   # non-causal, two sides
]
VARLEN_CASES = [
    oracle.VarlenCase((5, 300, 1, 129), (9, 300, 700, 128), 4, 2, 96),
    oracle.VarlenCase((700, 0, 33), (700, 20, 900), 2, 1, 192, causal=True, fmt="fp16"),   # an empty query set
    oracle.VarlenCase((333, 512), (333, 777), 2, 2, 40, window=(64, 32), softcap=20.0),
    oracle.VarlenCase((17, 400, 9), (30, 600, 9), 4, 2, 192, causal=True, head_dim_v=128),
    oracle.VarlenCase((300, 1, 129), (500, 7, 129), 4, 4, 192, head_dim_v=128),           # non-causal
    oracle.VarlenCase((257, 64), (700, 64), 2, 1, 192, head_dim_v=128, window=(100, -1)),  # varlen and local
]


def _qkv(d, dv=None, sq=16, sk=16):
    return (torch.randn(1, 2, sq, d, dtype=torch.bfloat16), torch.randn(1, 2, sk, d, dtype=torch.bfloat16),
            torch.randn(1, 2, sk, d if dv is None else dv, dtype=torch.bfloat16))


def test_hopper_takes_every_multiple_of_eight_and_refuses_the_rest():
    assert cuda_impl.VARIANTS["hopper"]["head_dims"] == tuple(range(32, 257, 8))
    for d, dv, got in ((24, None, "24"), (100, None, "100"), (264, None, "264"), (128, 64, "Q/K 128 with V 64"),
                       (128, 192, "Q/K 128 with V 192")):
        with pytest.raises(ValueError, match=f"head_dim: variant hopper supports multiples of 8 from 32 to 256, or "
                                             f"Q/K 192 with V 128, got {got}$"):
            cuda_impl.attention(*_qkv(d, dv), variant="hopper")
    with pytest.raises(ValueError, match="k and v must agree but in head_dim"):
        cuda_impl.attention(*_qkv(192, 128)[:2], torch.randn(1, 2, 15, 128, dtype=torch.bfloat16), variant="hopper")
    # The ladder and the decode kernel take no pair in q, k, v (decode's 576 / 512 only through the latent cache).
    for variant, d, dv in (("v5", 192, 128), ("decode", 576, 512)):
        with pytest.raises(ValueError, match=f"head_dim: variant {variant} supports \\(64, 128(, 256)?\\), got Q/K"):
            cuda_impl.attention(*_qkv(d, dv, sq=1), variant=variant)


def test_padded_dims_and_the_pair_pass_validation_and_stop_only_at_the_device():
    for d, dv in ((40, None), (96, None), (200, None), (192, 128)):
        with pytest.raises(ValueError, match="device"):  # CPU tensors: every shape check passed
            cuda_impl.attention(*_qkv(d, dv), variant="hopper")


def test_the_output_follows_v_under_torch_compile_tracing():
    """The custom ops' fake implementations give O V's head_dim (torch.compile traces them without a GPU)."""
    from cuda_impl import ops
    q, k, v = (t.to("meta") for t in _qkv(192, 128))
    out, lse = ops._fwd_fake(q, k, v, False, 0.1, "hopper")
    assert out.shape == (1, 2, 16, 128) and lse.shape == (1, 2, 16)
    out, lse = ops._fwd_local_fake(q, k, v, True, 0.1, 8, 0, 0.0, "hopper")
    assert out.shape == (1, 2, 16, 128)


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES + LOCAL_CASES, ids=[c.shape_str() for c in CASES + LOCAL_CASES])
def test_gpu_padded_head_dims_match_the_oracle(case):
    """Dense launches, and local ones (windows, softcap) on their own kernels."""
    hopper_or_skip()
    verdict = oracle.check(backends.get("cuda:hopper"), case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("case", VARLEN_CASES, ids=[c.shape_str() for c in VARLEN_CASES])
def test_gpu_padded_head_dims_in_packed_batches(case):
    hopper_or_skip()
    verdict = oracle.check_varlen(cuda_impl.attention_varlen, case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
def test_gpu_strided_views_and_the_columns_past_head_dim():
    """(B, S, H, D) storage read through (B, H, S, D) views: a row's next D values are the next head's, so a kernel
    that read past head_dim instead of taking TMA's zeros would mix heads; and the output's columns past it (here
    the next head's) stay as they were."""
    hopper_or_skip()
    case = oracle.Case(1, 4, 2, 300, 500, 80, causal=True)
    inputs = oracle.make_inputs(case, device="cuda")
    strided = {name: getattr(inputs, name).transpose(1, 2).contiguous().transpose(1, 2) for name in "qkv"}
    assert not strided["q"].is_contiguous()
    verdict = oracle.check(cuda_impl.attention, case, inputs=dataclasses.replace(inputs, **strided))
    assert verdict.passed, verdict.summary()
    # A view of the first 80 of 88 columns as the output: columns 80..87 must keep their values.
    wide = torch.full((1, 4, 300, 88), 7.0, dtype=torch.bfloat16, device="cuda")
    q, k, v = (getattr(inputs, name) for name in "qkv")
    out = cuda_impl.attention(q, k, v, causal=True, scale=0.1, variant="hopper")
    lse = torch.empty(1, 4, 300, dtype=torch.float32, device="cuda")
    _lib.launch_forward("hopper", q, k, v, wide[..., :80], lse, causal=True, scale=0.1)
    torch.cuda.synchronize()
    assert torch.equal(wide[..., :80], out)
    assert (wide[..., 80:] == 7.0).all()
