"""Two predictions about triton:decode's tiles (journal 2026-12-07 h200-sweeps, eighth session), timed on one GPU in
interleaved rounds (compare.bench.time_call: CUDA-graph replays, L2 flushed), each tile first passing the oracle
(check_kvcache, on a small case with a ragged tail):
1. e4m3 caches: tiles with 192 KB of K+V in flight an SM, as bf16's (d64 and d128 five stages, d256 seven or 64-key
   tiles) against the table's (144 / 144 / 96 KB), bf16's table tile beside for the e4m3 / bf16 ratio; h32/8,
   contiguous, b8 k32k (d128 also b32 k8k).
2. MLA (Q/K 576, V its first 512 columns, pages of 64): 64-row wgmma tiles (MAX_BLOCK_M 64; 32 or 64 keys, 8 warps,
   2 stages) against the table's 32-row mma.sync tile; b32 h128 k8k and b32 h64 k8k.
Writes $OUT/triton_tile_probe.csv, prints a table. GPU machine: python3 <this file> (LIMIT: seconds after which no
more shapes are timed; GROUPS: of e4m3-d128,e4m3-d64,e4m3-d256,mla,mla64)."""

from __future__ import annotations

import csv
import os
import statistics
import time

import torch

from compare import bench, oracle
from triton_impl import decode as tdecode

START, LIMIT = time.time(), float(os.environ.get("LIMIT", "200"))
ROUNDS = 3
# e4m3 tiles with the K+V bytes in flight an SM of bf16's (192 KB; offline compiles: programs an SM by shared
# memory and registers x buffered stages x tile), by head_dim
E4M3 = {64: {"table": None, "stages5": dict(num_stages=5)},
        128: {"table": None, "stages5": dict(num_stages=5)},
        256: {"table": None, "stages7": dict(num_stages=7), "n64-s4": dict(BLOCK_N=64, num_stages=4)}}
MLA = {"table": None, "m64-n32": dict(MAX_BLOCK_M=64, BLOCK_N=32, num_warps=8, num_stages=2),
       "m64-n64": dict(MAX_BLOCK_M=64, BLOCK_N=64, num_warps=8, num_stages=2)}


def runner(config):
    def fn(q, k_cache, v_cache, *, cache_seqlens, block_table=None, k_descale=None, v_descale=None, causal=False,
           scale=None, return_lse=True):
        scale = q.shape[-1] ** -0.5 if scale is None else scale
        if k_descale is not None:
            k_descale, v_descale = k_descale.float().contiguous(), v_descale.float().contiguous()
        out, lse = tdecode._decode_impl(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale,
                                        causal, float(scale), 0, 0, config=config)
        return (out, lse) if return_lse else out
    return fn


def bound(config, case, device="cuda"):
    """A call of `config`'s tile on fresh inputs of `case`, without arguments (what time_call takes)."""
    fn, inputs = runner(config), oracle.make_kvcache_inputs(case, device)
    return lambda: fn(inputs.q, inputs.k_cache, inputs.v_cache, **inputs.kwargs(case), return_lse=False)


def gqa(batch, keys, kv_fmt, lengths=None, head_dim=128):
    return oracle.KVCase(batch, 32, 8, 1, lengths or (keys,) * batch, head_dim, kv_fmt=kv_fmt)


def mla(batch, heads, keys, lengths=None):
    return oracle.KVCase(batch, heads, 1, 1, lengths or (keys,) * batch, 576, page_size=64, head_dim_v=512,
                         latent=True)


def main() -> None:
    groups = [(f"e4m3-d{d}", E4M3[d], lambda b, k, d=d: gqa(b, k, "fp8", head_dim=d),
               gqa(2, 0, "fp8", (9000, 777), d), [(8, 32768), (32, 8192)] if d == 128 else [(8, 32768)])
              for d in (128, 64, 256)]
    groups += [("mla", MLA, lambda b, k: mla(b, 128, k), mla(2, 128, 0, (9000, 777)), [(32, 8192)]),
               ("mla64", MLA, lambda b, k: mla(b, 64, k), mla(2, 64, 0, (9000, 777)), [(32, 8192)])]
    wanted = os.environ.get("GROUPS", ",".join(g[0] for g in groups)).split(",")
    rows = []
    for group, configs, make, small, shapes in [g for g in groups if g[0] in wanted]:
        for name, config in configs.items():
            verdict = oracle.check_kvcache(runner(config), small, device="cuda")
            print(f"{group} {name}: oracle {'pass' if verdict.passed else 'FAIL ' + verdict.summary()}", flush=True)
            if not verdict.passed:
                configs = {n: c for n, c in configs.items() if n != name}
        for batch, keys in shapes:
            if time.time() - START > LIMIT:
                print(f"{group} b{batch} k{keys}: not timed ({time.time() - START:.0f} s gone)")
                continue
            case = make(batch, keys)
            fns = {name: bound(config, case) for name, config in configs.items()}
            if group.startswith("e4m3"):  # bf16's table tile on the same shape, for the e4m3 / bf16 ratio
                fns["bf16 table"] = bound(None, gqa(batch, keys, "same", head_dim=case.head_dim))
            times = {name: [] for name in fns}
            for r in range(ROUNDS):
                for name in (list(fns) if r % 2 == 0 else list(reversed(fns))):
                    times[name].append(bench.time_call(fns[name], "cuda", warmup_ms=10, rep_ms=60, graph=True)[1])
            for name, ms in times.items():
                rows.append(dict(group=group, batch=batch, heads_q=case.heads_q, seqlen_k=keys, tile=name,
                                 us=1e3 * statistics.median(ms), us_min=1e3 * min(ms), us_max=1e3 * max(ms),
                                 gpu=torch.cuda.get_device_name()))
            del fns
            torch.cuda.empty_cache()
    with open(os.path.join(os.environ.get("OUT", "."), "triton_tile_probe.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'group':6} {'case':16} {'tile':12} {'us':>9} {'min':>9} {'max':>9}")
    for r in rows:
        case = f"b{r['batch']} h{r['heads_q']} k{r['seqlen_k'] // 1024}k"
        print(f"{r['group']:6} {case:16} {r['tile']:12} {r['us']:9.1f} {r['us_min']:9.1f} {r['us_max']:9.1f}")


if __name__ == "__main__":
    main()
