"""GPU quantizers producing compare.formats containers bit for bit (csrc/quant/).

``quantize(x, fmt, transpose=False, granularity="head")`` is ``compare.formats.quantize`` on the
GPU: same arguments, same ``QuantTensor`` (same dtypes, shapes, padding, NaN blocks), computed by
the kernels of csrc/quant/quantize.cu on torch's current stream. ``quantize_attention_inputs``
gives Q and K blocked along head_dim and V stored transposed (B, H, D, Sk), blocked along keys.

The kernels live in their own small library (``cuda_quant``), so that building them does not
rebuild the attention library and vice versa. Its cubins cover sm_80 (cc 8.x), sm_90a and sm_120
(the Blackwell variants quantize their inputs with it too).
"""

from __future__ import annotations

import ctypes
import threading

import torch

from compare import formats
from cuda_impl import toolchain

LIBRARY_NAME = "cuda_quant"
TARGETS = ("80", "90a", "120")
DTYPE_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2, torch.float64: 3}
FORMAT_CODES = {"fp8": 0, "mxfp8": 1, "nvfp4": 2}
GRID_LIMIT = 65535  # batch and heads index gridDim.z / gridDim.y
_ERR_LEN = 512


class QuantParams(ctypes.Structure):
    """Mirror of `struct QuantParams` in csrc/quant/quantize.cu (checked by size at load)."""

    _fields_ = [
        ("x", ctypes.c_void_p),
        ("x_stride", ctypes.c_int64 * 4),
        ("batch", ctypes.c_int32),
        ("heads", ctypes.c_int32),
        ("seqlen", ctypes.c_int32),
        ("head_dim", ctypes.c_int32),
        ("dtype", ctypes.c_int32),
        ("format", ctypes.c_int32),
        ("transpose", ctypes.c_int32),
        ("per_tensor", ctypes.c_int32),
        ("data", ctypes.c_void_p),
        ("scale", ctypes.c_void_p),
        ("tensor_scale", ctypes.c_void_p),
        ("amax", ctypes.c_void_p),
    ]


def library_spec() -> toolchain.LibrarySpec:
    quant_dir = toolchain.CSRC_DIR / "quant"
    return toolchain.LibrarySpec(
        name=LIBRARY_NAME,
        sources=tuple(sorted(quant_dir.glob("*.cu"))),
        include_dirs=(quant_dir,),
        targets=TARGETS,
    )


_loaded: ctypes.CDLL | None = None
_load_lock = threading.Lock()


