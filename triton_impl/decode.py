"""Decode against a KV cache (flash-decoding): the low-level `forward` that `attention_with_kvcache` calls.

`forward(q, k_cache, v_cache, cache_seqlens, block_table, *, causal, scale, k_descale=None, v_descale=None,
num_splits=None, split_size=None) -> (out, lse)`; the caller has validated shapes, dtypes and devices
(the decode contract). q (B, Sq, Hq, D), out (B, Sq, Hq, D) in q's dtype, lse (B, Hq, Sq) fp32, natural log.
Kernels: triton_impl/kernels/decode.py. The work runs behind the custom op `triton_fa::decode` (with a fake
implementation for torch.compile), called directly in plain eager use (runtime.eager).

Split-KV: the key range [0, capacity) is cut into chunks of `split_keys` keys (a multiple of the key tile)
processed by different programs, merged through their LSE in split order (deterministic). With a left window
bound the chunks cover the window's span instead (`plan(window_keys=)`: window_left + Sq keys and one key tile), each
sequence's counted on the device from the first key its rows see, rounded down to the key tile
(kernels.decode._chunk_start: from the sequence's own length, so still batch-invariant under split_size).
  * num_splits=None: about _PROGRAMS_PER_SM programs per SM over batch x KV heads x query tiles x splits, but
    no more programs than the SMs hold at once (kernels.decode.programs_per_sm, from the tile's shared memory):
    a partial second wave costs more than splitting gains. At least _MIN_SPLIT_TILES key tiles per chunk, at
    most _MAX_SPLITS chunks. Chunks shorter than _MIN_SHARED_CHUNK keys: one program per SM instead (no split
    when batch x KV heads x query tiles fill 80% of the SMs). Under TRITON_INTERPRET=1 a fixed 3.
  * num_splits=n: chunks of ceil(capacity / n) keys rounded up to the key tile (so possibly fewer chunks).
  * split_size=s: chunks of s keys rounded up to the key tile; a sequence's result then depends only on its
    own positions, not on the batch around it (batch-invariant, same bits).
No host sync: the grid is sized from the capacity; chunks past a sequence's length exit at once.
"""
import functools
import math
from typing import Optional

import torch

from triton_impl import native
from triton_impl.runtime import check_devices, device_scope, interpreting, run_op, unavailable_reason
from triton_impl.variants import VARIANTS

# split heuristic (num_splits=None) on a GPU
_PROGRAMS_PER_SM = 2      # aim: this many main-kernel programs per SM (batch x KV heads x query tiles x splits)
_MIN_SPLIT_TILES = 4      # at least this many key tiles per chunk
_MIN_SHARED_CHUNK = 1024  # keys a chunk needs before two programs per SM beat one (the extra chunks' fixed cost)
_MAX_SPLITS = 128
_INTERPRETER_SPLITS = 3


@functools.lru_cache(maxsize=None)
def _sm_count(index):
    return torch.cuda.get_device_properties(index).multi_processor_count


