"""One device call for cuda:hopper-fp8 (sm_90a, e4m3): correctness first, then timing.

Build here first (`python scripts/dev_hopper_fp8_gpu.py --build-only [NAME... | all]`: the default
library and the ALT_BUILDS named) and carry cuda_impl/_build; the ALT_BUILDS that were not built and
carried are skipped. On the H200:

    PYTHONPATH=. [DEV_ROUNDS=3] [DEV_HEAD_DIMS=256] [DEV_BASELINE_LIB=path/libcuda_fa.so] python scripts/dev_hopper_fp8_gpu.py
    PYTHONPATH=. timeout 120 compute-sanitizer --tool memcheck python scripts/dev_hopper_fp8_gpu.py --sanitize
    PYTHONPATH=. timeout 120 compute-sanitizer --tool memcheck python scripts/dev_hopper_fp8_gpu.py --sanitize-split
    PYTHONPATH=. ncu -k regex:fwd_hopper_fp8 --launch-skip 1 --launch-count 1 --section WarpStateStats \
        python scripts/dev_hopper_fp8_gpu.py --profile-once

Stages, each in a child process with a timeout (a barrier bug hangs instead of failing):
1. correctness: compare.oracle.check (float64 reference on the dequantized inputs, the plain fp8
   reference's error x 2 as the bound, NaN-poisoned outputs, LSE) on shapes chosen for the
   pipeline: tails, several ring rounds, causal with Sq != Sk both ways, GQA/MQA, the three head dims,
   a custom scale, large and shifted inputs; each ALT_BUILDS library on a few of them;
2. timing (only when everything passed): do_bench medians (L2 flushed) of cuda:hopper-fp8 through
   attention() (what the driver times) and as a direct launch per build, triton:fp8, and SDPA cuDNN
   in bf16 on the same values; TFLOP/s = 4 B H D x visible pairs / time. With DEV_ROUNDS=N every
   candidate is timed once per round, the order reversed on odd rounds, and the median kept: the
   H200's clock drifts by a few % within a call, which must not favour whichever build runs first.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import devkit  # noqa: E402  (scripts/devkit.py: python puts the script's folder on sys.path)
from compare.bench import attention_pairs  # noqa: E402
from devkit import log, oracle_check, run_checks  # noqa: E402

ROUNDS = int(os.environ.get("DEV_ROUNDS", "1"))  # timing rounds per candidate (see bench_case)
# DEV_HEAD_DIMS=256 or 64,128: time only BENCH_CASES of these head_dims (default: all)
HEAD_DIMS = {int(d) for d in os.environ.get("DEV_HEAD_DIMS", "").split(",") if d}
STAGE_TIMEOUT_S = {"correctness": 150, "timing": 60 + 120 * ROUNDS}
# Each measured beside the default (docs/perf-notes-hopper.md, section fp8, has the numbers).
ALL_ALT_BUILDS = {
    "pingpong": ("-DFA_HOPPER_FP8_PINGPONG=1", "-DFA_HOPPER_FP8_D64_CONSUMERS=2"),  # at every head_dim (d64: two consumers)
    "d128-no-pingpong": ("-DFA_HOPPER_FP8_D128_PINGPONG=0",),  # d128's consumers without turns (before session 19)
    # the ping-pong on d128's mask-free loop (session 19)
    "pingpong-unmasked-d128": ("-DFA_HOPPER_FP8_PINGPONG=1", "-DFA_HOPPER_FP8_D64_CONSUMERS=2",
                               "-DFA_HOPPER_FP8_D128_UNMASKED_LOOP=1"),
    "d64-2wg": ("-DFA_HOPPER_FP8_D64_CONSUMERS=2",),  # d64 with two consumers (before session 4)
    "chains4": ("-DFA_HOPPER_FP8_D128_SOFTMAX_CHAINS=4",),  # d128 with four chains of row max / row sum
    "d64-chains2": ("-DFA_HOPPER_FP8_D64_SOFTMAX_CHAINS=2",),  # d64 with two (before session 5)
    "k-in-order": ("-DFA_HOPPER_FP8_PERMUTED_K=0",),  # K tiles in key order, P moved by shuffles (before session 6)
    "k-5d-in-order": ("-DFA_HOPPER_FP8_PERMUTED_K=2",),  # flat K through the 5-D map in key order, shuffles
    # where P(t-1) V(t-1) is waited for (session 6): d64 right after softmax(t), where ptxas hoists the wait ahead of
    # the softmax (the loop before session 6); d128 at the top of the next step, so that softmax(t) runs under it
    "d64-retire-late": ("-DFA_HOPPER_FP8_D64_RETIRE_AT_TOP=0",),
    "d128-retire-top": ("-DFA_HOPPER_FP8_D128_RETIRE_AT_TOP=1",),
    "no-persist": ("-DFA_HOPPER_FP8_PERSISTENT=0",),  # non-causal one CTA per item too (before session 9)
    # causal one CTA per item (before session 10; the default feeds persistent CTAs from a counter)
    # (d256's, measured in session 16, spills 4 bytes since its e4m3 packs changed: not in this build)
    "item-grid-causal": ("-DFA_HOPPER_FP8_D64_DYNAMIC_CAUSAL=0", "-DFA_HOPPER_FP8_D128_DYNAMIC_CAUSAL=0"),
    "no-split": ("-DFA_HOPPER_FP8_SPLIT_TAIL=0",),  # a plain last round for non-causal d64 (before session 13)
    "direct-store": ("-DFA_HOPPER_FP8_STAGED_STORE=0",),  # O stored from the registers, 4 bytes a thread (before session 14)
    # the tiles that need no mask in a copy of the step without the mask branch (session 19, as bf16 d128): on at d256;
    # d256 with one loop that checks every tile, and d64 and d128 with the two copies
    "d256-masked-loop": ("-DFA_HOPPER_FP8_D256_UNMASKED_LOOP=0",),
    "unmasked-loop-d64-d128": ("-DFA_HOPPER_FP8_D64_UNMASKED_LOOP=1", "-DFA_HOPPER_FP8_D128_UNMASKED_LOOP=1"),
}


def carried(flags) -> bool:
    from cuda_impl import _lib, build

    return build.cached_library(_lib.library_spec(flags)) is not None


ALT_BUILDS = {name: flags for name, flags in ALL_ALT_BUILDS.items() if carried(flags)} | devkit.baseline_build()

# b, hq, hkv, sq, sk, d, causal, dist, scale
CORRECTNESS_CASES = [
    (1, 2, 2, 128, 128, 128, False, "normal", None),  # one Q tile, one KV tile
    (1, 2, 2, 128, 256, 128, False, "normal", None),  # the S(t+1) / P(t) V(t) overlap, once
    (2, 4, 4, 200, 333, 64, True, "normal", None),  # tails on both axes, V^T re-padded (333 % 16)
    (1, 4, 4, 300, 97, 128, True, "normal", None),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 128, True, "shifted", None),  # GQA, several rounds of the ring
    (1, 4, 2, 1000, 1500, 64, False, "large", None),
    (2, 8, 1, 64, 1100, 128, True, "normal", None),  # MQA, short Q against a long sweep
    (1, 2, 2, 1536, 640, 64, True, "normal", None),  # causal Sq > Sk over many Q tiles
    (1, 1, 1, 1, 1, 128, True, "normal", None),
    (3, 2, 2, 65, 1, 64, False, "normal", None),
    (1, 4, 4, 777, 2049, 64, True, "normal", 0.3),
    (1, 8, 8, 2048, 2048, 128, False, "normal", None),
    # non-causal d128 tails: one partial tile, V^T re-padded (333 % 16), GQA with a custom scale
    (1, 2, 2, 64, 100, 128, False, "normal", None),
    (2, 4, 4, 200, 333, 128, False, "normal", None),
    (1, 4, 2, 1000, 1500, 128, False, "shifted", 0.2),
    (1, 8, 8, 2048, 2048, 128, True, "large", 0.05),
    (1, 16, 16, 4096, 4096, 128, True, "normal", None),
    # key-permuted K (contiguous, sk % 16 == 0) with a partial last tile that runs into the next head
    (2, 4, 2, 300, 1040, 128, True, "normal", None),
    (2, 4, 2, 300, 1040, 64, False, "shifted", 0.3),
    # non-causal with more items than SMs: persistent CTAs walk two or three items each
    (4, 8, 4, 1000, 1200, 128, False, "normal", None),
    (2, 16, 8, 2000, 1500, 64, False, "shifted", None),  # d64's last round split (88 items over 132 CTAs)
    (3, 16, 4, 700, 1999, 64, False, "normal", 0.2),  # d64's last round split (60 items of 16 tiles)
    # d256: Q and K in two 128-byte panels, P V as m64n256k32, a 3-stage ring (session 16)
    (1, 2, 2, 128, 256, 256, False, "normal", None),
    (2, 4, 4, 200, 333, 256, True, "normal", None),  # tails, in-order K (333 % 16), V^T re-padded
    (1, 4, 4, 300, 97, 256, True, "normal", None),  # Sq > Sk
    (2, 4, 2, 300, 1040, 256, True, "shifted", None),  # permuted K, GQA, the last tile into the next head
    (1, 8, 8, 2048, 2048, 256, True, "large", 0.05),
    (4, 8, 4, 1000, 1200, 256, False, "normal", None),  # 256 items: persistent CTAs take two
    (2, 8, 1, 64, 1100, 256, False, "normal", 0.3),  # MQA
    (3, 2, 2, 65, 1, 256, False, "normal", None),
]
ALT_CASES = CORRECTNESS_CASES
BENCH_CASES = [  # b, h, s, d, causal
    (1, 16, 16384, 128, False),
    (1, 16, 16384, 128, True),
    (4, 16, 4096, 128, False),
    (1, 16, 16384, 64, False),
    (1, 16, 16384, 64, True),
    (4, 16, 4096, 64, False),
    (16, 16, 1024, 128, False),  # short rows: the per-item prologue and epilogue weigh most
    (32, 16, 512, 128, False),
    (16, 16, 1024, 64, False),
    (32, 16, 512, 64, False),
    (2, 16, 8192, 128, True),  # causal middle and short rows: where the counter-fed schedule gains
    (4, 16, 4096, 128, True),
    (16, 16, 1024, 128, True),
    (32, 16, 512, 128, True),
    (4, 16, 4096, 64, True),
    (16, 16, 1024, 64, True),
    (32, 16, 512, 64, True),
    (1, 16, 16384, 256, False),
    (1, 16, 16384, 256, True),
    (4, 16, 4096, 256, False),
    (4, 16, 4096, 256, True),
    (16, 16, 1024, 256, False),
    (16, 16, 1024, 256, True),
]


def make_case(b, hq, hkv, sq, sk, d, causal, dist, scale):
    from compare import oracle

    return oracle.Case(b, hq, hkv, sq, sk, d, causal=causal, fmt="fp8", dist=dist, scale=scale, seed=sq + sk)


def runner(extra_flags=()):
    """fn(q, k, v, causal=, scale=, return_lse=) for oracle.check; a non-default build goes
    through the raw launch (attention() always uses the default library)."""
    import torch

    import cuda_impl
    from cuda_impl import _lib

    if not extra_flags:
        return lambda q, k, v, **kw: cuda_impl.attention(q, k, v, variant="hopper-fp8", **kw)

    def run(q, k, v, *, causal=False, scale=None, return_lse=False):
        scale = 1.0 / math.sqrt(q.data.shape[-1]) if scale is None else scale
        vt = v.data
        if vt.stride(-2) % 16:
            vt = torch.nn.functional.pad(vt.view(torch.uint8), (0, -vt.shape[-1] % 16)).view(vt.dtype)[
                ..., : v.data.shape[-1]
            ]
        out = torch.empty(q.data.shape, dtype=torch.bfloat16, device=q.data.device)
        lse = torch.empty(q.data.shape[:-1], dtype=torch.float32, device=q.data.device)
        _lib.launch_forward_fp8("hopper-fp8", q.data, k.data, vt, q.scale, k.scale, v.scale, out, lse,
                                causal=causal, scale=scale, extra_flags=extra_flags)
        return (out, lse) if return_lse else out

    return run


def probe_uniform_p() -> tuple[bool, str]:
    """Q = 0 makes every score 0 and P exactly 1 for every key, whatever its register order: the
    output is the mean of V's rows. Passing this while the oracle fails (with a good LSE) points
    at the P permutation rather than the V^T tiles."""
    import torch

    import cuda_impl
    from compare import formats

    g = torch.Generator(device="cuda").manual_seed(1)
    q = torch.zeros(1, 2, 256, 128, device="cuda")
    k, v = (torch.randn(1, 2, 300, 128, device="cuda", generator=g) for _ in range(2))
    qq, kq, vq = formats.quantize_attention_inputs(q, k, v, "fp8")
    out = cuda_impl.attention(qq, kq, vq).double()
    expected = vq.dequantize().double().mean(dim=2, keepdim=True).expand_as(out)
    err = (out - expected).abs().max().item()
    return err < 2e-2, f"max|out - mean(V)| {err:.3e}"


def stage_correctness() -> int:
    checks = [("probe (Q = 0, P = 1: V^T tiles and P V without the permutation)", probe_uniform_p)]
    jobs = [("default", (), c) for c in CORRECTNESS_CASES]
    jobs += [(name, flags, c) for name, flags in ALT_BUILDS.items() for c in ALT_CASES]
    for build_name, flags, params in jobs:
        case = make_case(*params)
        name = f"{build_name:8} {case.shape_str()}" + (f" scale {case.scale}" if case.scale else "")
        checks.append((name, lambda flags=flags, case=case: oracle_check(runner(flags), case)))
    failures, total = run_checks(checks)
    log(f"correctness: {total - failures}/{total} pass")
    return 1 if failures else 0


def bench_case(b, h, s, d, causal):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    import cuda_impl
    import triton_impl
    from compare import formats
    from cuda_impl import _lib

    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, device="cuda", generator=g) for _ in range(3))
    qq, kq, vq = formats.quantize_attention_inputs(q, k, v, "fp8")
    q16, k16, v16 = (x.to(torch.bfloat16) for x in (q, k, v))
    flops = 4 * b * h * d * attention_pairs(s, s, causal)
    out = torch.empty(q.shape, dtype=torch.bfloat16, device="cuda")
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device="cuda")

    def direct(flags):
        return lambda: _lib.launch_forward_fp8("hopper-fp8", qq.data, kq.data, vq.data, qq.scale, kq.scale,
                                               vq.scale, out, lse, causal=causal, scale=d**-0.5, extra_flags=flags)

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q16, k16, v16, is_causal=causal)

    candidates = [
        ("hopper-fp8", lambda: cuda_impl.attention(qq, kq, vq, causal=causal, variant="hopper-fp8")),
        *[(name, direct(flags)) for name, flags in ALT_BUILDS.items()],
        ("triton:fp8", lambda: triton_impl.attention(qq, kq, vq, causal=causal, variant="fp8")),
        ("cudnn-bf16", cudnn),
    ]
    case = f"b{b} h{h} s{s} d{d} {'causal' if causal else 'full'}"
    def time_ms(fn):
        fn()  # compiled and autotuned before the timing
        return do_bench(fn, warmup=25, rep=100, return_mode="median")

    medians = devkit.interleaved_medians(f"{case:26}", candidates, ROUNDS, time_ms,
                                         lambda name, ms: f" {flops / ms / 1e9:7.1f} TFLOP/s")
    rates = {name: flops / ms / 1e9 for name, ms in medians.items()}
    # what was timed is right: hopper-fp8 against triton:fp8 on the same quantized inputs
    ours = cuda_impl.attention(qq, kq, vq, causal=causal, variant="hopper-fp8").float()
    theirs = triton_impl.attention(qq, kq, vq, causal=causal, variant="fp8").float()
    return case, rates, (ours - theirs).abs().max().item()


def stage_timing() -> int:
    rows = [bench_case(*c) for c in BENCH_CASES if not HEAD_DIMS or c[3] in HEAD_DIMS]
    names = ["hopper-fp8", *ALT_BUILDS, "triton:fp8", "cudnn-bf16"]
    print(f"\nTFLOP/s (median of {ROUNDS} round{'s' if ROUNDS > 1 else ''})\n" + f"{'case':26} " + " ".join(f"{n:>10}" for n in names) + "  vs triton  vs cudnn  max|ours-triton|")
    for case, rates, diff in rows:
        cells = " ".join(f"{rates.get(n, float('nan')):10.0f}" for n in names)
        best = rates.get("hopper-fp8", 0)
        vs_t = best / rates["triton:fp8"] if "triton:fp8" in rates else float("nan")
        vs_c = best / rates["cudnn-bf16"] if "cudnn-bf16" in rates else float("nan")
        print(f"{case:26} {cells}  {vs_t:9.2f}  {vs_c:7.2f}  {diff:.2e}")
    return 0


SANITIZE_CASES = [
    (1, 4, 2, 200, 333, 64, True, "normal", None), (1, 4, 2, 300, 170, 128, True, "normal", None),
    (1, 4, 2, 300, 333, 128, False, "normal", None),
    (2, 4, 2, 300, 1040, 128, True, "normal", None),  # key-permuted K tiles
    (2, 4, 2, 200, 320, 64, False, "normal", None),
    (3, 8, 4, 800, 500, 128, False, "normal", None),  # 168 items: persistent CTAs take two
    (1, 4, 2, 300, 333, 256, True, "normal", None), (2, 4, 2, 300, 1040, 256, False, "normal", None),
    (3, 8, 4, 700, 300, 256, False, "normal", None),  # 144 items: persistent CTAs take two
]
# d64's split last round, in memcheck (its workspace; its hand-over is in global memory, which racecheck does not
# watch): 60 items of 10 tiles over 132 CTAs, and 88 of 9.
SANITIZE_SPLIT_CASES = [(3, 16, 4, 700, 1200, 64, False, "normal", None), (2, 16, 8, 2000, 1100, 64, False, "normal", None)]


def stage_sanitize(build: str | None, cases: list[tuple]) -> int:
    from compare import oracle

    failures = 0
    for params in cases:
        verdict = oracle.check(runner(ALL_ALT_BUILDS[build] if build else ()), make_case(*params), device="cuda")
        failures += not verdict.passed
        log(f"{'PASS' if verdict.passed else 'FAIL'} sanitize {params}: {verdict.summary()}")
    return 1 if failures else 0


def profile_once() -> int:
    """Two launches at b1 h16 16k d128 non-causal for ncu (--launch-skip 1 --launch-count 1)."""
    import torch

    import cuda_impl
    from compare import formats

    q, k, v = (torch.randn(1, 16, 16384, 128, device="cuda") for _ in range(3))
    qq, kq, vq = formats.quantize_attention_inputs(q, k, v, "fp8")
    for _ in range(2):
        cuda_impl.attention(qq, kq, vq, variant="hopper-fp8")
    torch.cuda.synchronize()
    return 0


def run_stage(stage: str) -> int:
    return devkit.run_stage(__file__, stage, STAGE_TIMEOUT_S[stage])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sanitize", action="store_true", help="nine small launches, for compute-sanitizer")
    parser.add_argument("--sanitize-split", action="store_true",
                        help="two launches with a split last round, for compute-sanitizer's memcheck")
    parser.add_argument("--stage", choices=sorted(STAGE_TIMEOUT_S), help=argparse.SUPPRESS)
    parser.add_argument("--build", choices=list(ALL_ALT_BUILDS), help="with --sanitize: this ALT build's library")
    parser.add_argument("--profile-once", action="store_true", help="two launches at 16k d128, for ncu")
    parser.add_argument("--build-only", nargs="*", metavar="NAME", choices=["all", *ALL_ALT_BUILDS],
                        help="(dev machine) build the default library and the ALT_BUILDS named ('all': every one)")
    args = parser.parse_args()
    if args.build_only is not None:
        from cuda_impl import _lib, build

        names = list(ALL_ALT_BUILDS) if args.build_only == ["all"] else args.build_only
        for flags in ((), *(ALL_ALT_BUILDS[n] for n in names)):
            log(f"built {build.build_library(_lib.library_spec(flags))}")
        return 0
    if args.sanitize or args.sanitize_split:
        return stage_sanitize(args.build, SANITIZE_SPLIT_CASES if args.sanitize_split else SANITIZE_CASES)
    if args.profile_once:
        return profile_once()
    if args.stage:
        return {"correctness": stage_correctness, "timing": stage_timing}[args.stage]()

    import cuda_impl

    if reason := cuda_impl.unavailable_reason("hopper-fp8"):
        log(f"cuda:hopper-fp8 unavailable: {reason}")
        return 1
    start = time.time()
    rc = run_stage("correctness")
    log(f"correctness stage rc={rc} ({time.time() - start:.1f} s)")
    if rc != 0:
        log("timing skipped: correctness failed")
        return rc
    rc = run_stage("timing")
    log(f"timing stage rc={rc}; total {time.time() - start:.1f} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
