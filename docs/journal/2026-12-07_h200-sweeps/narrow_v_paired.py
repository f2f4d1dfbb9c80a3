"""Paired timing of two builds of cuda:hopper's local and varlen launches of Q/K 192 with V 128: --new and --old each
"default" (this checkout's library) or one define (a build with it, carried); per case the two outputs compared bit
for bit, then interleaved rounds of graph replays (the order reversed every other round); ratio = median of the
per-round ratios (> 1: --new is faster). d192 with V 192 is the control (the same kernels in both builds). Writes
$OUT/narrow_v_paired_<new>_<old>.csv and prints a table.
GPU machine: python3 <this file> --new=default --old=-DFA_WIDE_V_LOCAL"""

from __future__ import annotations

import argparse
import csv
import os
import statistics

import torch

from compare import bench
from cuda_impl import _lib

HEADS = 16
# (name, head_dim_v, kind, causal, window, softcap, lengths): local cases on one 32k sequence, varlen on a batch
CASES = [("local w4k causal", 128, "local", True, (4096, 0), 0.0, (32768,)),
         ("local w4k causal (d192 control)", 192, "local", True, (4096, 0), 0.0, (32768,)),
         ("local cap 30 causal", 128, "local", True, (-1, -1), 30.0, (16384,)),
         ("varlen 4x4k", 128, "varlen", False, (-1, -1), 0.0, (4096,) * 4),
         ("varlen 4x4k causal", 128, "varlen", True, (-1, -1), 0.0, (4096,) * 4),
         ("varlen mixed causal", 128, "varlen", True, (-1, -1), 0.0, (8192, 3000, 1500, 700, 300, 2884))]


def launcher(kind, q, k, v, causal, window, softcap, lengths, flags):
    scale = q.shape[-1] ** -0.5
    if kind == "local":
        out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)

        def run():
            _lib.launch_forward("hopper", q, k, v, out, lse, causal=causal, scale=scale, window=window,
                                softcap=softcap, extra_flags=flags)
            return out, lse
        return run
    offsets = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)), dtype=torch.int32, device=q.device)
    out = torch.empty(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32, device=q.device)

    def run():
        _lib.launch_varlen("hopper", q, k, v, out, lse, offsets, offsets, max(lengths), max(lengths), causal=causal,
                           scale=scale, window=window, softcap=softcap, extra_flags=flags)
        return out, lse
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--new", default="default")
    parser.add_argument("--old", default="default")
    args = parser.parse_args()
    flags = {name: () if name == "default" else (name,) for name in (args.new, args.old)}
    rows = []
    for name, dim_v, kind, causal, window, softcap, lengths in CASES:
        torch.manual_seed(0)
        total = sum(lengths)
        shape = (1, HEADS, total) if kind == "local" else (total, HEADS)
        q, k = (torch.randn(*shape, 192, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(*shape, dim_v, device="cuda", dtype=torch.bfloat16)
        new = launcher(kind, q, k, v, causal, window, softcap, lengths, flags[args.new])
        old = launcher(kind, q, k, v, causal, window, softcap, lengths, flags[args.old])
        same = all(torch.equal(a, b) for a, b in zip([x.clone() for x in new()], old()))
        times = {"new": [], "old": []}
        for r in range(args.rounds):
            for which in (("new", "old") if r % 2 == 0 else ("old", "new")):
                times[which].append(bench.time_call(new if which == "new" else old, "cuda", warmup_ms=10, rep_ms=80,
                                                    graph=True)[1])
        ratios = [o / n for n, o in zip(times["new"], times["old"])]
        rows.append(dict(case=name, head_dim_v=dim_v, same_bits=same, new_ms=statistics.median(times["new"]),
                         old_ms=statistics.median(times["old"]), ratio=statistics.median(ratios),
                         ratio_min=min(ratios), ratio_max=max(ratios)))
    tag = "_".join(n.lstrip("-D").lower() for n in (args.new, args.old))
    with open(os.path.join(os.environ.get("OUT", "."), f"narrow_v_paired_{tag}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{args.new} against {args.old}")
    print(f"{'case':34} {'bits':>5} {'new ms':>8} {'old ms':>8} {'ratio':>6} {'range':>13}")
    for r in rows:
        print(f"{r['case']:34} {str(r['same_bits']):>5} {r['new_ms']:8.3f} {r['old_ms']:8.3f} {r['ratio']:6.3f} "
              f"{r['ratio_min']:6.3f}-{r['ratio_max']:.3f}")


if __name__ == "__main__":
    main()
