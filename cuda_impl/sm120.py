"""Blackwell-native (sm_120a) MXFP8 and NVFP4 attention on the block-scaled warp MMA (csrc/sm120/).

Compiled and SASS-inspected in CI (tests/test_cuda_sm120.py); never run in this project, whose GPU is
an H200 (sm_90), so the variants are labelled "compiled, not run". They take the containers of
compare.formats (Q and K blocked along head_dim, V stored transposed (B, H, D, Sk) and blocked along
the keys), e.g. from cuda_impl.quantize_attention_inputs, and return bf16.

The kernels live in their own library (``cuda_fa_sm120``, one sm_120a cubin), so the attention
library's build and its CI time do not grow, and an sm_120a-only instruction never reaches it.
"""

from __future__ import annotations

import ctypes
import math
import threading

import torch

from compare import formats
from cuda_impl import _lib, toolchain, validate

LIBRARY_NAME = "cuda_fa_sm120"
TARGETS = ("120a",)
EMULATION_TARGETS = ("90a",)  # the emulation harness (library_spec(emulate=True)) runs on the H200
FORMAT_CODES = {"mxfp8": 1, "nvfp4": 2}
_ERR_LEN = 512

VARIANTS: dict[str, dict] = {
    f"{fmt}-sm120": {
        "formats": (fmt,),
        "head_dims": (64, 128),
        "min_cc": (12, 0),
        "max_cc": (12, 0),  # mma...block_scale on sm_120a only (RTX 50xx / RTX PRO Blackwell)
        "description": f"sm_120a, compiled, not run: {what}",
    }
    for fmt, what in (
        ("mxfp8", "mma.sync m16n8k32 kind::mxf8f6f4 block_scale (e4m3 x E8M0 per 32), P quantized in-kernel"),
        ("nvfp4", "mma.sync m16n8k64 kind::mxf4nvf4 block_scale 4X (e2m1 x e4m3 per 16), P quantized in-kernel"),
    )
}


class BlockScaledParams(ctypes.Structure):
    """Mirror of `struct BlockScaledParams` in csrc/sm120/blockscaled.cuh (checked by size at load)."""

    _fields_ = [
        ("base", _lib.FwdParams),
        ("q_scale", ctypes.c_void_p),
        ("k_scale", ctypes.c_void_p),
        ("vt_scale", ctypes.c_void_p),
        ("tensor_scale", ctypes.c_void_p * 3),
        ("vt_pitch", ctypes.c_int32),
        ("vt_scale_pitch", ctypes.c_int32),
        ("format", ctypes.c_int32),
    ]


def library_spec(*, emulate: bool = False) -> toolchain.LibrarySpec:
    """The sm_120a library; with emulate, the same kernels for sm_90a with the block-scaled MMA done
    in software (-DFA_SM120_EMULATE): a harness that checks everything else on the H200."""
    return toolchain.LibrarySpec(
        name=LIBRARY_NAME + ("_emulated" if emulate else ""),
        sources=tuple(sorted((toolchain.CSRC_DIR / "sm120").glob("*.cu"))),
        include_dirs=(toolchain.CSRC_DIR, toolchain.CSRC_DIR / "quant", toolchain.CSRC_DIR / "sm120"),
        extra_flags=("-DFA_SM120_EMULATE",) if emulate else (),
        targets=EMULATION_TARGETS if emulate else TARGETS,
    )


_loaded: dict[bool, ctypes.CDLL] = {}
_load_lock = threading.Lock()


def load(*, emulate: bool = False) -> ctypes.CDLL:
    with _load_lock:
        if emulate not in _loaded:
            lib = ctypes.CDLL(str(toolchain.build_library(library_spec(emulate=emulate))))
            lib.cuda_fa_blockscaled_params_size.restype = ctypes.c_int
            if lib.cuda_fa_blockscaled_params_size() != ctypes.sizeof(BlockScaledParams):
                raise RuntimeError("cuda_impl.sm120: BlockScaledParams in sm120.py and csrc/sm120 differ")
            fn = lib.cuda_fa_fwd_blockscaled_sm120
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.POINTER(BlockScaledParams), ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
            _loaded[emulate] = lib
        return _loaded[emulate]


def _spec(variant: str) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"variant: unknown sm120 variant {variant!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def arch_problem(variant: str, capability: tuple[int, int]) -> str | None:
    return validate.arch_problem(variant, _spec(variant), capability)


def unavailable_reason(variant: str) -> str | None:
    """None when `variant` can run here now, else why not (GPU, arch, compiler)."""
    _spec(variant)
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    if problem := arch_problem(variant, torch.cuda.get_device_capability()):
        return problem
    if toolchain.cached_library(library_spec()) is None and (problem := toolchain.missing_toolchain()):
        return f"library not built and {problem}"
    return None


