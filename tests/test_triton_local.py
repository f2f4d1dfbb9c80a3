"""Local attention (window=) and softcap in triton_impl.attention, and packed variable-length batches
(triton_impl.attention_varlen), held to compare.oracle (which defines all three as FlashAttention does).

Interpreter tests: TRITON_INTERPRET must be set before any @triton.jit runs, so `test_local_interpreter_suite`
runs this file in a subprocess with TRITON_INTERPRET=1, where the `interpreted` tests run on the CPU (fp16/fp32,
small shapes; the interpreter's 16-row, 16-key tiles, so these shapes span several tiles and windows cut them).
The refusals and the compile check need no interpreter.
"""
import dataclasses

import pytest
import torch

from compare import backends, oracle
from conftest import (check_interpreter_run, interpreted, run_interpreter_subprocess, skip_inside_interpreter,
                      sm90_compile, triton_gpu_or_skip)

pytest.importorskip("triton")


def test_local_interpreter_suite():
    skip_inside_interpreter()
    check_interpreter_run(run_interpreter_subprocess(__file__, "-rs", "-m", "not gpu"), globals())


CASES = [
    oracle.Case(1, 2, 2, 40, 40, 64, fmt="fp32", window=(5, 3)),
    oracle.Case(2, 4, 2, 37, 53, 64, causal=True, fmt="fp16", window=(8, -1)),     # causal: right = 0, Sq < Sk
    oracle.Case(1, 2, 1, 45, 30, 64, fmt="fp16", window=(-1, 4)),                   # Sq > Sk: leading rows see none
    oracle.Case(1, 2, 2, 33, 70, 64, fmt="fp32", window=(0, 0)),                    # one key per row
    oracle.Case(1, 2, 2, 35, 35, 64, fmt="fp32", dist="large", softcap=5.0),
    oracle.Case(2, 4, 1, 21, 50, 64, causal=True, fmt="fp16", dist="large", softcap=2.5, window=(9, 0)),
]


@interpreted
@pytest.mark.parametrize("case", CASES, ids=[c.shape_str() for c in CASES])
def test_fa2_window_and_softcap_match_the_oracle(case):
    verdict = oracle.check(backends.get("triton:fa2"), case)
    assert verdict.passed, verdict.summary()


@interpreted
def test_rows_without_keys_and_the_default_variant():
    import triton_impl
    case = oracle.Case(1, 2, 2, 40, 20, 64, fmt="fp32")
    inputs = oracle.make_inputs(case)
    out, lse = triton_impl.attention(inputs.q, inputs.k, inputs.v, window=(2, 1), return_lse=True)
    # row i sees keys i - 22 .. i - 19: none for i < 19
    assert (out[:, :, :19] == 0).all() and torch.isneginf(lse[:, :, :19]).all()
    assert torch.isfinite(lse[:, :, 19:]).all()
    same = triton_impl.attention(inputs.q, inputs.k, inputs.v, window=(2, 1), variant="fa2")
    assert torch.equal(out, same)


def test_other_variants_and_bad_arguments_are_refused():
    import triton_impl
    q = torch.zeros(1, 2, 8, 64, dtype=torch.float16)
    with pytest.raises(NotImplementedError, match="'fa2-tma' has no local window"):
        triton_impl.attention(q, q, q, window=(4, 0), variant="fa2-tma")
    with pytest.raises(NotImplementedError, match="the variants with them: \\['fa2'\\]"):
        triton_impl.attention(q, q, q, softcap=3.0, variant="fp8")
    with pytest.raises(ValueError, match="window"):
        triton_impl.attention(q, q, q, window=(4, -2))
    with pytest.raises(ValueError, match="softcap"):
        triton_impl.attention(q, q, q, softcap=-1.0)
    import cuda_impl
    with pytest.raises(NotImplementedError, match="'v5' has no local window"):
        cuda_impl.attention(q, q, q, window=(4, 0), variant="v5")
    assert backends.get("triton:fa2").local and not backends.get("triton:fa2-tma").local
    case = oracle.Case(1, 2, 2, 8, 8, 64, window=(2, 0))
    assert backends.get("triton:fa2-tma").unsupported_reason(case) == "a local window (no window= argument)"
    assert backends.get("triton:fa2").unsupported_reason(case) is None


