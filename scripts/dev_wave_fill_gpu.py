"""How much the last, partly filled wave of persistent clusters costs `cuda:hopper` non-causal d128.

Non-causal d128 runs persistent clusters of two CTAs (66 on the H200's 132 SMs), each taking two
128-row query tiles per round. b1 h16 16k and b4 h16 4k both make 2048 items: 15.5 rounds, so the last
round runs half full (fill 0.97). The shapes here pair each such case with one of the same length whose
item count fills every round (h33 at 16k, h66 and b2 h33 at 4k), and time cuDNN beside each
(docs/perf-notes-hopper.md, session 10, has the reading). On the H200:

    PYTHONPATH=. python scripts/dev_wave_fill_gpu.py
"""

import math

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from triton.testing import do_bench

import cuda_impl

SHAPES = [(1, 16, 16384), (1, 17, 16384), (1, 33, 16384), (4, 16, 4096), (1, 66, 4096), (2, 33, 4096)]
CLUSTERS, ROWS = 66, 128


def main() -> None:
    print("b h s | items cluster-rounds fill | hopper cudnn TFLOP/s (median of 3 interleaved rounds) | ratio",
          flush=True)
    for b, h, s in SHAPES:
        q, k, v = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * b * h * s * s * 128

        def ours():
            return cuda_impl.attention(q, k, v, causal=False, variant="hopper")

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)

        ms = {}
        for r in range(3):  # interleaved, the order reversed every other round (clock drift)
            for name, fn in (("hopper", ours), ("cudnn", cudnn)) if r % 2 == 0 else (("cudnn", cudnn), ("hopper", ours)):
                ms.setdefault(name, []).append(do_bench(fn, warmup=25, rep=200, return_mode="median"))
        rate = {name: flops / sorted(x)[1] / 1e9 for name, x in ms.items()}
        items = b * h * math.ceil(s / ROWS)
        rounds = math.ceil(items / 2 / CLUSTERS)
        print(f"{b} {h} {s} | {items} {rounds} {items / 2 / CLUSTERS / rounds:.3f} | {rate['hopper']:.1f} "
              f"{rate['cudnn']:.1f} | {rate['hopper'] / rate['cudnn']:.3f}", flush=True)


if __name__ == "__main__":
    main()
