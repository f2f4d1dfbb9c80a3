"""Input checks run before any launch; each error names the constraint it enforces.

They only read shapes, strides, dtypes and devices, so they also run on meta/fake tensors
(torch.compile tracing) and on CPU tensors in tests without a GPU. The data-pointer alignment
check needs real storage and lives next to the launch (cuda_impl._lib.launch_forward).
"""

from __future__ import annotations

import functools
import math

import torch

from cuda_impl import toolchain

DTYPE_FORMATS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# cp.async moves 16 bytes: every row must start 16-byte aligned, i.e. strides in multiples of
# 8 16-bit elements.
STRIDE_MULTIPLE = 8
GRID_LIMIT = 65535  # batch and heads_q index gridDim.z / gridDim.y


def is_quantized(x) -> bool:
    """A compare.formats.QuantTensor (duck-typed: cuda_impl does not import compare)."""
    return all(hasattr(x, name) for name in ("fmt", "data", "scale", "transposed"))


def format_of(q) -> str:
    if is_quantized(q):
        return q.fmt
    if not isinstance(q, torch.Tensor):
        raise TypeError(
            f"format: cuda_impl takes bf16/fp16 torch tensors or compare.formats.QuantTensor, "
            f"got {type(q).__name__}"
        )
    if q.dtype not in DTYPE_FORMATS:
        raise TypeError(f"dtype: cuda_impl supports bfloat16 and float16, got {q.dtype}")
    return DTYPE_FORMATS[q.dtype]


@functools.lru_cache(maxsize=None)
def _capability_of_index(index: int) -> tuple[int, int]:
    return torch.cuda.get_device_capability(index)


def capability(device: torch.device) -> tuple[int, int]:
    """The compute capability of a CUDA device, queried once per device (every call checks it)."""
    return _capability_of_index(torch.cuda.current_device() if device.index is None else device.index)


def arch_problem(variant: str, spec: dict, capability: tuple[int, int]) -> str | None:
    """Why `variant` cannot run on a GPU of this compute capability (its min_cc/max_cc), or None."""
    low, high = spec["min_cc"], spec["max_cc"]
    if capability < low or (high is not None and capability > high):
        allowed = f"sm_{low[0]}{low[1]}" + (f"..sm_{high[0]}{high[1]}" if high and high != low else "")
        return f"arch: variant {variant} runs on {allowed} only; this GPU is sm_{capability[0]}{capability[1]}"
    return None


def head_dims_text(spec: dict) -> str:
    """A variant's head dims for messages: '(64, 128)', or 'multiples of 8 from 32 to 256' for a long even run; and
    its (Q/K, V) pairs."""
    dims = spec["head_dims"]
    steps = {b - a for a, b in zip(dims, dims[1:])}
    text = f"multiples of {dims[1] - dims[0]} from {dims[0]} to {dims[-1]}" if len(dims) > 3 and len(steps) == 1 \
        else str(tuple(dims))
    return text + "".join(f", or Q/K {d} with V {dv}" for d, dv in _dense_pairs(spec))


def _dense_pairs(spec: dict) -> tuple:
    """The (Q/K, V) pairs a dense q, k, v call may take (MLA's latent pairs only through attention_mla_decode)."""
    return () if spec.get("latent_pairs_only") else spec.get("head_dim_pairs", ())


def check_head_dims(variant: str, spec: dict, head_dim: int, head_dim_v: int) -> None:
    """ValueError unless the variant takes Q/K head_dim `head_dim` with V head_dim `head_dim_v` in q, k, v."""
    if head_dim_v == head_dim and head_dim in spec["head_dims"]:
        return
    if (head_dim, head_dim_v) in _dense_pairs(spec):
        return
    got = head_dim if head_dim_v == head_dim else f"Q/K {head_dim} with V {head_dim_v}"
    raise ValueError(f"head_dim: variant {variant} supports {head_dims_text(spec)}, got {got}")


