"""Launch plumbing shared by the variants: autotuning tables, stride handling, grids, the launch itself.

Candidate configs are kept per (variant, head_dim, causal, element size), so a launch only times the few
configs that matter for its shape. Autotuning never times the user's problem: a tuning miss times the
candidates on a bounded proxy problem (`proxy_shape`: the same head_dim, dtypes, causal flag, GQA group and
kernel flags; sequence lengths rounded up to a power of two and clipped at PROXY_MAX_LEN, (batch, heads) and
lengths clipped so that the proxy holds at most SCORE_BUDGET padded score elements), and the choice is
cached per proxy (`tune_key`), so one first call costs a few short proxy launches per candidate whatever
its size (a 1M-token causal call had timed every candidate at full size: minutes).

Grids are one-dimensional (`flat_grid`): program i is query block i % m_tiles of (batch, head) i // m_tiles,
the order the former (query block, batch * head) grid ran in, so batch * heads is bounded by 2**31 - 1
programs instead of gridDim.y's 65535.
"""
import math

import torch
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


def table_head_dim(head_dim):
    """The head_dim whose candidates a head_dim takes: the power of two fa2 pads its tiles to, at least 64, the
    smallest the tables hold (d32 and the head dims between powers of two run the same tiles, untimed)."""
    return max(triton.next_power_of_2(head_dim), 64)


def candidates(variant, head_dim, causal, element_size):
    """The configs the autotuner would try, as launch dicts (for sweeps in dev scripts)."""
    return [_launch_dict(entry) for entry in _CANDIDATES[variant][(table_head_dim(head_dim), causal, element_size)]]


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


# ---------------------------------------------------------------- grids

# CUDA's grid limits: gridDim.x up to 2**31 - 1, gridDim.y and gridDim.z up to 65535
MAX_GRID_X, MAX_GRID_YZ = 2 ** 31 - 1, 65535


def flat_grid(*dims):
    """The one-dimensional grid of prod(dims) programs (first dim fastest, as a grid of those dims would run);
    ValueError past gridDim.x's limit."""
    programs = math.prod(dims)
    if programs > MAX_GRID_X:
        raise ValueError(f"{' x '.join(map(str, dims))} = {programs} programs exceed the CUDA grid limit "
                         f"of {MAX_GRID_X}")
    return (programs,)


def forward_grid(seqlen_q, batch_heads, block_m):
    """The forward kernels' grid: cdiv(seqlen_q, block_m) query blocks of each of batch_heads (batch, head)
    slices, flattened (common.program_tile takes it apart)."""
    return flat_grid(triton.cdiv(seqlen_q, block_m), batch_heads)


def check_int32_rows(name, rows, row_elements):
    """Kernels that address a (batch, head) slice's rows with 32-bit offsets (rows x row_elements, the
    slice's base in 64 bits) need the slice under 2**31 elements."""
    if rows * row_elements >= 2 ** 31:
        raise ValueError(f"{name}: {rows} rows of {row_elements} elements per (batch, head) exceed the 32-bit "
                         f"offsets of this kernel (2**31 elements)")


# ---------------------------------------------------------------- autotuning on a proxy

SCORE_BUDGET = 2 ** 30   # padded score elements of a proxy: 4 heads of 16k x 16k (512 programs of 128 rows)
PROXY_MAX_LEN = 16384    # longest proxy sequence: 16k is still tuned at 16k (docs/design/triton.md)
PROXY_KV_ELEMENTS = 2 ** 26  # elements of the proxy's K (and V): bounds its memory when Sq is short
PADDED = 128             # a program pads its rows and keys to its tile: work counts at least this many


def _pow2_floor(n):
    return 1 << (max(int(n), 1).bit_length() - 1)


def seq_bucket(seqlen):
    """A sequence length's tuning bucket and proxy length: the next power of two, at most PROXY_MAX_LEN."""
    return min(triton.next_power_of_2(max(int(seqlen), 1)), PROXY_MAX_LEN)


