"""Head dims beyond 64 / 128 / 256 in the "fa2" variant (issue 32): every multiple of 8 from 32 to 256, and Q/K 192
with V 128, in triton_impl.attention and triton_impl.attention_varlen, held to compare.oracle; variant=None picks fa2
for them, the other variants and bad head dims are refused by name.

Interpreter tests: TRITON_INTERPRET must be set before any @triton.jit runs, so `test_headdims_interpreter_suite`
runs this file in a subprocess with TRITON_INTERPRET=1, where the `interpreted` tests run on the CPU (fp16/fp32,
small shapes; the interpreter's 32-row, 16-key tiles, so these shapes span several tiles and cut them). The variant
choice and the refusals need no interpreter and run in both processes; the compile checks run outside it.
"""
import dataclasses

import pytest
import torch

from compare import backends, oracle
from conftest import (check_interpreter_run, interpreted, run_interpreter_subprocess, skip_inside_interpreter,
                      sm90_compile, triton_gpu_or_skip)

pytest.importorskip("triton")


def test_headdims_interpreter_suite():
    skip_inside_interpreter()
    check_interpreter_run(run_interpreter_subprocess(__file__, "-rs", "-m", "not gpu"), globals())


CASES = [
    oracle.Case(1, 2, 2, 40, 40, 32, fmt="fp16"),                                    # the smallest, a power of two
    oracle.Case(2, 4, 2, 37, 53, 40, causal=True, fmt="fp32"),                      # GQA, Sq < Sk, tails
    oracle.Case(1, 4, 1, 45, 30, 80, causal=True, fmt="fp16"),                      # MQA, Sq > Sk: rows see no key
    oracle.Case(1, 2, 2, 33, 70, 96, fmt="fp16", dist="large", window=(8, 4), softcap=4.0),
    oracle.Case(1, 2, 1, 21, 50, 192, causal=True, fmt="fp32", dist="shifted"),
    oracle.Case(1, 2, 2, 17, 33, 248, fmt="fp16"),                                  # the largest padded one
    oracle.Case(1, 2, 2, 35, 35, 256, fmt="fp16", causal=True),                     # unpadded, as before
    oracle.Case(1, 4, 2, 33, 45, 192, causal=True, fmt="fp16", head_dim_v=128),
    oracle.Case(1, 2, 2, 20, 37, 192, fmt="fp32", head_dim_v=128, window=(6, -1), softcap=2.5),
]