def check_inputs(q, k, v, *, variant: str, scale: float | None, emulate: bool = False) -> None:
    """Containers, shapes and limits, before any launch; every error names the constraint."""
    fmt = _spec(variant)["formats"][0]
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, formats.QuantTensor):
            raise TypeError(f"format: variant {variant} takes compare.formats.QuantTensor inputs "
                            f"(cuda_impl.quantize_attention_inputs); {name} is {type(x).__name__}")
        if x.fmt != fmt:
            raise TypeError(f"format: variant {variant} takes {fmt}; {name} is {x.fmt}")
        if x.transposed != (name == "v"):
            want = "stored transposed (B, H, D, Sk)" if name == "v" else "blocked along head_dim"
            raise ValueError(f"layout: {name} must be {want} (compare.formats.quantize_attention_inputs)")
        if len(x.shape) != 4:
            raise ValueError(f"shape: {name} must be 4-D, got {x.shape}")
        for part in (x.data, x.scale):
            if not part.is_contiguous():
                raise ValueError(f"layout: {name}'s containers must be contiguous (as compare.formats makes them)")
    (batch, heads_q, seqlen_q, head_dim) = q.logical_shape
    (kb, heads_kv, seqlen_k, kd) = k.logical_shape
    if v.logical_shape != k.logical_shape:
        raise ValueError(f"shape: k and v must have the same shape, got {k.logical_shape} and {v.logical_shape}")
    if kb != batch or kd != head_dim:
        raise ValueError(f"shape: q {q.logical_shape} and k {k.logical_shape} differ in batch or head_dim")
    if head_dim not in _spec(variant)["head_dims"]:
        raise ValueError(f"head_dim: variant {variant} supports {_spec(variant)['head_dims']}, got {head_dim}")
    if heads_q % heads_kv:
        raise ValueError(f"heads: heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for GQA/MQA")
    if batch > validate.GRID_LIMIT or heads_q > validate.GRID_LIMIT:
        raise ValueError(f"shape: batch and heads_q must be <= {validate.GRID_LIMIT} (CUDA grid limit)")
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be finite and > 0, got {scale}")
    if q.data.device.type != "cuda":
        raise ValueError(f"device: containers must be on a CUDA device, got {q.data.device}")
    if any(x.data.device != q.data.device for x in (k, v)):
        raise ValueError("device: q, k, v must be on one device")
    capability = torch.cuda.get_device_capability(q.data.device)
    if emulate:
        if not any(toolchain.target_runs_on(t, capability) for t in EMULATION_TARGETS):
            raise ValueError(f"arch: the emulation harness is built for sm_{EMULATION_TARGETS[0]}; "
                             f"this GPU is sm_{capability[0]}{capability[1]}")
    elif problem := arch_problem(variant, capability):
        raise ValueError(problem)


def attention(q, k, v, *, causal=False, scale=None, variant, return_lse=False, emulate=False):
    """Softmax(scale q k^T) v on sm_120a for QuantTensor q, k, v; bf16 out (B, Hq, Sq, D), fp32 lse.

    emulate=True runs the emulation harness instead (sm_90a, MMA in software; tests only)."""
    check_inputs(q, k, v, variant=variant, scale=None if scale is None else float(scale), emulate=emulate)
    batch, heads_q, seqlen_q, head_dim = q.logical_shape
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    _, heads_kv, seqlen_k, _ = k.logical_shape
    dev = q.data.device
    out = torch.empty(batch, heads_q, seqlen_q, head_dim, dtype=torch.bfloat16, device=dev)
    lse = torch.empty(batch, heads_q, seqlen_q, dtype=torch.float32, device=dev)
    base = _lib.FwdParams(
        q=q.data.data_ptr(), k=k.data.data_ptr(), v=v.data.data_ptr(), out=out.data_ptr(), lse=lse.data_ptr(),
        out_stride=(ctypes.c_int64 * 3)(*out.stride()[:3]),
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
        head_dim=head_dim, scale=scale, causal=int(bool(causal)), dtype=_lib.DTYPE_CODES[torch.bfloat16])
    params = BlockScaledParams(
        base=base, q_scale=q.scale.data_ptr(), k_scale=k.scale.data_ptr(), vt_scale=v.scale.data_ptr(),
        tensor_scale=(ctypes.c_void_p * 3)(*(None if x.tensor_scale is None else x.tensor_scale.data_ptr()
                                             for x in (q, k, v))),
        vt_pitch=v.data.shape[-1], vt_scale_pitch=v.scale.shape[-1], format=FORMAT_CODES[q.fmt])
    err = ctypes.create_string_buffer(_ERR_LEN)
    with torch.cuda.device(dev):
        stream = torch.cuda.current_stream(dev).cuda_stream
        rc = load(emulate=emulate).cuda_fa_fwd_blockscaled_sm120(ctypes.byref(params), ctypes.c_void_p(stream), err, _ERR_LEN)
    if rc != 0:
        raise RuntimeError(f"cuda_impl {variant}: {err.value.decode(errors='replace')}")
    return (out, lse) if return_lse else out
