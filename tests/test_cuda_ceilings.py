"""The mma.sync ceiling benchmark: it builds, and its SASS check rejects merged or lost work."""

from __future__ import annotations

import pytest
import torch

from compare import ceilings
from cuda_impl import build, sass

BF16_KERNEL = "_ZN7ceiling17mma_chains_kernelI13__nv_bfloat16EEvPKjPfi"
FP16_KERNEL = "_ZN7ceiling17mma_chains_kernelI6__halfEEvPKjPfi"


def fake_sass(bf16_count: int, fp16_count: int) -> dict:
    return {
        ("sm_90a", BF16_KERNEL): ["HMMA.16816.F32.BF16 R4, R8, R12, R4"] * bf16_count + ["EXIT"],
        ("sm_90a", FP16_KERNEL): ["HMMA.16816.F32 R4, R8, R12, R4"] * fp16_count + ["EXIT"],
    }


def test_sass_check_accepts_one_hmma_per_chain():
    assert ceilings.check_sass(fake_sass(8, 8), chains=8) == {("sm_90a", "bf16"): 8, ("sm_90a", "fp16"): 8}


@pytest.mark.parametrize("counts", [(4, 8), (8, 1), (16, 8)])
def test_sass_check_rejects_merged_or_duplicated_chains(counts):
    with pytest.raises(ceilings.MergedWorkError):
        ceilings.check_sass(fake_sass(*counts), chains=8)


def test_sass_check_rejects_missing_kernel():
    functions = fake_sass(8, 8)
    del functions[("sm_90a", FP16_KERNEL)]
    with pytest.raises(ceilings.MergedWorkError, match="fp16"):
        ceilings.check_sass(functions, chains=8)


def test_built_benchmark_passes_its_sass_check():
    if build.missing_toolchain() and build.cached_library(ceilings.library_spec()) is None:
        pytest.skip(build.missing_toolchain())
    path = ceilings.build_library()
    if sass.find_cuobjdump() is None:
        pytest.skip("cuobjdump not found")
    functions = sass.dump_sass(path)
    counts = ceilings.check_sass(functions, chains=8)
    assert len(counts) == 2 * len(build.ARCH_TARGETS)


@pytest.mark.gpu
def test_mma_ceiling_runs():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU")
    assert ceilings.mma_sync_tflops("bf16", iters=2_000, repeats=2) > 10
