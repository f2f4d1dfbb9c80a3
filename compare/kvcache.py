"""The checks and the in-place append of `attention_with_kvcache`, shared by both backends (torch only; no kernel).

Layouts (FlashAttention's `flash_attn_with_kvcache`): q (B, Sq, Hq, D); a paged cache (num_blocks, page_size,
Hkv, D) read through block_table (B, max_blocks) int32, or, without a block table, a contiguous cache
(B, S_max, Hkv, D); cache_seqlens (B,) int32, the keys each sequence holds before the call. k_new / v_new
(B, S_new, Hkv, D) are written in place at positions cache_seqlens[b] .. + S_new - 1, and the call attends to
cache_seqlens + S_new keys. An e4m3 cache (float8_e4m3fn) comes with k_descale / v_descale (B, Hkv) float32:
the true values are descale * stored value.

`check_inputs` looks at shapes, dtypes, devices and strides only: it never reads device memory, so a call
without k_new has no host sync and can be captured in a CUDA graph. The *values* of cache_seqlens and
block_table are the kernels' to guard: a sequence whose length is negative or beyond the capacity, or whose
block-table entries in use name a page outside the cache, gets NaN output and LSE, and no page outside the
cache is read. `check_values` (one host sync) turns the same conditions into a ValueError; the append path
runs it, since a write must not land outside the cache, and anyone may call it while debugging.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from . import oracle
from .checks import need

E4M3 = torch.float8_e4m3fn
PAGE_SIZES = tuple(1 << i for i in range(4, 9))  # 16 .. 256: the kernels' page-address arithmetic is tested there
MAX_SEQLEN_Q = 64  # speculative decoding and chunked prefill; longer query blocks are prefill (attention())
_ALIGN_BYTES = 16  # cp.async / vector loads of one row chunk
SPLIT_MULTIPLE = 64  # split_size granularity: a multiple of every decode kernel's key tile


class Layout(NamedTuple):
    """What the kernels need to know of a checked call, read off the shapes alone (a NamedTuple: it is built on
    every decode call, in 0.3 us on a CPU where a frozen dataclass took 1.4)."""
    batch: int
    seqlen_q: int
    heads_q: int
    heads_kv: int
    head_dim: int
    head_dim_v: int         # V's and the output's (MLA: 512 of K's 576)
    page_size: int | None   # None: contiguous cache
    capacity: int           # keys one sequence can hold (max_blocks * page_size, or S_max)
    fp8: bool


# check_inputs runs on every decode call, where the host time matters: each tensor's shape, strides, dtype and
# device are read once into locals (every read of a torch attribute builds a Python object), and each check is an
# inline `if ...: raise` whose message is formatted only when it fails (a `need` call per check, with a closure for
# its message, cost as much as the checks themselves).

def _check_tensor(name: str, x, dims: int, device: torch.device) -> torch.Size:
    """x is a tensor of `dims` dimensions on `device`; returns its shape."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    shape = x.shape
    if len(shape) != dims:
        raise ValueError(f"{name} must be {dims}-D, got shape {tuple(shape)}")
    if x.device != device:
        raise ValueError(f"{name} is on {x.device}, q on {device}: all inputs on one device")
    return shape


def _check_rows(name: str, x: torch.Tensor, shape) -> None:
    """x 4-D: last dimension contiguous, every other stride and the start 16-byte aligned (one row chunk per
    copy)."""
    stride = x.stride()
    s0, s1, s2, s3 = stride
    if s3 != 1 and shape[3] != 1:
        raise ValueError(f"{name} needs stride 1 in its last dimension, got {stride}")
    per_chunk = _ALIGN_BYTES // x.element_size()
    if (s0 % per_chunk and shape[0] > 1) or (s1 % per_chunk and shape[1] > 1) or (s2 % per_chunk and shape[2] > 1):
        raise ValueError(f"{name}: strides {stride} must be multiples of {per_chunk} elements (16 bytes)")
    if x.data_ptr() % _ALIGN_BYTES:
        raise ValueError(f"{name} must start 16-byte aligned")


