"""Paired timing of two builds of the MLA decode kernels: --new and --old each "default" (this checkout's
library), "baseline" (DEV_BASELINE_LIB, another commit's build of the same contract) or one define (a build with
it, carried); per case the two outputs compared bit for bit, then interleaved rounds of graph replays (the order
reversed every other round); ratio = median of the per-round ratios (> 1: --new is faster). Writes
$OUT/mla_paired_<new>_<old>.csv and prints a table.
GPU machine: DEV_BASELINE_LIB=cuda_impl/_build/baseline/libcuda_fa.so python3 <this file> --new default --old baseline"""

from __future__ import annotations

import argparse
import csv
import os
import statistics

import torch

from compare import bench, oracle
from cuda_impl import _lib
from cuda_impl import decode as plan

# (batch, query heads, Sq, keys): the compute-bound wgmma cases, and 16 heads (the mma.sync kernel) as a control
CASES = [(32, 64, 1, 8192), (32, 128, 1, 8192), (128, 128, 1, 8192), (32, 128, 1, 65536), (128, 64, 2, 8192),
         (8, 128, 1, 65536), (1, 128, 1, 65536), (32, 16, 1, 65536)]


def launcher(case: oracle.KVCase, inputs: oracle.KVInputs, flags: tuple[str, ...]):
    q, k, v = inputs.q, inputs.k_cache, inputs.v_cache
    batch, seqlen_q, heads_q, _ = q.shape
    rows = seqlen_q * heads_q
    block_n, tile_rows = _lib.mla_decode_tiles(rows)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    per_sm = _lib.mla_decode_ctas_per_sm(q.dtype, rows, q.device)
    splits, split_keys = plan.plan_splits(inputs.block_table.shape[1] * k.shape[1], block_n,
                                          ctas=batch * -(-rows // tile_rows), sms=sms, per_sm=per_sm)
    out = torch.empty(batch, seqlen_q, heads_q, 512, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device)
    workspace = (torch.empty(splits * batch * heads_q * seqlen_q * 513, dtype=torch.float32, device=q.device)
                 if splits > 1 else None)

    def run():
        _lib.launch_decode(q, k, v, out, lse, inputs.cache_seqlens, inputs.block_table, None, None, workspace,
                           causal=case.causal, scale=case.scale, num_splits=splits, split_keys=split_keys,
                           extra_flags=flags)
        return out, lse
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new", default="default")
    parser.add_argument("--old", default="baseline")
    args = parser.parse_args()
    if "baseline" in (args.new, args.old):
        _lib.register_library(("baseline",), os.environ["DEV_BASELINE_LIB"])
    flags = {name: () if name == "default" else (name,) for name in (args.new, args.old)}
    rows = []
    for batch, heads, seqlen_q, keys in CASES:
        case = oracle.KVCase(batch, heads, 1, seqlen_q, (keys,) * batch, 576, page_size=64, causal=seqlen_q > 1,
                             scale=576 ** -0.5, head_dim_v=512, latent=True)
        inputs = oracle.make_kvcache_inputs(case, "cuda")
        new, old = launcher(case, inputs, flags[args.new]), launcher(case, inputs, flags[args.old])
        same = all(torch.equal(a, b) for a, b in zip([x.clone() for x in new()], old()))
        times = {"new": [], "old": []}
        for r in range(args.rounds):
            for name in (("new", "old") if r % 2 == 0 else ("old", "new")):
                fn = new if name == "new" else old
                times[name].append(bench.time_call(fn, "cuda", warmup_ms=10, rep_ms=60, graph=True)[1])
        ratios = [o / n for n, o in zip(times["new"], times["old"])]
        flops = 4 * batch * heads * seqlen_q * keys * (576 + 512) / 2
        row = dict(batch=batch, heads_q=heads, seqlen_q=seqlen_q, seqlen_k=keys, same_bits=same,
                   new_ms=statistics.median(times["new"]), old_ms=statistics.median(times["old"]),
                   ratio=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios))
        row["new_tflops"] = flops / row["new_ms"] / 1e9
        rows.append(row)
        del inputs
        torch.cuda.empty_cache()
    tag = "_".join(name.lstrip("-D").lower() for name in (args.new, args.old))
    with open(os.path.join(os.environ.get("OUT", "."), f"mla_paired_{tag}.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"{args.new} against {args.old}")
    print(f"{'case':28} {'bits':>5} {'new ms':>8} {'old ms':>8} {'ratio':>6} {'range':>13} {'TFLOP/s':>8}")
    for r in rows:
        name = f"b{r['batch']} h{r['heads_q']} q{r['seqlen_q']} k{r['seqlen_k']}"
        print(f"{name:28} {str(r['same_bits']):>5} {r['new_ms']:8.4f} {r['old_ms']:8.4f} {r['ratio']:6.3f} "
              f"{r['ratio_min']:6.3f}-{r['ratio_max']:.3f} {r['new_tflops']:8.1f}")


if __name__ == "__main__":
    main()
