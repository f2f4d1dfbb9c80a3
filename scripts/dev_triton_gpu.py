"""One dev call on the GPU machine for the Triton backend: check, sweep configs, time.

    PYTHONPATH=. python scripts/dev_triton_gpu.py

1. every variant through the public API (autotuned) against compare.oracle on awkward shapes;
2. config sweeps (head_dim 128 at seqlen 1k/4k/16k, then 64 and 256 at 4k/16k; batch*seqlen = 16k
   tokens, 2048/head_dim heads): each config passes a row-sampled oracle check before it is timed;
3. the autotuned public path at the same shapes, with torch SDPA (cuDNN) beside it.
Timing: triton.testing.do_bench, median (p20/p80 kept), L2 flushed. Writes $OUT/triton_dev.csv and
$OUT/triton_dev.log; prints a compact table last. Phases stop early when the wall budget runs out.
"""
import csv
import os
import statistics
import subprocess
import sys
import time

import torch
import triton
import triton.testing

import triton_impl
from compare import formats, oracle
from triton_impl.kernels import fa2_pointer, fa2_tma, fp8_tma

import devkit  # noqa: E402  (scripts/devkit.py: python puts the script's folder on sys.path)

START = time.time()
BUDGET_S = float(os.environ.get("DEV_BUDGET_S", "200"))
OUT = os.environ.get("OUT", "/tmp")
LOG = open(os.path.join(OUT, "triton_dev.log"), "w")
ROWS = []
TOKENS = 16384
DEVICE = "cuda"
SEQLENS = (1024, 4096, 16384)
LAUNCH = {"fa2": fa2_pointer.launch, "fa2-tma": fa2_tma.launch, "fp8": fp8_tma.launch}


def log(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    LOG.write(line + "\n")
    LOG.flush()


def over_budget(phase):
    if time.time() - START > BUDGET_S:
        log(f"[budget] skipping {phase} at {time.time() - START:.0f}s")
        return True
    return False


def gpu_state():
    query = "name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu"
    return subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.strip()


def explicit_runner(variant, config):
    """fn(q, k, v, causal=, scale=, return_lse=) that launches one config, bypassing the autotuner."""
    def run(q, k, v, *, causal=False, scale=None, return_lse=False):
        data = q.data if variant == "fp8" else q
        scale = scale or data.shape[-1] ** -0.5
        out = torch.empty(data.shape, dtype=torch.bfloat16 if variant == "fp8" else data.dtype, device=DEVICE)
        lse = torch.empty(data.shape[:3], dtype=torch.float32, device=DEVICE)
        if variant == "fp8":
            LAUNCH[variant](q.data, k.data, v.data, q.scale, k.scale, v.scale, out, lse, causal, scale,
                            config=config)
        else:
            LAUNCH[variant](q, k, v, out, lse, causal, scale, config=config)
        return (out, lse) if return_lse else out
    return run


def api_runner(variant):
    def run(q, k, v, **kw):
        return triton_impl.attention(q, k, v, variant=variant, **kw)
    return run


def bench(fn):
    ms, p20, p80 = triton.testing.do_bench(fn, warmup=25, rep=100, quantiles=[0.5, 0.2, 0.8])
    return ms, p20, p80


def record(**row):
    ROWS.append(row)
    log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))


# ---------------------------------------------------------------- 1. correctness through the API

CHECK_CASES = devkit.AWKWARD_CASES + [
    dict(batch=1, heads_q=2, heads_kv=2, seqlen_q=333, seqlen_k=448, head_dim=256, causal=False, dist="shifted"),
    dict(batch=1, heads_q=2, heads_kv=1, seqlen_q=257, seqlen_k=1024, head_dim=256, causal=True),
]