def check_inputs(q, k_cache, v_cache, *, cache_seqlens, block_table, k_new, v_new, k_descale, v_descale,
                 dtypes: tuple[torch.dtype, ...], head_dims: tuple[int, ...], backend: str,
                 head_dim_pairs: tuple[tuple[int, int], ...] = ()) -> Layout:
    """Shapes, dtypes, devices and strides of an attention_with_kvcache call (no device memory read).
    V's head_dim may differ from Q's and K's where (D, Dv) is one of `head_dim_pairs` (MLA: (576, 512), V often
    a view of K's first columns). Raises TypeError / ValueError naming the argument; returns the Layout."""
    if not isinstance(q, torch.Tensor):
        raise TypeError(f"q must be a torch.Tensor, got {type(q).__name__}")
    q_shape, q_dtype = q.shape, q.dtype
    if len(q_shape) != 4:
        raise ValueError(f"q must be 4-D (B, Sq, Hq, D), got shape {tuple(q_shape)}")
    if q_dtype not in dtypes:
        raise TypeError(f"q: {backend} takes {', '.join(str(d).removeprefix('torch.') for d in dtypes)}, got "
                        f"{q_dtype}")
    batch, seqlen_q, heads_q, head_dim = q_shape
    device = q.device
    if not 1 <= seqlen_q <= MAX_SEQLEN_Q:
        raise ValueError(f"q: Sq = {seqlen_q}, the decode path takes 1..{MAX_SEQLEN_Q} query tokens per sequence "
                         "(longer blocks: attention())")
    if batch < 1 or heads_q < 1:
        raise ValueError(f"q: empty batch or heads, shape {tuple(q_shape)}")
    k_shape = _check_tensor("k_cache", k_cache, 4, device)
    v_shape = _check_tensor("v_cache", v_cache, 4, device)
    blocks, rows, heads_kv, cache_dim = k_shape
    head_dim_v = v_shape[3]
    if not oracle.takes_head_dims(head_dims, head_dim_pairs, head_dim, head_dim_v):
        raise ValueError(f"head_dim {head_dim} with V head_dim {head_dim_v}: {backend} decode takes {head_dims}"
                         + (f" and Q/K with V {', '.join(f'{d}/{dv}' for d, dv in head_dim_pairs)}"
                            if head_dim_pairs else ""))
    if blocks != v_shape[0] or rows != v_shape[1] or heads_kv != v_shape[2]:
        raise ValueError(f"k_cache {tuple(k_shape)} and v_cache {tuple(v_shape)} must have the same shape (but for "
                         "V's head_dim where a pair allows it)")
    kv_dtype = k_cache.dtype
    if kv_dtype != v_cache.dtype:
        raise TypeError(f"k_cache is {kv_dtype}, v_cache {v_cache.dtype}")
    fp8 = kv_dtype == E4M3
    if not fp8 and kv_dtype != q_dtype:
        raise TypeError(f"k_cache/v_cache must be q's dtype ({q_dtype}) or {E4M3}, got {kv_dtype}")
    if cache_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_dim} != q head_dim {head_dim}")
    if heads_kv < 1 or heads_q % heads_kv:
        raise ValueError(f"q has {heads_q} heads, the cache {heads_kv}: Hq must be a multiple of Hkv")
    _check_rows("q", q, q_shape)
    _check_rows("k_cache", k_cache, k_shape)
    _check_rows("v_cache", v_cache, v_shape)

    if fp8:
        for name, d in (("k_descale", k_descale), ("v_descale", v_descale)):
            if d is None:
                raise ValueError(f"{name} is required with an {E4M3} cache ((B, Hkv) float32)")
            d_shape = _check_tensor(name, d, 2, device)
            if d_shape != (batch, heads_kv) or d.dtype != torch.float32 or not d.is_contiguous():
                raise ValueError(f"{name} must be a contiguous (B, Hkv) = ({batch}, {heads_kv}) float32 tensor, got "
                                 f"{tuple(d_shape)} {d.dtype}")
    elif k_descale is not None or v_descale is not None:
        raise ValueError("k_descale/v_descale are for an e4m3 cache only")

    if block_table is None:
        if blocks != batch:
            raise ValueError("contiguous cache (no block_table): k_cache must be (B, S_max, Hkv, D) with B = "
                             f"{batch}, got {tuple(k_shape)}")
        page_size, capacity = None, rows
    else:
        table_shape = _check_tensor("block_table", block_table, 2, device)
        if block_table.dtype != torch.int32:
            raise TypeError(f"block_table must be int32, got {block_table.dtype}")
        if table_shape[0] != batch or table_shape[1] < 1:
            raise ValueError(f"block_table must be (B, max_blocks) with B = {batch}, got {tuple(table_shape)}")
        if block_table.stride(1) != 1:
            raise ValueError("block_table needs stride 1 in its last dimension")
        if rows not in PAGE_SIZES:
            raise ValueError(f"page_size {rows} (k_cache.shape[1]): the paged kernels take {PAGE_SIZES}")
        page_size, capacity = rows, table_shape[1] * rows

    seqlens_shape = _check_tensor("cache_seqlens", cache_seqlens, 1, device)
    if cache_seqlens.dtype != torch.int32:
        raise TypeError(f"cache_seqlens must be int32, got {cache_seqlens.dtype}")
    if seqlens_shape[0] != batch or not cache_seqlens.is_contiguous():
        raise ValueError(f"cache_seqlens must be a contiguous (B,) = ({batch},) tensor, got {tuple(seqlens_shape)}")

    if (k_new is None) != (v_new is None):
        raise ValueError("give k_new and v_new together, or neither")
    if k_new is not None:
        for name, x, cache_shape in (("k_new", k_new, k_shape), ("v_new", v_new, v_shape)):
            shape = _check_tensor(name, x, 4, device)
            if x.dtype != kv_dtype:
                raise TypeError(f"{name} must have the cache's dtype {kv_dtype}, got {x.dtype}")
            if shape[0] != batch or shape[2:] != cache_shape[2:] or shape[1] < 1:
                raise ValueError(f"{name} must be (B, S_new, Hkv, D) = ({batch}, S_new, {heads_kv}, {cache_shape[3]}), "
                                 f"got {tuple(shape)}")
        if k_new.shape[:3] != v_new.shape[:3]:
            raise ValueError(f"k_new {tuple(k_new.shape)} and v_new {tuple(v_new.shape)} differ in batch, length or "
                             "heads")
        if q.is_cuda and torch.cuda.is_current_stream_capturing():
            raise ValueError("k_new/v_new: the append checks the lengths on the host, which a CUDA graph capture "
                             "cannot do; write the cache before the captured call instead")
    return Layout(batch, seqlen_q, heads_q, heads_kv, head_dim, head_dim_v, page_size, capacity, fp8)


