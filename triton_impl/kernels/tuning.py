"""Launch plumbing shared by the variants: autotuning tables, stride handling, the launch itself.

Candidate configs are kept per (variant, head_dim, causal, element size) and pruned to that key
before timing, so a launch only benchmarks the few configs that matter for its shape. The tuning key
also holds a coarse bucket of seqlen_k (short sequences prefer other tiles than long ones) and,
automatically, the tensor dtypes.
"""
import math

import triton

from triton_impl.kernels import interpreter_compat

LOG2E = 1.4426950408889634

# (BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]); keyed by (head_dim, causal, element size in
# bytes). BLOCK_M=128 with 8 warps gives two warpgroups of 64 rows each; a maxnreg of 128 (168 for
# 4 warps) lets two (three) blocks share an SM's 65536 registers, so one block's softmax overlaps
# another's wgmma. Every entry is checked offline for spills and shared memory (test_triton_compile).
_CANDIDATES = {
    "fa2": {
        # pointer arithmetic needs registers: the maxnreg-capped configs of fa2-tma spill here
        (64, False, 2): [(128, 64, 4, 3), (128, 128, 8, 3)],
        (64, True, 2): [(128, 64, 4, 3), (128, 128, 8, 3)],
        # 4 stages of 128x64 K/V tiles: 512 / 499 TFLOP/s at 16k (non-causal / causal) against 501 / 495
        # for 128x128 with 3 stages (a dev run, docs/journal/2026-11-29_triton.md)
        (128, False, 2): [(128, 64, 8, 4), (128, 128, 8, 3)],
        (128, True, 2): [(128, 64, 8, 4), (128, 128, 8, 3)],
        (256, False, 2): [(128, 64, 8, 2), (128, 32, 8, 3)],
        (256, True, 2): [(128, 32, 8, 3), (128, 32, 8, 2)],  # 128x64 spills a few registers here
        (64, False, 4): [(64, 32, 4, 2)],
        (64, True, 4): [(64, 32, 4, 2)],
        (128, False, 4): [(64, 32, 4, 2)],
        (128, True, 4): [(64, 32, 4, 2)],
        (256, False, 4): [(32, 32, 4, 2)],
        (256, True, 4): [(32, 32, 4, 2)],
    },
    # measured on an H200 at 16k tokens (docs/journal/2026-11-29_triton.md); first entry = best at 16k
    "fa2-tma": {
        (64, False, 2): [(128, 128, 8, 2, 128), (128, 64, 4, 3)],
        (64, True, 2): [(128, 128, 8, 2, 128), (128, 64, 4, 3)],
        (128, False, 2): [(128, 64, 8, 2, 128), (128, 128, 8, 3)],
        (128, True, 2): [(128, 128, 8, 3), (128, 64, 8, 2, 128)],
        (256, False, 2): [(128, 64, 8, 2), (128, 32, 8, 3)],
        (256, True, 2): [(128, 64, 8, 2), (128, 32, 8, 3)],
    },
    "fp8": {
        (64, False, 1): [(64, 128, 4, 3), (128, 64, 4, 3)],
        (64, True, 1): [(64, 128, 4, 3), (128, 64, 4, 3)],
        (128, False, 1): [(64, 128, 4, 3), (64, 128, 4, 2, 168), (64, 64, 4, 3)],
        (128, True, 1): [(64, 128, 4, 3), (64, 128, 4, 2, 168), (64, 64, 4, 3)],
        (256, False, 1): [(128, 128, 8, 2), (64, 64, 4, 3)],
        (256, True, 1): [(128, 128, 8, 2), (64, 64, 4, 3)],
    },
    # block-scaled formats: untimed, chosen offline for no spills (test_triton_compile); head_dim 256 spills
    # in every config tried (docs/journal/2026-11-29_triton.md). BLOCK_N is a multiple of P's block (32 / 16 keys).
    "mxfp8-dequant": {
        (64, False, 1): [(128, 64, 8, 2), (64, 64, 4, 2)],
        (64, True, 1): [(128, 64, 8, 2), (64, 64, 4, 2)],
        (128, False, 1): [(128, 64, 8, 2), (128, 128, 8, 2), (128, 32, 8, 2)],
        (128, True, 1): [(128, 64, 8, 2), (128, 128, 8, 2), (128, 32, 8, 2)],
        (256, False, 1): [(64, 32, 8, 2), (128, 32, 8, 2)],
        (256, True, 1): [(64, 32, 8, 2), (128, 32, 8, 2)],
    },
    "nvfp4-dequant": {
        (64, False, 1): [(128, 64, 8, 2), (64, 64, 4, 2)],
        (64, True, 1): [(128, 64, 8, 2), (64, 64, 4, 2)],
        (128, False, 1): [(128, 64, 8, 2), (128, 32, 8, 2)],
        (128, True, 1): [(128, 64, 8, 2), (128, 32, 8, 2)],
        (256, False, 1): [(64, 32, 8, 2), (128, 32, 8, 2)],
        (256, True, 1): [(64, 32, 8, 2), (128, 32, 8, 2)],
    },
    "mxfp8-dot-scaled": {
        (64, False, 1): [(128, 64, 8, 2), (64, 64, 4, 2)],
        (64, True, 1): [(128, 64, 8, 2), (64, 64, 4, 2)],
        (128, False, 1): [(128, 64, 8, 2), (128, 32, 8, 2)],
        (128, True, 1): [(128, 64, 8, 2), (128, 32, 8, 2)],
        (256, False, 1): [(128, 32, 8, 2), (64, 32, 8, 2)],
        (256, True, 1): [(128, 32, 8, 2), (64, 32, 8, 2)],
    },
}

