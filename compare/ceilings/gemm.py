"""Library GEMM ceilings: what cuBLAS reaches with Hopper's own instructions (wgmma) on random data.

Recorded beside the wgmma microbenchmark (wgmma.py) as what a tuned library reaches on real matrices:
8192^3 products, bf16 through torch.matmul and e4m3 through torch._scaled_mm, best of a few launches
timed with CUDA events after a warm-up.
"""

from __future__ import annotations

from .timing import best_ms

N = 8192


def gemm_bf16_tflops(repeats: int = 10) -> float:
    import torch

    a, b = (torch.randn(N, N, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return 2 * N**3 / (best_ms(lambda: a @ b, repeats) * 1e-3) / 1e12


def gemm_fp8_tflops(repeats: int = 10) -> float:
    import torch

    a = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(N, N, device="cuda").to(torch.float8_e4m3fn).t()  # cuBLAS fp8 wants B column-major
    one = torch.ones((), device="cuda")
    return 2 * N**3 / (best_ms(lambda: torch._scaled_mm(a, b, one, one, out_dtype=torch.bfloat16), repeats)
                       * 1e-3) / 1e12