MLA_HEAD_DIM, MLA_HEAD_DIM_V = 576, 512  # DeepSeek's latent cache: 512 latent + 64 rotary columns, V the latent


def latent_views(kv_cache, head_dim_v: int):
    """(k_cache, v_cache) of one latent cache (MLA): K the whole rows, V a view of their first head_dim_v columns
    (no copy: the kernels see V's rows are K's and read each once). TypeError / ValueError naming the problem."""
    need(isinstance(kv_cache, torch.Tensor), f"kv_cache must be a torch.Tensor, got {type(kv_cache).__name__}",
          TypeError)
    need(kv_cache.dim() == 4, f"kv_cache must be 4-D (num_blocks, page_size, 1, {MLA_HEAD_DIM}) or (B, S_max, 1, "
          f"{MLA_HEAD_DIM}), got shape {tuple(kv_cache.shape)}")
    need(isinstance(head_dim_v, int) and not isinstance(head_dim_v, bool) and 0 < head_dim_v < kv_cache.shape[3],
          f"head_dim_v must be an int within kv_cache's head_dim {kv_cache.shape[3]}, got {head_dim_v!r}")
    return kv_cache, kv_cache[..., :head_dim_v]


def check_splits(num_splits, split_size) -> None:
    """num_splits: a positive int; split_size: keys per chunk, a positive multiple of SPLIT_MULTIPLE; not both.
    (Inline checks, messages formatted on failure only: this runs on every decode call.)"""
    if num_splits is not None and split_size is not None:
        raise ValueError("give num_splits or split_size, not both")
    if num_splits is not None and not (isinstance(num_splits, int) and num_splits >= 1):
        raise ValueError(f"num_splits must be a positive int, got {num_splits!r}")
    if split_size is not None and not (isinstance(split_size, int) and split_size >= SPLIT_MULTIPLE
                                       and split_size % SPLIT_MULTIPLE == 0):
        raise ValueError(f"split_size must be a positive multiple of {SPLIT_MULTIPLE} keys, got {split_size!r}")


def resolve_scale(scale, head_dim: int) -> float:
    """1/sqrt(head_dim) by default; a given scale must be finite and positive."""
    if scale is None:
        return head_dim ** -0.5
    scale = float(scale)
    need(scale > 0 and scale != float("inf"), f"scale must be a positive finite number, got {scale}")
    return scale


def check_values(layout: Layout, k_cache: torch.Tensor, cache_seqlens: torch.Tensor,
                 block_table: torch.Tensor | None, extra: int = 0) -> None:
    """ValueError when a length (plus `extra` appended keys) is negative or beyond the capacity, or a block-table
    entry those keys use names no page of the cache. One host sync."""
    lengths = cache_seqlens.long() + extra
    low, high = (int(x) for x in torch.stack([cache_seqlens.min(), lengths.max()]).tolist())
    need(low >= 0, f"cache_seqlens: a negative length ({low})")
    need(high <= layout.capacity, f"cache_seqlens{' + S_new' if extra else ''}: a length of {high} is beyond the "
          f"cache's capacity of {layout.capacity} keys per sequence")
    if block_table is not None:
        used = torch.arange(block_table.shape[1], device=block_table.device)[None, :] * layout.page_size < lengths[:, None]
        bad = used & ((block_table < 0) | (block_table >= k_cache.shape[0]))
        if bool(bad.any()):
            b, i = (int(x) for x in bad.nonzero()[0].tolist())
            raise ValueError(f"block_table[{b}, {i}] = {int(block_table[b, i])} is not a page of the cache "
                             f"(0..{k_cache.shape[0] - 1}) but sequence {b} needs it")


def append(layout: Layout, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table) -> torch.Tensor:
    """Write k_new / v_new at each sequence's end (in place) after check_values; returns the new lengths (a new
    tensor: the caller's cache_seqlens is not modified)."""
    check_values(layout, k_cache, cache_seqlens, block_table, extra=k_new.shape[1])
    pos = cache_seqlens.long()[:, None] + torch.arange(k_new.shape[1], device=k_new.device)[None, :]
    if block_table is None:
        rows = torch.arange(layout.batch, device=k_new.device)[:, None].expand_as(pos)
        k_cache[rows, pos] = k_new
        v_cache[rows, pos] = v_new
    else:
        pages = block_table.long().gather(1, pos // layout.page_size)
        k_cache[pages, pos % layout.page_size] = k_new
        v_cache[pages, pos % layout.page_size] = v_new
    return (cache_seqlens + k_new.shape[1]).to(torch.int32)