def load() -> ctypes.CDLL:
    """The quantizer library (built on first use when not cached), with its entry points typed."""
    global _loaded
    with _load_lock:
        if _loaded is None:
            lib = ctypes.CDLL(str(toolchain.build_library(library_spec())))
            lib.cuda_fa_quant_params_size.restype = ctypes.c_int
            if lib.cuda_fa_quant_params_size() != ctypes.sizeof(QuantParams):
                raise RuntimeError("cuda_impl.quant: QuantParams in quant.py and csrc/quant/quantize.cu differ")
            lib.cuda_fa_quantize.restype = ctypes.c_int
            lib.cuda_fa_quantize.argtypes = [ctypes.POINTER(QuantParams), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
            lib.cuda_fa_quantize_host.restype = ctypes.c_int
            lib.cuda_fa_quantize_host.argtypes = [ctypes.POINTER(QuantParams), ctypes.c_char_p, ctypes.c_int]
            _loaded = lib
        return _loaded


def check_input(x, fmt: str, *, granularity: str = "head") -> None:
    """The errors of compare.formats.quantize, plus the kernels' own limits (dtype, grid size)."""
    if fmt not in formats.QUANTIZED_FORMATS:
        raise ValueError(f"format: unknown quantized format {fmt!r}; valid: {', '.join(formats.QUANTIZED_FORMATS)}")
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"type: x must be a torch.Tensor, got {type(x).__name__}")
    if x.dtype not in DTYPE_CODES:
        raise TypeError(f"dtype: x must be bfloat16, float16, float32 or float64 (the high-precision tensor), got {x.dtype}")
    if x.dim() != 4:
        raise ValueError(f"shape: x must be 4-D (B, H, S, D), got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"shape: x is empty (shape {tuple(x.shape)})")
    if granularity not in formats.GRANULARITIES:
        raise ValueError(f"granularity: must be one of {formats.GRANULARITIES}, got {granularity!r}")
    if fmt != "fp8" and granularity != "head":
        raise ValueError(f"granularity: applies to fp8 only; {fmt} scales per block")
    if x.shape[0] > GRID_LIMIT or x.shape[1] > GRID_LIMIT:
        raise ValueError(f"shape: batch and heads must be <= {GRID_LIMIT} (CUDA grid limit), got {tuple(x.shape)}")
    if max(x.shape[2], x.shape[3]) >= 2**31:
        raise ValueError(f"shape: seqlen and head_dim must be < 2**31, got {tuple(x.shape)}")


def _containers(x: torch.Tensor, fmt: str, transpose: bool, granularity: str):
    """Empty outputs in the shapes and dtypes of compare.formats.quantize, plus the amax workspace."""
    batch, heads, seqlen, head_dim = x.shape
    rows, cols = (head_dim, seqlen) if transpose else (seqlen, head_dim)
    dev = x.device
    amax = torch.empty(batch * heads if fmt == "fp8" and granularity == "head" else 1, dtype=torch.int32, device=dev)
    if fmt == "fp8":
        data = torch.empty(batch, heads, rows, cols, dtype=torch.float8_e4m3fn, device=dev)
        return data, torch.empty(batch, heads, dtype=torch.float32, device=dev), None, amax
    block = formats.FORMATS[fmt].block
    blocks = -(-cols // block)
    if fmt == "mxfp8":
        data = torch.empty(batch, heads, rows, blocks * block, dtype=torch.float8_e4m3fn, device=dev)
        return data, torch.empty(batch, heads, rows, blocks, dtype=torch.uint8, device=dev), None, amax
    data = torch.empty(batch, heads, rows, blocks * block // 2, dtype=torch.uint8, device=dev)
    scale = torch.empty(batch, heads, rows, blocks, dtype=torch.float8_e4m3fn, device=dev)
    return data, scale, torch.empty((), dtype=torch.float32, device=dev), amax


def _run(x: torch.Tensor, fmt: str, transpose: bool, granularity: str, *, on_host: bool) -> formats.QuantTensor:
    data, scale, tensor_scale, amax = _containers(x, fmt, transpose, granularity)
    params = QuantParams(
        x=x.data_ptr(),
        x_stride=(ctypes.c_int64 * 4)(*x.stride()),
        batch=x.shape[0],
        heads=x.shape[1],
        seqlen=x.shape[2],
        head_dim=x.shape[3],
        dtype=DTYPE_CODES[x.dtype],
        format=FORMAT_CODES[fmt],
        transpose=int(transpose),
        per_tensor=int(granularity == "tensor"),
        data=data.data_ptr(),
        scale=scale.data_ptr(),
        tensor_scale=None if tensor_scale is None else tensor_scale.data_ptr(),
        amax=amax.data_ptr(),
    )
    lib = load()
    err = ctypes.create_string_buffer(_ERR_LEN)
    if on_host:
        rc = lib.cuda_fa_quantize_host(ctypes.byref(params), err, _ERR_LEN)
    else:
        with torch.cuda.device(x.device):
            stream = torch.cuda.current_stream(x.device).cuda_stream
            rc = lib.cuda_fa_quantize(ctypes.byref(params), ctypes.c_void_p(stream), err, _ERR_LEN)
    if rc != 0:
        raise RuntimeError(f"cuda_impl.quantize: {err.value.decode(errors='replace')}")
    shape = (x.shape[0], x.shape[1], *((x.shape[3], x.shape[2]) if transpose else x.shape[2:]))
    block = formats.FORMATS[fmt].block
    return formats.QuantTensor(fmt, data, scale, tensor_scale, tuple(shape), transpose, block)


def quantize(x: torch.Tensor, fmt: str, *, transpose: bool = False, granularity: str = "head") -> formats.QuantTensor:
    """compare.formats.quantize on the GPU, bit for bit: (B, H, S, D) -> QuantTensor on x's device.

    Blocks run along D, or along S with transpose=True (stored (B, H, D, S)). Any strides.
    Asynchronous on torch's current stream, like a torch op."""
    check_input(x, fmt, granularity=granularity)
    if x.device.type != "cuda":
        raise ValueError(f"device: x must be on a CUDA device, got {x.device} (compare.formats.quantize runs anywhere)")
    capability = torch.cuda.get_device_capability(x.device)
    if not any(toolchain.target_runs_on(t, capability) for t in TARGETS):
        raise ValueError(
            f"arch: the quantizer library holds cubins for sm_{', sm_'.join(TARGETS)}; "
            f"this GPU is sm_{capability[0]}{capability[1]}"
        )
    return _run(x, fmt, bool(transpose), granularity, on_host=False)


def quantize_on_host(x: torch.Tensor, fmt: str, *, transpose: bool = False, granularity: str = "head") -> formats.QuantTensor:
    """The kernels' per-block code run serially on CPU tensors (no GPU): how the CPU tests check
    the rounding logic of csrc/quant against compare.formats. Slow; small tensors only."""
    check_input(x, fmt, granularity=granularity)
    if x.device.type != "cpu":
        raise ValueError(f"device: quantize_on_host takes CPU tensors, got {x.device}")
    return _run(x, fmt, bool(transpose), granularity, on_host=True)


def quantize_attention_inputs(q, k, v, fmt: str, *, granularity: str = "head"):
    """Q and K blocked along head_dim; V stored transposed (B, H, D, Sk), blocked along the keys."""
    return (
        quantize(q, fmt, granularity=granularity),
        quantize(k, fmt, granularity=granularity),
        quantize(v, fmt, transpose=True, granularity=granularity),
    )
