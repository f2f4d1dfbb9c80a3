"""Compile a variant's kernel for a GPU arch on a machine without a GPU, and read its SASS.

Device time is scarce; registers, spills, shared memory and the instruction mix (HGMMA/QGMMA for
wgmma, UTMALDG for TMA loads, LDGSTS for cp.async) can all be read from the cubin that Triton builds
here. Arguments are specialised as Triton's launcher does for contiguous, 16-byte aligned tensors:
pointers and strides divisible by 16, the unit head_dim stride a constant.
"""
import os
import re
import subprocess
import tempfile

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from triton_impl.kernels import fa2_pointer, fa2_tma, fp8_tma

_KERNELS = {"fa2": fa2_pointer._fa2_fwd_pointer, "fa2-tma": fa2_tma._fa2_fwd_tma, "fp8": fp8_tma._fp8_fwd}
_FLOAT_ARGS = ("qk_scale", "softmax_scale_log2", "softcap_in", "softcap_out")
# strides that are 1 for contiguous inputs: head_dim strides, and the key stride of fp8's V^T
_UNIT_STRIDES = {"fa2": ("sqd", "skd", "svd"), "fa2-tma": (), "fp8": ("svs",)}
SASS_OPS = ("HGMMA", "QGMMA", "HMMA", "UTMALDG", "UTMALDG.5D", "UTMASTG", "LDGSTS", "MUFU.EX2", "SHFL.IDX", "STL",
            "LDL", "F2FP.F16.E4M3.UNPACK_B", "F2F.BF16.F16")
# the most dynamic shared memory one block may use on sm_90
SM90_SMEM_LIMIT = 232448


def _signature(kernel, variant, dtype):
    element = {"bf16": "*bf16", "fp16": "*fp16", "fp8": "*fp8e4nv"}[dtype]
    signature, aligned = {}, []
    for param in kernel.params:
        name = param.name
        if param.is_constexpr or name in _UNIT_STRIDES[variant]:
            signature[name] = "constexpr"
        elif name in ("Q", "K", "V", "VT", "O"):
            signature[name] = "*bf16" if (name == "O" and variant == "fp8") else element
            aligned.append(name)
        elif name in ("LSE", "Q_DESCALE", "K_DESCALE", "V_DESCALE"):
            signature[name] = "*fp32"
            aligned.append(name)
        elif name in ("CU_Q", "CU_K"):  # fa2's varlen offsets
            signature[name] = "*i32"
        elif name in _FLOAT_ARGS:
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if re.fullmatch(r"s[qkvo][bhsd]", name):
                aligned.append(name)
    return signature, aligned


