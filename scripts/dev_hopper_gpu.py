"""One device call for cuda:hopper (sm_90a): correctness first, then timing; under 60 s.

Run from the repository root on the H200 with the libraries built here and carried in
cuda_impl/_build (`python scripts/dev_hopper_gpu.py --build-only` on the dev machine):

    PYTHONPATH=. python scripts/dev_hopper_gpu.py
    PYTHONPATH=. timeout 60 compute-sanitizer --tool memcheck python scripts/dev_hopper_gpu.py --sanitize

The default run has two stages, each in a child process with a timeout, so that a hung kernel
(a barrier waiting for an arrival that never comes) is reported instead of eating the call:
1. correctness: ~12 shapes against float64, each under freshly NaN-poisoned outputs, one line
   per shape (max error, the FlashAttention bound, pass/fail); a crash in one shape is caught and
   printed without hiding the others (a CUDA fault poisons the context, so the rest are then
   marked as skipped);
2. timing (only when every shape passed): triton.testing.do_bench medians of cuda:hopper beside
   torch SDPA cuDNN and cuda:v5 (and the 3-stage d128 build when carried), TFLOP/s with
   FLOPs = 4 B H D (visible pairs), and each hopper output's max difference from cuDNN's.
--sanitize runs two tiny launches (d64 and d128; causal, Sq != Sk, GQA, tails) and checks them.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STAGE_TIMEOUT_S = {"correctness": 35, "timing": 30}
# Timed beside the default build when it was built and carried (`--build-only` builds it):
# a 3-stage K/V ring at d128 (224 KB of shared memory instead of 160 KB).
ALT_FLAGS = ("-DFA_HOPPER_D128_STAGES=3",)

# b, hq, hkv, sq, sk, d, dtype, causal
CORRECTNESS_SHAPES = [
    (1, 2, 2, 128, 128, 128, "bf16", False),
    (2, 4, 4, 200, 333, 64, "fp16", True),  # tails on both axes
    (1, 4, 4, 300, 97, 128, "bf16", True),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 128, "bf16", True),  # GQA, several rounds of the ring
    (1, 4, 2, 1000, 1500, 64, "fp16", False),
    (2, 8, 1, 64, 1100, 128, "fp16", True),  # MQA
    (1, 2, 2, 1536, 640, 64, "bf16", True),  # causal Sq > Sk over many Q tiles
    (1, 1, 1, 1, 1, 128, "bf16", True),
    (1, 4, 4, 777, 2049, 64, "bf16", True),
    (1, 8, 8, 2048, 2048, 128, "fp16", False),
    (1, 8, 8, 2048, 2048, 128, "bf16", True),
    (1, 16, 16, 4096, 4096, 128, "bf16", True),
]
BENCH_CASES = [  # b, h, s, d, causal
    (1, 16, 16384, 128, False),
    (1, 16, 16384, 128, True),
    (4, 16, 4096, 128, False),
    (4, 16, 4096, 128, True),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def reference_module():
    spec = importlib.util.spec_from_file_location("test_cuda_gpu", REPO / "tests" / "test_cuda_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dtype_of(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def check_shape(ref, b, hq, hkv, sq, sk, d, fmt, causal) -> tuple[bool, str]:
    """Poisoned launch of cuda:hopper, compared with float64 by the FlashAttention rule."""
    import torch

    import cuda_impl
    from cuda_impl import validate

    q, k, v = ref.make_inputs(b, hq, hkv, sq, sk, d, dtype_of(fmt), seed=sq * 7 + sk)
    scale = 1.0 / math.sqrt(d)
    validate.check_inputs(q, k, v, variant="hopper", spec=cuda_impl.VARIANTS["hopper"], scale=scale)
    out, lse = ref.run_poisoned("hopper", q, k, v, causal, scale)
    ref_out, ref_lse = ref.attention_reference(q, k, v, causal, scale)
    lp_out, _ = ref.attention_reference(q, k, v, causal, scale, low_precision=True)
    nan_out, nan_lse = out.isnan().sum().item(), lse.isnan().sum().item()
    diff = (out.double() - ref_out).abs().nan_to_num(math.inf)
    err = diff.max().item()
    bound = 2 * (lp_out - ref_out).abs().max().item() + torch.finfo(q.dtype).eps
    empty = torch.isinf(ref_lse)
    lse_ok = torch.equal(torch.isinf(lse), empty)
    finite = ~empty
    lse_err = (lse.double()[finite] - ref_lse[finite]).abs().max().item() if finite.any() else 0.0
    ok = nan_out == 0 and nan_lse == 0 and err <= bound and lse_ok and lse_err < 1e-3
    detail = f"max|err| {err:.3e} (bound {bound:.3e}) lse err {lse_err:.2e}"
    if nan_out or nan_lse:
        detail += f" NaN out {nan_out} lse {nan_lse}"
    if not lse_ok:
        detail += " -inf pattern of lse differs"
    if err > bound:  # where it goes wrong hints at the cause (a head_dim panel, a tail, a tile)
        bad = (diff > bound).nonzero()
        rows, cols = bad[:, 2].unique(), bad[:, 3].unique()
        detail += (
            f"; {len(bad)} bad elements, worst at (b, h, row, col) "
            f"{tuple(int(i) for i in (diff == err).nonzero()[0])}, rows {int(rows.min())}..{int(rows.max())}"
            f" ({len(rows)}), cols {int(cols.min())}..{int(cols.max())} ({len(cols)})"
        )
    return ok, detail


def stage_correctness() -> int:
    import torch

    ref = reference_module()
    failures, poisoned = 0, False
    for shape in CORRECTNESS_SHAPES:
        name = "b{} hq{} hkv{} sq{} sk{} d{} {} {}".format(*shape[:7], "causal" if shape[7] else "full")
        if poisoned:
            log(f"SKIP {name} (CUDA context lost earlier)")
            failures += 1
            continue
        try:
            ok, detail = check_shape(ref, *shape)
        except Exception as exc:  # noqa: BLE001 - report every shape, keep going
            ok, detail = False, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
            traceback.print_exc(limit=2)
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001 - a device fault: later launches cannot run
                poisoned = True
        failures += not ok
        log(f"{'PASS' if ok else 'FAIL'} {name}: {detail}")
    log(f"correctness: {len(CORRECTNESS_SHAPES) - failures}/{len(CORRECTNESS_SHAPES)} shapes pass")
    return 1 if failures else 0


def visible_pairs(sq: int, sk: int, causal: bool) -> int:
    if not causal:
        return sq * sk
    return sum(max(0, min(sk, i + sk - sq + 1)) for i in range(sq))


def bench_case(b: int, h: int, s: int, d: int, causal: bool) -> tuple[str, dict, int, float]:
    """Median ms of cuda:hopper, SDPA cuDNN and cuda:v5 on one bf16 shape, and max|hopper - cudnn|."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from cuda_impl import _lib, build

    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
    scale = 1.0 / math.sqrt(d)
    flops = 4 * b * h * d * visible_pairs(s, s, causal)
    case = f"b{b} h{h} s{s} d{d} {'causal' if causal else 'full'}"

    def cuda_variant(name, extra_flags=()):
        return lambda: _lib.launch_forward(
            name, q, k, v, out, lse, causal=causal, scale=scale, extra_flags=extra_flags
        )

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    candidates = [("hopper", cuda_variant("hopper")), ("sdpa:cudnn", cudnn), ("v5", cuda_variant("v5"))]
    if build.cached_library(_lib.library_spec(ALT_FLAGS)) is not None:
        candidates.append(("hopper-3st", cuda_variant("hopper", ALT_FLAGS)))
    results = {}
    for name, fn in candidates:
        try:
            ms = do_bench(fn, warmup=10, rep=60, return_mode="median")
            results[name] = ms
            log(f"{case:28} {name:11} {ms:8.3f} ms {flops / ms / 1e9:7.1f} TFLOP/s")
        except Exception as exc:  # noqa: BLE001 - a missing peer must not hide the rest
            log(f"{case:28} {name:11} failed: {type(exc).__name__}: {str(exc)[:120]}")
    diffs = {}  # same inputs as cuDNN: a cheap sanity check of what was timed
    if "sdpa:cudnn" in results:
        expected = cudnn().float()
        for name, fn in candidates:
            if name.startswith("hopper") and name in results:
                fn()
                diffs[name] = (out.float() - expected).abs().max().item()
    return case, results, flops, diffs


