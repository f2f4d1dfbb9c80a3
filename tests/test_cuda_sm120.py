"""The sm_120a block-scaled attention kernels (cuda_impl.sm120): compiled and inspected, never run.

The project's GPU is an H200, so these tests are all CPU: the library builds for sm_120a without
spills, its SASS holds the block-scaled MMAs (QMMA.SF.16832 for MXFP8, OMMA.SF.16864 ... 4X for
NVFP4) in the counts the tile shape implies and no 16-bit HMMA, ptxas refuses the same source for
sm_90a, the registry and the package refuse the variants on an sm_90 GPU naming the arch, and bad
input is refused before any launch.
"""

from __future__ import annotations

import ctypes

import pytest
import torch

import cuda_impl
from compare import backends, cli, formats, oracle
from cuda_impl import _lib, toolchain, sass, sm120

BLOCK_SCALED_MMA = {
    "Mxfp8": "QMMA.SF.16832.F32.E4M3.E4M3.E8",
    "Nvfp4": "OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X",
}
# Per 64-key tile and warp: S = Q K^T has 8 n-tiles x head_dim / k-step MMAs, O += P V has
# head_dim / 8 n-tiles x 64 / k-step (k-step 32 for MXFP8, 64 for NVFP4).
MMAS_PER_TILE = {("Mxfp8", 128): 64, ("Mxfp8", 64): 32, ("Nvfp4", 128): 32, ("Nvfp4", 64): 16}


@pytest.fixture(scope="module")
def sm120_library(build_or_skip):
    return build_or_skip(sm120.library_spec())


@pytest.fixture(scope="module")
def sm120_sass(sm120_library) -> dict:
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    return sass.dump_sass(sm120_library)


def kernel(functions: dict, fmt: str, head_dim: int) -> list[str]:
    (ins,) = [i for (arch, fn), i in functions.items()
              if arch == "sm_120" and f"fwd_blockscaled_kernelINS0_5{fmt}ELi{head_dim}E" in fn]
    return ins


def test_compiles_for_sm120a_only_without_spills(sm120_library):
    report = toolchain.ptxas_report(sm120.library_spec())
    assert {r["arch"] for r in report} == {"sm_120a"}
    assert len(report) == 4, toolchain.format_report(report)  # 2 formats x head_dim 64, 128
    spilling = [r for r in report if r["spill_stores"] or r["spill_loads"] or r["stack"]]
    assert not spilling, toolchain.format_report(spilling)


@pytest.mark.parametrize("fmt", ["Mxfp8", "Nvfp4"])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_sass_has_the_block_scaled_mma(sm120_sass, fmt, head_dim):
    ops = sass.opcode_counts(kernel(sm120_sass, fmt, head_dim))
    assert ops[BLOCK_SCALED_MMA[fmt]] == MMAS_PER_TILE[(fmt, head_dim)], ops
    other = BLOCK_SCALED_MMA["Nvfp4" if fmt == "Mxfp8" else "Mxfp8"]
    assert ops[other] == 0 and not any(op.startswith("HMMA") for op in ops), "no other MMA kind"
    assert ops["LDSM.16.M88.4"] > 0 and ops["LDSM.16.M88.2"] > 0, "fragments via ldmatrix"
    assert any(op.startswith("LDGSTS") for op in ops), "tiles via cp.async"
    # P's in-kernel quantization: e4m3 elements (MXFP8) or e4m3 block scales (NVFP4) by the hardware cast
    assert any(op.startswith("F2FP.SATFINITE.E4M3") for op in ops)
    assert not any(op.startswith(("LDL", "STL")) for op in ops), "local memory"


def test_ptxas_refuses_the_kernels_for_sm90a():
    if toolchain.missing_toolchain():
        pytest.skip(toolchain.missing_toolchain())
    spec = sm120.library_spec()
    hopper = toolchain.LibrarySpec(name="cuda_fa_sm120_on_sm90a", sources=spec.sources,
                               include_dirs=spec.include_dirs, targets=("90a",))
    if toolchain.cached_library(hopper) is not None:
        pytest.fail(f"a library for sm_90a exists at {hopper.library_path}")
    with pytest.raises(toolchain.BuildError, match="not supported on .target 'sm_90a'"):
        toolchain.build_library(hopper)


# --- registry and refusals (no GPU needed) ---------------------------------------------------


@pytest.fixture
def fake_h200(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))