def compile_for(variant, head_dim, causal, config, *, dtype="bf16", arch=90):
    """Compile `variant` with config dict(BLOCK_M, BLOCK_N, num_warps, num_stages[, maxnreg]) for sm_<arch>;
    for fa2 also WIDE_OFFSETS (default False: 32-bit key offsets within a slice), LOCAL, SOFTCAP and VARLEN (default
    False: no window, no cap, dense batches) and HEAD_DIM_V (V's head_dim, default head_dim); for fp8 also PERMUTED_K
    (default True: K tiles key-permuted, as launched when seqlen_k % 16 == 0)."""
    kernel = _KERNELS[variant]
    signature, aligned = _signature(kernel, variant, dtype)
    constexprs = dict(HEAD_DIM=head_dim, CAUSAL=causal, BLOCK_M=config["BLOCK_M"], BLOCK_N=config["BLOCK_N"])
    if variant == "fa2":
        constexprs.update(fa2_pointer.split_dims(head_dim, config.get("HEAD_DIM_V", head_dim)))
        constexprs.update(DOT_PRECISION="tf32", WIDE_OFFSETS=config.get("WIDE_OFFSETS", False),
                          LOCAL=config.get("LOCAL", False), SOFTCAP=config.get("SOFTCAP", False),
                          VARLEN=config.get("VARLEN", False))
    if variant == "fp8":
        constexprs.update(VT_VIA_TMA=True, PERMUTED_K=config.get("PERMUTED_K", True), EXACT_P_ROUNDING=False)
    constexprs.update({name: 1 for name in _UNIT_STRIDES[variant]})
    names = list(signature)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned if n not in constexprs}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {name: config[name] for name in ("num_warps", "num_stages", "maxnreg") if name in config}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def compile_decode(head_dim, config=None, *, head_dim_v=None, paged=True, page_size=64, split=True, fp8=False,
                   v_is_k=None, causal=False, local=False, arch=90):
    """Compile the decode split kernel for Q/K head_dim `head_dim` and V's `head_dim_v` (default head_dim; MLA 576
    / 512, V read from K's tile unless v_is_k is False) with config dict(BLOCK_M, BLOCK_N, num_warps, num_stages)
    (default: kernels.decode.tiles for a full query tile) for sm_<arch>, bf16 queries (e4m3 cache with fp8);
    causal / local: the causal mask and the local window's code paths."""
    from triton_impl.kernels import decode

    head_dim_v = head_dim if head_dim_v is None else head_dim_v
    if config is None:
        block_m, block_n, warps, stages = decode.tiles(head_dim, 1 << 10, 1 if fp8 else 2)
        config = dict(BLOCK_M=block_m, BLOCK_N=block_n, num_warps=warps, num_stages=stages)
    kernel = decode._decode_split
    cache = "*fp8e4nv" if fp8 else "*bf16"
    signature, aligned = {}, []
    for param in kernel.params:
        name = param.name
        if param.is_constexpr:
            signature[name] = "constexpr"
        elif name in ("Q", "O"):
            signature[name] = "*bf16"
            aligned.append(name)
        elif name in ("K", "V"):
            signature[name] = cache
            aligned.append(name)
        elif name in ("LSE", "WS_O", "WS_LSE", "KDS", "VDS"):
            signature[name] = "*fp32"
            aligned.append(name)
        elif name in ("SEQLENS", "BT"):
            signature[name] = "*i32"
        elif name == "qk_scale":
            signature[name] = "fp32"
        else:
            signature[name] = "i32"
            if re.fullmatch(r"s[a-z]{2,3}", name):  # the strides: multiples of 16 elements at every launch the
                aligned.append(name)                 # sweeps make, which the JIT specialises on
    constexprs = dict(HEAD_DIM=head_dim_v, QK_EXTRA=head_dim - head_dim_v,
                      V_IS_K=head_dim > head_dim_v if v_is_k is None else v_is_k, BLOCK_M=config["BLOCK_M"],
                      BLOCK_N=config["BLOCK_N"], M_TILES=1, PAGED=paged, PAGE_SIZE=page_size, HAS_SEQLENS=True,
                      CAUSAL=causal, LOCAL=local, SPLIT=split, FP8=fp8, DOT_PRECISION="tf32")
    names = list(signature)
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in aligned}
    source = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs)
    options = {name: config[name] for name in ("num_warps", "num_stages") if name in config}
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def compile_ws(head_dim, causal, config=None, *, dtype="bf16", arch=90):
    """Compile the Gluon kernel of "fa2-ws" (dtype bf16/fp16) or "fp8-ws" (dtype fp8) with config
    dict(BLOCK_N, STAGES, OVERLAP[, PERMUTED_K]) (default: fa2_ws.config_for; fp8 K key-permuted unless
    PERMUTED_K is False) for sm_<arch>."""
    import torch
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton_impl.kernels import fa2_ws, fp8_ws

    fp8 = dtype == "fp8"
    config = config or fa2_ws.config_for(head_dim, 1 if fp8 else 2)
    rows, block_n = fa2_ws.ROWS.value, config["BLOCK_N"]
    torch_dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8e4nv": torch.float8_e4m3fn}

    def descriptor(element, block):
        return f"tensordesc<{element}{block},{fa2_ws.box_layout(block, torch_dtypes[element])!r}>"

    element = "fp8e4nv" if fp8 else dtype
    permuted = fp8 and config.get("PERMUTED_K", True)
    k_block = fp8_ws.permuted_k_box(block_n, head_dim) if permuted else fa2_ws.box(block_n, head_dim)
    signature = dict(q_desc=descriptor(element, fa2_ws.box(rows, head_dim)), k_desc=descriptor(element, k_block))
    if fp8:
        signature.update(vt_desc=descriptor(element, fa2_ws.box(head_dim, block_n)),
                         o_desc=descriptor("bf16", fa2_ws.box(rows, head_dim)),
                         Q_DESCALE="*fp32", K_DESCALE="*fp32", V_DESCALE="*fp32", LSE="*fp32",
                         softmax_scale_log2="fp32", seqlen_q="i32", seqlen_k="i32", heads_q="i32", heads_kv="i32",
                         group_size="i32")
    else:
        signature.update(v_desc=descriptor(element, fa2_ws.box(block_n, head_dim)),
                         o_desc=descriptor(element, fa2_ws.box(rows, head_dim)),
                         LSE="*fp32", qk_scale="fp32", seqlen_q="i32", seqlen_k="i32", heads_q="i32",
                         group_size="i32")
    constexprs = dict(HEAD_DIM=head_dim, BLOCK_N=block_n, STAGES=config["STAGES"], CAUSAL=causal,
                      OVERLAP=config["OVERLAP"], **(dict(PERMUTED_K=permuted) if fp8 else {}),
                      **fa2_ws.roles(config))
    signature.update({name: "constexpr" for name in constexprs})
    kernel = fa2_ws._fp8_fwd_ws if fp8 else fa2_ws._fa2_fwd_ws
    source = GluonASTSource(fn=kernel, signature=signature, constexprs=constexprs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=4))


def report(compiled):
    """Registers, stack bytes (spills), shared memory and SASS instruction counts of a compiled kernel."""
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as cubin:
        cubin.write(compiled.asm["cubin"])
        cubin.flush()
        usage = subprocess.run([cuobjdump, "-res-usage", cubin.name], capture_output=True, text=True,
                               check=True).stdout
        sass = subprocess.run([cuobjdump, "-sass", cubin.name], capture_output=True, text=True,
                              check=True).stdout
    result = dict(regs=int(re.search(r"REG:(\d+)", usage).group(1)),
                  stack=int(re.search(r"STACK:(\d+)", usage).group(1)),
                  smem=compiled.metadata.shared)
    result.update({op: len(re.findall(re.escape(op) + r"\b", sass)) for op in SASS_OPS})
    result["HGMMA.BF16"] = len(re.findall(r"HGMMA\.\S*\.BF16\b", sass))  # wgmma on bf16 operands, any shape
    return result