def _cdiv(a, b):
    return -(-a // b)


def plan(batch, heads_kv, rows, capacity, head_dim, num_splits=None, split_size=None, device=None, config=None,
         kv_element_size=2, window_keys=None):
    """(tile, split_keys, n_splits): the kernel's tile (kernels.decode.tiles) and the chunking of [0, capacity), or
    with window_keys (window_left + Sq: how wide the union of a sequence's rows' windows is, ending at its length)
    of the window's span, min(capacity, window_keys + BLOCK_N) keys from the kernel's chunk start. (Asked once per
    call shape: _decode_impl keeps its answer.)"""
    on_gpu = not interpreting() and device is not None and device.type == "cuda"
    sms = _sm_count(device.index or 0) if on_gpu else 0
    return _plan(int(batch), int(heads_kv), int(rows), max(int(capacity), 1), int(head_dim), num_splits, split_size,
                 sms, kv_element_size, window_keys, config)


def _plan(batch, heads_kv, rows, capacity, head_dim, num_splits, split_size, sms, kv_element_size, window_keys,
          config=None):
    """plan() for `sms` SMs (0: no GPU, the interpreter's fixed split count)."""
    kernels = _kernels()
    tile = kernels.tiles(head_dim, rows, kv_element_size, config)
    block_m, block_n = tile[0], tile[1]
    keys = capacity if window_keys is None else min(capacity, window_keys + block_n)  # what the chunks cover
    key_tiles = _cdiv(keys, block_n)
    if split_size is not None:
        tiles_per_split = _cdiv(int(split_size), block_n)
    else:
        if num_splits is None:
            if not sms:
                want = _INTERPRETER_SPLITS
            else:
                # about _PROGRAMS_PER_SM programs per SM, but never more than the SMs hold at once: a second,
                # partial wave costs more than the split gains (H200: 512 programs of 3 per SM ran 290 us at
                # B32 Sk8k where 256 ran 248 us; 640 programs 284 us at B8 Sk32k where 320 ran 261 us)
                units = batch * heads_kv * _cdiv(rows, block_m)
                one_wave = max(1, sms * kernels.programs_per_sm(tile, head_dim, kv_element_size) // units)
                most = min(one_wave, max(1, key_tiles // _MIN_SPLIT_TILES), _MAX_SPLITS)
                want = min(_cdiv(_PROGRAMS_PER_SM * sms, units), most)
                if keys / want < _MIN_SHARED_CHUNK:  # short chunks: one program per SM, none split if filled
                    want = 1 if units >= 0.8 * sms else min(_cdiv(sms, units), most)
        else:
            want = int(num_splits)
        tiles_per_split = _cdiv(key_tiles, max(1, min(want, key_tiles)))
    split_keys = tiles_per_split * block_n
    return tile, split_keys, _cdiv(keys, split_keys)


_kernel_module = None


def _kernels():
    """triton_impl.kernels.decode, imported on the first launch (triton_impl imports without Triton); kept here,
    since an import statement in a function costs a microsecond or two on every call."""
    global _kernel_module
    if _kernel_module is None:
        from triton_impl.kernels import decode as kernels
        _kernel_module = kernels
    return _kernel_module


class _Prepared:
    """A call shape's plan (tile, split_keys, n_splits), what it allocates (out, lse, and the split partials'
    workspace) and its kernels' Launch (kernels.decode.prepare, made from the first call's tensors)."""

    __slots__ = ("tile", "split_keys", "n_splits", "out_shape", "lse_shape", "ws_o_shape", "ws_lse_shape", "launch")

    def __init__(self, q, k_cache, v_cache, block_table, num_splits, split_size, window_left, config):
        batch, seqlen_q, heads_q, head_dim = q.shape
        head_dim_v = v_cache.shape[3]
        heads_kv = k_cache.shape[2]
        rows = seqlen_q * (heads_q // heads_kv)
        capacity = block_table.shape[1] * k_cache.shape[1] if block_table is not None else k_cache.shape[1]
        self.tile, self.split_keys, self.n_splits = plan(
            batch, heads_kv, rows, capacity, head_dim, num_splits or None, split_size or None, q.device, config,
            k_cache.element_size(), window_left + seqlen_q if window_left >= 0 else None)
        self.out_shape = (batch, seqlen_q, heads_q, head_dim_v)
        self.lse_shape = (batch, heads_q, seqlen_q)
        split = self.n_splits > 1
        self.ws_o_shape = (batch, heads_kv, self.n_splits, rows, head_dim_v) if split else None
        self.ws_lse_shape = (batch, heads_kv, self.n_splits, rows) if split else None
        self.launch = None


# The prepared calls by everything they are computed from: the tensors' shapes, strides and dtypes (None for an
# absent one), whether V is K's view, causal, the split options, the window, the device and whether the
# interpreter runs the kernels. A decode step repeats one call shape; its plan, its launches' arguments and
# Triton's binding of them are then made once (kernels.decode._Kernel). The dict is emptied when it reaches
# PLAN_CACHE_SIZE entries (a server's changing batch sizes and cache lengths keep adding keys).
PLAN_CACHE_SIZE = 4096
_prepared: dict[tuple, _Prepared] = {}


def _decode_impl(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal, scale,
                 num_splits, split_size, window_left=-1, window_right=-1, config=None):
    tensors = [t for t in (q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale) if t is not None]
    # the portable pointer kernels' needs: triton, sm_80+ or the interpreter
    reason = unavailable_reason("decode" if "decode" in VARIANTS else "fa2")
    if reason is not None:
        raise RuntimeError(reason)
    check_devices(tensors)
    kernels = _kernels()
    q_shape, k_shape = q.shape, k_cache.shape
    capacity = block_table.shape[1] * k_shape[1] if block_table is not None else k_shape[1]
    # a side that reaches past every row's keys is unbounded (keeps the kernel's key arithmetic in int32): left >=
    # capacity starts every row's window at key 0 or before, right >= Sq - 1 ends it at the sequence's last key
    window_left = -1 if window_left >= capacity else window_left
    window_right = -1 if window_right >= q_shape[1] - 1 else window_right
    device = q.device
    key = (q_shape, q.stride(), q.dtype, k_shape, k_cache.stride(), k_cache.dtype, v_cache.shape, v_cache.stride(),
           v_cache.dtype, v_cache.data_ptr() == k_cache.data_ptr(),
           None if block_table is None else (block_table.shape, block_table.stride(), block_table.dtype),
           None if cache_seqlens is None else cache_seqlens.dtype,
           None if k_descale is None else k_descale.dtype, None if v_descale is None else v_descale.dtype,
           bool(causal), num_splits, split_size, window_left, window_right, device, kernels.tuning.interpreting())
    prepared = _prepared.get(key) if config is None else None
    if prepared is None:
        prepared = _Prepared(q, k_cache, v_cache, block_table, num_splits, split_size, window_left, config)
    out = torch.empty(prepared.out_shape, dtype=q.dtype, device=device)
    lse = torch.empty(prepared.lse_shape, dtype=torch.float32, device=device)
    ws_o = ws_lse = None
    if prepared.ws_o_shape is not None:
        ws_o = torch.empty(prepared.ws_o_shape, dtype=torch.float32, device=device)
        ws_lse = torch.empty(prepared.ws_lse_shape, dtype=torch.float32, device=device)
    if prepared.launch is None:
        prepared.launch = kernels.prepare(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, out,
                                          lse, ws_o, ws_lse, causal, prepared.split_keys, prepared.n_splits,
                                          prepared.tile, (window_left, window_right))
        if config is None:
            if len(_prepared) >= PLAN_CACHE_SIZE:
                _prepared.clear()
            _prepared[key] = prepared
    with device_scope(q):
        addresses = prepared.launch(q, k_cache, v_cache, out, lse, ws_o, ws_lse, cache_seqlens, block_table,
                                    k_descale, v_descale, scale)
    if config is None and cache_seqlens is not None and q.is_cuda and not torch.compiler.is_compiling():
        # the compiled entry takes this key's later calls (triton_impl.native)
        native.remember(prepared, addresses, q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale,
                        causal, num_splits, split_size, window_left, window_right)
    return out, lse


def _decode(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: Optional[torch.Tensor],
            block_table: Optional[torch.Tensor], k_descale: Optional[torch.Tensor],
            v_descale: Optional[torch.Tensor], causal: bool, scale: float, num_splits: int,
            split_size: int, window_left: int, window_right: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The op's implementation; num_splits / split_size 0 mean None."""
    return _decode_impl(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal, scale,
                        num_splits, split_size, window_left, window_right)


_decode_op = torch.library.custom_op("triton_fa::decode", mutates_args=())(_decode)


@_decode_op.register_fake
def _decode_fake(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal, scale,
                 num_splits, split_size, window_left, window_right):
    batch, seqlen_q, heads_q = q.shape[:3]
    return (q.new_empty((batch, seqlen_q, heads_q, v_cache.shape[3])),
            q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32))


def _split_arg(name, value):
    if value is None:
        return 0
    if isinstance(value, bool) or int(value) != value or int(value) < 1:
        raise ValueError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)


def _window(window, causal: bool) -> tuple[int, int]:
    """(left, right) as the kernel takes it: (-1, -1) without a window; with one, right 0 under causal."""
    left, right = (int(w) for w in window)
    if (left, right) == (-1, -1):
        return -1, -1
    return left, 0 if causal else right


def forward(q, k_cache, v_cache, cache_seqlens, block_table, *, causal: bool, scale: float,
            k_descale=None, v_descale=None, num_splits: Optional[int] = None, split_size: Optional[int] = None,
            window=(-1, -1)):
    """Decode attention of q (B, Sq, Hq, D) against the cache; returns (out (B, Sq, Hq, Dv), lse (B, Hq, Sq)), Dv
    V's head_dim (D but for MLA's 576 / 512, where v_cache is best a view of k_cache's first 512 columns).

    Paged cache (block_table (B, max_blocks) int32): k_cache/v_cache (num_blocks, page_size, Hkv, D);
    contiguous (block_table None): (B, S_max, Hkv, D). cache_seqlens (B,) int32 or None (full capacity).
    fp8 e4m3 K/V with k_descale/v_descale (B, Hkv) fp32. causal is bottom-right aligned. window (left, right):
    local attention on each sequence's keys (row i of a sequence of L keys sees keys i + L - Sq - left .. + right;
    -1 unbounded; causal sets right to 0); key tiles no row of a query tile sees are not read. See the module
    docstring for num_splits / split_size."""
    if num_splits is not None and split_size is not None:
        raise ValueError("num_splits and split_size are mutually exclusive")
    if q.stride(-1) != 1 or k_cache.stride(-1) != 1 or v_cache.stride(-1) != 1:
        raise ValueError("q, k_cache and v_cache need a unit stride along head_dim")
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale}")
    fp8 = k_cache.dtype == torch.float8_e4m3fn
    if fp8 and (k_descale is None or v_descale is None):
        raise ValueError("fp8 k_cache/v_cache need k_descale and v_descale of shape (batch, heads_kv)")
    if not fp8:
        k_descale = v_descale = None
    else:
        k_descale, v_descale = k_descale.float().contiguous(), v_descale.float().contiguous()
    return run_op(_decode_op, _decode, (q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale),
                bool(causal), scale, _split_arg("num_splits", num_splits), _split_arg("split_size", split_size),
                *_window(window, causal))
