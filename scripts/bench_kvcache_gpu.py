"""Paged against contiguous KV caches, per backend: what the block table costs a decode step.

On the GPU machine, from the repository root (CUDA library built here and carried in cuda_impl/_build):

    PYTHONPATH=. python scripts/bench_kvcache_gpu.py [--out DIR]

For each shape (bf16, d128, Sq 1, 32 query heads over 8 KV heads) and each cache layout (contiguous, pages of
16 / 64 / 256 keys in a shuffled block table) each backend's attention_with_kvcache is first held to the oracle
(compare.oracle.check_kvcache on the same inputs), then timed as CUDA-graph replays (compare.bench.time_call).
An e4m3 cache row is added where the backend takes one. Writes DIR/kvcache.csv (long format, the environment of
compare.env in every row) and prints a table: microseconds, TB/s of K and V bytes, and paged / contiguous.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = ((32, 8192), (8, 32768), (1, 131072))  # (batch, cache length): 1.07 / 1.07 / 0.54 GB of bf16 K and V
PAGES = (None, 16, 64, 256)
BACKENDS = ("cuda_impl", "triton_impl")


def measure(module_name: str, batch: int, length: int, page, kv_fmt: str) -> dict:
    import importlib

    import torch

    from compare import bench, oracle

    module = importlib.import_module(module_name)
    case = oracle.KVCase(batch, 32, 8, 1, (length,) * batch, 128, page_size=page, kv_fmt=kv_fmt, seed=batch + length)
    row = dict(backend=module_name, kv_format=kv_fmt, page_size=page or "contiguous", batch=batch, heads_q=32,
               heads_kv=8, seqlen_q=1, seqlen_k=length, head_dim=128)
    inputs = oracle.make_kvcache_inputs(case, "cuda")
    try:
        verdict = oracle.check_kvcache(module.attention_with_kvcache, case, device="cuda", inputs=inputs)
    except (NotImplementedError, ValueError, TypeError) as exc:
        return {**row, "oracle": "refused", "note": f"{type(exc).__name__}: {exc}"[:200]}
    row.update(oracle="pass" if verdict.passed else "fail", max_abs_err=verdict.max_abs_err, note=verdict.reason)
    if verdict.passed:
        kwargs = inputs.kwargs(case)
        p20, p50, p80, how = bench.time_call(
            lambda: module.attention_with_kvcache(inputs.q, inputs.k_cache, inputs.v_cache, **kwargs), "cuda",
            graph=True)
        kv_bytes = 2 * batch * 8 * length * 128 * inputs.k_cache.element_size()
        row.update(ms_p20=p20, ms_p50=p50, ms_p80=p80, kv_tbps=kv_bytes / (p50 * 1e-3) / 1e12, note=how)
    del inputs
    torch.cuda.empty_cache()
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/out")))
    parser.add_argument("--backends", nargs="*", default=list(BACKENDS))
    args = parser.parse_args()
    from compare import env

    environment = env.environment("cuda")
    rows = []
    for batch, length in SHAPES:
        for name in args.backends:
            for page in PAGES:
                rows.append({**measure(name, batch, length, page, "same"), **environment})
                print(rows[-1]["backend"], batch, length, page, rows[-1].get("kv_tbps"), rows[-1]["oracle"],
                      flush=True)
            rows.append({**measure(name, batch, length, 64, "fp8"), **environment})
    args.out.mkdir(parents=True, exist_ok=True)
    fields = list(dict.fromkeys(key for row in rows for key in row))
    with open(args.out / "kvcache.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    contiguous = {(r["backend"], r["batch"]): r.get("ms_p50") for r in rows if r["page_size"] == "contiguous"}
    print(f"{'backend':12} {'kv':5} {'B':>4} {'Sk':>7} {'page':>10} {'us':>8} {'TB/s':>6} {'paged/contig':>12}  oracle")
    for r in rows:
        base, ms = contiguous.get((r["backend"], r["batch"])), r.get("ms_p50")
        ratio = f"{base / ms:.3f}" if base and ms else "-"
        us = f"{ms * 1e3:8.1f}" if ms else f"{'-':>8}"
        tbps = f"{r['kv_tbps']:6.2f}" if r.get("kv_tbps") else f"{'-':>6}"
        print(f"{r['backend']:12} {r['kv_format']:5} {r['batch']:4} {r['seqlen_k']:7} {str(r['page_size']):>10} {us} "
              f"{tbps} {ratio:>12}  {r['oracle']} {r.get('note', '')[:60]}")


if __name__ == "__main__":
    main()
