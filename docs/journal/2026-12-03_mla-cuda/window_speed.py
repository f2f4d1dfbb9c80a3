"""Decode with a local window on the GPU (triton:decode; cuda:decode once it takes one): the time of a window of W
keys on a cache of L keys against the full cache of L and against a full cache of W keys (what the window's cost
should follow), CUDA-graph replays (compare.bench.time_call), bf16 d128, Hq 32 / Hkv 8, paged (page 64), Sq 1.
Each windowed output is first checked against the oracle (compare.oracle.check_kvcache). Writes
$OUT/window_speed.csv; `--backends triton,cuda` picks the implementations."""
import argparse
import csv
import os

import torch

from compare import oracle
from compare.bench import time_call
from compare.env import environment

parser = argparse.ArgumentParser()
parser.add_argument("--backends", default="triton")
args = parser.parse_args()
OUT = os.environ.get("OUT", "/tmp")
impls = {}
for name in args.backends.split(","):
    impls[name] = __import__({"triton": "triton_impl", "cuda": "cuda_impl"}[name]).attention_with_kvcache
env = environment("cuda")
rows = []
for batch, length, window in [(1, 32768, 4096), (8, 32768, 4096), (32, 8192, 1024)]:
    for name, fn_of in impls.items():
        for label, seqlen, win in [("window", length, (window, 0)), ("full", length, (-1, -1)),
                                   ("full_w", window + 1, (-1, -1))]:
            case = oracle.KVCase(batch, 32, 8, 1, (seqlen,) * batch, 128, page_size=64, window=win, seed=1)
            inputs = oracle.make_kvcache_inputs(case, "cuda")
            verdict = oracle.check_kvcache(fn_of, case, device="cuda", inputs=inputs)
            assert verdict.passed, verdict.reason
            kwargs = inputs.kwargs(case)
            call = lambda: fn_of(inputs.q, inputs.k_cache, inputs.v_cache, **kwargs)  # noqa: E731
            p20, p50, p80, how = time_call(call, "cuda", graph=True)
            rows.append(dict(backend=name, batch=batch, cache_len=seqlen, window=win[0], arm=label, ms_p20=p20,
                             ms_p50=p50, ms_p80=p80, note=how, **env))
            print(f"{name:7} b{batch} L{seqlen} window {win}: {p50 * 1e3:8.1f} us {how}", flush=True)
with open(os.path.join(OUT, "window_speed.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
