"""Where cuda:decode loses most to cuDNN on the published decode run (b32 h32/32 k8k, MHA: 0.88x, while triton:decode
and the prefill kernels ran at 0.97-0.99x of cuDNN there): the split count and the cache layout, timed against cuDNN
and triton:decode in the same interleaved rounds. Per case: cuda:decode at the heuristic's split and at forced
splits, triton:decode at its heuristic, cuDNN through SDPA on the same memory; both layouts of the cache, (B, S, H, D)
(attention_with_kvcache's) and (B, H, S, D) (the sweep's dense tensors, seen through a transposed view). Outputs
checked against cuDNN's first (max abs difference). Writes $OUT/decode_probe.csv, prints a table (TB/s of K and V).
GPU machine: python3 <this file>"""

from __future__ import annotations

import csv
import os
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from compare import bench

# (batch, query heads, KV heads, keys): the MHA case the finding names, two GQA cases beside it
CASES = [(32, 32, 32, 8192), (32, 32, 8, 8192), (8, 32, 8, 32768)]
SPLITS = [None, 1, 2, 4]
ROUNDS = 3


def calls(batch, heads_q, heads_kv, keys, layout):
    import cuda_impl
    import triton_impl
    gen = torch.Generator(device="cuda").manual_seed(0)
    shape = (batch, keys, heads_kv, 128) if layout == "bshd" else (batch, heads_kv, keys, 128)
    k, v = (torch.randn(shape, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    q = torch.randn(batch, 1, heads_q, 128, generator=gen, device="cuda", dtype=torch.bfloat16)
    if layout == "bhsd":
        k, v = k.transpose(1, 2), v.transpose(1, 2)  # (B, S, H, D) views of (B, H, S, D) memory
    lengths = torch.full((batch,), keys, dtype=torch.int32, device="cuda")
    out = {}
    for splits in SPLITS:
        out[f"cuda:decode/{splits or 'auto'}"] = (
            lambda s=splits: cuda_impl.attention_with_kvcache(q, k, v, cache_seqlens=lengths, num_splits=s))
    out["triton:decode/auto"] = lambda: triton_impl.attention_with_kvcache(q, k, v, cache_seqlens=lengths)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  enable_gqa=True).transpose(1, 2)
    out["sdpa:cudnn"] = cudnn
    return out, 2 * k.numel() * k.element_size()


def main() -> None:
    rows = []
    for batch, heads_q, heads_kv, keys in CASES:
        for layout in ("bshd", "bhsd"):
            fns, kv_bytes = calls(batch, heads_q, heads_kv, keys, layout)
            reference = fns["sdpa:cudnn"]().float()
            diff = {name: (fn().float() - reference).abs().max().item() for name, fn in fns.items()}
            times = {name: [] for name in fns}
            for r in range(ROUNDS):
                for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                    times[name].append(bench.time_call(fns[name], "cuda", warmup_ms=10, rep_ms=60, graph=True)[1])
            for name, ms in times.items():
                rows.append(dict(batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_k=keys, layout=layout,
                                 call=name, ms=statistics.median(ms), ms_min=min(ms), ms_max=max(ms),
                                 tbps=kv_bytes / (statistics.median(ms) * 1e-3) / 1e12, max_diff=diff[name]))
            del fns
            torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "decode_probe.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'case':22} {'layout':6} {'call':20} {'ms':>8} {'TB/s':>6} {'max diff':>9}")
    for r in rows:
        case = f"b{r['batch']} h{r['heads_q']}/{r['heads_kv']} k{r['seqlen_k'] // 1024}k"
        print(f"{case:22} {r['layout']:6} {r['call']:20} {r['ms']:8.4f} {r['tbps']:6.2f} {r['max_diff']:9.2e}")


if __name__ == "__main__":
    main()