@pytest.mark.parametrize("variant", list(sm120.VARIANTS))
def test_registered_and_refused_on_sm90_naming_the_arch(fake_h200, variant):
    spec = cuda_impl.VARIANTS[variant]
    assert spec["min_cc"] == spec["max_cc"] == (12, 0)
    assert "compiled, not run" in spec["description"]
    reason = cuda_impl.unavailable_reason(variant)
    assert reason and "sm_120" in reason and "sm_90" in reason, reason
    backend = backends.registry()[f"cuda:{variant}"]
    assert backend.formats == spec["formats"]
    registry_reason = backend.unavailable_reason()
    assert registry_reason and "12.0" in registry_reason and "9.0" in registry_reason, registry_reason


def test_16bit_variants_are_unaffected(fake_h200):
    assert "sm_120" not in (cuda_impl.unavailable_reason("v5") or "")
    q = torch.randn(1, 1, 8, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="device"):  # the 16-bit path still validates as before
        cuda_impl.attention(q, q, q, variant="v5")


def containers(fmt, sq=64, sk=64, d=128, hq=2, hkv=2):
    x = lambda h, s: torch.randn(1, h, s, d)
    return formats.quantize_attention_inputs(x(hq, sq), x(hkv, sk), x(hkv, sk), fmt)


@pytest.mark.parametrize(
    "variant, make, error, match",
    [
        ("mxfp8-sm120", lambda: tuple(torch.randn(1, 1, 8, 64, dtype=torch.bfloat16) for _ in range(3)),
         TypeError, "QuantTensor"),
        ("mxfp8-sm120", lambda: containers("nvfp4"), TypeError, "format"),
        ("nvfp4-sm120", lambda: (lambda q, k, v: (q, k, formats.quantize(torch.randn(1, 2, 64, 128), "nvfp4")))(
            *containers("nvfp4")), ValueError, "layout"),
        ("mxfp8-sm120", lambda: containers("mxfp8", d=96), ValueError, "head_dim"),
        ("mxfp8-sm120", lambda: containers("mxfp8", hq=3, hkv=2), ValueError, "heads"),
        ("mxfp8-sm120", lambda: containers("mxfp8"), ValueError, "device"),  # valid, but on the CPU
    ],
)
def test_bad_input_is_refused_before_launch(variant, make, error, match):
    q, k, v = make()
    with pytest.raises(error, match=match):
        cuda_impl.attention(q, k, v, variant=variant)


def test_c_surface_checks_before_launch(sm120_library):
    lib = sm120.load()  # raises if sizeof(BlockScaledParams) differs between C and ctypes
    fn = lib.cuda_fa_fwd_blockscaled_sm120
    err = ctypes.create_string_buffer(256)
    base = _lib.FwdParams(batch=1, heads_q=1, heads_kv=1, seqlen_q=4, seqlen_k=4, head_dim=96, scale=1.0)
    params = sm120.BlockScaledParams(base=base, vt_pitch=64, format=1)
    assert fn(ctypes.byref(params), None, err, 256) != 0 and b"head_dim" in err.value
    params = sm120.BlockScaledParams(base=base, vt_pitch=20, format=1)
    assert fn(ctypes.byref(params), None, err, 256) != 0 and b"vt_pitch" in err.value
    base.head_dim = 128
    params = sm120.BlockScaledParams(base=base, vt_pitch=64, format=5)
    assert fn(ctypes.byref(params), None, err, 256) != 0 and b"format" in err.value
    params = sm120.BlockScaledParams(base=base, vt_pitch=64, format=2)  # NVFP4 without tensor scales
    assert fn(ctypes.byref(params), None, err, 256) != 0 and b"tensor_scale" in err.value


# --- the emulation harness on the H200 (marked gpu) ------------------------------------------
# The same kernels built for sm_90a with the block-scaled MMA done in software through the
# documented fragment layout (-DFA_SM120_EMULATE): everything but the MMA instruction itself is
# checked against the oracle on the project's GPU.


def _emulation_cases():
    for variant in sm120.VARIANTS:
        for case in cli.matrix_cases(backends.get(f"cuda:{variant}"), "full", None):
            yield pytest.param(variant, case, id=f"{variant}-{case.shape_str().replace(' ', '-')}")


@pytest.mark.gpu
@pytest.mark.parametrize("variant, case", list(_emulation_cases()))
def test_emulated_kernel_passes_the_oracle(variant, case):
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the emulation harness is built for sm_90a")

    def run(q, k, v, **kwargs):
        return sm120.attention(q, k, v, variant=variant, emulate=True, **kwargs)

    verdict = oracle.check(run, case, device="cuda")
    assert verdict.passed, verdict.summary()


def test_emulation_harness_compiles_for_sm90a():
    spec = sm120.library_spec(emulate=True)
    problem = toolchain.missing_toolchain()
    if problem and toolchain.cached_library(spec) is None:
        pytest.skip(problem)
    toolchain.build_library(spec)
    assert {r["arch"] for r in toolchain.ptxas_report(spec)} == {"sm_90a"}
