"""Decode against a KV cache (flash-decoding): the low-level `forward` that cuda_impl's attention_with_kvcache
calls once it has validated the inputs and appended k_new / v_new, and the split-KV plan it launches with.

The kernel (csrc/fwd_decode.cu): one CTA per (16-row query tile, KV head, sequence, chunk of keys); GQA query
heads are packed into the tile's rows, four warps split each key tile, K/V stream through a 3-stage cp.async
ring with per-row page addresses. More than one chunk: fp32 partials merged through their LSE in chunk order
by a second kernel (deterministic); one chunk writes out directly.

Splits (`plan_splits`): `split_size` fixes the chunk by key positions alone, so a sequence's result has the same
bits whatever batch it is in; `num_splits` cuts the capacity into that many chunks; neither: a heuristic that
fills the GPU (below). The grid covers the capacity (known on the host), or with a left window bound the window's
span (`planned_keys`), the kernel then counting each sequence's chunks from its window's first key (computed on the
device from the sequence's own length: still batch-invariant under split_size); chunks past a sequence's length
find no key and write empty partials, so nothing here reads device data (no host sync: CUDA-graph capturable).
"""

from __future__ import annotations

import functools
import math

import torch

from cuda_impl import _lib, native, ops

MAX_SPLITS = 128  # the heuristic's ceiling: beyond it the merge's reads outgrow what another wave would cost
_sm_counts: dict[int, int] = {}


