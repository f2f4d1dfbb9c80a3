"""Re-times the decode sweep's b32 h32/32 Sq1 k8k bf16 d128 row (bimodal in f26b759's sweep: p20 0.952 ms, p50
1.082): cuda:decode against sdpa:cudnn, three interleaved rounds, CUDA-graph replays. Writes $OUT/bimodal_row.csv."""
import csv
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import cuda_impl
from compare.bench import time_call
from compare.env import environment

OUT = os.environ.get("OUT", "/tmp")
torch.manual_seed(0)
B, H, S, D = 32, 32, 8192, 128
q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16)
k = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)
v = torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16)


def cudnn():
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v)


ours = lambda: cuda_impl.attention(q, k, v, variant="decode")  # noqa: E731
torch.testing.assert_close(ours().float(), cudnn().float(), atol=2e-2, rtol=0)
env = environment("cuda")
rows = []
for rnd in range(3):
    for name, fn in (("cuda:decode", ours), ("sdpa:cudnn", cudnn)):
        p20, p50, p80, how = time_call(fn, "cuda", graph=True)
        rows.append(dict(round=rnd, backend=name, ms_p20=p20, ms_p50=p50, ms_p80=p80, note=how, **env))
        print(f"round {rnd} {name:12} p20 {p20:.3f} p50 {p50:.3f} p80 {p80:.3f} ms {how}", flush=True)
with open(os.path.join(OUT, "bimodal_row.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
