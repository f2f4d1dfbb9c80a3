"""Where a decode call's time goes: cuda:decode's (or triton:decode's) split and merge kernels against sdpa:cudnn.

On the GPU machine, from the repository root (CUDA library built here and carried in cuda_impl/_build):

    PYTHONPATH=. python docs/journal/2026-12-03_decode-merge/decode_breakdown.py [--out DIR] [--splits 8,16,32]
        [--backend triton --merge 8x64,16x32]

(PYTHONPATH=<other checkout>:. times another checkout's cuda_impl against the same harness.)

For each decode shape (bf16, d128, Sq 1, 32 query heads, dense (B, H, S, D) inputs as the decode sweep gives
them) both backends are held to the oracle, then timed as CUDA-graph replays (compare.bench.time_call, L2
flushed before each replay) and profiled eagerly (torch.profiler, L2 flushed before each call): the device time
of each kernel a call launches, averaged over the calls. cuda:decode is also timed with the chunk count forced
(--splits), which separates what the split count costs from what a fixed part of the call costs; for Triton,
--merge SxD also times the default split count with the merge taking S splits at a time and D columns a program. Writes
DIR/decode_breakdown.csv (long format, the environment of compare.env in every row) and prints a table.
"""

from __future__ import annotations

import argparse
import csv
import math
import os
from pathlib import Path


SHAPES = ((1, 4, 8192), (1, 8, 8192), (1, 4, 32768), (1, 4, 131072), (32, 4, 1024), (8, 8, 4096), (32, 8, 8192))
HEADS_Q, HEAD_DIM = 32, 128


def kernel_times(fn, calls: int = 20) -> dict[str, float]:
    """Mean device microseconds per call of each kernel `fn` launches (the L2 flush's kernel left out)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    flush = torch.empty(256 * 1024 * 1024, dtype=torch.int8, device="cuda")
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            flush.zero_()
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in prof.key_averages():
        if event.device_type.name != "CUDA" or "fill" in event.key.lower() or "memset" in event.key.lower():
            continue
        times[event.key] = times.get(event.key, 0.0) + event.device_time_total / calls
    return times


def short(name: str) -> str:
    for key in ("fwd_decode_merge_kernel", "fwd_decode_kernel", "_decode_merge", "_decode_split"):
        if key in name:
            return key
    return name[:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--splits", default="8,16,24,32,48,64,96")
    parser.add_argument("--backend", choices=("cuda", "triton"), default="cuda")
    parser.add_argument("--merge", default="", help="Triton: merge tiles SxD to time at the default split count")
    args = parser.parse_args()
    import torch

    from compare import backends, bench, env, oracle
    if args.backend == "cuda":
        from cuda_impl import decode
    else:
        from triton_impl import decode
        from triton_impl.kernels import decode as kernels

    environment = env.environment("cuda")
    rows = []
    name = f"{args.backend}:decode"
    ours, cudnn = backends.require(name), backends.require("sdpa:cudnn")
    for batch, heads_kv, length in SHAPES:
        case = oracle.Case(batch, HEADS_Q, heads_kv, 1, length, HEAD_DIM, seed=length + heads_kv)
        inputs = oracle.make_inputs(case, "cuda")
        q, k, v = inputs.q, inputs.k, inputs.v
        kv_bytes = 2 * batch * heads_kv * length * HEAD_DIM * 2
        shape = dict(batch=batch, heads_q=HEADS_Q, heads_kv=heads_kv, seqlen_k=length, kv_mb=kv_bytes / 1e6)
        calls = {name: lambda: ours.run(q, k, v, causal=False),
                 "sdpa:cudnn": lambda: cudnn.run(q, k, v, causal=False)}
        for label, fn in calls.items():
            backend = backends.require(label)
            verdict = oracle.check(backend.run, case, device="cuda", returns_lse=False)
            if not verdict.passed:
                rows.append({**shape, "what": label, "oracle": "fail", "note": verdict.reason})
                continue
            p20, p50, p80, how = bench.time_call(fn, "cuda", graph=True)
            per_kernel = kernel_times(fn)
            note = "; ".join(f"{short(k)}={t:.2f}" for k, t in sorted(per_kernel.items(), key=lambda x: -x[1]))
            rows.append({**shape, "what": label, "oracle": "pass", "us_p50": p50 * 1e3, "us_p20": p20 * 1e3,
                         "us_p80": p80 * 1e3, "kernel_us": sum(per_kernel.values()), "tbps": kv_bytes / p50 / 1e9,
                         "note": (how + " " + note).strip()})
        qd, kd, vd = (x.transpose(1, 2) for x in (q, k, v))
        scale = 1 / math.sqrt(HEAD_DIM)
        ref = ours.run(q, k, v, causal=False)
        forced = [(f"splits={n}", dict(num_splits=int(n)), None) for n in args.splits.split(",") if n]
        forced += [(f"merge={t}", {}, tuple(int(x) for x in t.split("x"))) for t in args.merge.split(",") if t]
        for what, split, merge in forced:
            if merge is not None:
                saved = kernels.MERGE_BLOCK_S, kernels.MERGE_BLOCK_D
                kernels.MERGE_BLOCK_S, kernels.MERGE_BLOCK_D = merge
            fn = lambda split=split: decode.forward(qd, kd, vd, None, None, causal=False, scale=scale, **split)
            got = fn()[0].transpose(1, 2)
            err = (got.float() - ref.float()).abs().max().item()
            p20, p50, p80, how = bench.time_call(fn, "cuda", graph=True)
            per_kernel = kernel_times(fn)
            if merge is not None:
                kernels.MERGE_BLOCK_S, kernels.MERGE_BLOCK_D = saved
            note = "; ".join(f"{short(k)}={t:.2f}" for k, t in sorted(per_kernel.items(), key=lambda x: -x[1]))
            rows.append({**shape, "what": f"{name} {what}", "oracle": f"max|diff| {err:.1e}",
                         "us_p50": p50 * 1e3, "us_p20": p20 * 1e3, "us_p80": p80 * 1e3,
                         "kernel_us": sum(per_kernel.values()), "tbps": kv_bytes / p50 / 1e9,
                         "note": (how + " " + note).strip()})
        del inputs, q, k, v
        torch.cuda.empty_cache()
        print(f"done B{batch} Hkv{heads_kv} Sk{length}", flush=True)

    args.out.mkdir(parents=True, exist_ok=True)
    columns = ["batch", "heads_q", "heads_kv", "seqlen_k", "kv_mb", "what", "oracle", "us_p20", "us_p50", "us_p80",
               "kernel_us", "tbps", "note", *environment]
    with open(args.out / "decode_breakdown.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, **environment})
    print(f"{'shape':>18} {'what':>24} {'us':>8} {'kern':>7} {'TB/s':>6}  kernels (us)")
    for r in rows:
        label = f"B{r['batch']} H{r['heads_kv']} S{r['seqlen_k']}"
        print(f"{label:>18} {r['what']:>24} {r.get('us_p50', float('nan')):8.1f} {r.get('kernel_us', float('nan')):7.1f} "
              f"{r.get('tbps', float('nan')):6.2f}  {r.get('note', '')[:90]}")


if __name__ == "__main__":
    main()
