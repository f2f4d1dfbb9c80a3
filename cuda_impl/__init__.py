"""Hand-written CUDA C++ FlashAttention-2 forward: the founding v1..v5 mma.sync ladder, and
"hopper", the sm_90a kernel (TMA, mbarriers, wgmma, warp specialisation); "hopper-fp8", its
e4m3 version (QGMMA) for compare.formats "fp8" inputs; "hopper-mxfp8" / "hopper-nvfp4", exact
block-scaled versions for the "mxfp8" / "nvfp4" formats; "mxfp8-sm120" and "nvfp4-sm120", block-scaled
kernels for Blackwell sm_120a (cuda_impl.sm120: compiled and SASS-checked, never run here); and GPU
quantizers that produce compare.formats containers (cuda_impl.quant).

Public surface (docs/contract.md): VARIANTS, DEFAULT_VARIANTS, select_variant(), attention(),
attention_with_kvcache() (decode against a contiguous or paged KV cache: "decode", split-KV), attention_mla_decode()
(MLA's Q/K 576 against one latent cache, V its first 512 columns), attention_varlen()
(packed variable-length batches: "hopper"), unavailable_reason(),
quantize(), quantize_attention_inputs().
Kernels live in csrc/ (one per version), are built by cuda_impl.toolchain into a torch-free shared
library and launched on torch's current stream, through the custom ops "cuda_fa::fwd" / "fwd_fp8" /
"fwd_mx" whenever torch has to see them (torch.compile, tracing, fake tensors; cuda_impl.ops).
Importing this package needs neither a GPU nor nvcc; both are asked for at call time.
"""

from __future__ import annotations

import math

import torch

from compare import kvcache, native_build, oracle
from cuda_impl import _lib, decode, native, toolchain, ops, sm120, validate
from cuda_impl.quant import quantize, quantize_attention_inputs