def _sm_count(device: torch.device) -> int:
    index = torch.cuda.current_device() if device.index is None else device.index
    if index not in _sm_counts:
        _sm_counts[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _sm_counts[index]


# Keys a chunk needs before two CTAs per SM beat one: below it the extra chunks' fixed cost (Q load, partial
# write, merge reads) outweighs the second CTA's overlap of memory latency.
MIN_SHARED_CHUNK = 1024


def _fewest_filling(ctas: int, most: int, slots: int) -> int:
    """The fewest chunks n <= most whose last wave over `slots` is nearly full: waves = ctas * n / slots,
    efficiency = waves / ceil(waves), the smallest n within 95% of the best; one when ctas >= 80% of slots."""
    if ctas >= 0.8 * slots:
        return 1

    def efficiency(n: int) -> float:
        waves = ctas * n / slots
        return waves / math.ceil(waves)

    best = max(efficiency(n) for n in range(1, most + 1))
    return next(n for n in range(1, most + 1) if efficiency(n) >= 0.95 * best)


@functools.lru_cache(maxsize=4096)  # a pure function of five ints, asked on every call: the search is most of
def heuristic_splits(ctas: int, capacity: int, block_n: int, sms: int, per_sm: int) -> int:  # the host time
    """Chunks per sequence when the caller names none. `ctas` = batch * heads_kv * query tiles (the grid of one
    chunk), `per_sm` = decode CTAs resident per SM. Fill every resident slot (sms * per_sm) when that leaves
    chunks of at least MIN_SHARED_CHUNK keys, else one CTA per SM; no chunk below one key tile, at most
    MAX_SPLITS. Fewer chunks mean fewer partials to write and merge. (H200, bf16 d128, Hq32: B1 Hkv4 Sk8k is
    fastest at 32 chunks of 256 keys, one CTA per SM; Sk128k at 64 chunks of 2048, two per SM; B32 Hkv4 Sk1k
    unsplit, 10% ahead of two chunks of 512: docs/journal/2026-12-03_decode-merge.)"""
    most = max(1, min(MAX_SPLITS, math.ceil(capacity / block_n)))
    n = _fewest_filling(ctas, most, sms * per_sm)
    if per_sm > 1 and capacity / n < MIN_SHARED_CHUNK:
        n = _fewest_filling(ctas, most, sms)
    return n


def plan_splits(capacity: int, block_n: int, *, ctas: int, sms: int = 0, per_sm: int = 0,
                num_splits: int | None = None, split_size: int | None = None) -> tuple[int, int]:
    """(chunks of the grid, keys per chunk): the chunk is a multiple of the kernel's key tile `block_n`.
    split_size: rounded up to the tile; num_splits: ceil(capacity / num_splits) rounded up to the tile (so at most
    num_splits chunks hold keys; the grid takes only those)."""
    if num_splits is not None and split_size is not None:
        raise ValueError("splits: num_splits and split_size are mutually exclusive")
    if split_size is not None:
        if int(split_size) < 1:
            raise ValueError(f"splits: split_size must be >= 1, got {split_size}")
        chunk = -(-int(split_size) // block_n) * block_n
    else:
        if num_splits is None:
            num_splits = heuristic_splits(ctas, capacity, block_n, sms, per_sm)
        elif int(num_splits) < 1:
            raise ValueError(f"splits: num_splits must be >= 1, got {num_splits}")
        chunk = -(-max(1, -(-capacity // int(num_splits))) // block_n) * block_n
    return max(1, -(-capacity // chunk)), chunk


def kernel_window(window, capacity: int, seqlen_q: int) -> tuple[int, int]:
    """(left, right) as the kernel takes them (csrc/fwd_decode.cu checks their range): a side that reaches past
    every row's keys is -1, unbounded -- left >= capacity (every row's window starts at key 0 or before), right >=
    seqlen_q - 1 (every row's ends at its sequence's last key or after) -- which keeps the key arithmetic in int."""
    left, right = (int(side) for side in window)
    return (-1 if left >= capacity else left), (-1 if right >= seqlen_q - 1 else right)


def planned_keys(capacity: int, block_n: int, seqlen_q: int, window_left: int) -> int:
    """The keys the split plan cuts into chunks: the capacity, or with a left window bound the window's span,
    min(capacity, window_left + seqlen_q + block_n): the union of a sequence's rows' windows is at most
    window_left + seqlen_q keys ending at its length, and its chunks start at that union's first key rounded
    down to the key tile (decode_chunk0 in csrc/decode/params.cuh), so that the grid holds the window's chunks
    alone instead of chunks over the whole capacity that mostly find no key."""
    return capacity if window_left < 0 else min(capacity, window_left + seqlen_q + block_n)


# Launch plans of forward() by everything they are computed from: q's shape, dtype and device, the cache's KV heads,
# V's head_dim, the capacity, whether K/V are e4m3, the split options and the window. A decode loop repeats one call
# shape: the library's tile and occupancy queries, the split search and the window's kernel form then run once per
# shape instead of on every call. Errors are raised before an entry is made; the dict is emptied when it reaches
# PLAN_CACHE_SIZE entries (a server's changing batch sizes and cache lengths keep adding keys).
PLAN_CACHE_SIZE = 4096
_plans: dict[tuple, tuple[int, int, int, int]] = {}


def _plan(q, heads_kv: int, head_dim_v: int, capacity: int, fp8: bool, num_splits, split_size,
          window) -> tuple[int, int, int, int]:
    """(chunks, keys per chunk, window left, window right) as the kernel takes them (uncached)."""
    batch, seqlen_q, heads_q, head_dim = q.shape
    rows = seqlen_q * (heads_q // heads_kv)  # packed query rows of one KV head
    mla = head_dim_v != head_dim  # MLA's latent cache: its own kernel (csrc/fwd_mla_decode.cu)
    if mla:
        block_n, tile_rows = _lib.mla_decode_tiles(rows)
    else:
        block_n, tile_rows = _lib.decode_block_n(head_dim, fp8), 16
    if block_n < 0:
        raise ValueError(f"head_dim: cuda_impl decode runs 64, 128 and 256, got {head_dim}")
    ctas = batch * heads_kv * -(-rows // tile_rows)
    sms = per_sm = 0
    if num_splits is None and split_size is None:
        sms = _sm_count(q.device)
        per_sm = (_lib.mla_decode_ctas_per_sm(q.dtype, rows, q.device) if mla
                  else _lib.decode_ctas_per_sm(q.dtype, fp8, head_dim, q.device))
    left, right = kernel_window(window, capacity, seqlen_q)
    splits, split_keys = plan_splits(planned_keys(capacity, block_n, seqlen_q, left), block_n, ctas=ctas, sms=sms,
                                     per_sm=per_sm, num_splits=num_splits, split_size=split_size)
    if splits * heads_kv > 65535:
        raise ValueError(f"splits: {splits} chunks x {heads_kv} KV heads exceed the grid (65535); "
                         "pass a larger split_size or fewer num_splits")
    return splits, split_keys, left, right


def forward(q, k_cache, v_cache, cache_seqlens, block_table, *, causal: bool, scale: float, k_descale=None,
            v_descale=None, num_splits: int | None = None, split_size: int | None = None, window=(-1, -1)):
    """(out (B, Sq, Hq, D) in q's dtype, contiguous; lse (B, Hq, Sq) float32, natural log) of softmax(scale q k^T) v
    over each sequence's first cache_seqlens[b] keys (None: the whole capacity), causal bottom-right aligned;
    window (left, right): local attention, query i of a sequence of L keys sees keys i + L - Sq - left .. + right
    (-1: unbounded; causal sets right to 0), key tiles no row of a CTA's tile sees are not read.
    q (B, Sq, Hq, D), stride(-1) == 1; paged cache (num_pages, page_size, Hkv, D) with block_table (B, max_pages)
    int32, or contiguous (B, S_max, Hkv, D) with block_table None; K/V in q's dtype, or float8_e4m3fn with
    k_descale / v_descale (B, Hkv) float32. Inputs are validated by the caller. A used block-table entry outside
    the cache, or a length outside [0, capacity], makes that sequence's rows NaN (nothing outside is read)."""
    k_shape = k_cache.shape
    heads_kv, head_dim_v = k_shape[2], v_cache.shape[3]
    capacity = block_table.shape[1] * k_shape[1] if block_table is not None else k_shape[1]
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    left, right = window
    key = (q.shape, q.dtype, q.device, heads_kv, head_dim_v, capacity, fp8, num_splits, split_size, left, right)
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(q, heads_kv, head_dim_v, capacity, fp8, num_splits, split_size, (left, right))
        if len(_plans) >= PLAN_CACHE_SIZE:
            _plans.clear()
        _plans[key] = plan
        if q.is_cuda and not torch.compiler.is_compiling():  # (the compiled entry takes CUDA tensors)
            native.remember_plan(q, heads_kv, head_dim_v, capacity, fp8, num_splits, split_size, (left, right), plan)
    splits, split_keys, left, right = plan
    return ops.decode(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, bool(causal),
                      float(scale), splits, split_keys, left, right)