def phase_correctness():
    for variant, fmts in (("fa2", ("bf16", "fp16")), ("fa2-tma", ("bf16", "fp16")), ("fp8", ("fp8",))):
        for fmt in fmts:
            cases = CHECK_CASES if fmt in ("bf16", "fp8") else CHECK_CASES[:1]
            for i, spec in enumerate(cases):
                case = oracle.Case(fmt=fmt, seed=i, **spec)
                try:
                    verdict = oracle.check(api_runner(variant), case, device=DEVICE)
                    log(f"[check] {variant:8s} {case.shape_str():55s} {verdict.summary()}")
                    record(phase="check", variant=variant, fmt=fmt, case=case.shape_str(), passed=verdict.passed,
                           err=verdict.max_abs_err, bound=verdict.bound, rel_l2=verdict.rel_l2)
                except Exception as err:  # keep going: one broken variant must not hide the others
                    log(f"[check] {variant:8s} {case.shape_str():55s} ERROR {type(err).__name__}: {err}")
                    record(phase="check", variant=variant, fmt=fmt, case=case.shape_str(), passed=False,
                           err=float("nan"), bound=float("nan"), rel_l2=float("nan"))


# ---------------------------------------------------------------- 2. config sweeps

def C(block_m, block_n, warps, stages, maxnreg=None):
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    if maxnreg:
        config["maxnreg"] = maxnreg
    return config


SWEEP = {
    ("fa2", 128): [C(128, 128, 8, 3), C(128, 64, 8, 3), C(128, 128, 8, 2), C(128, 64, 8, 4)],
    # capped configs that share an SM without the wgmma serialisation (ptxas C7512) of the two-stage capped
    # 128x64 / 64x128 ones: one stage, or narrower key tiles (docs/perf-notes-triton.md, session 4)
    ("fa2-tma", 128): [C(128, 64, 8, 2, 128), C(128, 128, 8, 3), C(128, 128, 8, 2, 128), C(128, 64, 8, 3),
                       C(128, 64, 8, 1, 128), C(128, 32, 8, 3, 128), C(128, 32, 8, 4, 128)],
    ("fp8", 128): [C(64, 128, 4, 3), C(128, 128, 8, 3), C(128, 128, 8, 2, 128), C(128, 64, 8, 3),
                   C(64, 128, 4, 4), C(64, 128, 4, 2, 168), C(64, 128, 4, 1, 168), C(64, 64, 4, 4, 168)],
    ("fa2-tma", 64): [C(128, 64, 4, 3), C(128, 128, 8, 2, 128), C(64, 128, 4, 3), C(128, 64, 8, 3),
                      C(128, 128, 8, 3)],
    ("fp8", 64): [C(64, 128, 4, 3), C(128, 128, 8, 3), C(64, 256, 4, 2), C(128, 64, 4, 3)],
    ("fa2-tma", 256): [C(128, 64, 8, 2), C(64, 64, 4, 2), C(128, 32, 8, 3)],
    ("fp8", 256): [C(64, 64, 4, 3), C(128, 64, 8, 2), C(64, 128, 4, 2), C(128, 128, 8, 2)],
}


def config_name(config):
    name = "{BLOCK_M}x{BLOCK_N} w{num_warps} s{num_stages}".format(**config)
    return name + (f" r{config['maxnreg']}" if "maxnreg" in config else "")


_INPUTS = {}


def timing_inputs(head_dim, seqlen, fmt):
    """batch * seqlen = 16k tokens, 2048 / head_dim heads; cached per shape (one set in memory)."""
    key = (head_dim, seqlen, fmt)
    if key not in _INPUTS:
        _INPUTS.clear()
        batch, heads = TOKENS // seqlen, 2048 // head_dim
        shape = (batch, heads, seqlen, head_dim)
        q, k, v = (torch.randn(shape, device=DEVICE, dtype=torch.bfloat16) for _ in range(3))
        lp = formats.quantize_attention_inputs(q, k, v, "fp8") if fmt == "fp8" else (q, k, v)
        _INPUTS[key] = (batch, heads, lp)
    return _INPUTS[key]


def flops(batch, heads, head_dim, seqlen, causal):
    pairs = seqlen * (seqlen + 1) // 2 if causal else seqlen * seqlen
    return 4 * batch * heads * head_dim * pairs