_LADDER = {
    "v1": "basic: Q in registers, 16-byte cp.async K/V, ldmatrix.x2, mma.sync m16n8k16, online softmax",
    "v2": "v1 + XOR-swizzled K/V shared memory (no bank conflicts)",
    "v3": "v2 + 2-stage double-buffered K/V cp.async pipeline",
    "v4": "v3 + ldmatrix.x4 for K and ldmatrix.x4.trans for V",
    "v5": "v4 + 4-stage K/V ring, loads for the next tiles issued before compute of the current one; "
    "d128: 32 query rows per warp, Q re-read from shared memory",
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

KVCACHE_DTYPES = (torch.bfloat16, torch.float16)  # q's (and a 16-bit cache's) in attention_with_kvcache

VARIANTS["decode"] = {
    "formats": ("bf16", "fp16"),
    "head_dims": (64, 128, 256),  # d256: Q re-read from shared memory each tile (beside O in registers it spills)
    "min_cc": (8, 0),
    "max_cc": (9, 0),
    "max_seqlen_q": 64,  # 1..64 query tokens per sequence (decode, speculative tokens, chunked prefill)
    # MLA: Q/K 576 against one latent cache whose first 512 columns are V (attention_mla_decode; its own kernel)
    "head_dim_pairs": ((576, 512),),
    "latent_pairs_only": True,  # V must be a view of K's first columns, the cache in q's dtype
    "description": "split-KV decode (flash-decoding): the query tokens of all query heads of one KV head packed "
    "into one mma.sync tile, each CTA one chunk of the keys, partials merged through their LSE in a fixed order; "
    "contiguous or paged KV cache (attention_with_kvcache)",
}

VARIANTS["hopper"] = {
    "formats": ("bf16", "fp16"),
    # Kernels at 64, 80, 96, 128, 192 and 256 (d80 / d96: d128's tiles in panels of 32- / 64-byte rows; d192: 112-key
    # tiles, O 96 + S 56 + P 28 registers of the consumers' 240; d256: 80-key tiles, O 128 + S 40 + P 20, 224 KB of
    # shared); every other multiple of 8 runs on the next of them, the columns past it zero-filled by TMA
    # (hopper/config.cuh hopper_kernel_dim): d112 costs what d128 costs, d160 what d192 costs.
    "head_dims": tuple(range(32, 257, 8)),
    # DeepSeek-style prefill: dense launches on kernels of their own (P V at V's 128 columns, 128-key tiles), local
    # and varlen ones on the d192 kernels (V's map 128 columns wide, P V at 192)
    "head_dim_pairs": ((192, 128),),
    "min_cc": (9, 0),
    "max_cc": (9, 0),  # wgmma / setmaxnreg: sm_90a cubin only (H100, H200)
    "ceiling": "wgmma",  # judged against the wgmma rate (compare.ceilings), not mma.sync
    "tma": True,  # tiles load through TMA maps: positive strides only (checked before the launch)
    # window=(left, right) and softcap=: their own kernel, scheduled as causal launches (docs/design/hopper.md);
    # attention_varlen: packed sequences on that kernel's varlen twin (docs/design/local-and-varlen.md)
    "local": True,
    "softcap": True,
    "varlen": True,
    "description": "sm_90a: TMA K/V ring on mbarriers, wgmma (S from shared, P from registers), "
    "1 producer + 2 ping-pong consumer warpgroups (3 in turn at d64, but 2 for causal d64 up to 1k query rows), "
    "S(t) issued with P(t-1)V(t-1) (softmax(t) under that P V at d256), "
    "persistent CTAs (non-causal; causal d256 at 4k-8k keys; causal d64 and d128 fed by an item counter), "
    "176-key tiles (non-causal d128), 80-key tiles (d256)",
}

VARIANTS["hopper-fp8"] = {
    "formats": ("fp8",),
    # d256: 128-key tiles (O 128 + S 64 + two P 16 registers of the consumers' 240), Q and K in two 128-byte panels,
    # a 3-stage ring (Q 32 KB + 3 x 64 KB of shared)
    "head_dims": (64, 128, 256),
    "min_cc": (9, 0),
    "max_cc": (9, 0),  # wgmma .e4m3 / setmaxnreg: sm_90a cubin only
    "ceiling": "wgmma",  # compare.backends maps wgmma + fp8 to the wgmma.e4m3 ceiling
    "description": "sm_90a fp8 e4m3: hopper's TMA ring and warpgroups, QGMMA for both products, V^T K-major, "
    "P in e4m3 (no scale), per-head descales, S(t+1) issued with P(t)V(t), 3 consumers at d64, 3 K/V stages at d256; "
    "K tiles loaded key-permuted (P packed without shuffles) when K is contiguous and Sk % 16 == 0",
}

_MX_DESCRIPTION = (
    "sm_90a {fmt}, exact: block-scaled Q, K, V^T expanded once to {tile} (every {fmt} value is exact there), "
    "hopper's TMA ring and warpgroups with {tile} wgmma (V^T K-major), P quantized in-kernel as "
    "compare.formats.quantize_p against the running max (rounded scaled scores: exact max)"
)
for _fmt, _tile in (("mxfp8", "bf16"), ("nvfp4", "fp16")):
    VARIANTS[f"hopper-{_fmt}"] = {
        "formats": (_fmt,),
        # d256: O alone is 128 fp32 registers per consumer thread; hopper's 80-key d256 not ported.
        "head_dims": (64, 128),
        "min_cc": (9, 0),
        "max_cc": (9, 0),  # wgmma / setmaxnreg: sm_90a cubin only
        "ceiling": "wgmma",
        "description": _MX_DESCRIPTION.format(fmt=_fmt, tile=_tile),
    }

# Blackwell-native block-scaled variants (csrc/sm120, their own library): compiled, not run here.
VARIANTS.update(sm120.VARIANTS)

# What variant=None runs: the first row whose architectures, format and head_dim fit the inputs. Each row is the
# fastest variant that passed the oracle there in the committed sweeps (figures/data/paper-h200-*.csv: on the
# H200, hopper / hopper-fp8 / hopper-mxfp8 / hopper-nvfp4 at every shape and head_dim they take, ahead of every
# ladder version); on other sm_8x/sm_9x GPUs the ladder's best, v5 (its sm_80 cubin runs on every cc 8.x).
# The sm_120a block-scaled kernels are compiled, never run here: only an explicit variant selects them.
DEFAULT_VARIANTS: tuple[tuple[tuple[int, int], tuple[int, int], tuple[str, ...], str], ...] = (
    # (lowest cc, highest cc, formats, variant); "decode" only where Sq <= DECODE_MAX_SEQLEN_Q
    ((8, 0), (9, 0), ("bf16", "fp16"), "decode"),
    ((9, 0), (9, 0), ("bf16", "fp16"), "hopper"),
    ((9, 0), (9, 0), ("fp8",), "hopper-fp8"),
    ((9, 0), (9, 0), ("mxfp8",), "hopper-mxfp8"),
    ((9, 0), (9, 0), ("nvfp4",), "hopper-nvfp4"),
    ((8, 0), (8, 9), ("bf16", "fp16"), "v5"),
)


# The longest query block variant=None sends to "decode" (longer ones are prefill tiles: hopper / v5).
DECODE_MAX_SEQLEN_Q = 16
# What variant=None runs with a window or softcap (the one variant that takes them).
LOCAL_DEFAULT_VARIANT = "hopper"


def _device_of(x) -> torch.device | None:
    data = x.data if validate.is_quantized(x) else x
    return data.device if isinstance(data, torch.Tensor) else None


def select_variant(q, k=None, v=None, *, causal=False) -> str:
    """The variant attention(q, k, v, causal=causal) runs when variant=None (DEFAULT_VARIANTS), for q's GPU,
    format and head_dim. Inputs that are not on a CUDA device get the row every architecture's validation
    understands (the portable one for the format), so that their refusal names the real problem (the device).
    Raises TypeError for a format no variant takes, ValueError where no variant runs the inputs on this GPU."""
    fmt = validate.format_of(q)
    head_dim = q.shape[-1]
    device = _device_of(q)
    cc = validate.capability(device) if device is not None and device.type == "cuda" else None
    rows = [r for r in DEFAULT_VARIANTS if fmt in r[2]]
    if not rows:
        formats = sorted({f for r in DEFAULT_VARIANTS for f in r[2]})
        raise TypeError(f"format: cuda_impl has no variant for {fmt}; formats: {', '.join(formats)}")
    if cc is None:
        return rows[-1][3]  # the portable row (v5 for 16-bit): its validation names the device problem
    seqlen_q = q.shape[-2]
    for low, high, _, variant in rows:
        if "max_seqlen_q" in VARIANTS[variant] and seqlen_q > DECODE_MAX_SEQLEN_Q:
            continue
        if low <= cc <= high and head_dim in VARIANTS[variant]["head_dims"]:
            return variant
    takes = "; ".join(f"{r[3]}: head_dim {VARIANTS[r[3]]['head_dims']} on sm_{r[0][0]}{r[0][1]}"
                      + (f"..sm_{r[1][0]}{r[1][1]}" if r[1] != r[0] else "") for r in rows)
    raise ValueError(f"variant: no cuda_impl variant runs {fmt} head_dim {head_dim} on sm_{cc[0]}{cc[1]} ({takes})")


def _spec(variant: str) -> dict:
    if variant not in VARIANTS:
        raise ValueError(f"variant: unknown cuda_impl variant {variant!r}; known: {', '.join(VARIANTS)}")
    return VARIANTS[variant]


def unavailable_reason(variant: str) -> str | None:
    """None when `variant` can run here now, else why not (GPU, arch, compiler)."""
    _spec(variant)
    if variant in sm120.VARIANTS:
        return sm120.unavailable_reason(variant)
    if not torch.cuda.is_available():
        return "no CUDA GPU (torch.cuda.is_available() is False)"
    capability = torch.cuda.get_device_capability()
    if not any(toolchain.target_runs_on(t, capability) for t in toolchain.ARCH_TARGETS):
        return f"arch: sm_{capability[0]}{capability[1]} has no cubin (built for sm_{', sm_'.join(toolchain.ARCH_TARGETS)})"
    if problem := validate.arch_problem(variant, VARIANTS[variant], capability):
        return problem
    if toolchain.cached_library(_lib.library_spec()) is None:
        problem = toolchain.missing_toolchain()
        if problem:
            return f"library not built and {problem}"
    return None


def attention(q, k, v, *, causal=False, scale=None, variant=None, return_lse=False, window=(-1, -1), softcap=0.0):
    """Softmax(scale * q k^T) v for q (B, Hq, Sq, D), k/v (B, Hkv, Sk, D) bf16/fp16 CUDA tensors,
    or, for variants hopper-fp8 / hopper-mxfp8 / hopper-nvfp4, compare.formats.QuantTensor in that
    format (q, k (B, H, S, D), v stored transposed (B, Hkv, D, Sk), as quantize_attention_inputs
    makes them): output bf16. hopper-fp8 is a few percent faster when k.data is contiguous and
    Sk % 16 == 0 (its K tiles then load key-permuted); other strides and lengths give the same results.

    causal is bottom-right aligned (query i sees keys j <= i + Sk - Sq); rows that see no key
    give 0 and lse -inf. scale defaults to 1/sqrt(D). Returns out (B, Hq, Sq, D) in q's dtype,
    and with return_lse also lse (B, Hq, Sq) float32, natural log of the scaled scores.
    variant=None runs select_variant(q, k, v, causal=causal): the fastest variant for this GPU, format and
    head_dim (DEFAULT_VARIANTS). Unsupported input raises ValueError/TypeError naming the constraint; an
    explicit variant is honoured or refused, never replaced. window=(left, right): local attention as
    FlashAttention defines it (query i sees keys i + Sk - Sq - left .. i + Sk - Sq + right; -1: unbounded; causal
    sets right to 0), only the key tiles it touches computed; softcap > 0: scaled scores become
    softcap * tanh(s / softcap). Both in the variants that declare them ("local" / "softcap" in VARIANTS;
    variant=None runs LOCAL_DEFAULT_VARIANT), bf16/fp16; others raise NotImplementedError."""
    if tuple(window) != (-1, -1) or softcap:
        return _attention_local(q, k, v, bool(causal), scale, variant, return_lse, window, softcap)
    if variant in sm120.VARIANTS:
        return sm120.attention(q, k, v, causal=causal, scale=scale, variant=variant, return_lse=return_lse)
    fmt = validate.format_of(q)
    variant = select_variant(q, k, v, causal=causal) if variant is None else variant
    spec = _spec(variant)
    if validate.is_quantized(q) and fmt in validate.BLOCKED_STORAGE:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        out, lse = _attention_blocked(q, k, v, bool(causal), scale, variant, spec)
    elif validate.is_quantized(q):
        scale = 1.0 / math.sqrt(q.data.shape[-1]) if scale is None else float(scale)
        out, lse = _attention_fp8(q, k, v, bool(causal), scale, variant, spec)
    else:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        validate.check_inputs(q, k, v, variant=variant, spec=spec, scale=scale)
        if "max_seqlen_q" in spec:
            out, lse = _attention_decode(q, k, v, bool(causal), scale, spec)
        else:
            out, lse = ops.fwd(q, k, v, bool(causal), scale, variant)
    return (out, lse) if return_lse else out


def _attention_local(q, k, v, causal: bool, scale, variant, return_lse: bool, window, softcap):
    """attention() with a window or softcap: both checked, the variant refused unless it declares both."""
    window = oracle.as_window(window)
    oracle.check_softcap(softcap)
    takes = sorted(name for name, spec in VARIANTS.items() if spec.get("local") and spec.get("softcap"))
    if validate.is_quantized(q):
        raise NotImplementedError(f"window / softcap: bf16/fp16 inputs only (variants {', '.join(takes)})")
    variant = LOCAL_DEFAULT_VARIANT if variant is None else variant
    spec = _spec(variant)
    if not (spec.get("local") and spec.get("softcap")):
        raise NotImplementedError(f"variant {variant!r} has no local window / softcap; the variants with them: "
                                  f"{', '.join(takes)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    validate.check_inputs(q, k, v, variant=variant, spec=spec, scale=scale)
    out, lse = ops.fwd_local(q, k, v, causal, scale, window, float(softcap), variant)
    return (out, lse) if return_lse else out


# What attention_varlen runs when variant=None (the one variant that takes packed sequences).
VARLEN_DEFAULT_VARIANT = "hopper"


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                     window=(-1, -1), softcap=0.0, scale=None, return_lse=False, variant=None):
    """Packed variable-length batches, FlashAttention's flash_attn_varlen_func layouts (compare.varlen): q
    (total_q, Hq, D), k / v (total_k, Hkv, D) bf16/fp16 CUDA tensors, cu_seqlens_q / cu_seqlens_k (B + 1,) int32
    offsets on q's device, max_seqlen_q / max_seqlen_k at least the longest sequence (they size the grid). causal,
    window and softcap per sequence as in attention(). Returns out (total_q, Hq, D), and with return_lse lse
    (Hq, total_q) float32. The offsets are not read on the host (no sync, graph-capturable;
    compare.varlen.check_values checks them, one sync, for debugging): each CTA walks its sequences' query tiles
    from them on the device. Variants with "varlen" in VARIANTS only (variant=None: VARLEN_DEFAULT_VARIANT)."""
    from compare import varlen
    window = tuple(window) if isinstance(window, list) else window
    layout = varlen.check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, window=window,
                                 softcap=softcap)
    variant = VARLEN_DEFAULT_VARIANT if variant is None else variant
    spec = _spec(variant)
    if not spec.get("varlen"):
        takes = sorted(name for name, s in VARIANTS.items() if s.get("varlen"))
        raise NotImplementedError(f"variant {variant!r} takes no packed batches; the variants that do: {takes}")
    if q.dtype not in validate.DTYPE_FORMATS:
        raise TypeError(f"dtype: variant {variant} supports bfloat16 and float16, got {q.dtype}")
    validate.check_head_dims(variant, spec, layout.head_dim, layout.head_dim_v)
    scale = 1.0 / math.sqrt(layout.head_dim) if scale is None else float(scale)
    as_bhsd = lambda x: x.unsqueeze(0).transpose(1, 2)  # noqa: E731 - the kernel's view of the packed tensors
    if min(layout.total_q, layout.total_k) > 0:
        validate.check_inputs(as_bhsd(q), as_bhsd(k), as_bhsd(v), variant=variant, spec=spec, scale=scale)
    else:  # (nothing to launch: zeros / -inf; the checks that need rows skipped)
        validate.check_device_and_arch([q, k, v], "q, k, v", variant, spec)
    out, lse = ops.fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
                              bool(causal), scale, window, float(softcap), variant)
    return (out, lse) if return_lse else out


