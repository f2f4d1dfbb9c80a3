"""triton:fa2 at the head dims it pads (80, 96, 160, 192, 192/128) and the powers of two beside them, bf16,
b4 h16 4k tokens, non-causal and causal: time and FLOP rate (compare.bench.flops, V's own head_dim), each case
checked against the oracle (row-sampled) before it is timed. Writes $OUT/headdim_speed.csv."""
import csv
import os

import torch

import triton_impl
from compare import oracle
from compare.bench import flops, time_call
from compare.backends import get

OUT = os.environ.get("OUT", "/tmp")
DIMS = [(64, None), (80, None), (96, None), (128, None), (160, None), (192, None), (192, 128), (256, None)]
rows = []
for rnd in range(2):
    for causal in (False, True):
        for d, dv in (DIMS if rnd == 0 else DIMS[::-1]):
            case = oracle.Case(4, 16, 16, 4096, 4096, d, causal=causal, head_dim_v=dv)
            inputs = oracle.make_inputs(case, "cuda")
            if rnd == 0:
                verdict = oracle.check(get("triton:fa2"), case, device="cuda", inputs=inputs)
                assert verdict.passed, verdict.summary()
            fn = lambda: triton_impl.attention(inputs.q, inputs.k, inputs.v, causal=causal, variant="fa2")  # noqa: E731
            fn()
            torch.cuda.synchronize()
            p20, p50, p80, _ = time_call(fn, "cuda")
            fl = flops(case)
            rows.append(dict(round=rnd, backend="triton:fa2", head_dim=d, head_dim_v=dv or d, causal=causal,
                             batch=4, heads=16, seqlen=4096, ms_p20=p20, ms_p50=p50, ms_p80=p80, flops=fl,
                             tflops=fl / p50 / 1e9))
            print(f"r{rnd} d{d}v{dv or d} {'causal' if causal else 'full':6} {p50:8.3f} ms {fl / p50 / 1e9:7.1f} TFLOP/s",
                  flush=True)
with open(os.path.join(OUT, "headdim_speed.csv"), "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=list(rows[0]))
    writer.writeheader()
    writer.writerows(rows)