def check_config(variant, config, head_dim, causal):
    """Row-sampled oracle check with this exact config. seqlen_k % 16 == 0 keeps fp8's V^T on the TMA
    path that is timed; seqlen_k % 64 != 0 leaves a key tail."""
    fmt = "fp8" if variant == "fp8" else "bf16"
    case = oracle.Case(batch=2, heads_q=8, heads_kv=2, seqlen_q=1024, seqlen_k=1024 + 80,
                       head_dim=head_dim, causal=causal, fmt=fmt, seed=7)
    return oracle.check(explicit_runner(variant, config), case, device=DEVICE, max_rows=128)


def time_config(variant, config, head_dim, seqlens, round_=0):
    fmt = "fp8" if variant == "fp8" else "bf16"
    for causal in (False, True):
        if over_budget(f"{variant} d{head_dim} {config_name(config)}"):
            return
        try:
            verdict = check_config(variant, config, head_dim, causal) if round_ == 0 else None
        except Exception as err:
            log(f"[sweep] {variant} d{head_dim} {config_name(config)} causal={causal} ERROR "
                f"{type(err).__name__}: {err}")
            continue
        # fp8's LSE misses the oracle's fp32-exact bound on Hopper (see fp8_tma.py): flag outputs only;
        # later rounds time the configs the first round checked
        out_ok = verdict is None or verdict.passed or (variant == "fp8" and verdict.max_abs_err <= verdict.bound)
        run = explicit_runner(variant, config)
        for seqlen in seqlens:
            batch, heads, (q, k, v) = timing_inputs(head_dim, seqlen, fmt)
            ms, p20, p80 = bench(lambda: run(q, k, v, causal=causal))
            record(phase="sweep", variant=variant, config=config_name(config), head_dim=head_dim,
                   causal=causal, seqlen=seqlen, round=round_, ms=ms, p20=p20, p80=p80,
                   tflops=flops(batch, heads, head_dim, seqlen, causal) / ms * 1e-9, passed=out_ok)


def phase_sweep(head_dims, seqlens):
    """DEV_ROUNDS passes over the configs, interleaved, so that drift of the GPU's clocks spreads over all of
    them; the summary shows each config's median."""
    for round_ in range(ROUNDS):
        for head_dim in head_dims:
            for variant in VARIANTS:
                for config in SWEEP.get((variant, head_dim), ()):
                    time_config(variant, config, head_dim, seqlens, round_)


# ---------------------------------------------------------------- 3. autotuned API and a peer

TUNERS = {"fa2": fa2_pointer._fa2_fwd_pointer_tuned, "fa2-tma": fa2_tma._fa2_fwd_tma_tuned,
          "fp8": fp8_tma._fp8_fwd_tuned}


def phase_api(head_dims, seqlens, peers):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for head_dim in head_dims:
        for variant in VARIANTS:
            fmt = "fp8" if variant == "fp8" else "bf16"
            for causal in (False, True):
                for seqlen in seqlens:
                    if over_budget(f"api {variant} d{head_dim}"):
                        return
                    batch, heads, (q, k, v) = timing_inputs(head_dim, seqlen, fmt)
                    run = api_runner(variant)
                    run(q, k, v, causal=causal)  # autotune outside the timed region
                    ms, p20, p80 = bench(lambda: run(q, k, v, causal=causal))
                    tuned = getattr(TUNERS[variant], "best_config", None)
                    record(phase="api", variant=variant, config=str(tuned), head_dim=head_dim, causal=causal,
                           seqlen=seqlen, ms=ms, p20=p20, p80=p80,
                           tflops=flops(batch, heads, head_dim, seqlen, causal) / ms * 1e-9)
        if not peers:
            continue
        for causal in (False, True):
            for seqlen in seqlens:
                batch, heads, (q, k, v) = timing_inputs(head_dim, seqlen, "bf16")
                try:
                    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                        ms, p20, p80 = bench(lambda: torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=causal))
                except RuntimeError as err:
                    log(f"[peer] sdpa-cudnn unavailable: {err}")
                    return
                record(phase="peer", variant="sdpa-cudnn", config="-", head_dim=head_dim, causal=causal,
                       seqlen=seqlen, ms=ms, p20=p20, p80=p80,
                       tflops=flops(batch, heads, head_dim, seqlen, causal) / ms * 1e-9)