def _attention_decode(q, k, v, causal: bool, scale: float, spec: dict):
    """The dense (B, H, S, D) call on the decode kernel: a contiguous cache of Sk keys per sequence, read through
    (B, S, H, D) views of the same storage (no copy of the inputs)."""
    if q.shape[2] > spec["max_seqlen_q"]:
        raise ValueError(f"variant 'decode' takes 1..{spec['max_seqlen_q']} query tokens, got Sq = {q.shape[2]}")
    out, lse = decode.forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None, causal=causal,
                              scale=scale)
    # (B, Sq, H, D) -> (B, H, Sq, D) as every other path returns it: contiguous (a copy of Sq > 1 rows only)
    return out.transpose(1, 2).contiguous(), lse


def attention_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table=None, k_new=None, v_new=None,
                           causal=False, scale=None, return_lse=False, k_descale=None, v_descale=None,
                           num_splits=None, split_size=None, window=(-1, -1)):
    """Decode attention against a KV cache, shaped like FlashAttention's flash_attn_with_kvcache (compare.kvcache
    has the layouts): q (B, Sq, Hq, D) bf16/fp16 with Sq 1..64, the cache in q's dtype or e4m3 (float8_e4m3fn,
    with k_descale / v_descale (B, Hkv) float32); k_cache / v_cache paged (num_blocks, page_size,
    Hkv, D) with block_table (B, max_blocks) int32, or contiguous (B, S_max, Hkv, D) without one; cache_seqlens
    (B,) int32. k_new / v_new (B, S_new, Hkv, D), if given, are written into the cache at cache_seqlens first
    (in place; one host sync checks that they fit) and attended to. causal is bottom-right aligned on the
    cache (query i sees key j <= i + L - Sq). Returns out (B, Sq, Hq, D) in q's dtype, and with return_lse the
    LSE (B, Hq, Sq) float32.

    Split-KV: num_splits=None picks the chunking from the shape and the GPU; num_splits=N forces N chunks;
    split_size=K chunks every sequence by K keys (a multiple of 64), so each sequence's result is the same bits
    whatever the batch around it. Results are deterministic either way. Without k_new there is no host sync:
    a length beyond the capacity, a negative one, or a block-table entry in use outside the cache gives that
    sequence NaN (compare.kvcache.check_values raises instead, at the cost of a sync). window=(left, right):
    local attention on each sequence's keys, FlashAttention's (compare.oracle.visible_range): query i of a sequence
    of L keys sees keys i + L - Sq - left .. i + L - Sq + right (a side of -1 unbounded; causal sets right to 0; a
    row that sees no key gives 0 and LSE -inf); the chunks then follow the window, so only its keys are read."""
    fast = native.kvcache_decode
    # The compiled entry (cuda_impl.native) for plain tensors outside torch's modes and tracers, with arguments its
    # schema parses as given; it answers None where the Python path below has to run (a check fails, a tensor needs
    # grad, or this shape was not planned yet).
    if (fast is not None
            and native_build.plain_call(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, k_descale,
                                        v_descale, causal, scale, num_splits, split_size, window)):
        out, lse = fast(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal, scale,
                        num_splits, split_size, window[0], window[1])
        if out is not None:
            return (out, lse) if return_lse else out
    window = oracle.as_window(window)
    layout = kvcache.check_inputs(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                                  k_new=k_new, v_new=v_new, k_descale=k_descale, v_descale=v_descale,
                                  dtypes=KVCACHE_DTYPES, head_dims=VARIANTS["decode"]["head_dims"],
                                  backend="cuda_impl", head_dim_pairs=VARIANTS["decode"]["head_dim_pairs"])
    if layout.head_dim_v != layout.head_dim:
        _check_latent(k_cache, v_cache, window)
    kvcache.check_splits(num_splits, split_size)
    scale = kvcache.resolve_scale(scale, layout.head_dim)
    validate.check_device_and_arch([q], "q", "decode", VARIANTS["decode"])
    if k_new is not None:
        cache_seqlens = kvcache.append(layout, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table)
    out, lse = decode.forward(q, k_cache, v_cache, cache_seqlens, block_table, causal=bool(causal), scale=scale,
                              k_descale=k_descale, v_descale=v_descale, num_splits=num_splits, split_size=split_size,
                              window=window)
    return (out, lse) if return_lse else out



