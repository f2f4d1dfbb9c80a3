"""Library GEMM ceilings: what cuBLAS reaches with Hopper's own instructions (wgmma) on random data.

They stand in for a wgmma microbenchmark as the bound of kernels that use wgmma (cuDNN, Triton on
sm_90): 8192^3 products, bf16 through torch.matmul and e4m3 through torch._scaled_mm, best of a few
launches timed with CUDA events after a warm-up.
"""

from __future__ import annotations

N = 8192


def _best_ms(fn, repeats: int) -> float:
    import torch

    fn()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def gemm_bf16_tflops(repeats: int = 10) -> float:
    import torch

    a, b = (torch.randn(N, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return 2 * N**3 / (_best_ms(lambda: a @ b, repeats) * 1e-3) / 1e12


def gemm_fp8_tflops(repeats: int = 10) -> float:
    import torch

    a = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn).t()  # cuBLAS fp8 wants B column-major
    one = torch.ones((), device="cuda")
    return 2 * N**3 / (_best_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), repeats)
                       * 1e-3) / 1e12
