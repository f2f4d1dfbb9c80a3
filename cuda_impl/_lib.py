"""ctypes binding of the attention library (cuda_impl/csrc) and the raw launch.

The library is torch-free: it takes raw device pointers, element strides and the caller's
cudaStream_t, and returns 0 or an error code with a message. This module turns torch tensors
into that call; validation of what users pass happens before, in cuda_impl.validate.
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading

import torch

from cuda_impl import toolchain

LIBRARY_NAME = "cuda_fa"
DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1}
E4M3_CODE = 2  # FA_DTYPE_E4M3 in csrc/hopper/config.cuh
# FA_MX_FORMAT_* in csrc/hopper/config.cuh, and the 16-bit type each format's values are exact in.
MX_FORMAT_CODES = {"mxfp8": 0, "nvfp4": 1}
MX_TILE_DTYPES = {"mxfp8": torch.bfloat16, "nvfp4": torch.float16}
_ERR_LEN = 512


class FwdParams(ctypes.Structure):
    """Mirror of `struct FwdParams` in csrc/fwd_common.cuh (checked by size at load)."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("q_stride", ctypes.c_int64 * 3),
        ("k_stride", ctypes.c_int64 * 3),
        ("v_stride", ctypes.c_int64 * 3),
        ("out_stride", ctypes.c_int64 * 3),
        ("batch", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("seqlen_k", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("tile_counter", ctypes.c_void_p),
        ("split_workspace", ctypes.c_void_p),
        ("local", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
        ("softcap", ctypes.c_float),
        ("cu_seqlens_q", ctypes.c_void_p),
        ("cu_seqlens_k", ctypes.c_void_p),
        ("total_q", ctypes.c_int32),
        ("total_k", ctypes.c_int32),
    ]


class Fp8FwdParams(ctypes.Structure):
    """Mirror of `struct Fp8FwdParams` in csrc/hopper/mainloop_fp8.cuh (checked by size at first use)."""

    _fields_ = [
        ("base", FwdParams),
        ("q_descale", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
    ]


class MxFwdParams(ctypes.Structure):
    """Mirror of `struct MxFwdParams` in csrc/hopper/mainloop_mx.cuh (checked by size at first use)."""

    _fields_ = [
        ("base", FwdParams),
        ("q_tensor_scale", ctypes.c_void_p),
        ("k_tensor_scale", ctypes.c_void_p),
        ("v_tensor_scale", ctypes.c_void_p),
        ("format", ctypes.c_int32),
    ]


class DequantParams(ctypes.Structure):
    """Mirror of `struct DequantParams` in csrc/dequant_blocked.cu."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("scales", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("n", ctypes.c_int64),
        ("format", ctypes.c_int32),
    ]


class DecodeParams(ctypes.Structure):
    """Mirror of `struct DecodeParams` in csrc/decode/params.cuh (checked by size at load)."""

    _fields_ = [
        ("q", ctypes.c_void_p),
        ("k", ctypes.c_void_p),
        ("v", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("lse", ctypes.c_void_p),
        ("block_table", ctypes.c_void_p),
        ("seqlens", ctypes.c_void_p),
        ("k_descale", ctypes.c_void_p),
        ("v_descale", ctypes.c_void_p),
        ("workspace", ctypes.c_void_p),
        ("q_stride", ctypes.c_int64 * 3),
        ("k_stride", ctypes.c_int64 * 3),
        ("v_stride", ctypes.c_int64 * 3),
        ("block_table_stride", ctypes.c_int64),
        ("batch", ctypes.c_int32),
        ("seqlen_q", ctypes.c_int32),
        ("heads_q", ctypes.c_int32),
        ("heads_kv", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("head_dim_v", ctypes.c_int32),
        ("page_size", ctypes.c_int32),
        ("num_pages", ctypes.c_int32),
        ("max_pages", ctypes.c_int32),
        ("num_splits", ctypes.c_int32),
        ("split_keys", ctypes.c_int32),
        ("scale", ctypes.c_float),
        ("causal", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("kv_dtype", ctypes.c_int32),
        ("window_left", ctypes.c_int32),
        ("window_right", ctypes.c_int32),
    ]


_PACK_CODES = {ctypes.c_void_p: "Q", ctypes.c_int64: "q", ctypes.c_int32: "i", ctypes.c_float: "f"}


def struct_packer(struct_type) -> struct.Struct:
    """A struct.Struct that writes the bytes of `struct_type` (a ctypes Structure of pointers, ints, floats and
    arrays of them) from its field values in order, arrays flattened, padding taken from the ctypes offsets.
    Building a ctypes Structure from keywords costs about 15 us per call on a CPU; packing about 1, which is
    what a decode step's host time is made of."""
    fmt, end = "=", 0
    for name, ctype in struct_type._fields_:
        field = getattr(struct_type, name)
        fmt += f"{field.offset - end}x" if field.offset > end else ""
        fmt += f"{ctype._length_}{_PACK_CODES[ctype._type_]}" if hasattr(ctype, "_length_") else _PACK_CODES[ctype]
        end = field.offset + field.size
    size = ctypes.sizeof(struct_type)
    packer = struct.Struct(fmt + (f"{size - end}x" if size > end else ""))
    if packer.size != size:
        raise RuntimeError(f"{struct_type.__name__}: packed {packer.size} bytes, the struct has {size}")
    return packer


_DECODE_PACK = struct_packer(DecodeParams)


def library_spec(extra_flags: tuple[str, ...] = ()) -> toolchain.LibrarySpec:
    return toolchain.LibrarySpec(
        name=LIBRARY_NAME,
        sources=tuple(sorted(toolchain.CSRC_DIR.glob("*.cu"))),
        include_dirs=(toolchain.CSRC_DIR,),
        extra_flags=extra_flags,
    )


_loaded: dict[tuple[str, ...], ctypes.CDLL] = {}
_load_lock = threading.Lock()


# Every parameter block shared with the C side: (its sizeof function, the ctypes mirror, the source).
_STRUCTS = (("cuda_fa_params_size", FwdParams, "fwd_common.cuh"),
            ("cuda_fa_fp8_params_size", Fp8FwdParams, "hopper/mainloop_fp8.cuh"),
            ("cuda_fa_dequant_params_size", DequantParams, "dequant_blocked.cu"),
            ("cuda_fa_mx_params_size", MxFwdParams, "hopper/mainloop_mx.cuh"),
            ("cuda_fa_decode_params_size", DecodeParams, "decode/params.cuh"))


def _checked(path) -> ctypes.CDLL:
    lib = ctypes.CDLL(str(path))
    for size_fn, struct, source in _STRUCTS:
        fn = getattr(lib, size_fn)
        fn.restype = ctypes.c_int
        if fn() != ctypes.sizeof(struct):
            raise RuntimeError(f"cuda_impl: {struct.__name__} in _lib.py and csrc/{source} differ ({path})")
    return lib


def load(extra_flags: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The library (built on first use when not cached), its parameter blocks checked against the C side."""
    with _load_lock:
        if extra_flags not in _loaded:
            _loaded[extra_flags] = _checked(toolchain.build_library(library_spec(extra_flags)))
        return _loaded[extra_flags]


def register_library(key: tuple[str, ...], path) -> None:
    """Serve `load(key)` from a prebuilt library at `path` (dev scripts: another commit's build)."""
    with _load_lock:
        _loaded[key] = _checked(path)


def entry_point(lib: ctypes.CDLL, variant: str):
    return _typed_entry(lib, f"cuda_fa_fwd_{variant}", FwdParams)


def _strides(t: torch.Tensor):
    return (ctypes.c_int64 * 3)(*t.stride()[:3])


_typed_entries: dict[tuple[int, str], object] = {}
# torch's current stream of a device as a raw handle, without building a torch.cuda.Stream (Triton's
# launcher reads it the same way); the public call where this torch build lacks it.
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


def _typed_entry(lib: ctypes.CDLL, name: str, struct):
    """The C entry `name`, typed once per library (the loaded libraries live as long as the process)."""
    key = (id(lib), name)
    if key not in _typed_entries:
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.POINTER(struct), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
        _typed_entries[key] = fn
    return _typed_entries[key]


def _call(lib: ctypes.CDLL, name: str, struct, params, device, what: str) -> None:
    """Launch on torch's current stream of `device`, made the current device for the launch if it is not."""
    fn = _typed_entry(lib, name, struct)
    err = ctypes.create_string_buffer(_ERR_LEN)
    current = torch.cuda.current_device()
    index = current if device.index is None else device.index
    if index == current:
        rc = fn(ctypes.byref(params), ctypes.c_void_p(_raw_stream(index)), err, _ERR_LEN)
    else:
        with torch.cuda.device(index):
            rc = fn(ctypes.byref(params), ctypes.c_void_p(_raw_stream(index)), err, _ERR_LEN)
    if rc != 0:
        raise RuntimeError(f"cuda_impl {what}: {err.value.decode(errors='replace')}")


def _base_params(q, k, v, out, lse, *, causal: bool, scale: float, dtype: int,
                 seqlen_k: int | None = None) -> FwdParams:
    """The parameter block every kernel takes; `v` is V or V^T as the kernel reads it."""
    return FwdParams(
        q=q.data_ptr(), k=k.data_ptr(), v=v.data_ptr(), out=out.data_ptr(),
        lse=lse.data_ptr() if lse is not None else None,
        q_stride=_strides(q), k_stride=_strides(k), v_stride=_strides(v), out_stride=_strides(out),
        batch=q.shape[0], heads_q=q.shape[1], heads_kv=k.shape[1], seqlen_q=q.shape[2],
        seqlen_k=k.shape[2] if seqlen_k is None else seqlen_k, head_dim=q.shape[3], scale=scale,
        causal=int(causal), dtype=dtype,
    )


def _check_aligned(tensors: dict, why: str) -> None:
    for name, t in tensors.items():
        if t.data_ptr() % 16:
            raise ValueError(f"alignment: {name} must start on a 16-byte boundary ({why})")


def _zeroed_tile_counter(params: FwdParams, device) -> torch.Tensor:
    """A dynamic causal scheduler's item counter, zeroed on the launch's stream, into params.tile_counter.
    The caller holds the tensor until the launch is queued; its block then returns to the caching allocator
    stream-ordered, so the launch keeps it."""
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    params.tile_counter = counter.data_ptr()
    return counter


def _optional_entry(lib: ctypes.CDLL, name: str, restype, argtypes):
    """The C entry `name` typed once, or None where the library does not export it."""
    key = (id(lib), name)
    if key not in _typed_entries:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
        _typed_entries[key] = fn
    return _typed_entries[key]


def _scheduler_buffers(lib: ctypes.CDLL, symbol: str, struct, params, base: FwdParams, causal: bool,
                       head_dim: int, device) -> list[torch.Tensor]:
    """What a variant's persistent scheduler needs for this launch, as its entry file exports it: a zeroed item
    counter where `cuda_fa_<symbol>_dynamic_causal(head_dim)` says causal launches take one, and the split last
    round's workspace that `cuda_fa_<symbol>_split_workspace` sizes as the launch sizes its grid (its prefix
    zeroed). Both are made on the launch's stream and set in `base`; the caller holds the returned tensors until
    the launch is queued, after which their blocks return to the caching allocator stream-ordered."""
    held = []
    dynamic = _optional_entry(lib, f"cuda_fa_{symbol}_dynamic_causal", ctypes.c_int, [ctypes.c_int])
    if causal and dynamic is not None and dynamic(head_dim):
        held.append(_zeroed_tile_counter(base, device))
    sized = _optional_entry(lib, f"cuda_fa_{symbol}_split_workspace", ctypes.c_int64,
                            [ctypes.POINTER(struct), ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_int])
    if not causal and sized is not None:
        zeroed = ctypes.c_int64(0)
        err = ctypes.create_string_buffer(_ERR_LEN)
        index = torch.cuda.current_device() if device.index is None else device.index
        with torch.cuda.device(index):  # (the query sizes the grid on the launch's device)
            size = sized(ctypes.byref(params), ctypes.byref(zeroed), err, _ERR_LEN)
        if size < 0:
            raise RuntimeError(f"cuda_impl {symbol}: {err.value.decode(errors='replace')}")
        if size > 0:
            workspace = torch.empty(size, dtype=torch.uint8, device=device)
            workspace[: zeroed.value].zero_()
            base.split_workspace = workspace.data_ptr()
            held.append(workspace)
    return held


def launch_forward(
    variant: str, q, k, v, out, lse, *, causal: bool, scale: float, window: tuple[int, int] = (-1, -1),
    softcap: float = 0.0, extra_flags: tuple[str, ...] = ()
) -> None:
    """Run one forward on torch's current stream of q's device. Tensors, window and softcap are already checked;
    a window or softcap makes it a local launch (FwdParams::local; the kernel schedules it as a causal one)."""
    _check_aligned({"q": q, "k": k, "v": v, "out": out}, "16-byte cp.async")
    params = _base_params(q, k, v, out, lse, causal=causal, scale=scale, dtype=DTYPE_CODES[q.dtype])
    params.head_dim_v = v.shape[3] if v.shape[3] != q.shape[3] else 0
    _run_16bit(variant, params, causal, window, softcap, q.shape[3], q.device, extra_flags)


def _run_16bit(variant: str, params: FwdParams, causal: bool, window, softcap: float, head_dim: int, device,
               extra_flags: tuple[str, ...] = ()) -> None:
    """A 16-bit launch of `params`: a window or softcap makes it a local one (FwdParams::local, scheduled as a
    causal one, so with the causal launches' scheduler buffers)."""
    local = tuple(window) != (-1, -1) or softcap > 0
    if local:
        params.local, (params.window_left, params.window_right), params.softcap = 1, window, softcap
    lib = load(extra_flags)
    symbol = variant.replace("-", "_")
    held = _scheduler_buffers(lib, symbol, FwdParams, params, params, causal or local, head_dim,  # noqa: F841
                              device)
    _call(lib, f"cuda_fa_fwd_{symbol}", FwdParams, params, device, variant)


def launch_varlen(
    variant: str, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, *,
    causal: bool, scale: float, window: tuple[int, int] = (-1, -1), softcap: float = 0.0,
    extra_flags: tuple[str, ...] = (),
) -> None:
    """Packed sequences (compare.varlen layouts: q / out (total_q, Hq, D), k / v (total_k, Hkv, D), lse (Hq, total_q),
    offsets (B + 1,) int32 on the device) on a varlen launch (FwdParams::cu_seqlens_q: the packed tensors as one
    (1, H, total, D) batch entry, the grid sized by the longest sequences). Checked already; totals >= 1."""
    as_bhsd = lambda x: x.unsqueeze(0).transpose(1, 2)  # noqa: E731 - (1, H, total, D) strided views, no copy
    q4, k4, v4, out4 = (as_bhsd(x) for x in (q, k, v, out))
    _check_aligned({"q": q, "k": k, "v": v, "out": out}, "16-byte TMA rows")
    params = _base_params(q4, k4, v4, out4, lse, causal=causal, scale=scale, dtype=DTYPE_CODES[q.dtype])
    params.batch, params.seqlen_q, params.seqlen_k = cu_seqlens_q.numel() - 1, max_seqlen_q, max_seqlen_k
    params.total_q, params.total_k = q.shape[0], k.shape[0]
    params.cu_seqlens_q, params.cu_seqlens_k = cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr()
    params.head_dim_v = v.shape[2] if v.shape[2] != q.shape[2] else 0
    _run_16bit(variant, params, causal, window, softcap, q.shape[2], q.device, extra_flags)


def launch_forward_fp8(
    variant: str, q, k, vt, q_descale, k_descale, v_descale, out, lse, *, causal: bool, scale: float,
    extra_flags: tuple[str, ...] = (),
) -> None:
    """fp8 forward: q (B, Hq, Sq, D), k (B, Hkv, Sk, D), vt (B, Hkv, D, Sk) e4m3 tensors with byte
    strides that are multiples of 16; descales (B, H) float32 contiguous; out bf16. Checked already."""
    _check_aligned({"q": q, "k": k, "vt": vt, "out": out}, "TMA")
    base = _base_params(q, k, vt, out, lse, causal=causal, scale=scale, dtype=E4M3_CODE)
    lib = load(extra_flags)
    params = Fp8FwdParams(
        base=base, q_descale=q_descale.data_ptr(), k_descale=k_descale.data_ptr(), v_descale=v_descale.data_ptr()
    )
    symbol = variant.replace("-", "_")
    held = _scheduler_buffers(lib, symbol, Fp8FwdParams, params, params.base, causal, q.shape[3],  # noqa: F841
                              q.device)
    _call(lib, f"cuda_fa_fwd_{symbol}", Fp8FwdParams, params, q.device, variant)


def dequantize_blocked(fmt: str, data: torch.Tensor, scales: torch.Tensor, *,
                       extra_flags: tuple[str, ...] = ()) -> torch.Tensor:
    """Stored block-scaled data (contiguous; nvfp4: two codes per byte) and its block scales -> the
    exact values in MX_TILE_DTYPES[fmt], same stored shape (nvfp4's tensor scale not applied)."""
    elements = data.shape[-1] * (2 if fmt == "nvfp4" else 1)
    out = torch.empty((*data.shape[:-1], elements), dtype=MX_TILE_DTYPES[fmt], device=data.device)
    lib = load(extra_flags)
    params = DequantParams(data=data.data_ptr(), scales=scales.data_ptr(), out=out.data_ptr(), n=out.numel(),
                           format=MX_FORMAT_CODES[fmt])
    _call(lib, "cuda_fa_dequant_blocked", DequantParams, params, data.device, f"dequant {fmt}")
    return out


def launch_forward_mx(
    fmt: str, q, k, vt, q_ts, k_ts, v_ts, out, lse, *, causal: bool, scale: float, seqlen_k: int,
    extra_flags: tuple[str, ...] = (),
) -> None:
    """Block-scaled forward on the dequantized 16-bit tiles: q (B, Hq, Sq, D), k (B, Hkv, Sk, D), vt
    (B, Hkv, D, Sk_padded) in MX_TILE_DTYPES[fmt], contiguous; q_ts/k_ts/v_ts nvfp4's 0-dim fp32 tensor
    scales (None for mxfp8); out bf16, lse fp32. Checked already."""
    base = _base_params(q, k, vt, out, lse, causal=causal, scale=scale, dtype=DTYPE_CODES[q.dtype],
                        seqlen_k=seqlen_k)
    ts = [None if t is None else t.data_ptr() for t in (q_ts, k_ts, v_ts)]
    params = MxFwdParams(base=base, q_tensor_scale=ts[0], k_tensor_scale=ts[1], v_tensor_scale=ts[2],
                         format=MX_FORMAT_CODES[fmt])
    lib = load(extra_flags)
    _call(lib, "cuda_fa_fwd_hopper_mx", MxFwdParams, params, q.device, f"hopper-{fmt}")


def decode_block_n(head_dim: int, kv_fp8: bool, *, extra_flags: tuple[str, ...] = ()) -> int:
    """Keys of the decode kernel's tile at head_dim (split sizes are multiples of it); -1 where none runs."""
    fn = _optional_entry(load(extra_flags), "cuda_fa_decode_block_n", ctypes.c_int, [ctypes.c_int, ctypes.c_int])
    return fn(head_dim, E4M3_CODE if kv_fp8 else DTYPE_CODES[torch.bfloat16])


_decode_slots: dict[tuple, int] = {}


def decode_ctas_per_sm(dtype, kv_fp8: bool, head_dim: int, device, *, extra_flags: tuple[str, ...] = ()) -> int:
    """Decode CTAs resident per SM of `device` (cudaOccupancy...; cached per device, dtypes and head_dim)."""
    index = torch.cuda.current_device() if device.index is None else device.index
    key = (index, dtype, kv_fp8, head_dim, extra_flags)
    if key not in _decode_slots:
        fn = _optional_entry(load(extra_flags), "cuda_fa_decode_ctas_per_sm", ctypes.c_int,
                             [ctypes.c_int, ctypes.c_int, ctypes.c_int])
        code = DTYPE_CODES[dtype]
        with torch.cuda.device(index):
            n = fn(code, E4M3_CODE if kv_fp8 else code, head_dim)
        if n < 1:
            raise RuntimeError(f"cuda_impl decode: no occupancy for head_dim {head_dim} ({n})")
        _decode_slots[key] = n
    return _decode_slots[key]


def mla_decode_tiles(rows: int, *, extra_flags: tuple[str, ...] = ()) -> tuple[int, int]:
    """(keys per tile, query rows per CTA) of the MLA decode kernels (csrc/fwd_mla_decode.cu) for `rows` packed
    query rows (heads x query positions) on the current device: more than 32 rows take the wgmma kernel's 64 keys
    and 64 rows on sm_90 (fwd_mla_decode_wgmma.cu), 32 keys and 16 or 32 rows elsewhere."""
    device = torch.cuda.current_device() if torch.cuda.is_available() else -1
    return _mla_decode_tiles(rows, device, extra_flags)


@functools.lru_cache(maxsize=256)
def _mla_decode_tiles(rows: int, device: int, extra_flags: tuple[str, ...]) -> tuple[int, int]:
    lib = load(extra_flags)
    block_n = _optional_entry(lib, "cuda_fa_mla_decode_block_n", ctypes.c_int, [ctypes.c_int])
    tile_rows = _optional_entry(lib, "cuda_fa_mla_decode_tile_rows", ctypes.c_int, [ctypes.c_int])
    return block_n(rows), tile_rows(rows)


def mla_decode_ctas_per_sm(dtype, rows: int, device, *, extra_flags: tuple[str, ...] = ()) -> int:
    """MLA decode CTAs resident per SM of `device` for `rows` packed query rows (cached as decode_ctas_per_sm)."""
    index = torch.cuda.current_device() if device.index is None else device.index
    tile_rows = mla_decode_tiles(rows, extra_flags=extra_flags)[1]
    key = (index, dtype, "mla", tile_rows, extra_flags)
    if key not in _decode_slots:
        fn = _optional_entry(load(extra_flags), "cuda_fa_mla_decode_ctas_per_sm", ctypes.c_int,
                             [ctypes.c_int, ctypes.c_int])
        with torch.cuda.device(index):
            n = fn(DTYPE_CODES[dtype], rows)
        if n < 1:
            raise RuntimeError(f"cuda_impl MLA decode: no occupancy for {tile_rows}-row tiles ({n})")
        _decode_slots[key] = n
    return _decode_slots[key]


# The decode launch's parameter block and error buffer, one of each per thread (ctypes releases the GIL during
# the call, so another thread may launch meanwhile), reused by every launch: packed in place
# (_DECODE_PACK.pack_into) instead of a new Structure and buffer per call. The C entry copies the block into the
# kernel's arguments before it returns.
_decode_buffers = threading.local()
# The typed decode entries by (extra_flags, MLA or not), so that a launch does not take load()'s lock.
_decode_entries: dict[tuple[tuple[str, ...], bool], object] = {}


def _decode_entry(extra_flags: tuple[str, ...], mla: bool):
    key = (extra_flags, mla)
    fn = _decode_entries.get(key)
    if fn is None:
        # V narrower than Q/K: MLA's latent cache (V the first columns of K's rows), its own kernel.
        fn = _decode_entries[key] = _typed_entry(load(extra_flags), "cuda_fa_mla_decode" if mla else "cuda_fa_decode",
                                                 DecodeParams)
    return fn


def launch_decode(q, k_cache, v_cache, out, lse, cache_seqlens, block_table, k_descale, v_descale, workspace, *,
                  causal: bool, scale: float, num_splits: int, split_keys: int,
                  window: tuple[int, int] = (-1, -1), extra_flags: tuple[str, ...] = ()) -> None:
    """One decode (csrc/fwd_decode.cu; fwd_mla_decode.cu for V narrower than Q/K, MLA's latent cache, where v_cache
    must be k_cache's first columns) on torch's current stream of q's device. q (B, Sq, Hq, D) with any strides
    but the last; k_cache/v_cache (num_pages, page_size, Hkv, D) with block_table (B, max_pages) int32, or
    (B, S_max, Hkv, D) with block_table None; out (B, Sq, Hq, D) and lse (B, Hq, Sq) contiguous; workspace: fp32
    num_splits * B * Hq * Sq * (D + 1) elements when num_splits > 1, else None; window (left, right) as
    cuda_impl.decode.kernel_window gives it. Checked already."""
    q_ptr, k_ptr, v_ptr, out_ptr = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), out.data_ptr()
    if (q_ptr | k_ptr | v_ptr | out_ptr) % 16:  # (names the tensor)
        _check_aligned({"q": q, "k_cache": k_cache, "v_cache": v_cache, "out": out}, "16-byte cp.async")
    batch, seqlen_q, heads_q, head_dim = q.shape
    num_pages, page_size, heads_kv, _ = k_cache.shape
    head_dim_v = v_cache.shape[3]
    dtype = DTYPE_CODES[q.dtype]
    paged = block_table is not None
    params = getattr(_decode_buffers, "params", None)
    if params is None:
        params = _decode_buffers.params = DecodeParams()
        _decode_buffers.err = ctypes.create_string_buffer(_ERR_LEN)
    # DecodeParams' fields in order (struct_packer); a contiguous cache is one page per sequence (page index =
    # batch index), and S_max = 0 holds no page.
    _DECODE_PACK.pack_into(
        params, 0, q_ptr, k_ptr, v_ptr, out_ptr, lse.data_ptr(),
        block_table.data_ptr() if paged else 0, cache_seqlens.data_ptr() if cache_seqlens is not None else 0,
        k_descale.data_ptr() if k_descale is not None else 0, v_descale.data_ptr() if v_descale is not None else 0,
        workspace.data_ptr() if workspace is not None else 0,
        *q.stride()[:3], *k_cache.stride()[:3], *v_cache.stride()[:3], block_table.stride(0) if paged else 0,
        batch, seqlen_q, heads_q, heads_kv, head_dim, head_dim_v, max(1, page_size), num_pages,
        block_table.shape[1] if paged else int(page_size > 0), num_splits, split_keys, scale, int(causal), dtype,
        E4M3_CODE if k_cache.dtype == torch.float8_e4m3fn else dtype, *window)
    fn = _decode_entry(extra_flags, head_dim_v != head_dim)
    err = _decode_buffers.err
    # Launch on torch's current stream of q's device, made the current device for the launch if it is not.
    current = torch.cuda.current_device()
    index = q.device.index
    if index is None or index == current:
        index = current
        rc = fn(params, _raw_stream(index), err, _ERR_LEN)
    else:
        with torch.cuda.device(index):
            rc = fn(params, _raw_stream(index), err, _ERR_LEN)
    if rc != 0:
        raise RuntimeError(f"cuda_impl decode: {err.value.decode(errors='replace')}")