# Under TRITON_INTERPRET=1: small tiles so that small test shapes still span several blocks.
INTERPRETER_CONFIG = dict(BLOCK_M=32, BLOCK_N=16)


def _launch_dict(entry):
    block_m, block_n, warps, stages, *maxnreg = entry
    config = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    if maxnreg:
        config["maxnreg"] = maxnreg[0]
    return config


def _config(entry):
    launch = _launch_dict(entry)
    return triton.Config({"BLOCK_M": launch.pop("BLOCK_M"), "BLOCK_N": launch.pop("BLOCK_N")}, **launch)


def _entry(config):
    entry = (config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"], config.num_warps, config.num_stages)
    return entry + ((config.maxnreg,) if config.maxnreg else ())


_TUNERS = {}  # variant -> its autotuner, for last_config


def autotuned(kernel, variant):
    """Wrap `kernel` in an autotuner over the variant's candidates, pruned per launch to its key."""
    table = _CANDIDATES[variant]
    entries = sorted({entry for entries in table.values() for entry in entries})

    def prune(configs, named_args, **meta):
        wanted = table[(meta["HEAD_DIM"], meta["CAUSAL"], named_args["Q"].element_size())]
        return [c for c in configs if _entry(c) in wanted]

    tuner = triton.autotune(configs=[_config(e) for e in entries],
                            key=["tune_bucket", "HEAD_DIM", "CAUSAL"],
                            prune_configs_by={"early_config_prune": prune})(kernel)
    _TUNERS[variant] = tuner
    return tuner


def last_config(variant):
    """The config the autotuner of `variant` chose for its latest launch, e.g. '64x128 w4 s3 r168'
    (BLOCK_M x BLOCK_N, warps, stages, maxnreg); None before its first autotuned launch."""
    best = getattr(_TUNERS.get(variant), "best_config", None)
    if best is None:
        return None
    block_m, block_n, warps, stages, *maxnreg = _entry(best)
    return f"{block_m}x{block_n} w{warps} s{stages}" + (f" r{maxnreg[0]}" if maxnreg else "")


def candidates(variant, head_dim, causal, element_size):
    """The configs the autotuner would try, as launch dicts (for sweeps in dev scripts)."""
    return [_launch_dict(entry) for entry in _CANDIDATES[variant][(head_dim, causal, element_size)]]


def seq_bucket(seqlen_k):
    """Coarse length class for the tuning key: <=1k, <=4k, <=8k, longer. The autotuner times a bucket at
    the first length it meets in it; 8k and 16k prefer different tiles for bf16 d128 (paper sweep at
    6e059c1: the 8k pick ran at 16k, not the 16k dev-sweep best), so they get a bucket each."""
    return 0 if seqlen_k <= 1024 else 1 if seqlen_k <= 4096 else 2 if seqlen_k <= 8192 else 3


def strides(t):
    """t.stride(), with the stride of every size-1 dim replaced by its contiguous value.

    Such strides never move the address, but TMA descriptors still require them to be 16-byte
    multiples, and views like x[:, :, :1] can carry arbitrary ones."""
    out = list(t.stride())
    for dim in range(t.dim()):
        if t.shape[dim] == 1:
            out[dim] = math.prod(t.shape[dim + 1:])
    return tuple(out)


def interpreting():
    return triton.knobs.runtime.interpret


def run(kernel, tuned, args, meta, config, grid_rows, grid_heads):
    """Launch with an explicit config, the interpreter's small config, or the autotuner; returns
    what the launch returns (the compiled kernel on a GPU)."""
    def grid(launch_meta):
        return (triton.cdiv(grid_rows, launch_meta["BLOCK_M"]), grid_heads)

    if interpreting():
        interpreter_compat.apply()
        return kernel[grid](*args, **meta, **(config or INTERPRETER_CONFIG))
    if config is not None:
        return kernel[grid](*args, **meta, **config)
    return tuned[grid](*args, **meta)
