"""One device call for cuda:hopper (sm_90a): correctness first, then timing; 30-60 s.

Run from the repository root on the H200 with the libraries built here and carried in
cuda_impl/_build (`python scripts/dev_hopper_gpu.py --build-only` on the dev machine):

    PYTHONPATH=. [DEV_ROUNDS=5] [DEV_POWER_LOG=1] [DEV_BASELINE_LIB=path/libcuda_fa.so] \
        python scripts/dev_hopper_gpu.py [--head-dim 256]
    PYTHONPATH=. timeout 60 compute-sanitizer --tool memcheck python scripts/dev_hopper_gpu.py --sanitize
    PYTHONPATH=. timeout 90 compute-sanitizer --tool memcheck python scripts/dev_hopper_gpu.py --sanitize-split

The default run has two stages (three with --gap), each in a child process with a timeout, so
that a hung kernel (a barrier waiting for an arrival that never comes) is reported instead of
eating the call:
1. correctness, once per build (the default library and each ALT_FLAGS library that was built
   and carried; with DEV_BASELINE_LIB, build "baseline": another commit's library, devkit.baseline_build):
   the CORRECTNESS_SHAPES (d64, d128 and d256; some with more items than SMs, in clusters of two CTAs
   or with a split last round) against float64, each under freshly NaN-poisoned outputs, one line per shape (max
   error, the FlashAttention bound, pass/fail); a crash in one shape is caught and printed without
   hiding the others (a CUDA fault poisons the context, so the rest are then marked as skipped);
2. timing of the builds that passed: triton.testing.do_bench medians beside torch SDPA cuDNN
   (timed before and after them, so the ratio is taken at the same clocks; with DEV_ROUNDS=N every
   build N times in alternating order, medians kept), TFLOP/s with
   FLOPs = 4 B H D (visible pairs), the SM clock after each case, and each hopper output's max
   difference from cuDNN's;
3. --gap: the default build through this script's direct launch and through the driver's path
   (compare.bench.time_call on the registry backend, oracle inputs, the custom op), interleaved
   in one process, with the SM clock, power and throttle reasons after each.
--driver instead measures the quick sweep's bf16 shapes the way `python -m compare run` does
(compare.bench.measure: oracle check, then do_bench with L2 flush, through the custom op) for
cuda:hopper between two sdpa:cudnn measurements, without the ceilings.
--sanitize runs ten small launches (d64, d128, d256; causal and not, Sq != Sk, GQA, tails; one with more
items than SMs, so that some persistent CTAs run two; one in two-CTA clusters with multicast K/V) and
checks them; --sanitize-split three whose last round is split (d128 with and without clusters, d64; for
memcheck).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import devkit  # noqa: E402  (scripts/devkit.py: python puts the script's folder on sys.path)
from compare.bench import attention_pairs  # noqa: E402
from devkit import log, run_checks  # noqa: E402

ROUNDS = int(os.environ.get("DEV_ROUNDS", "1"))  # timing rounds per build (see bench_case)
POWER_LOG = os.environ.get("DEV_POWER_LOG") == "1"  # nvidia-smi's clock and power after every timing
STAGE_TIMEOUT_S = {"correctness": 60, "timing": 60 + 90 * ROUNDS, "gap": 60, "driver": 90}
# Builds timed beside the default one when built and carried (`--build-only NAME...` builds them,
# `--build-only all` every one):
# one feature switched off (or the 3-stage K/V ring at d128, 224 KB of shared memory) each.
ALT_FLAGS = {
    "3-stage": ("-DFA_HOPPER_D128_STAGES=3",),
    "no-pingpong": ("-DFA_HOPPER_PINGPONG=0",),
    "no-overlap": ("-DFA_HOPPER_OVERLAP=0",),
    "no-persist": ("-DFA_HOPPER_PERSISTENT=0",),
    # d256 causal persistent (static order) at every length, and never (before session 15: one CTA per item)
    "causal-persist": ("-DFA_HOPPER_D256_CAUSAL_PERSISTENT=1048576", "-DFA_HOPPER_D256_CAUSAL_PERSISTENT_FROM=0"),
    "d256-causal-grid": ("-DFA_HOPPER_D256_CAUSAL_PERSISTENT=0",),
    # d64 causal on three consumers at every length and without the dynamic scheduler (before session 15): one CTA per
    # item (before session 8), persistent (the static balanced order) at every length, and the two as in sessions 8-14
    "d64-causal-grid": ("-DFA_HOPPER_D64_DYNAMIC_CAUSAL=0", "-DFA_HOPPER_D64_SHORT_CAUSAL_ROWS=0",
                        "-DFA_HOPPER_D64_CAUSAL_PERSISTENT=0"),
    "d64-causal-persist": ("-DFA_HOPPER_D64_DYNAMIC_CAUSAL=0", "-DFA_HOPPER_D64_SHORT_CAUSAL_ROWS=0",
                           "-DFA_HOPPER_D64_CAUSAL_PERSISTENT=1048576"),
    "d64-static-causal": ("-DFA_HOPPER_D64_DYNAMIC_CAUSAL=0", "-DFA_HOPPER_D64_SHORT_CAUSAL_ROWS=0"),
    "d64-causal-3wg": ("-DFA_HOPPER_D64_SHORT_CAUSAL_ROWS=0",),  # short causal d64 rows on three consumers too
    "static-causal": ("-DFA_HOPPER_D128_DYNAMIC_CAUSAL=0",),  # d128 causal one CTA per item (before session 9)
    # d256 causal persistent at every length, items from a counter (the scheduler of d64 and d128)
    "d256-dynamic-causal": ("-DFA_HOPPER_D256_DYNAMIC_CAUSAL=1",),
    "no-split": ("-DFA_HOPPER_SPLIT_TAIL=0",),  # a plain last round for non-causal d128 (before session 13)
    "kv128": ("-DFA_HOPPER_D128_BLOCK_KV=128",),
    "kv192": ("-DFA_HOPPER_D128_BLOCK_KV=192",),  # 2 x (48 + 48 KB) + Q 32 KB = 224 KB of shared
    # non-causal d128 on 128-key tiles in a 3-stage ring too (triton:fa2-ws's shape, 3 x 64 + 32 = 224 KB)
    "kv128-3-stage": ("-DFA_HOPPER_D128_BLOCK_KV=128", "-DFA_HOPPER_D128_STAGES=3"),
    "3-stage-no-pingpong": ("-DFA_HOPPER_D128_STAGES=3", "-DFA_HOPPER_PINGPONG=0"),
    # causal d128 as triton:fa2-ws runs it: one CTA per item, 3 stages, no ping-pong
    "gluon-like": ("-DFA_HOPPER_D128_DYNAMIC_CAUSAL=0", "-DFA_HOPPER_D128_STAGES=3", "-DFA_HOPPER_PINGPONG=0"),
    "d256-kv64": ("-DFA_HOPPER_D256_BLOCK_KV=64",),  # d256 with 64-key tiles (192 KB of shared)
    "eager-rescale": ("-DFA_HOPPER_LAZY_RESCALE=0",),  # O rescaled on every new row max (before session 3)
    "late-q": ("-DFA_HOPPER_EARLY_Q_RELEASE=0",),  # Q freed after the last P V (before session 4)
    "d64-2wg": ("-DFA_HOPPER_D64_CONSUMERS=2",),  # d64 with two consumer warpgroups (before session 4)
    "l2-groups": ("-DFA_HOPPER_D128_HEAD_GROUP=0",),  # d128 items in groups of heads filling half of L2 (before session 5)
    "d64-group1": ("-DFA_HOPPER_D64_HEAD_GROUP=1",),  # d64 in FA4's order: all query tiles of one head, then the next
    # where P(t-1) V(t-1) is waited for (session 6): d256 right after softmax(t), where ptxas hoists the wait ahead
    # of the softmax (as before session 6); d64 and d128 at the top of the next step, so softmax(t) runs under it
    "d256-retire-late": ("-DFA_HOPPER_D256_RETIRE_AT_TOP=0",),
    # the KV loop as one copy of the step that checks every tile for a mask (d128 before session 19), and d64 and d256
    # with two copies, the tiles needing no mask first (FlashAttention-4's mask-free steady loop)
    "masked-loop": ("-DFA_HOPPER_D128_UNMASKED_LOOP=0",),
    "unmasked-loop-d64-d256": ("-DFA_HOPPER_D64_UNMASKED_LOOP=1", "-DFA_HOPPER_D256_UNMASKED_LOOP=1"),
    "retire-top": ("-DFA_HOPPER_D64_RETIRE_AT_TOP=1", "-DFA_HOPPER_D128_RETIRE_AT_TOP=1"),
    # the softmax under the own P V at d64 / d128 without the ping-pong that covered it with the other consumer's GEMMs
    # 128-key d128 tiles (S 64 + P 32 + O 64 registers instead of 88 + 44 + 64) with the softmax under its own P V
    "kv128-retire-top": ("-DFA_HOPPER_D128_BLOCK_KV=128", "-DFA_HOPPER_D128_RETIRE_AT_TOP=1"),
    "retire-top-no-pingpong": ("-DFA_HOPPER_D64_RETIRE_AT_TOP=1", "-DFA_HOPPER_D128_RETIRE_AT_TOP=1",
                               "-DFA_HOPPER_PINGPONG=0"),
    # one chain of row max and of row sum instead of four (before session 5, whose max folded pairs)
    "chains1": ("-DFA_HOPPER_SOFTMAX_CHAINS=1",),
    # non-causal d128 / d256 one CTA per K/V load, no clusters and no multicast (before session 7)
    "no-cluster": ("-DFA_HOPPER_D128_CLUSTER=1", "-DFA_HOPPER_D256_CLUSTER=1"),
    "direct-store": ("-DFA_HOPPER_STAGED_STORE=0",),  # O stored from the registers, 4 bytes a thread (before session 14)
    "no-short": ("-DFA_HOPPER_D128_SHORT_KEYS=0",),  # non-causal d128 on 176-key tiles up to 1k keys too (before session 14)
    "late-next": ("-DFA_HOPPER_EARLY_NEXT=0",),  # causal d128 and d64 take their next item after the stores (before session 14)
    "d64-4-stage": ("-DFA_HOPPER_D64_STAGES=4",),  # d64 with a 4-stage ring: no multiply-high for slot and phase (session 17)
    "no-pin": ("-DFA_HOPPER_PIN_BASE=0",),  # d256's loops keep the shared base they have (before session 18)
    "d128-pin": ("-DFA_HOPPER_D128_PIN_BASE=1",),  # the 176-key d128 loops read it anew too (sessions 18 to 19)
}
BUILDS = {"hopper": (), **ALT_FLAGS, **devkit.baseline_build()}  # DEV_BASELINE_LIB: see devkit.baseline_build

# b, hq, hkv, sq, sk, d, dtype, causal
CORRECTNESS_SHAPES = [
    (1, 2, 2, 128, 128, 128, "bf16", False),
    (2, 4, 4, 200, 333, 64, "fp16", True),  # tails on both axes
    (1, 4, 4, 300, 97, 128, "bf16", True),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 128, "bf16", True),  # GQA, several rounds of the ring
    (1, 4, 2, 1000, 1500, 64, "fp16", False),
    (1, 4, 2, 1000, 1500, 128, "bf16", False),  # 128-key tiles in clusters of 2 (up to 4096 keys): 12, the last 92 keys
    (1, 4, 2, 1000, 4500, 128, "bf16", False),  # 176-key tiles above 4096 keys: 26, the last 100 keys; clusters of 2
    (2, 8, 1, 64, 1100, 128, "bf16", False),
    (2, 8, 1, 64, 1100, 128, "fp16", True),  # MQA
    (1, 2, 2, 1536, 640, 64, "bf16", True),  # causal Sq > Sk over many Q tiles
    (1, 1, 1, 1, 1, 128, "bf16", True),
    (1, 4, 4, 777, 2049, 64, "bf16", True),
    (1, 8, 8, 2048, 2048, 128, "fp16", False),
    (1, 8, 8, 2048, 2048, 128, "bf16", True),
    (1, 16, 16, 4096, 4096, 128, "bf16", True),
    # the upper consumer of a causal item sees none of its last tile (Sq = Sk + 64); non-causal up to 1k keys (the
    # 128-key kernel) with 64 keys and with 4 keys in the last tile
    (1, 2, 2, 576, 512, 128, "bf16", True),
    (2, 4, 4, 300, 960, 128, "fp16", False),
    (2, 4, 2, 333, 900, 128, "bf16", False),
    # d256 (80-key tiles, 4 head_dim panels, O += P V as m64n256k16)
    (1, 2, 2, 128, 128, 256, "bf16", False),  # one Q tile, a full and a 48-key tail tile
    (2, 4, 4, 200, 333, 256, "fp16", True),  # tails on both axes
    (1, 4, 4, 300, 97, 256, "bf16", True),  # Sq > Sk: CTAs with no visible key
    (1, 4, 2, 1000, 1500, 256, "bf16", False),  # GQA, 19 KV tiles: ring rounds, persistent CTAs
    (1, 4, 2, 1000, 1500, 256, "fp16", True),
    (2, 8, 1, 64, 1100, 256, "bf16", False),  # MQA
    (1, 8, 8, 2048, 2048, 256, "bf16", True),
    # more items than SMs: persistent CTAs run several items each (tails, GQA, Sq != Sk)
    (8, 16, 4, 300, 500, 128, "bf16", False),  # (up to 1k keys: the 128-key kernel, non-causal)
    (8, 16, 4, 300, 1100, 128, "bf16", False),  # the 128-key kernel from 1k to 4k keys (3 query tiles: no clusters)
    (8, 16, 4, 300, 4200, 128, "bf16", False),  # the 176-key kernels above 4k keys
    (4, 32, 8, 256, 1000, 64, "fp16", False),
    (4, 16, 16, 384, 333, 256, "bf16", False),
    # clusters (even query tiles per head, non-causal): more pairs than clusters, tails on both axes
    (8, 16, 4, 500, 1100, 128, "bf16", False),
    # non-causal d128's split last round (176-key tiles, above 4k keys): 96 pairs on 66 clusters; 192 single CTAs on 132
    (3, 16, 4, 500, 4999, 128, "bf16", False),
    (4, 16, 16, 384, 5000, 128, "fp16", False),
    (3, 16, 4, 500, 1999, 64, "fp16", False),  # d64: 144 items on 132 CTAs, 12 split
    (8, 8, 2, 500, 333, 256, "fp16", False),
    # causal d64 from the counter, more items than SMs: two consumers up to 1024 query rows, three above
    (8, 16, 4, 1000, 1200, 64, "bf16", True),
    (4, 16, 4, 1100, 1100, 64, "fp16", True),
    # causal d256 with 4k-8k keys: persistent CTAs in the balanced static order (Sq != Sk, GQA, tails)
    (2, 4, 2, 1000, 4100, 256, "fp16", True),
    (4, 8, 2, 1500, 4096, 256, "bf16", True),
]
BENCH_CASES = [  # b, h, s, d, causal
    (1, 16, 16384, 128, False),
    (1, 16, 16384, 128, True),
    (4, 16, 4096, 128, False),
    (4, 16, 4096, 128, True),
    (16, 16, 1024, 128, False),
    (16, 16, 1024, 128, True),
    (1, 16, 16384, 64, False),
    (1, 16, 16384, 64, True),
    (4, 16, 4096, 64, False),
    # short causal rows, the paper sweep's weakest cells (items of one to four KV tiles: per-item costs)
    (32, 16, 512, 128, True),
    (4, 16, 4096, 64, True),
    (16, 32, 1024, 64, True),
    (32, 32, 512, 64, True),
    (4, 32, 4096, 64, True),  # the paper sweep's d64 causal 4k and 8k (32 heads)
    (2, 32, 8192, 64, True),
    # d256 at the anchors' shapes (h8: FA4 717 / cuDNN 650 non-causal at 16k)
    (1, 8, 16384, 256, False),
    (1, 8, 16384, 256, True),
    (4, 8, 4096, 256, False),
    (4, 8, 4096, 256, True),
    (16, 8, 1024, 256, True),  # short causal d256 rows (the paper sweep's shapes)
    (32, 8, 512, 256, True),
]


def selected(shapes: list[tuple], dim_index: int) -> list[tuple]:
    """The shapes of the head_dim given with --head-dim (FA_DEV_HEAD_DIM in the child stages)."""
    only = os.environ.get("FA_DEV_HEAD_DIM")
    return [s for s in shapes if only is None or s[dim_index] == int(only)]


def reference_module():
    spec = importlib.util.spec_from_file_location("test_cuda_gpu", REPO / "tests" / "test_cuda_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def dtype_of(name: str):
    import torch

    return {"bf16": torch.bfloat16, "fp16": torch.float16}[name]


def gpu_state() -> str:
    """SM clock (MHz), power (W), temperature and active throttle reasons, from nvidia-smi."""
    for reasons in ("clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        query = f"clocks.sm,power.draw,temperature.gpu,{reasons}"
        try:
            out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
            clock, power, temp, active = (x.strip() for x in out.splitlines()[0].split(","))
            return f"{clock} MHz {float(power):.0f} W {temp} C reasons {active}"
        except Exception:  # noqa: BLE001 - older field name next; a missing nvidia-smi must not stop timing
            continue
    return "(nvidia-smi gave no clock)"


def check_shape(ref, b, hq, hkv, sq, sk, d, fmt, causal, flags=()) -> tuple[bool, str]:
    """Poisoned launch of cuda:hopper, compared with float64 by the FlashAttention rule."""
    import torch

    import cuda_impl
    from cuda_impl import validate

    q, k, v = ref.make_inputs(b, hq, hkv, sq, sk, d, dtype_of(fmt), seed=sq * 7 + sk)
    scale = 1.0 / math.sqrt(d)
    validate.check_inputs(q, k, v, variant="hopper", spec=cuda_impl.VARIANTS["hopper"], scale=scale)
    out, lse = ref.run_poisoned("hopper", q, k, v, causal, scale, flags)
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


def stage_correctness(build_name: str) -> int:
    ref = reference_module()
    flags = BUILDS[build_name]
    checks = [(f"{build_name} " + "b{} hq{} hkv{} sq{} sk{} d{} {} {}".format(*shape[:7], "causal" if shape[7] else "full"),
               lambda shape=shape: check_shape(ref, *shape, flags=flags)) for shape in selected(CORRECTNESS_SHAPES, 5)]
    failures, total = run_checks(checks)
    log(f"correctness {build_name}: {total - failures}/{total} shapes pass")
    return 1 if failures else 0


def bench_case(builds: list[str], b: int, h: int, s: int, d: int, causal: bool):
    """Median ms of each hopper build and of SDPA cuDNN (before and after them) on one bf16 shape."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    from cuda_impl import _lib

    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)
    scale = 1.0 / math.sqrt(d)
    flops = 4 * b * h * d * attention_pairs(s, s, causal)
    case = f"b{b} h{h} s{s} d{d} {'causal' if causal else 'full'}"

    def build(name):
        return lambda: _lib.launch_forward(
            "hopper", q, k, v, out, lse, causal=causal, scale=scale, extra_flags=BUILDS[name]
        )

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    candidates = [("cudnn", cudnn), *((n, build(n)) for n in builds), ("cudnn-after", cudnn)]
    # the clock right after each timing (DEV_POWER_LOG): at the power cap it shows what each build draws
    results = devkit.interleaved_medians(
        f"{case:28}", candidates, ROUNDS, lambda fn: do_bench(fn, warmup=10, rep=60, return_mode="median"),
        lambda name, ms: f" {flops / ms / 1e9:7.1f} TFLOP/s" + (f" {gpu_state()}" if POWER_LOG else ""))
    state = gpu_state()
    log(f"{case:28} after: {state}")
    diffs = {}  # same inputs as cuDNN: a cheap sanity check of what was timed
    if "cudnn" in results:
        expected = cudnn().float()
        for name in builds:
            if name in results:
                build(name)()
                diffs[name] = (out.float() - expected).abs().max().item()
    return case, results, flops, diffs, state.split(" W")[0]


