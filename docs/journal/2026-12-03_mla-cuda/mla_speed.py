"""MLA decode in both backends on the GPU (attention_mla_decode: Q/K 576 against one latent cache, V its first 512
columns; paged, page 64; bf16): each backend's output judged by the oracle (compare.oracle.check_kvcache) at every
shape before it is timed (CUDA-graph replays, compare.bench.time_call); the read ceiling (dram.read), the mma.sync
and wgmma bf16 ceilings measured in the same run. Bytes read per call: each key row of 576 columns once; FLOPs:
2 Hq Sq L (576 + 512). Writes $OUT/mla_speed.csv (long format, the environment in every row); prints a table.
    PYTHONPATH=. python docs/journal/2026-12-03_mla-cuda/mla_speed.py [--backends cuda,triton]"""
import argparse
import csv
import os

import torch

from compare import ceilings, oracle
from compare.bench import time_call
from compare.ceilings import wgmma
from compare.env import environment

parser = argparse.ArgumentParser()
parser.add_argument("--backends", default="cuda,triton")
args = parser.parse_args()
OUT = os.environ.get("OUT", "/tmp")
impls = {name: __import__({"triton": "triton_impl", "cuda": "cuda_impl"}[name]).attention_mla_decode
         for name in args.backends.split(",")}
SHAPES = [(1, 16, 1, 65536), (32, 16, 1, 8192), (128, 16, 1, 4096), (8, 64, 1, 32768), (32, 128, 1, 8192),
          (64, 128, 2, 4096), (128, 128, 1, 1024), (1, 128, 1, 65536)]
env = environment("cuda")
ceiling = dict(read_tbps=ceilings.read_bandwidth_tbps(), mma_sync_tflops=ceilings.mma_sync_tflops("bf16"),
               wgmma_tflops=wgmma.wgmma_tflops("bf16"))
print("ceilings: " + ", ".join(f"{k} {v:.2f}" for k, v in ceiling.items()), flush=True)
rows = []
for batch, heads, seqlen_q, length in SHAPES:
    case = oracle.KVCase(batch, heads, 1, seqlen_q, (length,) * batch, 576, page_size=64, head_dim_v=512,
                         latent=True, scale=576 ** -0.5, causal=seqlen_q > 1, seed=3)
    inputs = oracle.make_kvcache_inputs(case, "cuda")
    kwargs = inputs.kwargs(case)
    for name, mla in impls.items():
        def run(q, k_cache, v_cache, *, return_lse, _mla=mla, **kw):
            return _mla(q, k_cache, return_lse=return_lse, **kw)
        verdict = oracle.check_kvcache(run, case, device="cuda", inputs=inputs)
        call = lambda: mla(inputs.q, inputs.k_cache, **kwargs)  # noqa: E731
        p20, p50, p80, how = time_call(call, "cuda", graph=True)
        tbps = batch * length * 576 * 2 / (p50 * 1e-3) / 1e12
        tflops = 2 * batch * heads * seqlen_q * length * (576 + 512) / (p50 * 1e-3) / 1e12
        rows.append(dict(backend=f"{name}:decode", batch=batch, heads_q=heads, seqlen_q=seqlen_q, cache_len=length,
                         page=64, passed=verdict.passed, ms_p20=p20, ms_p50=p50, ms_p80=p80, tb_per_s=tbps,
                         pct_read=100 * tbps / ceiling["read_tbps"], tflops=tflops,
                         pct_wgmma=100 * tflops / ceiling["wgmma_tflops"],
                         pct_mma_sync=100 * tflops / ceiling["mma_sync_tflops"], note=how or verdict.reason,
                         **{f"ceiling_{k}": v for k, v in ceiling.items()}, **env))
        print(f"{name:7} b{batch:<3} h{heads:<3} q{seqlen_q} L{length:<6} {'ok ' if verdict.passed else 'BAD'} "
              f"{p50 * 1e3:8.1f} us {tbps:5.2f} TB/s ({rows[-1]['pct_read']:4.1f}%) {tflops:6.1f} TFLOP/s "
              f"({rows[-1]['pct_wgmma']:4.1f}% wgmma) {how}", flush=True)
with open(os.path.join(OUT, "mla_speed.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