def _check_latent(k_cache, v_cache, window) -> None:
    """What the MLA kernel (csrc/fwd_mla_decode.cu) takes beyond compare.kvcache's checks: V the first columns of
    K's rows (it reads each row once, for both products), a cache in q's dtype, no window."""
    if k_cache.dtype == torch.float8_e4m3fn:
        raise NotImplementedError("cuda_impl's MLA decode takes a cache in q's dtype (an e4m3 latent cache: "
                                  "triton_impl.attention_mla_decode)")
    if v_cache.data_ptr() != k_cache.data_ptr() or v_cache.stride() != k_cache.stride():
        raise ValueError(f"v_cache must be k_cache[..., :{v_cache.shape[3]}] (the latent cache's first columns): "
                         "cuda_impl's MLA kernel reads V from K's rows; use attention_mla_decode(q, kv_cache, ...)")
    if oracle.as_window(window) != (-1, -1):
        raise NotImplementedError("window: cuda_impl's MLA decode takes no local window")


def attention_mla_decode(q, kv_cache, *, cache_seqlens, block_table=None, head_dim_v=512, causal=False, scale=None,
                         return_lse=False, num_splits=None, split_size=None):
    """Multi-head latent attention decode (DeepSeek's MLA, FlashMLA's shapes): q (B, Sq, Hq, 576) bf16/fp16 with
    Sq 1..64 against one latent cache in q's dtype, paged (num_blocks, page_size, 1, 576) with block_table
    (B, max_blocks) int32 or contiguous (B, S_max, 1, 576); V is the cache's first head_dim_v (512) columns, read
    from the same rows (no second copy). scale defaults to 1/sqrt(576): pass the model's own. Returns out
    (B, Sq, Hq, head_dim_v) and with return_lse the LSE (B, Hq, Sq); otherwise as
    attention_with_kvcache(q, kv_cache, kv_cache[..., :head_dim_v])."""
    k_cache, v_cache = kvcache.latent_views(kv_cache, head_dim_v)
    return attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                                  causal=causal, scale=scale, return_lse=return_lse, num_splits=num_splits,
                                  split_size=split_size)


