"""Hand-written CUDA C++ FlashAttention-2 forward: the founding v1..v5 mma.sync ladder, and
"hopper", the sm_90a kernel (TMA, mbarriers, wgmma, warp specialisation).

Public surface (docs/contract.md): VARIANTS, DEFAULT_VARIANT, attention(), unavailable_reason().
Kernels live in csrc/ (one per version), are built by cuda_impl.build into a torch-free shared
library and launched through the custom op "cuda_fa::fwd" on torch's current stream.
Importing this package needs neither a GPU nor nvcc; both are asked for at call time.
"""

from __future__ import annotations

import math

import torch

from cuda_impl import _lib, build, ops, validate

_LADDER = {
    "v1": "basic: Q in registers, 16-byte cp.async K/V, ldmatrix.x2, mma.sync m16n8k16, online softmax",
    "v2": "v1 + XOR-swizzled K/V shared memory (no bank conflicts)",
    "v3": "v2 + 2-stage double-buffered K/V cp.async pipeline",
    "v4": "v3 + ldmatrix.x4 for K and ldmatrix.x4.trans for V",
    "v5": "v4 + 3-stage K/V pipeline, loads for the next tiles issued before compute of the current one",
}

VARIANTS: dict[str, dict] = {
    name: {
        "formats": ("bf16", "fp16"),
        # d256 would need Q (64) + O (128) registers per thread before S: it spills, so refused.
        "head_dims": (64, 128),
        "min_cc": (8, 0),
        "max_cc": (9, 0),  # cubins: sm_80 (any cc 8.x) and sm_90a (cc 9.0 only); no PTX fallback
        "description": description,
    }
    for name, description in _LADDER.items()
}

VARIANTS["hopper"] = {
    "formats": ("bf16", "fp16"),
    # d256 would need O (128 fp32 registers) + S + P per consumer thread: not attempted yet.
    "head_dims": (64, 128),
    "min_cc": (9, 0),
    "max_cc": (9, 0),  # wgmma / setmaxnreg: sm_90a cubin only (H100, H200)
    "ceiling": "wgmma",  # judged against the wgmma rate (compare.ceilings), not mma.sync
    "description": "sm_90a: TMA K/V ring on mbarriers, wgmma (S from shared, P from registers), "
    "1 producer + 2 consumer warpgroups",
}

DEFAULT_VARIANT: dict[str, str] = {"bf16": "v5", "fp16": "v5"}


def _spec(variant: str) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"variant: unknown cuda_impl variant {variant!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def unavailable_reason(variant: str) -> str | None:
    """None when `variant` can run here now, else why not (GPU, arch, compiler)."""
    _spec(variant)
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    capability = torch.cuda.get_device_capability()
    if not any(build.target_runs_on(t, capability) for t in build.ARCH_TARGETS):
        return f"arch: sm_{capability[0]}{capability[1]} has no cubin (built for sm_{', sm_'.join(build.ARCH_TARGETS)})"
    if problem := validate.arch_problem(variant, VARIANTS[variant], capability):
        return problem
    if build.cached_library(_lib.library_spec()) is None:
        problem = build.missing_toolchain()
        if problem:
            return f"library not built and {problem}"
    return None


def attention(q, k, v, *, causal=False, scale=None, variant=None, return_lse=False):
    """Softmax(scale * q k^T) v for q (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16/fp16 CUDA tensors.

    causal is bottom-right aligned (query i sees keys j <= i + Sk - Sq); rows that see no key
    give 0 and lse -inf. scale defaults to 1/sqrt(D). Returns out (B, Hq, Sq, D) in q's dtype,
    and with return_lse also lse (B, Hq, Sq) float32, natural log of the scaled scores.
    Unsupported input raises ValueError/TypeError naming the constraint; no fallback."""
    fmt = validate.format_of(q)
    variant = DEFAULT_VARIANT[fmt] if variant is None else variant
    spec = _spec(variant)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    validate.check_inputs(q, k, v, variant=variant, spec=spec, scale=scale)
    out, lse = ops.fwd(q, k, v, bool(causal), scale, variant)
    return (out, lse) if return_lse else out


# --- Blackwell-native block-scaled variants (csrc/sm120, own library; compiled, not run here) ---
# Registered beside the ladder; calls naming them go to cuda_impl.sm120, every other call to the
# functions above, unchanged.
from cuda_impl import sm120 as _sm120  # noqa: E402

VARIANTS.update(_sm120.VARIANTS)
_attention_16bit, _unavailable_reason_16bit = attention, unavailable_reason


def attention(q, k, v, *, causal=False, scale=None, variant=None, return_lse=False):  # noqa: F811
    if variant in _sm120.VARIANTS:
        return _sm120.attention(q, k, v, causal=causal, scale=scale, variant=variant, return_lse=return_lse)
    return _attention_16bit(q, k, v, causal=causal, scale=scale, variant=variant, return_lse=return_lse)


attention.__doc__ = _attention_16bit.__doc__


def unavailable_reason(variant: str) -> str | None:  # noqa: F811
    if variant in _sm120.VARIANTS:
        return _sm120.unavailable_reason(variant)
    return _unavailable_reason_16bit(variant)


# --- GPU quantizers (csrc/quant): compare.formats containers, bit for bit ---------------------
from cuda_impl.quant import quantize, quantize_attention_inputs  # noqa: E402

__all__ = ["VARIANTS", "DEFAULT_VARIANT", "attention", "unavailable_reason", "quantize",
           "quantize_attention_inputs"]
