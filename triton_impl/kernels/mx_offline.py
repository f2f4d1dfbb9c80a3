"""Compile the block-scaled (MXFP8 / NVFP4) kernels for sm_90a on a machine without a GPU.

The counterpart of kernels/offline.py for these kernels (their signatures carry scale tensors and a
format); `offline.report` reads registers, spills, shared memory and SASS of the result. Arguments
are specialised as Triton's launcher does for contiguous tensors from compare.formats.
"""
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from triton_impl.kernels import mx_dequant, mx_dot_scaled, nvfp4_dot_scaled

_POINTERS = {  # kernel argument -> Triton pointer type, per format
    "mxfp8": dict(Q="*fp8e4nv", K="*fp8e4nv", VT="*fp8e4nv", QS="*u8", KS="*u8", VS="*u8"),
    "nvfp4": dict(Q="*u8", K="*u8", VT="*u8", QS="*fp8e4nv", KS="*fp8e4nv", VS="*fp8e4nv",
                  Q_TS="*fp32", K_TS="*fp32", V_TS="*fp32"),
}


def _source(kernel, fmt, constexprs):
    pointers = dict(_POINTERS[fmt], O="*bf16", LSE="*fp32", S="*fp32")
    signature, aligned = {}, []
    for param in kernel.params:
        name = param.name
        if param.is_constexpr or (name.endswith("_TS") and fmt == "mxfp8"):
            signature[name] = "constexpr"
            constexprs.setdefault(name, None)
        elif name in pointers:
            signature[name] = pointers[name]
            aligned.append(name)
        elif name == "softmax_scale_log2":
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if name == "keys_stored":  # always a multiple of the block (16 or 32)
                aligned.append(name)
    names = list(signature)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    return ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)


def _compile(source, config, arch):
    options = {name: config[name] for name in ("num_warps", "num_stages", "maxnreg") if name in config}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def compile_for(variant, head_dim, causal, config, *, arch=90):
    """Compile "mxfp8-dequant", "nvfp4-dequant" or "mxfp8-dot-scaled" with config dict(BLOCK_M,
    BLOCK_N, num_warps, num_stages[, maxnreg]) for sm_<arch>."""
    import triton.language as tl
    fmt, kind = variant.split("-", 1)
    constexprs = dict(HEAD_DIM=head_dim, CAUSAL=causal, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"])
    if kind == "dequant":
        kernel = mx_dequant._blocked_dequant_fwd
        constexprs.update(FORMAT=fmt, TILE=tl.bfloat16, DOT_PRECISION="tf32", EMULATED_ROUNDING=False)
    elif variant == "mxfp8-dot-scaled":
        kernel = mx_dot_scaled._mxfp8_dot_scaled_fwd
        constexprs.update(EMULATED_ROUNDING=False)
    else:
        raise ValueError(f"no block-scaled kernel for variant {variant!r}")
    return _compile(_source(kernel, fmt, constexprs), config, arch)


def compile_nvfp4_scores_probe(*, block_m=64, block_n=64, head_dim=128, arch=90):
    """Compile the one-tile NVFP4 dot_scaled product (raises where Triton cannot lower it)."""
    constexprs = dict(BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=head_dim)
    source = _source(nvfp4_dot_scaled.scores_probe, "nvfp4", constexprs)
    return _compile(source, dict(num_warps=4), arch)
