"""Host cost of one API call per backend: what a user pays on the CPU for each attention call, beside the
kernel time the sweeps report (those time CUDA-graph replays, which leave the host work out).

On the GPU machine, from the repository root (CUDA libraries built here and carried in cuda_impl/_build):

    PYTHONPATH=. python scripts/bench_api_overhead_gpu.py [--out DIR] [--profile BACKEND]

For each backend, on a tiny problem (b1 h1 s128 d128, so that the kernel takes a few microseconds; with --decode
one decode step, b1 h32/8 q1 k4096 d128 bf16, through the registry's dense (B, H, S, D) calls, and then the calls a
decode loop makes: each backend's attention_with_kvcache on a paged (pages of 64 keys) and a contiguous cache, and
torch's scaled_dot_product_attention called directly on the same keys, the host time the kvcache calls aim at):
- eager: wall time per call of N back-to-back calls, synchronised once at the end. The GPU runs far
  ahead of nothing here: the kernel is short, so the host's issue rate sets the pace;
- replay: the same call captured as a CUDA graph, timed the same way (the GPU-side cost plus one
  graph launch);
- host overhead = eager - replay, per call; for --decode's direct calls the median of R rounds (--rounds), each
  timing every call in turn, with the range over the rounds (the host's speed drifts between rounds).
Writes DIR/api_overhead.csv (one row per backend, with the environment of compare.env; --decode:
api_overhead_decode.csv, the direct calls' rows too) and prints a table; with --decode the direct calls' host time
per call, beside SDPA's, is the short table printed last. --profile NAME adds a cProfile of N eager calls of that
backend or direct call (top functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import io
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BACKENDS = ("sdpa:flash", "sdpa:cudnn", "triton:fa2", "triton:fa2-tma", "triton:fp8", "cuda:v5", "cuda:hopper",
            "cuda:hopper-fp8", "cuda:hopper-mxfp8", "cuda:hopper-nvfp4", "triton:mxfp8-dequant")
DECODE_BACKENDS = ("sdpa:flash", "sdpa:cudnn", "triton:decode", "cuda:decode", "cuda:hopper", "triton:fa2-ws")
TINY = (1, 1, 1, 128, 128, 128)    # b1 h1 s128 d128: the kernel takes a few microseconds
DECODE = (1, 32, 8, 1, 4096, 128)  # --decode: b1 h32/8 q1 k4096 d128, one decode step
PAGE = 64  # --decode: the paged cache's page size
CALLS = 2000


def per_call_us(fn, calls: int) -> float:
    import torch

    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def tiny_call(name: str, shape: tuple = TINY):
    """(backend, case, call): the backend, its first format's case of `shape` (B, Hq, Hkv, Sq, Sk, D) and a
    function running one eager call on fresh inputs (None where the backend cannot run the case)."""
    from compare import backends, oracle

    backend = backends.get(name)
    fmt = next((f for f in ("bf16", "fp8", "mxfp8", "nvfp4") if f in backend.formats), backend.formats[0])
    case = oracle.Case(*shape, fmt=fmt)
    if backend.unavailable_reason() or backend.unsupported_reason(case):
        return backend, case, None
    inputs = oracle.make_inputs(case, "cuda")
    return backend, case, lambda: backend(inputs.q, inputs.k, inputs.v, causal=False, scale=None)


def measure(name: str, calls: int, shape: tuple = TINY) -> dict:
    from compare import bench

    backend, case, call = tiny_call(name, shape)
    row = {"backend": name, "format": case.fmt, "shape": case.shape_str().removeprefix(f"{case.fmt} ")}
    if call is None:
        return {**row, "note": backend.unavailable_reason() or backend.unsupported_reason(case)}
    eager = per_call_us(call, calls)
    graph, why = bench.capture_graph(call)
    replay = per_call_us(graph.replay, calls) if graph is not None else float("nan")
    return {**row, "eager_us": round(eager, 1), "replay_us": round(replay, 1),
            "host_overhead_us": round(eager - replay, 1), "note": why}


def direct_calls(shape: tuple = DECODE) -> dict:
    """{name: one eager call} of a decode step at `shape` (B, Hq, Hkv, Sq, Sk, D), bf16, as a decode loop makes it:
    each backend's attention_with_kvcache on a paged cache (pages of PAGE keys, in order) and on a contiguous one,
    and SDPA called directly on the contiguous cache's (B, Hkv, Sk, D) view (GQA)."""
    import torch

    import cuda_impl
    import triton_impl

    batch, heads_q, heads_kv, seqlen_q, seqlen_k, dim = shape
    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(batch, seqlen_q, heads_q, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
    pages = batch * seqlen_k // PAGE
    paged = [torch.randn(pages, PAGE, heads_kv, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
             for _ in range(2)]
    table = torch.arange(pages, device="cuda", dtype=torch.int32).view(batch, -1)
    dense = [torch.randn(batch, seqlen_k, heads_kv, dim, device="cuda", dtype=torch.bfloat16, generator=gen)
             for _ in range(2)]
    lengths = torch.full((batch,), seqlen_k, device="cuda", dtype=torch.int32)
    calls = {}
    for name, module in (("cuda_impl", cuda_impl), ("triton_impl", triton_impl)):
        kv = module.attention_with_kvcache
        calls[f"{name}.kvcache paged{PAGE}"] = (
            lambda kv=kv: kv(q, *paged, cache_seqlens=lengths, block_table=table))
        calls[f"{name}.kvcache contiguous"] = lambda kv=kv: kv(q, *dense, cache_seqlens=lengths)
    q_bhsd, k_bhsd, v_bhsd = q.transpose(1, 2), dense[0].transpose(1, 2), dense[1].transpose(1, 2)
    calls["sdpa direct"] = lambda: torch.nn.functional.scaled_dot_product_attention(q_bhsd, k_bhsd, v_bhsd,
                                                                                    enable_gqa=True)
    return calls


def measure_direct(calls: dict, n: int, rounds: int) -> list[dict]:
    """Rows of the direct calls: each call's eager and graph-replay time per call, measured in `rounds` rounds
    that each time every call in turn (the host's speed drifts between rounds by more than the differences
    measured: interleaving puts every call under the same drift); the medians, and the host time's range."""
    from compare import bench

    shape = "b{} h{}/{} q{} k{} d{}".format(*DECODE)
    rows, timed = {}, {}
    for name, call in calls.items():
        rows[name] = {"backend": name, "format": "bf16", "shape": shape, "rounds": rounds}
        try:
            call()
        except (RuntimeError, ValueError, TypeError, NotImplementedError) as exc:  # e.g. a backend not built here
            rows[name]["note"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:120]
            continue
        graph, why = bench.capture_graph(call)
        rows[name]["note"] = why
        timed[name] = (call, graph, [], [])
    for _ in range(rounds):
        for name, (call, graph, eager, replay) in timed.items():
            eager.append(per_call_us(call, n))
            replay.append(per_call_us(graph.replay, n) if graph is not None else float("nan"))
    for name, (_, _, eager, replay) in timed.items():
        host = [e - r for e, r in zip(eager, replay)]
        rows[name].update(eager_us=round(statistics.median(eager), 1), replay_us=round(statistics.median(replay), 1),
                          host_overhead_us=round(statistics.median(host), 1), host_min_us=round(min(host), 1),
                          host_max_us=round(max(host), 1))
    return list(rows.values())


def profile(name: str, calls: int, shape: tuple = TINY) -> str:
    direct = direct_calls() if shape == DECODE else {}
    if name in direct:
        call = direct[name]
    else:
        backend, case, call = tiny_call(name, shape)
        if call is None:
            return f"{name}: {backend.unavailable_reason() or backend.unsupported_reason(case)}"
    per_call_us(call, 50)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        call()
    prof.disable()
    text = io.StringIO()
    pstats.Stats(prof, stream=text).sort_stats("tottime").print_stats(25)
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--backends", nargs="*", default=None, help="default: the prefill list, or with --decode "
                        "the decode list")
    parser.add_argument("--decode", action="store_true", help="time one decode step (b1 h32/8 q1 k4096 d128) "
                        "instead of the tiny prefill call")
    parser.add_argument("--rounds", type=int, default=5, help="--decode: rounds of the direct calls, each timing "
                        "every call in turn (medians reported)")
    parser.add_argument("--profile", action="append", default=[], metavar="BACKEND")
    args = parser.parse_args()
    from compare import env

    environment = env.environment("cuda")
    names = args.backends or list(DECODE_BACKENDS if args.decode else BACKENDS)
    shape = DECODE if args.decode else TINY
    rows = [{**measure(name, args.calls, shape), **environment} for name in names]
    direct = []
    if args.decode:
        direct = [{**row, **environment} for row in measure_direct(direct_calls(), args.calls, args.rounds)]
        rows += direct
    args.out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(args.out / ("api_overhead_decode.csv" if args.decode else "api_overhead.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'backend':24} {'format':7} {'eager us':>9} {'replay us':>10} {'host us':>8}  note")
    for row in rows:
        print(f"{row['backend']:24} {row['format']:7} {row.get('eager_us', float('nan')):9.1f} "
              f"{row.get('replay_us', float('nan')):10.1f} {row.get('host_overhead_us', float('nan')):8.1f}  "
              f"{row.get('note', '')}", flush=True)
    for name in args.profile:
        print(f"\n=== cProfile of {args.calls} eager calls of {name} ===")
        print(profile(name, args.calls, shape))
    if direct:
        sdpa = next(row.get("host_overhead_us", float("nan")) for row in direct if row["backend"] == "sdpa direct")
        print("\ndecode step b{} h{}/{} q{} k{} d{} bf16: host time per call (eager - replay)".format(*DECODE))
        print(f"medians of {args.rounds} interleaved rounds of {args.calls} calls; host range over the rounds")
        print(f"{'call':32} {'eager us':>9} {'replay us':>10} {'host us':>8} {'range':>13} {'x sdpa':>7}")
        for row in direct:
            host = row.get("host_overhead_us", float("nan"))
            spread = f"{row.get('host_min_us', float('nan')):.1f}-{row.get('host_max_us', float('nan')):.1f}"
            print(f"{row['backend']:32} {row.get('eager_us', float('nan')):9.1f} "
                  f"{row.get('replay_us', float('nan')):10.1f} {host:8.1f} {spread:>13} {host / sdpa:7.2f}  "
                  f"{row.get('note', '')}")


if __name__ == "__main__":
    main()
