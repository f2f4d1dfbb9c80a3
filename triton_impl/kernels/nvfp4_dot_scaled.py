"""Variant "nvfp4-dot-scaled": refused, because Triton 3.6 cannot compile tl.dot_scaled with NVFP4
operands for sm_90.

tl.dot_scaled's front end accepts e2m1 elements with e4m3 block scales over 16 elements (NVFP4), but
the sm_90 lowering, which decomposes block-scaled dots into upcasts and a bf16 wgmma, assumes integer
E8M0 scales: compiling even one such product aborts the TritonGPUAccelerateMatmul pass (an MLIR
assertion, `DenseElementsAttr::get ... isIntOrIndex`, then "PassManager::run failed"). NVFP4's scales
cannot be rewritten exactly as E8M0 codes over 32 elements either (they are not powers of two and
cover 16 elements), so there is no honest dot_scaled variant of NVFP4 on sm_90; "nvfp4-dequant" is
the NVFP4 kernel. `scores_probe` is the smallest product that shows the failure;
tests/test_triton_compile.py compiles it so that a Triton that fixes the lowering is noticed.
"""
import triton
import triton.language as tl

LIMITATION = ("variant 'nvfp4-dot-scaled' is not available: Triton 3.6 cannot lower tl.dot_scaled with "
              "NVFP4 operands (e2m1 elements, e4m3 scales per 16) for sm_90 - its TritonGPUAccelerateMatmul "
              "pass fails on non-E8M0 scales - and NVFP4 scales have no exact E8M0 form; use 'nvfp4-dequant' "
              "(docs/design/triton.md)")


@triton.jit
def scores_probe(Q, QS, K, KS, S, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    """S = Q K^T for one tile of NVFP4 Q (BLOCK_M, HEAD_DIM/2 bytes) and K (BLOCK_N, HEAD_DIM/2 bytes)
    with their e4m3 scales (HEAD_DIM/16 per row)."""
    offs_m = tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_byte = tl.arange(0, HEAD_DIM // 2)
    offs_blk = tl.arange(0, HEAD_DIM // 16)
    q = tl.load(Q + offs_m[:, None] * (HEAD_DIM // 2) + offs_byte[None, :])
    kt = tl.load(K + offs_n[None, :] * (HEAD_DIM // 2) + offs_byte[:, None])
    q_scale = tl.load(QS + offs_m[:, None] * (HEAD_DIM // 16) + offs_blk[None, :])
    k_scale = tl.load(KS + offs_n[:, None] * (HEAD_DIM // 16) + offs_blk[None, :])
    s = tl.dot_scaled(q, q_scale, "e2m1", kt, k_scale, "e2m1")
    tl.store(S + offs_m[:, None] * BLOCK_N + offs_n[None, :], s)
