"""triton:decode's MLA path (attention_mla_decode) on the GPU: Q/K 576, V the latent cache's first 512 columns,
paged (page 64), bf16; time (CUDA-graph replays, compare.bench.time_call), the cache bytes read per second (each
key row of 576 columns read once) and TFLOP/s (2 Hq Sq L (576 + 512) per call). Writes $OUT/mla_speed.csv."""
import csv
import os

import torch

import triton_impl
from compare.bench import time_call

OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
rows = []
for batch, heads, seqlen_q, length in [(1, 16, 1, 65536), (32, 16, 1, 8192), (128, 16, 1, 4096), (32, 128, 1, 8192),
                                       (64, 128, 2, 4096), (8, 64, 1, 32768)]:
    page = 64
    pages = length // page
    kv = torch.randn(batch * pages, page, 1, 576, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(batch * pages, device="cuda", dtype=torch.int64).to(torch.int32).view(batch, pages)
    lengths = torch.full((batch,), length, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, seqlen_q, heads, 576, device="cuda", dtype=torch.bfloat16)
    fn = lambda: triton_impl.attention_mla_decode(q, kv, cache_seqlens=lengths, block_table=table,  # noqa: E731
                                                  scale=576 ** -0.5)
    fn()
    torch.cuda.synchronize()
    p20, p50, p80, how = time_call(fn, "cuda", graph=True)
    read = batch * length * 576 * 2
    flops = 2 * batch * heads * seqlen_q * length * (576 + 512)
    rows.append(dict(batch=batch, heads_q=heads, seqlen_q=seqlen_q, cache_len=length, page=page, ms_p20=p20,
                     ms_p50=p50, ms_p80=p80, tb_per_s=read / (p50 * 1e-3) / 1e12, tflops=flops / (p50 * 1e-3) / 1e12,
                     note=how))
    print(f"b{batch} h{heads} q{seqlen_q} L{length}: {p50 * 1e3:8.1f} us {rows[-1]['tb_per_s']:5.2f} TB/s "
          f"{rows[-1]['tflops']:6.1f} TFLOP/s", flush=True)
with open(os.path.join(OUT, "mla_speed.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
