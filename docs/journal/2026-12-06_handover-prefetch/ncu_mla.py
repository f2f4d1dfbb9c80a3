"""One MLA decode launch of the wgmma kernel (b32 h128 q1 k8192, pages of 64), after a warm-up, for Nsight Compute.
GPU machine: ncu --clock-control none -k regex:fwd_mla_decode_wgmma -s 1 -c 1 --section ... \
    python3 docs/journal/2026-12-06_handover-prefetch/ncu_mla.py"""

from __future__ import annotations

import torch

import cuda_impl
from compare import oracle


def main() -> None:
    case = oracle.KVCase(32, 128, 1, 1, (8192,) * 32, 576, page_size=64, scale=0.072, head_dim_v=512, latent=True)
    inputs = oracle.make_kvcache_inputs(case, "cuda")
    for _ in range(2):
        cuda_impl.attention_mla_decode(inputs.q, inputs.k_cache, cache_seqlens=inputs.cache_seqlens,
                                       block_table=inputs.block_table)
    torch.cuda.synchronize()
    print("launched", case.shape_str())


if __name__ == "__main__":
    main()