def _attention_fp8(q, k, v, causal: bool, scale: float, variant: str, spec: dict):
    validate.check_fp8_inputs(q, k, v, variant=variant, spec=spec, scale=scale)
    vt = v.data
    if vt.shape[-2] > 1 and vt.stride(-2) % validate.FP8_STRIDE_MULTIPLE:
        # TMA needs 16-byte row strides; V^T rows are Sk bytes long. Re-pad the keys (zeros, never
        # read: the tensor map stops at Sk). One copy of V, Sk * D bytes per head.
        vt = torch.nn.functional.pad(vt.view(torch.uint8), (0, -vt.shape[-1] % validate.FP8_STRIDE_MULTIPLE))
        vt = vt.view(torch.float8_e4m3fn)[..., : v.data.shape[-1]]
    descales = (q.scale.contiguous(), k.scale.contiguous(), v.scale.contiguous())
    return ops.fwd_fp8(q.data, k.data, vt, *descales, causal, scale, variant)


def _attention_blocked(q, k, v, causal: bool, scale: float, variant: str, spec: dict):
    validate.check_blocked_inputs(q, k, v, variant=variant, spec=spec, scale=scale)
    return ops.fwd_mx(q.fmt, q.data, q.scale, k.data, k.scale, v.data, v.scale, q.tensor_scale, k.tensor_scale,
                      v.tensor_scale, q.shape[-1], k.shape[2], causal, scale)


__all__ = ["VARIANTS", "DEFAULT_VARIANTS", "select_variant", "attention", "attention_mla_decode", "attention_varlen",
           "attention_with_kvcache",
           "unavailable_reason", "quantize",
           "quantize_attention_inputs"]
