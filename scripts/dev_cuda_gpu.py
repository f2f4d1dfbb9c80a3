"""One device call for cuda_impl: correctness, sanitizers, timing, ceilings, a table last.

Run on the GPU machine from the repository root (scripts/dev_cuda_gpu.sh does it) with the
libraries built here (`python scripts/dev_cuda_gpu.py --build-only`: the default library, each
ALT_BUILDS entry and the ceilings benchmark) and carried in cuda_impl/_build; ALT_BUILDS that were
not carried are skipped.
Stages, each timed and logged: pytest of the GPU tests; the alternative tile-shape builds
against the float64 reference; timing with triton.testing.do_bench (median) of v1..v5 (v4/v5
also from the alternative builds) and torch SDPA flash / cuDNN; mma.sync and copy ceilings;
compute-sanitizer memcheck and racecheck on a small shape (this same file with
--sanitize-target). Results go to --out.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import cuda_impl  # noqa: E402
from compare.bench import attention_pairs  # noqa: E402
from cuda_impl import _lib, build  # noqa: E402

# Variants that take 16-bit tensors (hopper-fp8: scripts/dev_hopper_fp8_gpu.py).
SIXTEEN_BIT = [name for name, spec in cuda_impl.VARIANTS.items() if "bf16" in spec["formats"]]

# Build-flag alternatives timed beside the default library; earlier ones and their outcomes are in
# docs/perf-notes-cuda.md (-DFA_D128_WARPS=4, -DFA_V5_STAGES=3, a skipped O rescale).
# rows16: v5 at d128 with the ladder's 16 query rows per warp (its default until session 2); kv32: the
# 32-row shape with 32-key tiles and 4 stages (its default until session 3; 48 keys / 3 stages won by
# 1.7-3.8%, 64 keys lost 21%: docs/perf-notes-cuda.md).
ALT_BUILDS = {
    "rows16": ("-DFA_V5_D128_WARP_ROWS=16",),
    "kv32": ("-DFA_V5_D128_BLOCK_KV=32", "-DFA_V5_D128_STAGES=4"),
    # two stages (session 17): 48-key tiles, and FlashAttention-2's 64-key tiles (96 KB: still two CTAs per SM)
    "s2": ("-DFA_V5_D128_STAGES=2",),
    "kv64-s2": ("-DFA_V5_D128_BLOCK_KV=64", "-DFA_V5_D128_STAGES=2"),
    # s2 with the whole carveout as shared memory: L1 at its smallest, as the 3-stage default leaves it
    "s2-carveout100": ("-DFA_V5_D128_STAGES=2", "-DFA_SMEM_CARVEOUT=100"),
    # d64 before session 17 (32-key tiles, S of tile t+1 ahead of the softmax), and those tiles with S in place
    "d64-kv32-ahead": ("-DFA_V5_D64_BLOCK_KV=32", "-DFA_V5_D64_S_AHEAD=1"),
    "d64-kv32": ("-DFA_V5_D64_BLOCK_KV=32",),
}
FOUNDING = dict(b=1, hq=8, hkv=8, sq=4096, sk=8192, d=128)
BENCH_CASES = [  # name, shape, causal
    ("founding", FOUNDING, False),
    ("founding-causal", FOUNDING, True),
    ("d64-4k", dict(b=1, hq=16, hkv=16, sq=4096, sk=4096, d=64), False),
]


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def load_test_module():
    spec = importlib.util.spec_from_file_location("test_cuda_gpu", REPO / "tests" / "test_cuda_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(shape: dict, dtype=torch.bfloat16):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(shape["b"], shape["hq"], shape["sq"], shape["d"], generator=g, device="cuda", dtype=dtype)
    k = torch.randn(
        shape["b"], shape["hkv"], shape["sk"], shape["d"], generator=g, device="cuda", dtype=dtype
    )
    v = torch.randn(
        shape["b"], shape["hkv"], shape["sk"], shape["d"], generator=g, device="cuda", dtype=dtype
    )
    return q, k, v


def sanitize_target() -> None:
    """Small launches for compute-sanitizer: tails, causal with Sq > Sk, GQA, both dims."""
    for variant in ("v1", "v2", "v3", "v4", "v5"):
        for d in (64, 128):
            q, k, v = inputs(dict(b=1, hq=4, hkv=2, sq=150, sk=70, d=d))
            for causal in (False, True):
                out = torch.empty_like(q)
                lse = torch.empty(q.shape[:-1], device="cuda")
                _lib.launch_forward(variant, q, k, v, out, lse, causal=causal, scale=d**-0.5)
    torch.cuda.synchronize()
    print("sanitize target done")


def run_pytest(out_dir: Path) -> str:
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "--maxfail=20",
        "-p",
        "no:cacheprovider",
        "tests/test_cuda_gpu.py",
        "tests/test_cuda_ceilings.py",
        "tests/test_cuda_build.py",
    ]
    result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    (out_dir / "pytest.txt").write_text(result.stdout + result.stderr)
    tail = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    if result.returncode:
        print(result.stdout[-4000:])
    return tail


def check_builds(tests) -> str:
    """Default and alternative builds against the reference: all variants, a few shapes at both head_dims
    (a quick check for runs that skip pytest)."""
    failures = []
    for alt, flags in {"default": (), **ALT_BUILDS}.items():
        for variant in SIXTEEN_BIT:
            for shape, causal in [
                ((1, 4, 2, 333, 517), True),
                ((2, 2, 2, 256, 256), False),
                ((1, 2, 1, 400, 130), True),
            ]:
                for d in (64, 128):
                    b, hq, hkv, sq, sk = shape
                    q, k, v = tests.make_inputs(b, hq, hkv, sq, sk, d, torch.bfloat16)
                    try:
                        tests.check_against_reference(variant, q, k, v, causal, d**-0.5, extra_flags=flags)
                    except AssertionError as exc:
                        failures.append(f"{alt} {variant} {shape} d{d} causal={causal}: {exc}")
    return "pass" if not failures else "FAIL: " + "; ".join(failures)


def bench_ms(fn) -> tuple[float, float, float]:
    import triton.testing

    p20, p50, p80 = triton.testing.do_bench(fn, quantiles=[0.2, 0.5, 0.8])
    return p20, p50, p80


def time_kernels(rows: list[dict]) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    for case, shape, causal in BENCH_CASES:
        q, k, v = inputs(shape)
        flops = 4 * shape["b"] * shape["hq"] * shape["d"] * attention_pairs(shape["sq"], shape["sk"], causal)
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[:-1], device="cuda")
        scale = shape["d"] ** -0.5
        candidates = []
        for variant in SIXTEEN_BIT:
            candidates.append(
                (
                    f"cuda:{variant}",
                    lambda variant=variant: _lib.launch_forward(
                        variant, q, k, v, out, lse, causal=causal, scale=scale
                    ),
                )
            )
            if shape["d"] == 128:
                for alt, flags in ALT_BUILDS.items():
                    candidates.append(
                        (
                            f"cuda:{variant}@{alt}",
                            lambda variant=variant, flags=flags: _lib.launch_forward(
                                variant, q, k, v, out, lse, causal=causal, scale=scale, extra_flags=flags
                            ),
                        )
                    )
        candidates.append(("cuda:v5 via attention()", lambda: cuda_impl.attention(q, k, v, causal=causal)))
        # SDPA's is_causal is top-left aligned; it equals ours only when sq == sk.
        if not causal or shape["sq"] == shape["sk"]:
            for name, backend in (
                ("sdpa:flash", SDPBackend.FLASH_ATTENTION),
                ("sdpa:cudnn", SDPBackend.CUDNN_ATTENTION),
            ):

                def run_sdpa(backend=backend):
                    with sdpa_kernel([backend]):
                        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

                candidates.append((name, run_sdpa))
        for name, fn in candidates:
            try:
                p20, p50, p80 = bench_ms(fn)
                rows.append(
                    dict(
                        case=case,
                        kernel=name,
                        ms_p20=p20,
                        ms_p50=p50,
                        ms_p80=p80,
                        tflops=flops / (p50 * 1e-3) / 1e12,
                    )
                )
            except Exception as exc:  # a peer that is not available here is reported, not fatal
                rows.append(dict(case=case, kernel=name, error=f"{type(exc).__name__}: {exc}"[:200]))
            log(f"  {case:16} {name:26} {rows[-1].get('tflops', float('nan')):7.1f} TFLOP/s")


def run_sanitizer(tool: str, out_dir: Path) -> str:
    cmd = [
        "compute-sanitizer",
        f"--tool={tool}",
        "--error-exitcode=3",
        sys.executable,
        str(Path(__file__).resolve()),
        "--sanitize-target",
    ]
    try:
        result = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=150)
    except FileNotFoundError:
        return "compute-sanitizer not found"
    except subprocess.TimeoutExpired:
        return "timeout (150 s)"
    (out_dir / f"sanitizer-{tool}.txt").write_text(result.stdout[-20000:] + result.stderr[-20000:])
    summary = [
        ln
        for ln in (result.stdout + result.stderr).splitlines()
        if "ERROR SUMMARY" in ln or "RACECHECK SUMMARY" in ln
    ]
    return f"rc={result.returncode} " + (" | ".join(summary) or "no summary line")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "/tmp/dev_cuda_gpu")))
    parser.add_argument("--sanitize-target", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--build-only", action="store_true", help="build every library this script uses (no GPU)"
    )
    parser.add_argument(
        "--skip", action="append", default=[], choices=["pytest", "alt", "bench", "ceilings", "sanitize"]
    )
    args = parser.parse_args()
    if args.sanitize_target:
        sanitize_target()
        return
    if args.build_only:
        from compare import ceilings

        for flags in ((), *ALT_BUILDS.values()):
            print(build.build_library(_lib.library_spec(flags)))
        print(ceilings.build_library())
        return
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    log(
        f"{props.name}, {props.multi_processor_count} SMs, torch {torch.__version__}, cuda {torch.version.cuda}"
    )
    log(f"library default: {'cached' if build.cached_library(_lib.library_spec()) else 'building'}")
    _lib.load()
    for name, flags in list(ALT_BUILDS.items()):  # carried builds are used as they are; others skipped
        if build.cached_library(_lib.library_spec(flags)) is None:
            log(f"library {name}: not built and carried, skipped")
            del ALT_BUILDS[name]
    summary: dict[str, str] = {}

    if "pytest" not in args.skip:
        log("pytest (GPU tests, ceilings, build) ...")
        summary["pytest"] = run_pytest(args.out)
        log(summary["pytest"])
    if "alt" not in args.skip:
        summary["all builds vs fp64 (d64, d128)"] = check_builds(load_test_module())
        log(summary["all builds vs fp64 (d64, d128)"])
    rows: list[dict] = []
    if "bench" not in args.skip:
        log("timing ...")
        time_kernels(rows)
    if "ceilings" not in args.skip:
        from compare import ceilings

        for dtype in ("bf16", "fp16"):
            rows.append(
                dict(
                    case="ceiling",
                    kernel=f"mma.sync m16n8k16 {dtype}",
                    tflops=ceilings.mma_sync_tflops(dtype),
                )
            )
            log(f"  mma.sync {dtype}: {rows[-1]['tflops']:.1f} TFLOP/s")
        summary["copy bandwidth"] = f"{ceilings.copy_bandwidth_tbps():.2f} TB/s"
    if "sanitize" not in args.skip:
        for tool in ("memcheck", "racecheck"):
            log(f"compute-sanitizer {tool} ...")
            summary[f"sanitizer {tool}"] = run_sanitizer(tool, args.out)
            log(summary[f"sanitizer {tool}"])

    with open(args.out / "timing.csv", "w", newline="") as f:
        fields = ["case", "kernel", "ms_p20", "ms_p50", "ms_p80", "tflops", "error"]
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print("\nptxas (sm_90a):")
    for name, flags in (("default", ()), *ALT_BUILDS.items()):
        report = [
            r
            for r in build.ptxas_report(_lib.library_spec(flags))
            if r["arch"] == "sm_90a" and "bf16,128" in r["kernel"]
        ]
        print(name)
        print(build.format_report(report))
    print("\nsummary:")
    for key, value in summary.items():
        print(f"  {key}: {value}")
    ceiling = next((r["tflops"] for r in rows if r["kernel"] == "mma.sync m16n8k16 bf16"), math.nan)
    print("\n%mma: share of the bf16 mma.sync ceiling measured above")
    print(f"{'case':16} {'kernel':26} {'ms p50':>8} {'TFLOP/s':>8} {'%mma':>6}")
    for r in rows:
        if "tflops" in r:
            ms = f"{r['ms_p50']:.3f}" if "ms_p50" in r else ""
            print(
                f"{r['case']:16} {r['kernel']:26} {ms:>8} {r['tflops']:8.1f} {100 * r['tflops'] / ceiling:6.1f}"
            )
        else:
            print(f"{r['case']:16} {r['kernel']:26} {r['error']}")


if __name__ == "__main__":
    main()
