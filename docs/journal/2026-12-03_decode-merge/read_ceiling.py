"""The read ceiling's probes one by one on the GPU: torch.sum and each streaming-read config over 2 GiB of float32
(best of 5 launches each, three rounds), beside the copy ceiling; writes $OUT/read_ceiling.csv with the
environment. Run from the repository root: PYTHONPATH=. python docs/journal/2026-12-03_decode-merge/read_ceiling.py"""
import csv
import os

import torch

from compare import env
from compare.ceilings import copy_bandwidth_tbps, read_bandwidth_tbps, stream_read, timing

NBYTES = 2 << 30
environment = env.environment("cuda")
x = torch.rand(NBYTES // 4, dtype=torch.float32, device="cuda")
want = x.double().sum().item()
rows = []
for r in range(3):
    rows.append(dict(probe="torch.sum", tbps=NBYTES / (timing.best_ms(lambda: torch.sum(x), 5) * 1e-3) / 1e12))
    for block, warps, stages in stream_read.CONFIGS:
        got = stream_read.partial_sums(x, block, warps, stages).double().sum().item()
        assert abs(got - want) <= 1e-4 * abs(want), (block, warps, stages, got, want)
        ms = timing.best_ms(lambda b=block, w=warps, s=stages: stream_read.partial_sums(x, b, w, s), 5)
        rows.append(dict(probe=f"stream {block}x{stream_read.TILES} w{warps} s{stages}", tbps=NBYTES / (ms * 1e-3) / 1e12))
    rows.append(dict(probe="dram (copy)", tbps=copy_bandwidth_tbps()))
    rows.append(dict(probe="dram.read (as the sweeps take it)", tbps=read_bandwidth_tbps()))
    for row in rows[-(len(stream_read.CONFIGS) + 3):]:
        row["round"] = r
out = os.environ.get("OUT", ".")
with open(os.path.join(out, "read_ceiling.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, ["round", "probe", "tbps", *environment])
    writer.writeheader()
    writer.writerows({**row, **environment} for row in rows)
best = {}
for row in rows:
    best[row["probe"]] = max(best.get(row["probe"], 0.0), row["tbps"])
for probe, tbps in best.items():
    print(f"{probe:40} {tbps:6.3f} TB/s")
