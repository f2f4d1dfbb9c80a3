"""Paired timing of two builds of cuda:hopper's local (window / softcap) launches: --new and --old each "default"
(this checkout's library) or one define (a build with it, carried); per case the two outputs compared bit for bit,
then interleaved rounds of graph replays (the order reversed every other round); ratio = median of the per-round
ratios (> 1: --new is faster); TFLOP/s on the FLOPs done (compare.bench.flops). The dense causal rows are the
control (the same kernel in both builds). Writes $OUT/local_paired_<new>_<old>.csv and prints a table.
GPU machine: python3 <this file> --new=-DFA_LOCAL_D64_THREE --old=default"""

from __future__ import annotations

import argparse
import csv
import os
import statistics

import torch

from compare import bench, oracle
from cuda_impl import _lib

# (head_dim, window_left, softcap): one sequence of 32k tokens, 2048 / head_dim heads, causal (the local sweep's)
CASES = [(64, -1, 0.0), (64, 1024, 0.0), (64, 4096, 0.0), (64, 16384, 0.0), (64, -1, 30.0), (128, 4096, 0.0)]
SEQLEN = 32768


def launcher(q, k, v, window_left: int, softcap: float, flags: tuple[str, ...]):
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)

    def run():
        _lib.launch_forward("hopper", q, k, v, out, lse, causal=True, scale=q.shape[-1] ** -0.5,
                            window=(window_left, -1 if window_left < 0 else 0), softcap=softcap, extra_flags=flags)
        return out, lse
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new", default="default")
    parser.add_argument("--old", default="default")
    parser.add_argument("--windows", type=int, nargs="+", help="d64 causal windows only (left keys), no control rows")
    args = parser.parse_args()
    cases = CASES if args.windows is None else [(64, w, 0.0) for w in args.windows]
    flags = {name: () if name == "default" else (name,) for name in (args.new, args.old)}
    rows = []
    for head_dim, window_left, softcap in cases:
        heads = 2048 // head_dim
        torch.manual_seed(0)
        q, k, v = (torch.randn(1, heads, SEQLEN, head_dim, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        new = launcher(q, k, v, window_left, softcap, flags[args.new])
        old = launcher(q, k, v, window_left, softcap, flags[args.old])
        same = all(torch.equal(a, b) for a, b in zip([x.clone() for x in new()], old()))
        times = {"new": [], "old": []}
        for r in range(args.rounds):
            for name in (("new", "old") if r % 2 == 0 else ("old", "new")):
                fn = new if name == "new" else old
                times[name].append(bench.time_call(fn, "cuda", warmup_ms=10, rep_ms=80, graph=True)[1])
        ratios = [o / n for n, o in zip(times["new"], times["old"])]
        window = (window_left, 0) if window_left >= 0 else (-1, -1)
        case = oracle.Case(1, heads, heads, SEQLEN, SEQLEN, head_dim, True, "bf16", window=window)
        row = dict(head_dim=head_dim, heads=heads, window_left=window_left, softcap=softcap, same_bits=same,
                   new_ms=statistics.median(times["new"]), old_ms=statistics.median(times["old"]),
                   ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
        row["new_tflops"] = bench.flops(case) / row["new_ms"] / 1e9
        row["old_tflops"] = bench.flops(case) / row["old_ms"] / 1e9
        rows.append(row)
    tag = "_".join(name.lstrip("-D").lower() for name in (args.new, args.old))
    with open(os.path.join(os.environ.get("OUT", "."), f"local_paired_{tag}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{args.new} against {args.old}")
    print(f"{'case':28} {'bits':>5} {'new ms':>8} {'old ms':>8} {'ratio':>6} {'range':>13} {'new TF':>7} {'old TF':>7}")
    for r in rows:
        name = f"d{r['head_dim']} h{r['heads']} window {r['window_left']} cap {r['softcap']:g}"
        print(f"{name:28} {str(r['same_bits']):>5} {r['new_ms']:8.3f} {r['old_ms']:8.3f} {r['ratio']:6.3f} "
              f"{r['ratio_min']:6.3f}-{r['ratio_max']:.3f} {r['new_tflops']:7.1f} {r['old_tflops']:7.1f}")


if __name__ == "__main__":
    main()
