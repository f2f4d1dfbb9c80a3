"""cuda:hopper's local kernel (window=, softcap=) against its dense kernel and triton:fa2 / fa2-ws, bf16, 32k keys:
FLOP rate on the FLOPs done (compare.bench.attention_pairs), two rounds in reversed order, medians of eager calls
(compare.bench.time_call without graph=True: host time included). With LOCAL_BASELINE_LIB (another build of the library) the CUDA cases also run
on it, as backend "cuda-base:hopper", in the same rounds. Writes $OUT/local_speed.csv."""
import csv
import os

import torch

import cuda_impl
import triton_impl
from compare.bench import attention_pairs, time_call
from cuda_impl import _lib, toolchain

OUT = os.environ.get("OUT", "/tmp")
S = 32768
LIBS = {"cuda": toolchain.build_library(_lib.library_spec())}
if os.environ.get("LOCAL_BASELINE_LIB"):
    LIBS["cuda-base"] = os.environ["LOCAL_BASELINE_LIB"]


def on_library(name):
    def run(*args, **kw):
        _lib.register_library((), LIBS[name])
        return cuda_impl.attention(*args, **kw)
    return run


BACKENDS = {name: on_library(name) for name in LIBS} | {"triton": triton_impl.attention}
# (head_dim, heads, package, variant, causal, window, softcap). Call 1 ran every row below and also d64 / d256
# (dense causal and window 4096) and the triton:fa2 / fa2-ws rows; call 2 runs the d128 rows, on this build and on
# LOCAL_BASELINE_LIB.
CASES = [
    (128, 16, "cuda", "hopper", True, (-1, -1), 0.0),
    (128, 16, "cuda", "hopper", True, (4096, 0), 0.0),
    (128, 16, "cuda", "hopper", False, (-1, -1), 0.0),
    (128, 16, "cuda", "hopper", False, (2048, 2048), 0.0),
    (128, 16, "cuda", "hopper", True, (-1, -1), 30.0),
    (128, 16, "cuda", "hopper", False, (-1, -1), 30.0),
    (128, 16, "cuda", "hopper", True, (4096, 0), 30.0),
]
CASES += [(d, h, "cuda-base", v, c, w, cap) for d, h, pkg, v, c, w, cap in CASES
          if pkg == "cuda" and (w != (-1, -1) or cap) and "cuda-base" in LIBS]
torch.manual_seed(0)
inputs = {}
rows = []
for rnd in range(2):
    for d, h, pkg, variant, causal, window, softcap in (CASES if rnd == 0 else CASES[::-1]):
        if d not in inputs:
            inputs[d] = [torch.randn(1, h, S, d, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
        q, k, v = inputs[d]
        kw = dict(variant=variant, causal=causal)
        if window != (-1, -1):
            kw["window"] = window
        if softcap:
            kw["softcap"] = softcap
        fn = lambda: BACKENDS[pkg](q, k, v, **kw)  # noqa: E731
        fn()
        torch.cuda.synchronize()
        p20, p50, p80, _ = time_call(fn, "cuda")
        flops = 4 * h * attention_pairs(S, S, causal, window) * d
        name = f"{pkg}:{variant} d{d} {'causal' if causal else 'full'} win{window[0]},{window[1]} cap{softcap:g}"
        rows.append(dict(round=rnd, backend=f"{pkg}:{variant}", head_dim=d, heads=h, seqlen=S, causal=causal,
                         window_left=window[0], window_right=window[1], softcap=softcap, ms_p20=p20, ms_p50=p50,
                         ms_p80=p80, flops=flops, tflops=flops / p50 / 1e9))
        print(f"r{rnd} {name:55} {p50:8.3f} ms {flops / p50 / 1e9:7.1f} TFLOP/s", flush=True)
with open(os.path.join(OUT, "local_speed.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
best = {}
for r in rows:
    key = (r["backend"], r["head_dim"], r["causal"], r["window_left"], r["window_right"], r["softcap"])
    best[key] = max(best.get(key, 0), r["tflops"])
for key, t in best.items():
    print(f"{str(key):60} {t:7.1f} TFLOP/s")
