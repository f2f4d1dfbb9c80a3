"""Input checks run before any launch; each error names the constraint it enforces.

They only read shapes, strides, dtypes and devices, so they also run on meta/fake tensors
(torch.compile tracing) and on CPU tensors in tests without a GPU. The data-pointer alignment
check needs real storage and lives next to the launch (cuda_impl._lib.launch_forward).
"""

from __future__ import annotations

import math

import torch

from cuda_impl import build

DTYPE_FORMATS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
# cp.async moves 16 bytes: every row must start 16-byte aligned, i.e. strides in multiples of
# 8 16-bit elements.
STRIDE_MULTIPLE = 8
GRID_LIMIT = 65535  # batch and heads_q index gridDim.z / gridDim.y


def format_of(q) -> str:
    if not isinstance(q, torch.Tensor):
        raise TypeError(
            f"format: cuda_impl takes bf16/fp16 torch tensors; got {type(q).__name__} "
            "(quantized formats have no cuda_impl variant yet)"
        )
    if q.dtype not in DTYPE_FORMATS:
        raise TypeError(f"dtype: cuda_impl supports bfloat16 and float16, got {q.dtype}")
    return DTYPE_FORMATS[q.dtype]


def arch_problem(variant: str, spec: dict, capability: tuple[int, int]) -> str | None:
    """Why `variant` cannot run on a GPU of this compute capability (its min_cc/max_cc), or None."""
    low, high = spec["min_cc"], spec["max_cc"]
    if capability < low or (high is not None and capability > high):
        allowed = f"sm_{low[0]}{low[1]}" + (f"..sm_{high[0]}{high[1]}" if high and high != low else "")
        return f"arch: variant {variant} runs on {allowed} only; this GPU is sm_{capability[0]}{capability[1]}"
    return None


def check_inputs(q, k, v, *, variant: str, spec: dict, scale: float) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
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
    if k.shape != v.shape:
        raise ValueError(
            f"shape: k and v must have the same shape, got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if kb != batch:
        raise ValueError(f"shape: batch differs between q ({batch}) and k/v ({kb})")
    if kd != head_dim:
        raise ValueError(f"head_dim: q has {head_dim}, k/v have {kd}")
    if head_dim not in spec["head_dims"]:
        raise ValueError(f"head_dim: variant {variant} supports {spec['head_dims']}, got {head_dim}")
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
            if variant == "hopper" and t.shape[dim] > 1 and t.stride(dim) <= 0:
                raise ValueError(
                    f"stride: {name}.stride({dim}) = {t.stride(dim)}; variant hopper loads tiles "
                    "with TMA, which needs positive strides (no broadcast dimensions)"
                )

    if q.device.type != "cuda":
        raise ValueError(f"device: tensors must be on a CUDA device, got {q.device}")
    if k.device != q.device or v.device != q.device:
        raise ValueError(f"device: q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    capability = torch.cuda.get_device_capability(q.device)
    if not any(build.target_runs_on(t, capability) for t in build.ARCH_TARGETS):
        raise ValueError(
            f"arch: the library holds cubins for sm_{', sm_'.join(build.ARCH_TARGETS)}; "
            f"this GPU is sm_{capability[0]}{capability[1]}"
        )
    if problem := arch_problem(variant, spec, capability):
        raise ValueError(problem)