def proxy_shape(batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim):
    """(slices, group, seqlen_q', seqlen_k'): the problem the autotuner times for this one. `slices` KV heads of
    `group` query heads each (batch 1): the GQA group kept, batch x heads_kv rounded up to a power of two and
    clipped so that slices x group x max(Sq', 128) x max(Sk', 128) <= SCORE_BUDGET and slices x Sk' x head_dim
    <= PROXY_KV_ELEMENTS; lengths seq_bucket's, halved (the longer first) where one slice alone is over the
    budget (large groups)."""
    group = heads_q // heads_kv
    sq, sk = seq_bucket(seqlen_q), seq_bucket(seqlen_k)

    def work(slices):
        return slices * group * max(sq, PADDED) * max(sk, PADDED)

    while work(1) > SCORE_BUDGET and max(sq, sk) > PADDED:
        if sq >= sk:
            sq //= 2
        else:
            sk //= 2
    slices = min(triton.next_power_of_2(batch * heads_kv), _pow2_floor(SCORE_BUDGET // work(1)),
                 _pow2_floor(PROXY_KV_ELEMENTS // (sk * head_dim)))
    return slices, group, sq, sk


def tune_key(variant, shape, meta, dtypes):
    """What a choice is cached under: the variant, the proxy (proxy_shape of shape = (batch, heads_q,
    heads_kv, seqlen_q, seqlen_k, head_dim)), the head_dim, the kernel's flags (meta: causal, head_dim, ...)
    and the tensors' dtypes."""
    flags = tuple(sorted((name, str(value)) for name, value in meta.items()))
    return (variant, proxy_shape(*shape), shape[-1], flags, tuple(str(d) for d in dtypes))


def proxy_zeros(like, *shape, dtype=None):
    """A zero tensor of `shape` in like's dtype (or dtype) on like's device (1-byte formats through uint8)."""
    dtype = dtype or like.dtype
    if dtype.itemsize == 1 and dtype != torch.uint8:
        return torch.zeros(shape, dtype=torch.uint8, device=like.device).view(dtype)
    return torch.zeros(shape, dtype=dtype, device=like.device)


def proxy_16bit(q, proxy, head_dim_v=None):
    """Zero q, k (B, H, S, D), v, out (B, H, S, Dv; head_dim_v None: D) and lse of the proxy (proxy_shape's) of a
    16-bit forward, contiguous."""
    slices, group, seqlen_q, seqlen_k = proxy
    head_dim = q.shape[-1]
    head_dim_v = head_dim_v or head_dim
    return (proxy_zeros(q, 1, slices * group, seqlen_q, head_dim), proxy_zeros(q, 1, slices, seqlen_k, head_dim),
            proxy_zeros(q, 1, slices, seqlen_k, head_dim_v), proxy_zeros(q, 1, slices * group, seqlen_q, head_dim_v),
            proxy_zeros(q, 1, slices * group, seqlen_q, dtype=torch.float32))


class Tuner:
    """A variant's autotuner: the candidates of _CANDIDATES timed on a proxy problem (proxy_shape) the first
    time a key (tune_key) is met, the fastest cached for the key. `best_config` is the choice of the latest
    tuned launch (last_config), `choices` every key's (config, proxy, seconds spent tuning)."""

    def __init__(self, kernel, variant):
        self.kernel, self.variant = kernel, variant
        self.table = _CANDIDATES[variant]
        self.best_config = None
        self.choices = {}

    def config_for(self, shape, meta, dtypes, element_size, proxy_args):
        """The launch dict for a problem of `shape` (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim);
        on a miss, proxy_args(proxy) gives (args, grid dims) of the proxy launch."""
        import time
        key = tune_key(self.variant, shape, meta, dtypes)
        if key not in self.choices:
            started = time.perf_counter()
            entries = self.table[(table_head_dim(shape[-1]), meta["CAUSAL"], element_size)]
            proxy = proxy_shape(*shape)
            best = entries[0] if len(entries) == 1 else self._fastest(entries, meta, *proxy_args(proxy))
            self.choices[key] = (_config(best), proxy, time.perf_counter() - started)
        self.best_config = self.choices[key][0]
        return _launch_dict(_entry(self.best_config))

    def _fastest(self, entries, meta, args, grid_rows, grid_heads):
        from triton.compiler.errors import CompileTimeAssertionFailure
        from triton.runtime.errors import OutOfResources, PTXASError
        from triton.testing import do_bench
        timings = {}
        for entry in entries:
            config = _launch_dict(entry)
            grid = forward_grid(grid_rows, grid_heads, config["BLOCK_M"])
            try:
                timings[entry] = do_bench(lambda: self.kernel[grid](*args, **meta, **config), return_mode="median")
            except (OutOfResources, CompileTimeAssertionFailure, PTXASError):
                continue
        if not timings:
            raise RuntimeError(f"no {self.variant} candidate runs {meta}: {entries}")
        return min(entries, key=lambda e: timings.get(e, math.inf))  # ties: the table's order


def autotuned(kernel, variant):
    """The autotuner of `kernel` over the variant's candidates (see Tuner)."""
    tuner = Tuner(kernel, variant)
    _TUNERS[variant] = tuner
    return tuner


_TUNERS = {}  # variant -> its Tuner, for last_config


def last_config(variant):
    """The config the autotuner of `variant` chose for its latest launch, e.g. '64x128 w4 s3 r168'
    (BLOCK_M x BLOCK_N, warps, stages, maxnreg); None before its first autotuned launch."""
    best = getattr(_TUNERS.get(variant), "best_config", None)
    if best is None:
        return None
    block_m, block_n, warps, stages, *maxnreg = _entry(best)
    return f"{block_m}x{block_n} w{warps} s{stages}" + (f" r{maxnreg[0]}" if maxnreg else "")


def run(kernel, tuner, args, meta, config, grid_rows, grid_heads, shape=None, dtypes=(), proxy_args=None):
    """Launch with an explicit config, the interpreter's small config, or the tuner's choice for `shape`
    (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim) (proxy_args: see Tuner.config_for); returns
    what the launch returns (the compiled kernel on a GPU)."""
    if interpreting():
        interpreter_compat.apply()
        config = config or INTERPRETER_CONFIG
    elif config is None:
        config = tuner.config_for(shape, meta, dtypes, args[0].element_size(), proxy_args)
    grid = forward_grid(grid_rows, grid_heads, config["BLOCK_M"])
    return kernel[grid](*args, **meta, **config)