@interpreted
@pytest.mark.parametrize("case", CASES, ids=[c.shape_str() for c in CASES])
def test_fa2_head_dims_match_the_oracle(case):
    verdict = oracle.check(backends.get("triton:fa2"), case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_strided_inputs_with_a_padded_head_dim():
    """(B, S, H, D) storage read through (B, H, S, D) views: rows H * D apart, so a column read past D lands in the
    next head's values, not in zeros."""
    import triton_impl
    case = oracle.Case(1, 4, 2, 29, 41, 72, causal=True, fmt="fp16")
    inputs = oracle.make_inputs(case)
    strided = {name: getattr(inputs, name).transpose(1, 2).contiguous().transpose(1, 2) for name in "qkv"}
    assert not strided["q"].is_contiguous()
    verdict = oracle.check(triton_impl.attention, case, inputs=dataclasses.replace(inputs, **strided))
    assert verdict.passed, verdict.summary()


VARLEN_CASES = [
    oracle.VarlenCase((5, 40, 1, 23), (9, 40, 30, 0), 4, 2, 80, causal=True, fmt="fp16"),   # an empty key set
    oracle.VarlenCase((17, 0, 9), (30, 4, 9), 2, 1, 192, fmt="fp32", head_dim_v=128, window=(4, -1), softcap=3.0),
]


@interpreted
@pytest.mark.parametrize("case", VARLEN_CASES, ids=[c.shape_str() for c in VARLEN_CASES])
def test_fa2_varlen_head_dims_match_the_oracle(case):
    import triton_impl
    verdict = oracle.check_varlen(triton_impl.attention_varlen, case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_variant_none_runs_fa2_for_its_head_dims():
    import triton_impl
    case = oracle.Case(1, 2, 2, 24, 24, 56, fmt="fp16")
    inputs = oracle.make_inputs(case)
    assert torch.equal(triton_impl.attention(inputs.q, inputs.k, inputs.v),
                       triton_impl.attention(inputs.q, inputs.k, inputs.v, variant="fa2"))


# ---------------------------------------------------------------- which variant runs, and refusals (no kernel runs)

def _qkv(head_dim, head_dim_v=None, *, seqlen_q=8, seqlen_k=8, dtype=torch.float16):
    return (torch.randn(1, 2, seqlen_q, head_dim, dtype=dtype), torch.randn(1, 2, seqlen_k, head_dim, dtype=dtype),
            torch.randn(1, 2, seqlen_k, head_dim_v or head_dim, dtype=dtype))


DEFAULTS = [  # (interpreting, compute capability, head_dim, V head_dim, seqlen_q, expected)
    (False, (9, 0), 80, None, 512, "fa2"), (False, (9, 0), 192, 128, 4096, "fa2"), (False, (9, 0), 40, None, 1, "fa2"),
    (False, (8, 0), 96, None, 2048, "fa2"), (True, None, 80, None, 256, "fa2"), (True, None, 192, 128, 8, "fa2"),
    (False, (9, 0), 128, None, 4096, "fa2-ws"), (True, None, 128, None, 256, "fa2-tma"),  # as before
]


@pytest.mark.parametrize("interpreting, cc, head_dim, head_dim_v, seqlen_q, expected", DEFAULTS)
def test_default_variant_for_the_new_head_dims(monkeypatch, interpreting, cc, head_dim, head_dim_v, seqlen_q,
                                               expected):
    import triton_impl
    from triton_impl import frontend
    monkeypatch.setattr(frontend, "interpreting", lambda: interpreting)
    monkeypatch.setattr(frontend, "_device_type", lambda t: "cpu" if interpreting else "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: cc)
    q, k, v = _qkv(head_dim, head_dim_v, seqlen_q=seqlen_q)
    assert triton_impl.select_variant(q, k, v) == expected


FA2_TAKES = "it takes head_dim 32 to 256 in steps of 8, or Q/K 192 with V 128"
BAD_CALLS = [  # (id, (q, k, v), attention's keywords, message)
    ("d36 not a multiple of 8", _qkv(36), dict(variant="fa2"), "head_dim 36 not supported by variant 'fa2'; "
     + FA2_TAKES),
    ("d264 past 256", _qkv(264), dict(variant="fa2"), "head_dim 264 not supported by variant 'fa2'"),
    ("d24 below 32", _qkv(24), dict(variant="fa2", window=(4, 0)), "head_dim 24 not supported by variant 'fa2'"),
    ("d36 with variant None", _qkv(36), {}, "no triton variant runs fp16 head_dim 36"),
    ("d36 head dims named", _qkv(36), {}, "fa2: 32 to 256 in steps of 8, or Q/K 192 with V 128"),
    ("d80 to fa2-tma", _qkv(80), dict(variant="fa2-tma"),
     "head_dim 80 not supported by variant 'fa2-tma'; it takes head_dim 64, 128, 256 (variants that take head_dim "
     "80: ['fa2'])"),
    ("d96 to decode", _qkv(96, seqlen_q=1), dict(variant="decode"), "head_dim 96 not supported by variant 'decode'"),
    ("V wider than Q/K", _qkv(128, 192), dict(variant="fa2"),
     "Q/K head_dim 128 with V head_dim 192 not supported by variant 'fa2'; " + FA2_TAKES),
    ("V wider, variant None", _qkv(128, 192), {}, "no triton variant runs fp16 head_dim 128 with V head_dim 192"),
    ("an undeclared pair", _qkv(256, 128), dict(variant="fa2"), "Q/K head_dim 256 with V head_dim 128 not supported"),
    ("192/128 to fa2-tma", _qkv(192, 128), dict(variant="fa2-tma"),
     "Q/K head_dim 192 with V head_dim 128 not supported by variant 'fa2-tma'; it takes head_dim 64, 128, 256 "
     "(variants that take Q/K head_dim 192 with V head_dim 128: ['fa2'])"),
    ("K's head_dim unlike Q's", (_qkv(80)[0], *_qkv(96)[1:]), dict(variant="fa2"), "differ in batch or head_dim"),
    ("K and V lengths differ", (*_qkv(192)[:2], _qkv(192, 128, seqlen_k=9)[2]), dict(variant="fa2"),
     "k and v must have the same (batch, heads, seqlen)"),
]


@pytest.mark.parametrize("inputs, kwargs, message", [c[1:] for c in BAD_CALLS], ids=[c[0] for c in BAD_CALLS])
def test_bad_head_dims_are_refused_by_name(inputs, kwargs, message):
    import triton_impl
    with pytest.raises(ValueError) as err:
        triton_impl.attention(*inputs, **kwargs)
    assert message in str(err.value), str(err.value)


def _packed(head_dim, head_dim_v=None, total_k=6):
    return (torch.randn(5, 2, head_dim, dtype=torch.float16), torch.randn(total_k, 1, head_dim, dtype=torch.float16),
            torch.randn(6, 1, head_dim_v or head_dim, dtype=torch.float16))


BAD_VARLEN_CALLS = [
    ("d36", _packed(36), "head_dim 36 not supported by variant 'fa2'; " + FA2_TAKES),
    ("V wider than Q/K", _packed(128, 192), "Q/K head_dim 128 with V head_dim 192 not supported by variant 'fa2'"),
    ("K and V lengths differ", _packed(192, 128, total_k=7), "k and v must have the same (total_tokens, heads)"),
]


@pytest.mark.parametrize("inputs, message", [c[1:] for c in BAD_VARLEN_CALLS], ids=[c[0] for c in BAD_VARLEN_CALLS])
def test_bad_varlen_head_dims_are_refused_by_name(inputs, message):
    import triton_impl
    offsets = torch.tensor([0, 5], dtype=torch.int32), torch.tensor([0, 6], dtype=torch.int32)
    with pytest.raises(ValueError) as err:
        triton_impl.attention_varlen(*inputs, *offsets, 5, 6)
    assert message in str(err.value), str(err.value)


def test_the_registry_declares_the_head_dims():
    fa2, tma = backends.get("triton:fa2"), backends.get("triton:fa2-tma")
    assert fa2.head_dims == tuple(range(32, 257, 8)) and fa2.head_dim_pairs == ((192, 128),)
    assert tma.head_dims == (64, 128, 256) and tma.head_dim_pairs == ()
    pair = oracle.Case(1, 2, 2, 8, 8, 192, fmt="fp16", head_dim_v=128)
    assert fa2.unsupported_reason(pair) is None and fa2.unsupported_reason(pair.replace(head_dim=80)) is not None
    assert "V head_dim 128" in tma.unsupported_reason(pair)
    assert fa2.unsupported_reason(oracle.Case(1, 2, 2, 8, 8, 88, fmt="fp16")) is None
    assert tma.unsupported_reason(oracle.Case(1, 2, 2, 8, 8, 88, fmt="fp16")) == "head_dim 88 not in (64, 128, 256)"


# (Q/K head_dim, V head_dim, causal, kernel options): the first autotuning candidate of the tile they are padded to
COMPILES = [(40, 40, True, {}), (80, 80, False, {}), (192, 128, True, {}), (248, 248, False, {}),
            (96, 96, True, dict(VARLEN=True, LOCAL=True, SOFTCAP=True))]


@sm90_compile
@pytest.mark.parametrize("head_dim, head_dim_v, causal, options", COMPILES,
                         ids=[f"d{d}v{dv}{'c' * c}{''.join(o)}" for d, dv, c, o in COMPILES])
def test_padded_head_dims_compile_for_sm90_without_spills(head_dim, head_dim_v, causal, options):
    from triton_impl.kernels import offline, tuning
    config = tuning.candidates("fa2", head_dim, causal, 2)[0]
    usage = offline.report(offline.compile_for("fa2", head_dim, causal, dict(config, HEAD_DIM_V=head_dim_v,
                                                                            **options)))
    assert usage["HGMMA"] > 0 and usage["HMMA"] == 0, usage
    assert usage["stack"] == 0 and usage["STL"] == 0, usage
    assert usage["smem"] <= offline.SM90_SMEM_LIMIT, usage


# ---------------------------------------------------------------- on a GPU (skipped without one)

# The interpreter's cases in 16 bits, and shapes that span several of the GPU kernel's tiles at each padded size.
GPU_CASES = [c.replace(fmt="bf16") if c.fmt == "fp32" else c for c in CASES] + [
    oracle.Case(2, 8, 2, 1000, 1000, 80, causal=True),
    oracle.Case(1, 16, 16, 777, 1500, 96),
    oracle.Case(1, 8, 1, 1200, 900, 192, causal=True, head_dim_v=128),
    oracle.Case(1, 4, 4, 513, 513, 160, fmt="fp16", window=(100, 0), softcap=30.0),
]
GPU_VARLEN_CASES = [dataclasses.replace(c, fmt="bf16") if c.fmt == "fp32" else c for c in VARLEN_CASES]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[c.shape_str() for c in GPU_CASES])
def test_gpu_fa2_head_dims_match_the_oracle(case):
    triton_gpu_or_skip()
    verdict = oracle.check(backends.get("triton:fa2"), case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_VARLEN_CASES, ids=[c.shape_str() for c in GPU_VARLEN_CASES])
def test_gpu_fa2_varlen_head_dims_match_the_oracle(case):
    triton_gpu_or_skip()
    import triton_impl
    verdict = oracle.check_varlen(triton_impl.attention_varlen, case, device="cuda")
    assert verdict.passed, verdict.summary()