def stage_timing() -> int:
    rows = [bench_case(*shape) for shape in BENCH_CASES]
    names = ("hopper", "hopper-3st", "sdpa:cudnn", "v5")
    print(f"\nTFLOP/s\n{'case':28} {'hopper':>7} {'3-stage':>7} {'cudnn':>7} {'v5':>7}  hopper/cudnn  max|hopper-cudnn|")
    for case, results, flops, diffs in rows:
        rate = {n: flops / ms / 1e9 for n, ms in results.items()}
        ratio = rate.get("hopper", 0) / rate["sdpa:cudnn"] if "sdpa:cudnn" in rate else float("nan")
        cells = " ".join(f"{rate.get(n, float('nan')):7.0f}" for n in names)
        checks = " ".join(f"{n} {d:.1e}" for n, d in diffs.items())
        print(f"{case:28} {cells}  {ratio:11.2f}  {checks}")
    return 0


def stage_sanitize() -> int:
    ref = reference_module()
    failures = 0
    for shape in [(1, 4, 2, 200, 333, 64, "bf16", True), (1, 4, 2, 300, 170, 128, "fp16", True)]:
        ok, detail = check_shape(ref, *shape)
        failures += not ok
        log(f"{'PASS' if ok else 'FAIL'} sanitize {shape}: {detail}")
    return 1 if failures else 0


def run_stage(stage: str) -> int:
    """The stage in a child process: a hang becomes a timeout, not a lost device call."""
    try:
        return subprocess.run(
            [sys.executable, __file__, "--stage", stage], check=False, timeout=STAGE_TIMEOUT_S[stage]
        ).returncode
    except subprocess.TimeoutExpired:
        log(f"{stage}: TIMEOUT after {STAGE_TIMEOUT_S[stage]} s (kernel hang? check the barrier protocol)")
        return 124


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sanitize", action="store_true", help="two tiny launches, for compute-sanitizer")
    parser.add_argument("--stage", choices=sorted(STAGE_TIMEOUT_S), help=argparse.SUPPRESS)
    parser.add_argument(
        "--build-only", action="store_true", help="(dev machine) build the default and the 3-stage library"
    )
    args = parser.parse_args()
    if args.build_only:
        from cuda_impl import _lib, build

        for flags in ((), ALT_FLAGS):
            log(f"built {build.build_library(_lib.library_spec(flags))}")
        return 0
    if args.sanitize:
        return stage_sanitize()
    if args.stage:
        return {"correctness": stage_correctness, "timing": stage_timing}[args.stage]()

    import cuda_impl
    from cuda_impl import _lib, build

    if reason := cuda_impl.unavailable_reason("hopper"):
        log(f"cuda:hopper unavailable: {reason}")
        return 1
    log(f"library: {build.cached_library(_lib.library_spec()) or 'not cached, building'}")
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
