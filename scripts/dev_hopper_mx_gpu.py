"""One device call for cuda:hopper-mxfp8 and cuda:hopper-nvfp4 (sm_90a, exact block scaling).

Build here first (`PYTHONPATH=. python scripts/dev_hopper_mx_gpu.py --build-only`: the default library and
the ALT_BUILDS) and carry cuda_impl/_build. On the H200:

    PYTHONPATH=. python scripts/dev_hopper_mx_gpu.py                    # all stages, < 90 s
    PYTHONPATH=. python scripts/dev_hopper_mx_gpu.py --only correctness # < 30 s
    PYTHONPATH=. MX_ALT_OK=1 python scripts/dev_hopper_mx_gpu.py --only timing  # < 45 s
    PYTHONPATH=. timeout 60 compute-sanitizer --tool memcheck python scripts/dev_hopper_mx_gpu.py --sanitize

Stages, each in a child process with a timeout (a barrier bug hangs instead of failing):
1. correctness (default library): the dequantization pass against compare.formats bit for bit; a Q = 0 probe (every
   score 0, so P is the quantized 1 for every key: mxfp8 1, nvfp4 e2m1(1 / e4m3(1/6)) * e4m3(1/6) =
   1.03125) that isolates the V^T tiles from the softmax; then compare.oracle.check (float64 reference
   on the dequantized inputs, the plain quantized-P reference's error x 2 as the bound, NaN-poisoned
   outputs, LSE) on tails, Sq > Sk causal, GQA/MQA, both head dims, a custom scale, large and shifted
   inputs, for both formats; then (stage "alt", its own timeout) each ALT_BUILDS library on ALT_CASES;
2. timing (only when the default passed; ALT_BUILDS only when they passed too): do_bench medians (L2 flushed) at b1 h16 16k d128, causal and
   not, of hopper-mxfp8 / hopper-nvfp4 through cuda_impl.attention (dequantization included, what the
   driver times) and of the attention kernel alone on pre-expanded tiles (default and ALT_BUILDS), triton:mxfp8-dequant /
   nvfp4-dequant (first tuning candidate, no autotuning: it would not fit the time), cuda:hopper-fp8,
   and SDPA cuDNN in bf16; TFLOP/s = 4 B H D x visible pairs / time.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import devkit  # noqa: E402  (scripts/devkit.py: python puts the script's folder on sys.path)
from compare.bench import attention_pairs  # noqa: E402
from devkit import log, oracle_check, run_checks  # noqa: E402

STAGE_TIMEOUT_S = {"correctness": 30, "alt": 15, "timing": 43}
FORMATS = ("mxfp8", "nvfp4")
# Measured beside the default; docs/perf-notes-hopper.md ("MXFP8 / NVFP4") says what each should move.
ALT_BUILDS = {"overlap": ("-DFA_HOPPER_MX_OVERLAP=1",)}

# b, hq, hkv, sq, sk, d, causal, dist, scale
CORRECTNESS_CASES = [
    (1, 2, 2, 128, 128, 128, False, "normal", None),  # one Q tile, one KV tile
    (2, 4, 4, 200, 333, 64, True, "normal", None),  # tails on both axes, V^T padded to the block
    (1, 4, 4, 300, 97, 128, True, "normal", None),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 128, True, "shifted", None),  # GQA, several rounds of the ring
    (1, 4, 2, 700, 900, 64, False, "large", None),  # peaky softmax: P's max must be exactly 1
    (2, 8, 1, 64, 1100, 128, True, "normal", None),  # MQA, short Q against a long sweep
    (3, 2, 2, 65, 1, 64, False, "normal", None),
    (1, 4, 4, 777, 2049, 64, True, "normal", 0.3),
    (1, 8, 8, 2048, 2048, 128, True, "large", 0.05),
]
ALT_CASES = [CORRECTNESS_CASES[i] for i in (1, 2, 3, 5, 6)]
BENCH_CASES = [(1, 16, 16384, 128, False), (1, 16, 16384, 128, True)]  # b, h, s, d, causal


def runner(fmt: str, extra_flags=()):
    """fn(q, k, v, causal=, scale=, return_lse=) for oracle.check: cuda_impl.attention for the default
    library, else the dequantization pass and the raw launch of the build with `extra_flags`."""
    import math

    import torch

    import cuda_impl
    from cuda_impl import _lib

    if not extra_flags:
        return lambda q, k, v, **kw: cuda_impl.attention(q, k, v, variant=f"hopper-{fmt}", **kw)

    def run(q, k, v, *, causal=False, scale=None, return_lse=False):
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        tiles = [_lib.dequantize_blocked(fmt, t.data, t.scale) for t in (q, k, v)]
        out = torch.empty(q.shape, dtype=torch.bfloat16, device="cuda")
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device="cuda")
        _lib.launch_forward_mx(fmt, *tiles, q.tensor_scale, k.tensor_scale, v.tensor_scale, out, lse, causal=causal,
                               scale=scale, seqlen_k=k.shape[2], extra_flags=extra_flags)
        return (out, lse) if return_lse else out

    return run


def check_dequant() -> tuple[bool, str]:
    """csrc/dequant_blocked.cu against compare.formats (values before nvfp4's tensor scale)."""
    import torch

    from compare import formats
    from cuda_impl import _lib

    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(2, 3, 100, 128, device="cuda", generator=g) * torch.logspace(-20, 20, 128, device="cuda")
    worst = []
    for fmt in FORMATS:
        for transpose in (False, True):
            t = formats.quantize(x, fmt, transpose=transpose)
            tile = _lib.dequantize_blocked(fmt, t.data, t.scale).float()
            if fmt == "mxfp8":
                expected = t.dequantize() if not transpose else t.dequantize().transpose(-1, -2)
            else:
                ts = t.tensor_scale
                elements = formats.e2m1_decode(formats.unpack_e2m1(t.data))
                expected = (elements.reshape(*elements.shape[:-1], -1, 16) * t.scale.float()[..., None]).reshape(
                    elements.shape)
                assert torch.allclose(expected[..., : t.shape[-1]] * ts,
                                      t.dequantize().transpose(-1, -2) if transpose else t.dequantize(), rtol=1e-6)
            expected = expected.contiguous()
            n = min(tile.shape[-1], expected.shape[-1])
            same = torch.equal(tile[..., :n], expected[..., :n])
            worst.append(f"{fmt}{'^T' if transpose else ''} {'exact' if same else 'DIFFERS'}")
            if not same:
                return False, ", ".join(worst)
    return True, ", ".join(worst)


def probe_uniform_p(fmt: str) -> tuple[bool, str]:
    """Q = 0: every score is 0 and P the quantized 1 for every visible key, so out = p1 * mean(V)."""
    import torch

    import cuda_impl
    from compare import formats

    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.zeros(1, 2, 256, 128, device="cuda")
    k, v = (torch.randn(1, 2, 300, 128, device="cuda", generator=g) for _ in range(2))
    qq, kq, vq = formats.quantize_attention_inputs(q, k, v, fmt)
    out = cuda_impl.attention(qq, kq, vq, variant=f"hopper-{fmt}").double()
    p1 = formats.quantize_p(torch.ones(1, 16, device="cuda"), fmt)[0, 0].item()
    expected = (p1 * vq.dequantize().double().mean(dim=2, keepdim=True)).expand_as(out)
    err = (out - expected).abs().max().item()
    return err < 2e-2, f"P(1) = {p1}, max|out - P(1) mean(V)| {err:.3e}"


def stage_correctness(alt: bool = False) -> int:
    """The default library (dequant check, probes, oracle), or with alt=True the ALT_BUILDS on ALT_CASES."""
    from compare import oracle

    checks = [] if alt else [("dequant", check_dequant)] + [(f"probe {f}", lambda f=f: probe_uniform_p(f))
                                                            for f in FORMATS]
    jobs = [(fmt, "default", (), c) for fmt in FORMATS for c in CORRECTNESS_CASES]
    if alt:
        jobs = [(fmt, name, flags, c) for name, flags in ALT_BUILDS.items() for fmt in FORMATS for c in ALT_CASES]
    for fmt, build_name, flags, (b, hq, hkv, sq, sk, d, causal, dist, scale) in jobs:
        case = oracle.Case(b, hq, hkv, sq, sk, d, causal=causal, fmt=fmt, dist=dist, scale=scale, seed=sq + sk)
        name = f"{build_name:8} {case.shape_str()}" + (f" scale {scale}" if scale else "")
        checks.append((name, lambda fmt=fmt, flags=flags, case=case: oracle_check(runner(fmt, flags), case)))
    failures, total = run_checks(checks)
    log(f"correctness: {total - failures}/{total} pass")
    return 1 if failures else 0


def bench_case(b, h, s, d, causal):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    import cuda_impl
    from compare import formats
    from cuda_impl import _lib
    from triton_impl.kernels import mx_dequant, tuning

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g) for _ in range(3))
    flops = 4 * b * h * d * attention_pairs(s, s, causal)
    out = torch.empty(q.shape, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device="cuda")
    inputs = {fmt: formats.quantize_attention_inputs(q, k, v, fmt) for fmt in ("fp8", *FORMATS)}
    q16, k16, v16 = (x.to(torch.bfloat16) for x in (q, k, v))

    def ours(fmt):
        qq, kq, vq = inputs[fmt]
        return lambda: cuda_impl.attention(qq, kq, vq, causal=causal, variant=f"hopper-{fmt}")

    def kernel_only(fmt, flags=()):
        qq, kq, vq = inputs[fmt]
        tiles = [_lib.dequantize_blocked(fmt, t.data, t.scale) for t in (qq, kq, vq)]
        return lambda: _lib.launch_forward_mx(fmt, *tiles, qq.tensor_scale, kq.tensor_scale, vq.tensor_scale, out, lse,
                                              causal=causal, scale=d**-0.5, seqlen_k=s, extra_flags=flags)

    def dequant_only(fmt):
        qq, kq, vq = inputs[fmt]
        return lambda: [_lib.dequantize_blocked(fmt, t.data, t.scale) for t in (qq, kq, vq)]

    def triton_dequant(fmt):
        qq, kq, vq = inputs[fmt]
        config = tuning.candidates(f"{fmt}-dequant", d, causal, 1)[0]
        tensor_scales = (qq.tensor_scale, kq.tensor_scale, vq.tensor_scale)
        return lambda: mx_dequant.launch(fmt, qq.data, qq.scale, kq.data, kq.scale, vq.data, vq.scale, tensor_scales,
                                         out, lse, causal, d**-0.5, config=config)

    def fp8():
        qq, kq, vq = inputs["fp8"]
        return lambda: cuda_impl.attention(qq, kq, vq, causal=causal, variant="hopper-fp8")

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q16, k16, v16, is_causal=causal)

    candidates = [
        ("cuda:mxfp8", ours("mxfp8")), ("mxfp8-kernel", kernel_only("mxfp8")), ("mxfp8-dequant", dequant_only("mxfp8")),
        ("cuda:nvfp4", ours("nvfp4")), ("nvfp4-kernel", kernel_only("nvfp4")),
        *[(f"{fmt}-{name}", kernel_only(fmt, flags)) for name, flags in ALT_BUILDS.items() for fmt in FORMATS
          if os.environ.get("MX_ALT_OK") == "1"],
        ("cuda:fp8", fp8()), ("cudnn-bf16", cudnn),
        ("triton:mxfp8", triton_dequant("mxfp8")), ("triton:nvfp4", triton_dequant("nvfp4")),
    ]
    case = f"b{b} h{h} s{s} d{d} {'causal' if causal else 'full'}"
    rates = {}
    for name, fn in candidates:
        try:
            fn()
            ms = do_bench(fn, warmup=10, rep=50, return_mode="median")
            rates[name] = flops / ms / 1e9
            log(f"{case:26} {name:13} {ms:8.3f} ms {rates[name]:7.1f} TFLOP/s")
        except Exception as exc:  # noqa: BLE001 - a missing peer must not hide the rest
            log(f"{case:26} {name:13} failed: {type(exc).__name__}: {str(exc)[:160]}")
    return case, rates


