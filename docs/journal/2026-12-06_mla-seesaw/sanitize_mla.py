"""Small MLA decode launches of the wgmma kernel (64 / 128 heads), each checked against the oracle in this process,
to run under compute-sanitizer (memcheck, racecheck, synccheck): an odd block count (a pair without its B block),
causal Sq 2 with hostile tables and pages of 16, a forced split, a contiguous cache.
GPU machine: compute-sanitizer --tool racecheck python3 docs/journal/2026-12-06_mla-seesaw/sanitize_mla.py"""

from __future__ import annotations

import sys

import cuda_impl
from compare import oracle

MLA = dict(head_dim=576, head_dim_v=512, latent=True, scale=0.072)
CASES = [(oracle.KVCase(2, 64, 1, 1, (200, 64), page_size=64, **MLA), {}),
         (oracle.KVCase(2, 128, 1, 2, (333, 17), page_size=16, causal=True, hostile=True, **MLA), {}),
         (oracle.KVCase(1, 64, 1, 1, (700,), page_size=64, **MLA), dict(num_splits=3)),
         (oracle.KVCase(1, 64, 1, 1, (300,), **MLA), dict(num_splits=1))]


def main() -> int:
    failed = 0
    for case, split in CASES:
        def run(q, k_cache, v_cache, *, return_lse, **kw):
            return cuda_impl.attention_mla_decode(q, k_cache, return_lse=return_lse, **kw, **split)
        verdict = oracle.check_kvcache(run, case, device="cuda")
        print(("PASS" if verdict.passed else "FAIL"), case.shape_str(), split, verdict.summary(), flush=True)
        failed += not verdict.passed
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
