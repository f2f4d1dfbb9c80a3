"""The oracle on MLA's largest cases (128 heads, 64k keys, b1 and b8): with the reference's grouped matmul these no
longer run out of memory on an 80 GB card (they took 32-36 GiB of float64 with K/V repeated per query head).
GPU machine: PYTHONPATH=. python3 docs/journal/2026-12-06_handover-prefetch/oom_check.py"""

from __future__ import annotations

import time

import torch

import cuda_impl
from compare import oracle

MLA = dict(head_dim=576, head_dim_v=512, latent=True, scale=0.072, page_size=64)


def main() -> None:
    for batch in (1, 8):
        case = oracle.KVCase(batch, 128, 1, 1, (65536,) * batch, **MLA)
        t0 = time.perf_counter()
        torch.cuda.reset_peak_memory_stats()

        def run(q, k_cache, v_cache, *, return_lse, **kw):
            return cuda_impl.attention_mla_decode(q, k_cache, return_lse=return_lse, **kw)
        verdict = oracle.check_kvcache(run, case, device="cuda")
        peak = torch.cuda.max_memory_allocated() / 2**30
        print(("PASS" if verdict.passed else "FAIL"), case.shape_str(), verdict.summary(),
              f"peak {peak:.1f} GiB, {time.perf_counter() - t0:.0f} s", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