def stage_timing() -> int:
    rows = [bench_case(*c) for c in BENCH_CASES]
    names = ["cuda:mxfp8", "mxfp8-kernel", *[f"mxfp8-{n}" for n in ALT_BUILDS], "triton:mxfp8", "cuda:nvfp4",
             "nvfp4-kernel", *[f"nvfp4-{n}" for n in ALT_BUILDS], "triton:nvfp4", "cuda:fp8", "cudnn-bf16"]
    print("\nTFLOP/s (the -kernel columns exclude the dequantization pass)\n" + f"{'case':26} "
          + " ".join(f"{n:>12}" for n in names) + "  mx/triton  mx/fp8  nv/triton")
    for case, rates in rows:
        def r(name, rates=rates):
            return rates.get(name, float("nan"))

        cells = " ".join(f"{r(n):12.0f}" for n in names)
        print(f"{case:26} {cells}  {r('cuda:mxfp8') / r('triton:mxfp8'):9.2f}  {r('cuda:mxfp8') / r('cuda:fp8'):6.2f}"
              f"  {r('cuda:nvfp4') / r('triton:nvfp4'):9.2f}")
    return 0


def stage_sanitize() -> int:
    """Small launches for compute-sanitizer (memcheck): tails, causal, GQA, both formats and head dims."""
    from compare import oracle

    failures = 0
    for fmt in FORMATS:
        for b, hq, hkv, sq, sk, d, causal in [(1, 4, 2, 200, 333, 64, True), (1, 4, 2, 300, 170, 128, True)]:
            case = oracle.Case(b, hq, hkv, sq, sk, d, causal=causal, fmt=fmt, seed=1)
            verdict = oracle.check(runner(fmt), case, device="cuda")
            failures += not verdict.passed
            log(f"{'PASS' if verdict.passed else 'FAIL'} sanitize {case.shape_str()}: {verdict.summary()}")
    return 1 if failures else 0


