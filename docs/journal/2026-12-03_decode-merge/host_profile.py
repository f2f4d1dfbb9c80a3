"""Host cost of attention_with_kvcache (paged, page 64, b1 h32/8 q1 k4096 d128 bf16) in both backends: eager and
graph-replay time per call of 2000 back-to-back calls, and a cProfile of the eager calls (top functions by own
time). Run from the repository root: PYTHONPATH=. python docs/journal/2026-12-03_decode-merge/host_profile.py"""
import cProfile
import io
import pstats
import sys

import torch

sys.path.insert(0, "scripts")
from bench_api_overhead_gpu import per_call_us  # noqa: E402

import cuda_impl  # noqa: E402
import triton_impl  # noqa: E402
from compare import bench  # noqa: E402

CALLS = 2000
batch, heads_q, heads_kv, length, dim, page = 1, 32, 8, 4096, 128, 64
gen = torch.Generator(device="cuda").manual_seed(0)
pages = batch * length // page
k_cache, v_cache = (torch.randn(pages, page, heads_kv, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
                    for _ in range(2))
table = torch.arange(pages, device="cuda", dtype=torch.int32).view(batch, -1)
lengths = torch.full((batch,), length, device="cuda", dtype=torch.int32)
q = torch.randn(batch, 1, heads_q, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
calls = {name: (lambda mod=mod: mod.attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=lengths,
                                                           block_table=table))
         for name, mod in (("cuda_impl", cuda_impl), ("triton_impl", triton_impl))}
contiguous = (k_cache.view(batch, length, heads_kv, dim).transpose(1, 2), v_cache.view(batch, length, heads_kv, dim).transpose(1, 2))
calls["sdpa (cudnn, dense)"] = lambda: torch.nn.functional.scaled_dot_product_attention(
    q.transpose(1, 2), *contiguous, enable_gqa=True)
profiles = {}
print(f"{'call':24} {'eager us':>9} {'replay us':>10} {'host us':>8}")
for name, fn in calls.items():
    eager = per_call_us(fn, CALLS)
    graph, why = bench.capture_graph(fn)
    replay = per_call_us(graph.replay, CALLS) if graph is not None else float("nan")
    print(f"{name:24} {eager:9.1f} {replay:10.1f} {eager - replay:8.1f} {why or ''}", flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(CALLS):
        fn()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(22)
    profiles[name] = text.getvalue()
for name, text in profiles.items():
    print(f"\n=== cProfile, {CALLS} eager calls of {name} ===\n{text}")
