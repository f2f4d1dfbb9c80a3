"""Per-kernel GPU time of MLA decode calls (torch.profiler, CUDA activity): the split kernel and the merge apart,
at the shapes where call 2 found a fixed ~370 us. Writes $OUT/mla_profile.csv."""
import csv
import os

import torch
from torch.profiler import ProfilerActivity, profile

import triton_impl

OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
rows = []
for batch, heads, length, splits in [(1, 16, 65536, 16), (1, 16, 65536, 64), (32, 16, 8192, 16), (32, 128, 8192, 1),
                                     (32, 128, 8192, 16)]:
    page = 64
    kv = torch.randn(batch * length // page, page, 1, 576, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(kv.shape[0], device="cuda").to(torch.int32).view(batch, -1)
    lengths = torch.full((batch,), length, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, 1, heads, 576, device="cuda", dtype=torch.bfloat16)
    call = lambda: triton_impl.attention_mla_decode(q, kv, cache_seqlens=lengths, block_table=table,  # noqa: E731
                                                    num_splits=splits)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(10):
            call()
        torch.cuda.synchronize()
    for event in prof.key_averages():
        if event.device_type.name != "CUDA" or not event.count:
            continue
        us = event.device_time_total / event.count if hasattr(event, "device_time_total") else event.cuda_time_total / event.count
        rows.append(dict(batch=batch, heads_q=heads, cache_len=length, num_splits=splits, kernel=event.key[:60],
                         calls=event.count, us_per_call=us))
        print(f"b{batch} h{heads} L{length} s{splits}: {event.key[:50]:50} x{event.count:3} {us:9.1f} us", flush=True)
with open(os.path.join(OUT, "mla_profile.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