def summary():
    timed = [r for r in ROWS if r["phase"] in ("sweep", "api", "peer")]
    for head_dim in sorted({r["head_dim"] for r in timed}):
        rows = [r for r in timed if r["head_dim"] == head_dim]
        seqlens = sorted({r["seqlen"] for r in rows})
        log(f"\n=== TFLOP/s d{head_dim}, {2048 // head_dim} heads, 16k tokens ('!' = output failed the oracle) ===")
        log(f"{'variant':44s}" + "".join(f"{('c' if c else 'n') + str(s // 1024) + 'k':>7s}"
                                         for c in (False, True) for s in seqlens))
        labels = sorted({(r["phase"], r["variant"], r["config"]) for r in rows})
        for phase, variant, config in labels:
            cells = []
            for causal in (False, True):
                for seqlen in seqlens:
                    hit = [r for r in rows if (r["phase"], r["variant"], r["config"]) == (phase, variant, config)
                           and r["causal"] == causal and r["seqlen"] == seqlen]
                    failed = any(r.get("passed") is False for r in hit)
                    cell = f"{statistics.median(r['tflops'] for r in hit):.0f}" + "!" * failed if hit else "-"
                    cells.append(f"{cell:>7s}")
            label = f"{variant} {config}" if phase == "sweep" else f"{variant} [{phase}]"
            log(f"{label[:44]:44s}" + "".join(cells))
    checks = [r for r in ROWS if r["phase"] == "check"]
    failed = [r for r in checks if not r["passed"]]
    log(f"checks: {len(checks) - len(failed)} passed, {len(failed)} failed: "
        + "; ".join(f"{r['variant']} {r['case']}" for r in failed))


# DEV_PHASES picks phases (comma-separated; default all), DEV_VARIANTS the variants timed, DEV_SEQLENS the d128
# lengths (config sweep and autotuned path), so that a short call can re-time only the d128 configs at 16k:
# DEV_PHASES=sweep128 DEV_SEQLENS=16384 (DEV_ROUNDS=3 for medians of three interleaved passes)
PHASES = os.environ.get("DEV_PHASES", "correctness,sweep128,api128,sweep_other,api_other").split(",")
VARIANTS = os.environ.get("DEV_VARIANTS", "fa2,fa2-tma,fp8").split(",")  # the timed phases' variants
ROUNDS = int(os.environ.get("DEV_ROUNDS", "1"))  # interleaved passes of the config sweeps
SWEEP_SEQLENS = tuple(int(s) for s in os.environ.get("DEV_SEQLENS", ",".join(map(str, SEQLENS))).split(","))


def main():
    log("gpu:", gpu_state(), "| torch", torch.__version__, "| triton", triton.__version__)
    if "correctness" in PHASES:
        phase_correctness()
    if "sweep128" in PHASES:
        phase_sweep((128,), SWEEP_SEQLENS)
    if "api128" in PHASES:
        phase_api((128,), SWEEP_SEQLENS, peers=True)
    if "sweep_other" in PHASES:
        phase_sweep((64, 256), SEQLENS[1:])
    if "api_other" in PHASES:
        phase_api((64, 256), SEQLENS[2:], peers=True)
    log("gpu after:", gpu_state(), f"| wall {time.time() - START:.0f}s")
    with open(os.path.join(OUT, "triton_dev.csv"), "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=sorted({key for row in ROWS for key in row}))
        writer.writeheader()
        writer.writerows(ROWS)
    summary()


if __name__ == "__main__":
    sys.exit(main())
