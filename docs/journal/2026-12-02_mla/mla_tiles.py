"""MLA decode's split kernel at other tiles (BLOCK_N keys per step, warps, pipeline stages), CUDA-graph replays, the
heuristic's chunking: does a deeper stream of key tiles per program lift the memory-bound cases? Each config's
output is checked against the default tile's. Writes $OUT/mla_tiles.csv."""
import csv
import os

import torch

from compare.bench import time_call
from triton_impl import decode

OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
CONFIGS = [None, dict(num_stages=4), dict(num_stages=5), dict(num_warps=4), dict(num_warps=4, num_stages=4),
           dict(BLOCK_N=16, num_stages=5), dict(BLOCK_N=16, num_stages=7), dict(BLOCK_N=64, num_stages=2),
           dict(BLOCK_N=64, num_warps=4, num_stages=2), dict(BLOCK_N=16, num_warps=4, num_stages=6)]
rows = []
for batch, heads, length in [(1, 16, 65536), (32, 16, 8192), (32, 128, 8192)]:
    page = 64
    kv = torch.randn(batch * length // page, page, 1, 576, device="cuda", dtype=torch.bfloat16)
    table = torch.randperm(kv.shape[0], device="cuda").to(torch.int32).view(batch, -1)
    lengths = torch.full((batch,), length, device="cuda", dtype=torch.int32)
    q = torch.randn(batch, 1, heads, 576, device="cuda", dtype=torch.bfloat16)
    call = lambda cfg: decode._decode_impl(q, kv, kv[..., :512], lengths, table, None, None, False,  # noqa: E731
                                           576 ** -0.5, 0, 0, config=cfg)
    ref = call(None)[0]
    for cfg in CONFIGS:
        row = dict(batch=batch, heads_q=heads, cache_len=length, config=str(cfg or "default"))
        try:
            diff = float((call(cfg)[0].float() - ref.float()).abs().max())
            torch.cuda.synchronize()
            _, p50, _, how = time_call(lambda: call(cfg), "cuda", graph=True)
            row.update(ms_p50=p50, tb_per_s=batch * length * 1152 / (p50 * 1e-3) / 1e12, max_abs_vs_default=diff,
                       note=how)
        except Exception as exc:  # noqa: BLE001 - a config that does not compile is a result
            row.update(note=f"{type(exc).__name__}: {exc}".splitlines()[0][:160])
        rows.append(row)
        print(f"b{batch} h{heads} L{length} {row['config']:>45}: "
              + (f"{row['ms_p50'] * 1e3:8.1f} us {row['tb_per_s']:5.2f} TB/s diff {row['max_abs_vs_default']:.2g}"
                 if "ms_p50" in row else row["note"]), flush=True)
with open(os.path.join(OUT, "mla_tiles.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=["batch", "heads_q", "cache_len", "config", "ms_p50", "tb_per_s",
                                           "max_abs_vs_default", "note"])
    writer.writeheader()
    writer.writerows(rows)