VARLEN_CASES = [
    oracle.VarlenCase((5, 40, 1, 23), (9, 40, 30, 0), 4, 2, 64, fmt="fp16"),            # an empty key set
    oracle.VarlenCase((33, 0, 17), (20, 4, 50), 2, 2, 64, causal=True, fmt="fp32"),      # Sq > Sk, an empty query set
    oracle.VarlenCase((40, 12), (64, 12), 4, 1, 128, causal=True, fmt="fp16", window=(6, -1), softcap=3.0,
                      dist="large"),
]


@interpreted
@pytest.mark.parametrize("case", VARLEN_CASES, ids=[c.shape_str() for c in VARLEN_CASES])
def test_fa2_varlen_matches_the_oracle(case):
    import triton_impl
    verdict = oracle.check_varlen(triton_impl.attention_varlen, case)
    assert verdict.passed, verdict.summary()


def test_varlen_refusals():
    import triton_impl
    case = oracle.VarlenCase((3, 5), (4, 6), 2, 2, 64, fmt="fp16")
    inputs = oracle.make_varlen_inputs(case)
    args = (inputs.q, inputs.k, inputs.v, inputs.cu_seqlens_q, inputs.cu_seqlens_k, 5, 6)
    with pytest.raises(NotImplementedError, match="takes no packed batches"):
        triton_impl.attention_varlen(*args, variant="fa2-tma")
    with pytest.raises(TypeError, match="int32"):
        triton_impl.attention_varlen(*args[:3], inputs.cu_seqlens_q.long(), *args[4:])
    with pytest.raises(ValueError, match="head_dim"):
        bad = oracle.make_varlen_inputs(oracle.VarlenCase((3,), (4,), 2, 2, 36, fmt="fp16"))  # not a multiple of 8
        triton_impl.attention_varlen(bad.q, bad.k, bad.v, bad.cu_seqlens_q, bad.cu_seqlens_k, 3, 4)


COMPILE_OPTIONS = [dict(LOCAL=True), dict(SOFTCAP=True), dict(LOCAL=True, SOFTCAP=True), dict(VARLEN=True),
                   dict(VARLEN=True, LOCAL=True, SOFTCAP=True)]


@sm90_compile
@pytest.mark.parametrize("options", COMPILE_OPTIONS)
def test_the_options_compile_for_sm90_without_spills(options):
    from triton_impl.kernels import offline
    kernel = offline.compile_for("fa2", 128, True, dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3,
                                                        **options))
    assert offline.report(kernel)["STL"] == 0


# ---------------------------------------------------------------- the same cases on a GPU (skipped without one)

GPU_CASES = [c.replace(fmt="bf16") if c.fmt == "fp32" else c for c in CASES]
GPU_VARLEN_CASES = [dataclasses.replace(c, fmt="bf16") if c.fmt == "fp32" else c for c in VARLEN_CASES]


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES, ids=[c.shape_str() for c in GPU_CASES])
def test_gpu_fa2_window_and_softcap_match_the_oracle(case):
    triton_gpu_or_skip()
    verdict = oracle.check(backends.get("triton:fa2"), case, device="cuda")
    assert verdict.passed, verdict.summary()


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_VARLEN_CASES, ids=[c.shape_str() for c in GPU_VARLEN_CASES])
def test_gpu_fa2_varlen_matches_the_oracle(case):
    triton_gpu_or_skip()
    import triton_impl
    verdict = oracle.check_varlen(triton_impl.attention_varlen, case, device="cuda")
    assert verdict.passed, verdict.summary()
