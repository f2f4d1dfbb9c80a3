"""One launch of sanitize_mla.py's (journal 2026-12-06 mla-seesaw) per process, so that a launch compute-sanitizer
stops does not hide the others: python3 <this file> <index>. The four: pages of 64 (TMA blocks), causal Sq 2 on
hostile pages of 16 (cp.async), a forced split of pages of 64, a contiguous cache in one split."""

from __future__ import annotations

import sys

import cuda_impl
from compare import oracle

MLA = dict(head_dim=576, head_dim_v=512, latent=True, scale=0.072)
CASES = [(oracle.KVCase(2, 64, 1, 1, (200, 64), page_size=64, **MLA), {}),
         (oracle.KVCase(2, 128, 1, 2, (333, 17), page_size=16, causal=True, hostile=True, **MLA), {}),
         (oracle.KVCase(1, 64, 1, 1, (700,), page_size=64, **MLA), dict(num_splits=3)),
         (oracle.KVCase(1, 64, 1, 1, (300,), **MLA), dict(num_splits=1))]

if __name__ == "__main__":
    case, split = CASES[int(sys.argv[1])]

    def run(q, k_cache, v_cache, *, return_lse, **kw):
        return cuda_impl.attention_mla_decode(q, k_cache, return_lse=return_lse, **kw, **split)
    verdict = oracle.check_kvcache(run, case, device="cuda")
    print(("PASS" if verdict.passed else "FAIL"), case.shape_str(), split, verdict.summary(), flush=True)
    sys.exit(0 if verdict.passed else 1)