def check_inputs(q, k, v, *, variant: str, spec: dict, scale: float) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if is_quantized(t):
            raise TypeError(
                f"format: variant {variant} takes torch tensors ({spec['formats']}); {name} is a "
                f"QuantTensor ({t.fmt})"
            )
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"type: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dtype != q.dtype:
            raise TypeError(f"dtype: q, k, v must share one dtype; {name} is {t.dtype}, q is {q.dtype}")
        if t.dim() != 4:
            raise ValueError(f"shape: {name} must be (batch, heads, seqlen, head_dim), got {tuple(t.shape)}")
    fmt = DTYPE_FORMATS[q.dtype]
    if fmt not in spec["formats"]:
        raise TypeError(f"dtype: variant {variant} supports {spec['formats']}, got {fmt}")

    (batch, heads_q, seqlen_q, head_dim), (kb, heads_kv, seqlen_k, kd) = q.shape, k.shape
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"shape: k and v must agree but in head_dim, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if kb != batch:
        raise ValueError(f"shape: batch differs between q ({batch}) and k/v ({kb})")
    if kd != head_dim:
        raise ValueError(f"head_dim: q has {head_dim}, k has {kd}")
    check_head_dims(variant, spec, head_dim, v.shape[3])
    if min(batch, heads_q, heads_kv, seqlen_q, seqlen_k) < 1:
        raise ValueError(
            f"shape: batch, heads and seqlens must be >= 1, got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if heads_q % heads_kv:
        raise ValueError(
            f"heads: heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for GQA/MQA"
        )
    if batch > GRID_LIMIT or heads_q > GRID_LIMIT:
        raise ValueError(f"shape: batch and heads_q must be <= {GRID_LIMIT} (CUDA grid limit)")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be finite and > 0, got {scale}")

    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            raise ValueError(
                f"stride: {name}'s last (head_dim) dimension must be contiguous, strides {t.stride()}"
            )
        for dim in range(3):
            if t.shape[dim] > 1 and t.stride(dim) % STRIDE_MULTIPLE:
                raise ValueError(
                    f"stride: {name}.stride({dim}) = {t.stride(dim)} must be a multiple of "
                    f"{STRIDE_MULTIPLE} elements (16-byte cp.async rows)"
                )
            if spec.get("tma") and t.shape[dim] > 1 and t.stride(dim) <= 0:
                raise ValueError(
                    f"stride: {name}.stride({dim}) = {t.stride(dim)}; variant {variant} loads tiles "
                    "with TMA, which needs positive strides (no broadcast dimensions)"
                )

    if q.device.type != "cuda":
        raise ValueError(f"device: tensors must be on a CUDA device, got {q.device}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"device: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    cc = capability(q.device)
    if not any(toolchain.target_runs_on(t, cc) for t in toolchain.ARCH_TARGETS):
        raise ValueError(
            f"arch: the library holds cubins for sm_{', sm_'.join(toolchain.ARCH_TARGETS)}; "
            f"this GPU is sm_{cc[0]}{cc[1]}"
        )
    if problem := arch_problem(variant, spec, cc):
        raise ValueError(problem)


# TMA moves e4m3 rows with byte strides that must be multiples of 16.
FP8_STRIDE_MULTIPLE = 16


def check_fp8_inputs(q, k, v, *, variant: str, spec: dict, scale: float) -> None:
    """q, k, v: compare.formats.QuantTensor of format fp8 as quantize_attention_inputs makes them:
    q, k data (B, H, S, D) e4m3, v stored transposed (B, Hkv, D, Sk), descales (B, H) float32.
    v's key stride is checked by the caller, which may re-pad it (see cuda_impl.attention)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not is_quantized(t):
            raise TypeError(f"format: q, k, v must all be QuantTensor when one is; {name} is {type(t).__name__}")
        if t.fmt not in spec["formats"]:
            raise TypeError(f"format: variant {variant} supports {spec['formats']}, got {name} in {t.fmt}")
    if q.transposed or k.transposed or not v.transposed:
        raise ValueError(
            "layout: q and k must be stored untransposed and v transposed (B, H, D, Sk), so that both "
            "operands of P @ V are K-major; use compare.formats.quantize_attention_inputs"
        )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t.data, torch.Tensor) or t.data.dtype != torch.float8_e4m3fn:
            raise TypeError(f"dtype: {name}.data must be torch.float8_e4m3fn, got {getattr(t.data, 'dtype', None)}")
        if t.data.dim() != 4:
            raise ValueError(f"shape: {name}.data must be 4-D, got {tuple(t.data.shape)}")
    batch, heads_q, heads_kv = _check_quantized_shapes(tuple(q.data.shape), tuple(k.data.shape),
                                                       tuple(v.data.shape), "v.data", variant, spec, scale)
    for name, t, heads in (("q", q, heads_q), ("k", k, heads_kv), ("v", v, heads_kv)):
        if not isinstance(t.scale, torch.Tensor) or t.scale.dtype != torch.float32 or tuple(t.scale.shape) != (
            batch,
            heads,
        ):
            raise ValueError(
                f"descale: {name}.scale must be float32 of shape (batch, heads) = {(batch, heads)}, got "
                f"{getattr(t.scale, 'dtype', None)} {tuple(getattr(t.scale, 'shape', ()))}"
            )
    for name, t in (("q", q.data), ("k", k.data), ("v", v.data)):
        if t.stride(-1) != 1:
            raise ValueError(f"stride: {name}.data's last dimension must be contiguous, strides {t.stride()}")
        for dim in range(3 if name != "v" else 2):  # v's row (key) stride: see cuda_impl.attention
            if t.shape[dim] > 1 and (t.stride(dim) <= 0 or t.stride(dim) % FP8_STRIDE_MULTIPLE):
                raise ValueError(
                    f"stride: {name}.data.stride({dim}) = {t.stride(dim)} must be a positive multiple of "
                    f"{FP8_STRIDE_MULTIPLE} bytes (TMA)"
                )
    check_device_and_arch((q.data, k.data, v.data, q.scale, k.scale, v.scale), "data and descales", variant, spec)


# compare.formats storage of the block-scaled formats: (element dtype, block-scale dtype, block).
BLOCKED_STORAGE = {
    "mxfp8": (torch.float8_e4m3fn, torch.uint8, 32),
    "nvfp4": (torch.uint8, torch.float8_e4m3fn, 16),
}


def check_blocked_inputs(q, k, v, *, variant: str, spec: dict, scale: float) -> None:
    """q, k, v: compare.formats.QuantTensor in format mxfp8 or nvfp4 as quantize_attention_inputs makes
    them: q, k (B, H, S, D) blocked along D, v stored transposed (B, Hkv, D, Sk) blocked along the keys;
    data and block scales contiguous; nvfp4 with a 0-dim float32 tensor scale per tensor."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not is_quantized(t):
            raise TypeError(f"format: q, k, v must all be QuantTensor when one is; {name} is {type(t).__name__}")
        if t.fmt not in spec["formats"]:
            raise TypeError(f"format: variant {variant} supports {spec['formats']}, got {name} in {t.fmt}")
    if len({q.fmt, k.fmt, v.fmt}) > 1:
        raise TypeError(f"format: q, k, v must share one format, got {q.fmt}, {k.fmt}, {v.fmt}")
    fmt = q.fmt
    if q.transposed or k.transposed or not v.transposed:
        raise ValueError(
            "layout: q and k must be stored untransposed and v transposed (B, H, D, Sk), blocked along the "
            "keys of P @ V; use compare.formats.quantize_attention_inputs"
        )
    element, scale_dtype, block = BLOCKED_STORAGE[fmt]
    pack = 2 if fmt == "nvfp4" else 1
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.block != block:
            raise ValueError(f"block: {fmt} blocks are {block} elements, {name} has {t.block}")
        if not isinstance(t.data, torch.Tensor) or t.data.dtype != element:
            raise TypeError(f"dtype: {name}.data must be {element} for {fmt}, got {getattr(t.data, 'dtype', None)}")
        if not isinstance(t.scale, torch.Tensor) or t.scale.dtype != scale_dtype:
            raise TypeError(
                f"dtype: {name}.scale (block scales) must be {scale_dtype} for {fmt}, got {getattr(t.scale, 'dtype', None)}"
            )
        if t.data.dim() != 4 or len(t.shape) != 4:
            raise ValueError(f"shape: {name} must be 4-D, got data {tuple(t.data.shape)}")
        padded = -(-t.shape[-1] // block) * block
        if tuple(t.data.shape) != (*t.shape[:-1], padded // pack) or tuple(t.scale.shape) != (*t.shape[:-1], padded // block):
            raise ValueError(
                f"shape: {name}.data {tuple(t.data.shape)} / .scale {tuple(t.scale.shape)} do not match the stored "
                f"shape {tuple(t.shape)} padded to {block}-element blocks"
            )
        if not (t.data.is_contiguous() and t.scale.is_contiguous()):
            raise ValueError(f"stride: {name}.data and {name}.scale must be contiguous, as compare.formats stores them")
        if fmt == "nvfp4":
            ts = t.tensor_scale
            if not isinstance(ts, torch.Tensor) or ts.dtype != torch.float32 or ts.numel() != 1:
                raise ValueError(f"tensor scale: nvfp4 {name}.tensor_scale must be one float32 value, got {ts!r}")
    batch, heads_q, heads_kv = _check_quantized_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), "v",
                                                       variant, spec, scale)
    check_device_and_arch([t for x in (q, k, v) for t in (x.data, x.scale, x.tensor_scale) if t is not None],
                           "data and scales", variant, spec)


def check_device_and_arch(tensors, what: str, variant: str, spec: dict) -> None:
    """The quantized inputs' placement: all of `tensors` (data first) on one CUDA device that runs `variant`."""
    device = tensors[0].device
    if device.type != "cuda":
        raise ValueError(f"device: tensors must be on a CUDA device, got {device}")
    if any(t.device != device for t in tensors):
        raise ValueError(f"device: {what} must be on one device, got {sorted({str(t.device) for t in tensors})}")
    if problem := arch_problem(variant, spec, capability(device)):
        raise ValueError(problem)


def _check_quantized_shapes(q_shape, k_shape, v_shape, v_name: str, variant: str, spec: dict,
                            scale: float) -> tuple[int, int, int]:
    """Logical shapes of quantized q, k (B, H, S, D) and v stored transposed (B, Hkv, D, Sk); returns
    (batch, heads_q, heads_kv)."""
    (batch, heads_q, seqlen_q, head_dim), (kb, heads_kv, seqlen_k, kd) = q_shape, k_shape
    expected_v = (batch, heads_kv, head_dim, seqlen_k)
    if tuple(v_shape) != expected_v:
        raise ValueError(f"shape: {v_name} (stored transposed) must be (batch, heads_kv, head_dim, seqlen_k) = "
                         f"{expected_v}, got {tuple(v_shape)}")
    if kb != batch:
        raise ValueError(f"shape: batch differs between q ({batch}) and k/v ({kb})")
    if kd != head_dim:
        raise ValueError(f"head_dim: q has {head_dim}, k has {kd}")
    if head_dim not in spec["head_dims"]:
        raise ValueError(f"head_dim: variant {variant} supports {spec['head_dims']}, got {head_dim}")
    if min(batch, heads_q, heads_kv, seqlen_q, seqlen_k) < 1:
        raise ValueError("shape: batch, heads and seqlens must be >= 1")
    if heads_q % heads_kv:
        raise ValueError(f"heads: heads_q ({heads_q}) must be a multiple of heads_kv ({heads_kv}) for GQA/MQA")
    if batch > GRID_LIMIT or heads_q > GRID_LIMIT:
        raise ValueError(f"shape: batch and heads_q must be <= {GRID_LIMIT} (CUDA grid limit)")
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale: must be finite and > 0, got {scale}")
    return batch, heads_q, heads_kv