def run_stage(stage: str) -> int:
    return devkit.run_stage(__file__, stage, STAGE_TIMEOUT_S[stage])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", choices=sorted(STAGE_TIMEOUT_S), help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=sorted(STAGE_TIMEOUT_S), help="run one stage (in a child with its timeout)")
    parser.add_argument("--sanitize", action="store_true", help="four small launches in-process, for compute-sanitizer")
    parser.add_argument("--build-only", action="store_true", help="(dev machine) build the default and ALT_BUILDS libraries")
    args = parser.parse_args()
    if args.build_only:
        from cuda_impl import _lib, build

        for flags in ((), *ALT_BUILDS.values()):
            log(f"built {build.build_library(_lib.library_spec(flags))}")
        return 0
    if args.sanitize:
        return stage_sanitize()
    if args.stage:
        return {"correctness": stage_correctness, "alt": lambda: stage_correctness(alt=True),
                "timing": stage_timing}[args.stage]()

    import cuda_impl

    for fmt in FORMATS:
        if reason := cuda_impl.unavailable_reason(f"hopper-{fmt}"):
            log(f"cuda:hopper-{fmt} unavailable: {reason}")
            return 1
    start = time.time()
    if args.only:
        rc = run_stage(args.only)
        log(f"{args.only} stage rc={rc} ({time.time() - start:.1f} s)")
        return rc
    rc = run_stage("correctness")
    log(f"correctness stage rc={rc} ({time.time() - start:.1f} s)")
    if rc != 0:
        log("timing skipped: correctness failed")
        return rc
    alt_rc = run_stage("alt")  # a hang or failure here only drops the ALT_BUILDS from the timing
    log(f"alt stage rc={alt_rc} ({time.time() - start:.1f} s)")
    os.environ["MX_ALT_OK"] = "1" if alt_rc == 0 else "0"
    rc = run_stage("timing")
    log(f"timing stage rc={rc}; total {time.time() - start:.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
