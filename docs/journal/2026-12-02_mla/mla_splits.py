"""Where MLA decode's time goes at small batch: the same calls with num_splits 1 / 4 / 16 / 64 / auto (the split
kernel alone at 1, the merge's share above it). Writes $OUT/mla_splits.csv."""
import csv
import os

import torch

import triton_impl
from compare.bench import time_call

OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
rows = []
for batch, heads, length in [(1, 16, 65536), (32, 16, 8192), (32, 128, 8192)]:
    page = 64
    kv = torch.randn(batch * length // page, page, 1, 576, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(kv.shape[0], device="cuda").to(torch.int32).view(batch, -1)
    lengths = torch.full((batch,), length, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, 1, heads, 576, device="cuda", dtype=torch.bfloat16)
    for splits in (1, 4, 16, 64, None):
        fn = lambda: triton_impl.attention_mla_decode(q, kv, cache_seqlens=lengths, block_table=table,  # noqa: E731
                                                      num_splits=splits)
        fn()
        torch.cuda.synchronize()
        p20, p50, p80, how = time_call(fn, "cuda", graph=True)
        rows.append(dict(batch=batch, heads_q=heads, cache_len=length, num_splits=splits or "auto", ms_p50=p50,
                         tb_per_s=batch * length * 1152 / (p50 * 1e-3) / 1e12, note=how))
        print(f"b{batch} h{heads} L{length} splits {splits or 'auto':>4}: {p50 * 1e3:8.1f} us "
              f"{rows[-1]['tb_per_s']:5.2f} TB/s", flush=True)
with open(os.path.join(OUT, "mla_splits.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
