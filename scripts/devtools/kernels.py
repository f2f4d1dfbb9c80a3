"""The one place where scripts/dev.py launches a CUDA kernel of this checkout or of another build: through the
low-level launchers of cuda_impl._lib, with the inputs prepared as cuda_impl.attention prepares them, into
NaN-poisoned outputs (an element a kernel does not write stays NaN and fails).

A variant's launch kind follows from the formats it takes (cuda_impl.VARIANTS): 16-bit tensors go to
launch_forward; fp8 containers to launch_forward_fp8 with V^T's rows re-padded to 16 bytes (TMA); block-scaled
containers through the library's own dequantization pass (dequantize_blocked) to launch_forward_mx. `flags` is
the _lib key of the library: () this checkout's, ("baseline",) DEV_BASELINE_LIB, (define,) a named build."""

from __future__ import annotations

import math

FP8_ROW_BYTES = 16  # TMA: V^T's row stride a multiple of 16 bytes (cuda_impl.validate.FP8_STRIDE_MULTIPLE)


def kind_of(variant: str) -> str:
    """'16bit', 'fp8' or 'mx' for a cuda_impl variant, from the formats it takes."""
    import cuda_impl

    if variant not in cuda_impl.VARIANTS:
        raise ValueError(f"unknown cuda_impl variant {variant!r}; known: {', '.join(cuda_impl.VARIANTS)}")
    formats = cuda_impl.VARIANTS[variant]["formats"]
    if "bf16" in formats or "fp16" in formats:
        return "16bit"
    if "fp8" in formats:
        return "fp8"
    return "mx"


def output_spec(q):
    """(out shape, out dtype, lse shape) of a launch on `q` (a tensor or a compare.formats container)."""
    import torch

    if isinstance(q, torch.Tensor):
        return tuple(q.shape), q.dtype, tuple(q.shape[:-1])
    shape = tuple(q.shape)  # the logical (B, H, S, D) of a container
    return shape, torch.bfloat16, shape[:-1]


def poisoned_outputs(q, poison: bool = True):
    """Fresh (out, lse) on q's device, filled with NaN (poison=False: uninitialised, as the public path)."""
    import torch

    shape, dtype, lse_shape = output_spec(q)
    device = q.device if isinstance(q, torch.Tensor) else q.data.device
    if not poison:
        return (torch.empty(shape, dtype=dtype, device=device),
                torch.empty(lse_shape, dtype=torch.float32, device=device))
    return (torch.full(shape, math.nan, dtype=dtype, device=device),
            torch.full(lse_shape, math.nan, dtype=torch.float32, device=device))


def padded_vt(v):
    """fp8 V^T (B, H, D, Sk) with a row stride that is a multiple of 16 bytes, as cuda_impl.attention passes
    it (the pad columns are never read: the tensor map stops at Sk)."""
    import torch

    vt = v.data
    if vt.shape[-2] > 1 and vt.stride(-2) % FP8_ROW_BYTES:
        vt = torch.nn.functional.pad(vt.view(torch.uint8), (0, -vt.shape[-1] % FP8_ROW_BYTES))
        vt = vt.view(torch.float8_e4m3fn)[..., : v.data.shape[-1]]
    return vt


def launch(variant: str, q, k, v, out, lse, *, causal: bool, scale: float, flags: tuple[str, ...] = ()) -> None:
    """One forward of `variant` of library `flags` into out / lse (on torch's current stream)."""
    from cuda_impl import _lib

    kind = kind_of(variant)
    if kind == "16bit":
        _lib.launch_forward(variant, q, k, v, out, lse, causal=causal, scale=scale, extra_flags=flags)
    elif kind == "fp8":
        _lib.launch_forward_fp8(variant, q.data, k.data, padded_vt(v), q.scale.contiguous(), k.scale.contiguous(),
                                v.scale.contiguous(), out, lse, causal=causal, scale=scale, extra_flags=flags)
    else:
        fmt = q.fmt
        tiles = [_lib.dequantize_blocked(fmt, t.data, t.scale, extra_flags=flags) for t in (q, k, v)]
        _lib.launch_forward_mx(fmt, *tiles, q.tensor_scale, k.tensor_scale, v.tensor_scale, out, lse, causal=causal,
                               scale=scale, seqlen_k=k.shape[2], extra_flags=flags)


def default_scale(q, scale: float | None) -> float:
    return 1.0 / math.sqrt(output_spec(q)[0][-1]) if scale is None else float(scale)


def runner(variant: str, flags: tuple[str, ...] = ()):
    """fn(q, k, v, *, causal, scale, return_lse) for compare.oracle.check: a poisoned launch of `variant` of
    library `flags`."""
    def run(q, k, v, *, causal=False, scale=None, return_lse=False):
        out, lse = poisoned_outputs(q)
        launch(variant, q, k, v, out, lse, causal=causal, scale=default_scale(q, scale), flags=flags)
        return (out, lse) if return_lse else out

    return run


def timed_call(variant: str, inputs, case, flags: tuple[str, ...] = ()):
    """A no-argument call for timing: `variant` of library `flags` on `inputs` (oracle.Inputs), outputs
    allocated once (not poisoned: the checks did that). Returns the output tensor."""
    out, lse = poisoned_outputs(inputs.q)
    scale = case.softmax_scale

    def call():
        launch(variant, inputs.q, inputs.k, inputs.v, out, lse, causal=case.causal, scale=scale, flags=flags)
        return out

    return call


def fresh_call(variant: str, inputs, case, flags: tuple[str, ...] = ()):
    """As timed_call, but each call allocates its outputs as the public path does (for CUDA-graph capture:
    compare.bench.capture_graph NaN-fills what the capture returned and checks the replay rewrites it)."""
    scale = case.softmax_scale

    def call():
        out, lse = poisoned_outputs(inputs.q, poison=False)
        launch(variant, inputs.q, inputs.k, inputs.v, out, lse, causal=case.causal, scale=scale, flags=flags)
        return out, lse

    return call