def stage_timing(builds: list[str]) -> int:
    rows = [bench_case(builds, *shape) for shape in selected(BENCH_CASES, 3)]
    names = ["cudnn", *builds, "cudnn-after"]
    print("\nTFLOP/s (bf16; ratio = default build / mean of the two cuDNN timings)")
    print(f"{'case':28} " + " ".join(f"{n[:11]:>11}" for n in names) + "  ratio  clock/power  max|hopper-cudnn|")
    for case, results, flops, diffs, state in rows:
        rate = {n: flops / ms / 1e9 for n, ms in results.items()}
        cudnn = [rate[n] for n in ("cudnn", "cudnn-after") if n in rate]
        ratio = rate.get("hopper", 0) / (sum(cudnn) / len(cudnn)) if cudnn else float("nan")
        cells = " ".join(f"{rate.get(n, float('nan')):11.0f}" for n in names)
        checks = " ".join(f"{n} {d:.1e}" for n, d in diffs.items())
        print(f"{case:28} {cells}  {ratio:5.3f}  {state}  {checks}")
    return 0


def stage_gap() -> int:
    """Same kernel, the script's path against the driver's, interleaved; clocks after each."""
    import torch
    from triton.testing import do_bench

    import cuda_impl
    from compare import backends, bench, oracle
    from cuda_impl import _lib

    backend = backends.registry()["cuda:hopper"]
    for b, h, s in ((1, 16, 16384), (4, 16, 4096)):
        case = oracle.Case(b, h, h, s, s, 128, causal=False, fmt="bf16", seed=1)
        flops = bench.flops(case)
        inputs = oracle.make_inputs(case, "cuda")
        q, k, v = inputs.q, inputs.k, inputs.v
        qd, kd, vd = (torch.randn(b, h, s, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out, lse = torch.empty_like(q), torch.empty(q.shape[:-1], device="cuda", dtype=torch.float32)

        def direct(q, k, v):
            return lambda: _lib.launch_forward("hopper", q, k, v, out, lse, causal=False, scale=case.softmax_scale)

        paths = {
            "script: direct, randn bf16": lambda: do_bench(direct(qd, kd, vd), warmup=10, rep=60, return_mode="median"),
            "direct, oracle inputs": lambda: do_bench(direct(q, k, v), warmup=10, rep=60, return_mode="median"),
            "custom op, oracle inputs": lambda: do_bench(
                lambda: cuda_impl.attention(q, k, v, variant="hopper"), warmup=10, rep=60, return_mode="median"),
            "driver: bench.time_call": lambda: bench.time_call(
                lambda: backend(q, k, v, causal=False, scale=case.scale), "cuda", graph=True)[1],
        }
        for rnd in range(2):
            for name, timed in paths.items():
                ms = timed()
                log(f"gap b{b} s{s} round {rnd} {name:28} {ms:7.3f} ms {flops / ms / 1e12 * 1e3:6.1f} "
                    f"TFLOP/s; after: {gpu_state()}")
        # Heat: the kernel back to back for 3 s, then the script's path at once and after 5 s idle.
        fn = direct(qd, kd, vd)
        end = time.time() + 3
        while time.time() < end:
            for _ in range(20):
                fn()
            torch.cuda.synchronize()
        log(f"gap b{b} s{s} after 3 s of load: {gpu_state()}")
        ms = do_bench(fn, warmup=10, rep=60, return_mode="median")
        log(f"gap b{b} s{s} script path right after the load: {flops / ms / 1e9:6.1f} TFLOP/s; {gpu_state()}")
        time.sleep(5)
        ms = do_bench(fn, warmup=10, rep=60, return_mode="median")
        log(f"gap b{b} s{s} script path after 5 s idle:       {flops / ms / 1e9:6.1f} TFLOP/s; {gpu_state()}")
    return 0


def stage_driver() -> int:
    from compare import backends, bench, sweeps

    registry = backends.registry()
    hopper, cudnn = registry["cuda:hopper"], registry["sdpa:cudnn"]
    cases = [c for c in sweeps.load("quick").cases if c.fmt == "bf16" and not hopper.unsupported_reason(c)]
    print(f"\n{'case (driver path, TFLOP/s)':50} {'cudnn':>7} {'hopper':>7} {'cudnn':>7}  ratio  oracle  clock")
    for case in cases:
        rows = [bench.measure(b, case, "cuda", {}) for b in (cudnn, hopper, cudnn)]
        rates = [r.get("tflops") or float("nan") for r in rows]
        ratio = rates[1] / ((rates[0] + rates[2]) / 2)
        print(f"{case.shape_str():50} {rates[0]:7.1f} {rates[1]:7.1f} {rates[2]:7.1f}  {ratio:5.3f}  "
              f"{rows[1]['oracle']:6}  {gpu_state()}", flush=True)
    return 0


SANITIZE_SHAPES = [
    (1, 4, 2, 200, 333, 64, "bf16", True),  # causal d64 up to 1024 query rows: two consumers
    (1, 4, 2, 1100, 1200, 64, "fp16", True),  # causal d64 above: three
    (1, 4, 2, 300, 170, 128, "fp16", True),
    (1, 4, 2, 300, 4200, 128, "bf16", False),  # the 176-key kernel (more than 4k keys), tail tile
    (1, 4, 2, 300, 500, 256, "bf16", True),  # d256, 80-key tiles
    (1, 2, 1, 128, 4100, 256, "fp16", True),  # d256 causal with 4k-8k keys: persistent CTAs
    (1, 2, 1, 200, 333, 256, "fp16", False),
    (1, 48, 8, 384, 200, 128, "bf16", False),  # 144 items: 12 persistent CTAs run two (128-key kernel)
    (1, 72, 8, 512, 1100, 128, "bf16", False),  # clusters of 2 with multicast K/V, 144 pairs (128-key tiles)
    (1, 72, 8, 512, 4200, 128, "bf16", False),  # the same with 176-key tiles
]
# The split last round, in memcheck (its workspace); its hand-over goes through global memory, so racecheck
# (shared memory) would only take a minute per launch over the same ring protocol as above.
SANITIZE_SPLIT_SHAPES = [
    (2, 48, 8, 256, 4200, 128, "bf16", False),  # 96 pairs on 66 clusters: 30 split, 11 tiles each (176 keys)
    (4, 16, 4, 384, 4200, 128, "fp16", False),  # 192 items on 132 CTAs: 60 split
    (3, 16, 4, 500, 2100, 64, "bf16", False),  # d64: 144 items on 132 CTAs, 12 split
]


def stage_sanitize(build: str | None, shapes: list[tuple]) -> int:
    ref = reference_module()
    failures = 0
    for shape in shapes:
        ok, detail = check_shape(ref, *shape, flags=ALT_FLAGS[build] if build else ())
        failures += not ok
        log(f"{'PASS' if ok else 'FAIL'} sanitize {shape}: {detail}")
    return 1 if failures else 0


def run_stage(stage: str, *builds: str) -> int:
    return devkit.run_stage(__file__, stage, STAGE_TIMEOUT_S[stage], *builds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sanitize", action="store_true", help="the small launches of SANITIZE_SHAPES, for compute-sanitizer")
    parser.add_argument("--sanitize-split", action="store_true",
                        help="three launches with a split last round, for compute-sanitizer's memcheck")
    parser.add_argument("--build", choices=list(ALT_FLAGS), help="with --sanitize: this ALT build's library")
    parser.add_argument("--stage", choices=sorted(STAGE_TIMEOUT_S), help=argparse.SUPPRESS)
    parser.add_argument("builds", nargs="*", help=argparse.SUPPRESS)
    parser.add_argument(
        "--build-only", action="store_true",
        help="(dev machine) build the default library and the ALT_FLAGS ones named ('all': every one)",
    )
    parser.add_argument("--gap", action="store_true", help="also time the script's path against the driver's")
    parser.add_argument("--driver", action="store_true", help="the quick sweep's bf16 shapes, driver path")
    parser.add_argument("--head-dim", type=int, choices=(64, 128, 256),
                        help="correctness and timing shapes of this head_dim only")
    args = parser.parse_args()
    if args.head_dim:
        os.environ["FA_DEV_HEAD_DIM"] = str(args.head_dim)
    if args.build_only:
        from cuda_impl import _lib, build

        for name in ["hopper", *(ALT_FLAGS if args.builds == ["all"] else args.builds)]:
            log(f"built {name}: {build.build_library(_lib.library_spec(BUILDS[name]))}")
        return 0
    if args.sanitize or args.sanitize_split:
        return stage_sanitize(args.build, SANITIZE_SPLIT_SHAPES if args.sanitize_split else SANITIZE_SHAPES)
    if args.driver:
        return run_stage("driver")
    if args.stage:
        if args.stage == "correctness":
            return stage_correctness(*args.builds)
        if args.stage == "timing":
            return stage_timing(args.builds)
        return stage_gap() if args.stage == "gap" else stage_driver()

    import cuda_impl
    from cuda_impl import _lib, build

    if reason := cuda_impl.unavailable_reason("hopper"):
        log(f"cuda:hopper unavailable: {reason}")
        return 1
    log(f"library: {build.cached_library(_lib.library_spec()) or 'not cached, building'}")
    start = time.time()
    passed, failed = [], []
    for name, flags in BUILDS.items():
        if name in ALT_FLAGS and build.cached_library(_lib.library_spec(flags)) is None:
            log(f"{name}: not built here, skipped")
            continue
        rc = run_stage("correctness", name)
        log(f"correctness {name} rc={rc} ({time.time() - start:.1f} s)")
        (passed if rc == 0 else failed).append(name)
    if "hopper" not in passed:
        log("timing skipped: the default build failed correctness")
        return 1
    rc = run_stage("timing", *passed)
    log(f"timing stage rc={rc} ({time.time() - start:.1f} s)")
    if args.gap:
        rc = run_stage("gap") or rc
        log(f"gap stage rc={rc}; total {time.time() - start:.1f} s")
    return 1 if failed else rc


if __name__ == "__main__":
    sys.exit(main())
