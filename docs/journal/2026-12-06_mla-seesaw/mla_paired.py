"""Paired timing of two builds of the decode kernels (MLA and GQA): --new and --old each "default" (this checkout's
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

# (batch, query heads, KV heads, Sq, keys, head_dim, page size; head_dim 576: MLA's latent cache, V its first 512)
# "wgmma": the compute-bound MLA cases, 16 heads (the mma.sync kernel) as a control; "16": the 16-head
# (memory-bound) MLA cases and one wgmma case; "gqa": the GQA decode kernel on paged caches (bf16)
CASES = {"wgmma": [(32, 64, 1, 1, 8192, 576, 64), (32, 128, 1, 1, 8192, 576, 64), (128, 128, 1, 1, 8192, 576, 64),
                   (32, 128, 1, 1, 65536, 576, 64), (128, 64, 1, 2, 8192, 576, 64), (8, 128, 1, 1, 65536, 576, 64),
                   (1, 128, 1, 1, 65536, 576, 64), (32, 16, 1, 1, 65536, 576, 64)],
         "16": [(1, 16, 1, 1, 65536, 576, 64), (8, 16, 1, 1, 65536, 576, 64), (32, 16, 1, 1, 8192, 576, 64),
                (32, 16, 1, 1, 65536, 576, 64), (128, 16, 1, 1, 8192, 576, 64), (32, 128, 1, 1, 65536, 576, 64)],
         "gqa": [(32, 32, 8, 1, 8192, 128, 64), (8, 32, 8, 1, 32768, 128, 64), (1, 32, 8, 1, 131072, 128, 64),
                 (32, 32, 8, 1, 8192, 128, 16), (32, 32, 8, 1, 8192, 64, 64), (16, 32, 8, 1, 16384, 256, 128),
                 (32, 32, 8, 4, 8192, 128, 256)]}


def launcher(case: oracle.KVCase, inputs: oracle.KVInputs, flags: tuple[str, ...]):
    q, k, v = inputs.q, inputs.k_cache, inputs.v_cache
    batch, seqlen_q, heads_q, head_dim = q.shape
    heads_kv, dim_v = k.shape[2], v.shape[3]
    rows = seqlen_q * (heads_q // heads_kv)
    mla = dim_v != head_dim
    if mla:
        block_n, tile_rows = _lib.mla_decode_tiles(rows)
        per_sm = _lib.mla_decode_ctas_per_sm(q.dtype, rows, q.device)
    else:  # (as cuda_impl.decode.forward)
        block_n, tile_rows = _lib.decode_block_n(head_dim, False), 16
        per_sm = _lib.decode_ctas_per_sm(q.dtype, False, head_dim, q.device)
    sms = torch.cuda.get_device_properties(q.device).multi_processor_count
    splits, split_keys = plan.plan_splits(inputs.block_table.shape[1] * k.shape[1], block_n,
                                          ctas=batch * heads_kv * -(-rows // tile_rows), sms=sms, per_sm=per_sm)
    out = torch.empty(batch, seqlen_q, heads_q, dim_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=q.device)
    workspace = (torch.empty(splits * batch * heads_q * seqlen_q * (dim_v + 1), dtype=torch.float32,
                             device=q.device) if splits > 1 else None)

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
    parser.add_argument("--cases", choices=sorted(CASES), default="wgmma")
    args = parser.parse_args()
    if "baseline" in (args.new, args.old):
        _lib.register_library(("baseline",), os.environ["DEV_BASELINE_LIB"])
    flags = {name: () if name == "default" else (name,) for name in (args.new, args.old)}
    rows = []
    for batch, heads, heads_kv, seqlen_q, keys, head_dim, page in CASES[args.cases]:
        mla = head_dim == 576
        case = oracle.KVCase(batch, heads, heads_kv, seqlen_q, (keys,) * batch, head_dim, page_size=page,
                             causal=seqlen_q > 1, scale=head_dim ** -0.5, head_dim_v=512 if mla else None,
                             latent=mla)
        inputs = oracle.make_kvcache_inputs(case, "cuda")
        new, old = launcher(case, inputs, flags[args.new]), launcher(case, inputs, flags[args.old])
        same = all(torch.equal(a, b) for a, b in zip([x.clone() for x in new()], old()))
        times = {"new": [], "old": []}
        for r in range(args.rounds):
            for name in (("new", "old") if r % 2 == 0 else ("old", "new")):
                fn = new if name == "new" else old
                times[name].append(bench.time_call(fn, "cuda", warmup_ms=10, rep_ms=60, graph=True)[1])
        ratios = [o / n for n, o in zip(times["new"], times["old"])]
        flops = 2 * batch * heads * seqlen_q * keys * (head_dim + (512 if mla else head_dim))
        row = dict(batch=batch, heads_q=heads, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=keys,
                   head_dim=head_dim, page_size=page, same_bits=same,
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
    print(f"{'case':34} {'bits':>5} {'new ms':>8} {'old ms':>8} {'ratio':>6} {'range':>13} {'TFLOP/s':>8}")
    for r in rows:
        name = (f"b{r['batch']} h{r['heads_q']}/{r['heads_kv']} q{r['seqlen_q']} k{r['seqlen_k']} "
                f"d{r['head_dim']} p{r['page_size']}")
        print(f"{name:34} {str(r['same_bits']):>5} {r['new_ms']:8.4f} {r['old_ms']:8.4f} {r['ratio']:6.3f} "
              f"{r['ratio_min']:6.3f}-{r['ratio_max']:.3f} {r['new_tflops']:8.1f}")


if __name__ == "__main__":
    main()
