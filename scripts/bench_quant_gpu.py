"""Time the CUDA quantizers (cuda_impl.quant) at the quick sweep's shapes, after checking them.

    PYTHONPATH=. python scripts/bench_quant_gpu.py [--out quant.csv]

Shapes: d128, 16 heads, 16k tokens (batch x seqlen = 16384 for seqlen 1k, 4k, 16k), bf16 input:
the cost a "quantize + attention" row adds per tensor. For every format it first checks the GPU
containers bit for bit against compare.formats.quantize on the same input (a failing quantizer is
not timed), then times Q (blocks along D), V (stored transposed, blocks along S) and the whole
quantize_attention_inputs triple, and compare.formats.quantize (torch ops) on the GPU for scale.
GB/s counts the minimal traffic (input read once + containers written); fp8 and NVFP4 read the
input twice (amax pass, then quantize), so their bound is lower by up to a third.
Times: triton.testing.do_bench median (L2 flushed between runs), microseconds.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

import torch
import triton.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compare import formats  # noqa: E402
from cuda_impl import quant  # noqa: E402

TOKENS, HEADS, HEAD_DIM = 16384, 16, 128


def container_bytes(qt: formats.QuantTensor) -> int:
    total = qt.data.numel() * qt.data.element_size() + qt.scale.numel() * qt.scale.element_size()
    return total + (0 if qt.tensor_scale is None else 4)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype.is_floating_point:
        nan = b.float().isnan()
        if not torch.equal(a.float().isnan(), nan):
            return False
        view = torch.uint8 if a.element_size() == 1 else torch.int32
        return torch.equal(a.view(view)[~nan], b.view(view)[~nan])
    return torch.equal(a, b)


def check(x: torch.Tensor, fmt: str, transpose: bool) -> None:
    got = quant.quantize(x, fmt, transpose=transpose)
    want = formats.quantize(x, fmt, transpose=transpose)
    pairs = [("data", got.data, want.data), ("scale", got.scale, want.scale)]
    if want.tensor_scale is not None:
        pairs.append(("tensor_scale", got.tensor_scale, want.tensor_scale))
    for name, g, w in pairs:
        if not same_bits(g, w):
            raise SystemExit(f"FAIL: {fmt} transpose={transpose} {tuple(x.shape)}: {name} differs from compare.formats")


def time_us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median") * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, help="also write the table as CSV")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA GPU", file=sys.stderr)
        return 1
    print(torch.cuda.get_device_name(), flush=True)
    rows = []
    for seqlen in (1024, 4096, 16384):
        batch = TOKENS // seqlen
        gen = torch.Generator(device="cuda").manual_seed(seqlen)
        q, k, v = (torch.randn(batch, HEADS, seqlen, HEAD_DIM, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(3))
        in_bytes = q.numel() * q.element_size()
        for fmt in formats.QUANTIZED_FORMATS:
            for transpose in (False, True):
                check(q, fmt, transpose)
            cases = {
                "q": (lambda: quant.quantize(q, fmt), in_bytes + container_bytes(quant.quantize(q, fmt))),
                "v^T": (lambda: quant.quantize(v, fmt, transpose=True),
                        in_bytes + container_bytes(quant.quantize(v, fmt, transpose=True))),
                "q,k,v^T": (lambda: quant.quantize_attention_inputs(q, k, v, fmt),
                            3 * in_bytes + sum(map(container_bytes, quant.quantize_attention_inputs(q, k, v, fmt)))),
                "torch q": (lambda: formats.quantize(q, fmt), in_bytes + container_bytes(formats.quantize(q, fmt))),
            }
            for what, (fn, nbytes) in cases.items():
                us = time_us(fn)
                rows.append(dict(seqlen=seqlen, batch=batch, fmt=fmt, tensor=what, us=round(us, 2),
                                 gbps=round(nbytes / us / 1e3, 1)))
                print(f"  {fmt:6} {what:8} seqlen {seqlen:5}: {us:9.2f} us {nbytes / us / 1e3:8.1f} GB/s", flush=True)
    print(f"\nquantize, bf16 in, d{HEAD_DIM} h{HEADS} {TOKENS} tokens (batch x seqlen); bit-identical to compare.formats")
    print(f"{'fmt':7}{'tensor':9}{'seqlen':>7}{'us':>10}{'GB/s':>9}")
    for r in rows:
        print(f"{r['fmt']:7}{r['tensor']:9}{r['seqlen']:>7}{r['us']:>10.2f}{r['gbps']:>9.1f}")
    if args.out:
        with args.out.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
