"""The public entry point: input checks, variant choice, and the torch.library custom ops.

Ops: `triton_fa::fwd` (16-bit), `triton_fa::fwd_fp8` (fp8 with descales) and `triton_fa::fwd_blocked`
(MXFP8 / NVFP4 data and block scales; nvfp4's tensor scales as 0-dim tensors, None for mxfp8).
`attention` runs their implementations directly in plain eager use and through the ops wherever a torch
machinery (compile, export, tracing, fake tensors, modes, autograd) has to see them (`eager`).
Kernels (and Triton itself) are imported only when a kernel runs, so `import triton_impl` works on a
machine without Triton or a GPU. Both ops always produce the LSE (B*H*Sq floats, negligible next
to the output); `attention` drops it unless asked.
"""
import importlib
import math
import sys
from typing import Optional

import torch

from compare import native_build
from triton_impl import native
from triton_impl.runtime import check_devices, device_scope, interpreting, run_op, unavailable_reason
from triton_impl.variants import DECODE_MAX_SEQLEN_Q, DEFAULT_VARIANTS, VARIANTS

_TORCH_FORMATS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
# block-scaled formats: (element dtype of data, dtype of the block scales, elements per byte, block)
_BLOCKED = {"mxfp8": (torch.float8_e4m3fn, torch.uint8, 1, 32), "nvfp4": (torch.uint8, torch.float8_e4m3fn, 2, 16)}


def last_config(variant):
    """The tile config of the latest launch of `variant`: the autotuner's pick ('64x128 w4 s3': BLOCK_M x
    BLOCK_N, warps, stages[, maxnreg]), or for the Gluon variants their table's config ('128x128 ws s3
    overlap'); None when none ran in this process."""
    if VARIANTS.get(variant, {}).get("gluon"):
        gluon = sys.modules.get("triton_impl.kernels.fa2_ws")  # not imported: no kernel has run
        return None if gluon is None else gluon.last_config(variant)
    tuning = sys.modules.get("triton_impl.kernels.tuning")
    return None if tuning is None else tuning.last_config(variant)


def _is_quantized(x):
    return all(hasattr(x, name) for name in ("fmt", "data", "scale", "transposed"))


def _check_runnable(op, variant, tensors, tma_tensors):
    """Checks that need real tensors or the machine, so they run inside the op, not while tracing."""
    if variant not in VARIANTS or VARIANTS[variant]["op"] != op:
        runs = tuple(name for name, spec in VARIANTS.items() if spec["op"] == op)
        raise ValueError(f"triton_fa::{op} runs variants {runs}, got {variant!r}")
    reason = unavailable_reason(variant)
    if reason is not None:
        raise RuntimeError(reason)
    check_devices(tensors)
    _check_tma_layout(variant, tma_tensors)


# ---------------------------------------------------------------- custom ops

def _fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
            variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_runnable("fwd", variant, (q, k, v), dict(q=q, k=k, v=v) if VARIANTS[variant].get("tma") else {})
    out = torch.empty((*q.shape[:3], v.shape[3]), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    kernels = importlib.import_module(VARIANTS[variant]["kernels"])
    with device_scope(q):
        kernels.launch(q, k, v, out, lse, causal, scale)
    return out, lse


_fwd_op = torch.library.custom_op("triton_fa::fwd", mutates_args=())(_fwd)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, causal, scale, variant):
    return q.new_empty((*q.shape[:3], v.shape[3])), q.new_empty(q.shape[:3], dtype=torch.float32)


def _fwd_local(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, window_left: int,
               window_right: int, softcap: float, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_runnable("fwd", variant, (q, k, v), {})
    out = torch.empty((*q.shape[:3], v.shape[3]), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    kernels = importlib.import_module(VARIANTS[variant]["kernels"])
    with device_scope(q):
        kernels.launch(q, k, v, out, lse, causal, scale, window=(window_left, window_right), softcap=softcap)
    return out, lse


_fwd_local_op = torch.library.custom_op("triton_fa::fwd_local", mutates_args=())(_fwd_local)


@_fwd_local_op.register_fake
def _fwd_local_fake(q, k, v, causal, scale, window_left, window_right, softcap, variant):
    return q.new_empty((*q.shape[:3], v.shape[3])), q.new_empty(q.shape[:3], dtype=torch.float32)


def _fwd_fp8(q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_descale: torch.Tensor,
                k_descale: torch.Tensor, v_descale: torch.Tensor, causal: bool, scale: float,
                variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_runnable("fwd_fp8", variant, (q, k, vt, q_descale, k_descale, v_descale), dict(q=q, k=k))
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[:3], dtype=torch.float32, device=q.device)
    kernels = importlib.import_module(VARIANTS[variant]["kernels"])
    with device_scope(q):
        kernels.launch(q, k, vt, q_descale, k_descale, v_descale, out, lse, causal, scale)
    return out, lse


_fwd_fp8_op = torch.library.custom_op("triton_fa::fwd_fp8", mutates_args=())(_fwd_fp8)


@_fwd_fp8_op.register_fake
def _fwd_fp8_fake(q, k, vt, q_descale, k_descale, v_descale, causal, scale, variant):
    return (q.new_empty(q.shape, dtype=torch.bfloat16),
            q.new_empty(q.shape[:3], dtype=torch.float32))


def _fwd_blocked(q: torch.Tensor, q_scale: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor,
                    vt: torch.Tensor, vt_scale: torch.Tensor, q_tensor_scale: Optional[torch.Tensor],
                    k_tensor_scale: Optional[torch.Tensor], v_tensor_scale: Optional[torch.Tensor], causal: bool,
                    scale: float, variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    tensor_scales = (q_tensor_scale, k_tensor_scale, v_tensor_scale)
    _check_runnable("fwd_blocked", variant, (q, q_scale, k, k_scale, vt, vt_scale,
                                             *(t for t in tensor_scales if t is not None)), {})
    out, lse = _blocked_outputs(q, variant)
    kernels = importlib.import_module(VARIANTS[variant]["kernels"])
    with device_scope(q):
        kernels.launch(VARIANTS[variant]["formats"][0], q, q_scale, k, k_scale, vt, vt_scale, tensor_scales,
                       out, lse, causal, scale)
    return out, lse


_fwd_blocked_op = torch.library.custom_op("triton_fa::fwd_blocked", mutates_args=())(_fwd_blocked)


def _blocked_outputs(q, variant):
    """Empty out (B, H, Sq, D) bf16 and lse (B, H, Sq) fp32 for block-scaled q data (nvfp4: D/2 bytes)."""
    per_byte = _BLOCKED[VARIANTS[variant]["formats"][0]][2]
    shape = (*q.shape[:3], q.shape[3] * per_byte)
    return (q.new_empty(shape, dtype=torch.bfloat16), q.new_empty(q.shape[:3], dtype=torch.float32))


@_fwd_blocked_op.register_fake
def _fwd_blocked_fake(q, q_scale, k, k_scale, vt, vt_scale, q_tensor_scale, k_tensor_scale, v_tensor_scale,
                      causal, scale, variant):
    return _blocked_outputs(q, variant)


# ---------------------------------------------------------------- checks

def _check_shapes(q, k, v_logical_shape, variant):
    """q (B, Hq, Sq, D), k (B, Hkv, Sk, D), v's logical shape (B, Hkv, Sk, Dv), the head dims `variant`'s."""
    for name, shape in (("q", q.shape), ("k", k.shape), ("v", v_logical_shape)):
        if len(shape) != 4:
            raise ValueError(f"{name} must be 4-D (batch, heads, seqlen, head_dim), got shape {tuple(shape)}")
    batch, heads_q, seqlen_q, head_dim = q.shape
    if tuple(k.shape[:3]) != tuple(v_logical_shape[:3]):
        raise ValueError(f"k and v must have the same (batch, heads, seqlen), "
                         f"got {tuple(k.shape)} and {tuple(v_logical_shape)}")
    if k.shape[0] != batch or k.shape[3] != head_dim:
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} differ in batch or head_dim")
    if heads_q % k.shape[1] != 0:
        raise ValueError(f"heads_q ({heads_q}) must be a multiple of heads_kv ({k.shape[1]})")
    if min(batch, heads_q, seqlen_q, k.shape[2]) < 1:
        raise ValueError(f"empty input: q {tuple(q.shape)}, k {tuple(k.shape)}")
    _check_head_dims(variant, head_dim, v_logical_shape[3])


def _takes_head_dims(spec, head_dim, head_dim_v):
    """Whether a VARIANTS row takes Q/K head_dim `head_dim` with V head_dim `head_dim_v`."""
    from compare import oracle
    return oracle.takes_head_dims(spec["head_dims"], spec.get("head_dim_pairs", ()), head_dim, head_dim_v)


def _head_dims_text(spec):
    """A variant's head dims for messages: '64, 128, 256', or '32 to 256 in steps of 8' for a long even run; and
    its (Q/K, V) pairs."""
    dims = spec["head_dims"]
    steps = {b - a for a, b in zip(dims, dims[1:])}
    text = f"{dims[0]} to {dims[-1]} in steps of {steps.pop()}" if len(dims) > 3 and len(steps) == 1 \
        else ", ".join(map(str, dims))
    pairs = spec.get("head_dim_pairs", ())
    return text + "".join(f", or Q/K {d} with V {dv}" for d, dv in pairs)


def _check_head_dims(variant, head_dim, head_dim_v):
    """ValueError unless `variant` takes Q/K head_dim `head_dim` with V head_dim `head_dim_v`, naming what it
    takes and the variants that take these."""
    spec = VARIANTS[variant]
    if _takes_head_dims(spec, head_dim, head_dim_v):
        return
    dims = f"head_dim {head_dim}" if head_dim_v == head_dim else f"Q/K head_dim {head_dim} with V head_dim {head_dim_v}"
    others = sorted(name for name, other in VARIANTS.items() if _takes_head_dims(other, head_dim, head_dim_v))
    raise ValueError(f"{dims} not supported by variant {variant!r}; it takes head_dim {_head_dims_text(spec)}"
                     + (f" (variants that take {dims}: {others})" if others else ""))


def _check_tma_layout(variant, tensors):
    """TMA descriptors need a unit last stride and 16-byte aligned base address and strides."""
    from triton_impl.kernels.tuning import strides
    for name, t in tensors.items():
        st = strides(t)
        if st[-1] != 1 or any(s * t.element_size() % 16 for s in st[:-1]) or t.data_ptr() % 16:
            raise ValueError(f"variant {variant!r} reads {name} through TMA, which needs a unit last stride "
                             f"and 16-byte aligned base and strides; got strides {tuple(t.stride())} "
                             f"(call .contiguous(), or use variant 'fa2' for strided 16-bit inputs)")


def _resolve_scale(scale, head_dim):
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = float(scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a positive finite number, got {scale}")
    return scale


def _device_type(t):
    return t.device.type


def select_variant(q, k=None, v=None, *, causal=False):
    """The variant attention(q, k, v, causal=causal) runs when variant=None: the first row of DEFAULT_VARIANTS
    that fits q's GPU (under TRITON_INTERPRET=1 or off the GPU: the first that is not a Gluon kernel), format,
    head dims (q's and k's, and v's where given) and length. TypeError for a format no variant takes, ValueError
    where none runs the inputs here."""
    quantized = _is_quantized(q)
    fmt = q.fmt if quantized else _TORCH_FORMATS.get(getattr(q, "dtype", None))
    if fmt is None:
        raise TypeError(f"dtype {getattr(q, 'dtype', type(q).__name__)} not supported; use bfloat16, float16 "
                        f"(or float32 with 'fa2'), or a QuantTensor")
    def shape_of(t):
        return t.logical_shape if _is_quantized(t) else t.shape

    head_dim = shape_of(q)[-1]
    head_dim_v = shape_of(v)[-1] if v is not None else head_dim
    seqlen_q = shape_of(q)[-2]
    length = max(seqlen_q, shape_of(k)[-2] if k is not None else 0)
    data = q.data if quantized else q
    cc = None if interpreting() or _device_type(data) != "cuda" else torch.cuda.get_device_capability(data.device)
    rows = [r for r in DEFAULT_VARIANTS if fmt in r[2]]
    if not rows:
        formats = sorted({f for r in DEFAULT_VARIANTS for f in r[2]})
        raise TypeError(f"no triton variant takes format {fmt!r}; formats: {formats}")
    for low, high, _, head_dims, longest, variant in rows:
        if "max_seqlen_q" in VARIANTS[variant] and seqlen_q > DECODE_MAX_SEQLEN_Q:
            continue
        if cc is None:
            arch_ok = not VARIANTS[variant].get("gluon")
        else:
            arch_ok = low <= cc and (high is None or cc <= high)
        if arch_ok and (head_dims is None or head_dim in head_dims) and (longest is None or length <= longest) \
                and _takes_head_dims(VARIANTS[variant], head_dim, head_dim_v):
            return variant
    where = "the interpreter" if cc is None else f"sm_{cc[0]}{cc[1]}"
    dims = f"head_dim {head_dim}" + (f" with V head_dim {head_dim_v}" if head_dim_v != head_dim else "")
    takes = "; ".join(f"{name}: {_head_dims_text(VARIANTS[name])}" for name in dict.fromkeys(r[5] for r in rows))
    raise ValueError(f"no triton variant runs {fmt} {dims} on {where}; the table: "
                     f"{', '.join(r[5] for r in rows)} (triton_impl.DEFAULT_VARIANTS); head dims: {takes}")


def _choose_variant(fmt, variant, q, k, v, causal):
    if variant is None:
        variant = select_variant(q, k, v, causal=causal)
    if variant not in VARIANTS:
        raise ValueError(f"unknown triton variant {variant!r}; known: {sorted(VARIANTS)}")
    formats = VARIANTS[variant]["formats"]
    if fmt not in formats:
        raise TypeError(f"variant {variant!r} takes formats {formats}, got {fmt!r}")
    return variant


# ---------------------------------------------------------------- public entry point

def attention(q, k, v, *, causal=False, scale=None, variant=None, return_lse=False, window=(-1, -1), softcap=0.0):
    """q: (B, Hq, Sq, D), k/v: (B, Hkv, Sk, D); Hq % Hkv == 0 (GQA/MQA). Head dims: VARIANTS' "head_dims" (fa2:
    every multiple of 8 from 32 to 256), and v's head_dim Dv may differ from D where "head_dim_pairs" say (fa2:
    D 192 with Dv 128); variant=None picks a variant that takes them.

    16-bit formats: torch tensors (bf16/fp16; fp32 for variant "fa2"). fp8, mxfp8, nvfp4:
    compare.formats.QuantTensor (fp8 with per-head descales), v stored transposed (B, Hkv, D, Sk).
    causal is bottom-right aligned (query i sees keys j <= i + Sk - Sq); rows that see no key give
    out 0 and lse -inf. scale defaults to 1/sqrt(D). window=(left, right): local attention as FlashAttention's
    (query i sees keys i + Sk - Sq - left .. i + Sk - Sq + right, -1 unbounded; causal sets right to 0);
    softcap > 0: scaled scores become softcap * tanh(s / softcap). Both only in the variants that declare them
    ("local" / "softcap" in VARIANTS; variant=None picks "fa2"); others raise NotImplementedError. Returns out
    (B, Hq, Sq, Dv) in q's dtype (bf16 for quantized inputs), and with return_lse the natural-log LSE (B, Hq, Sq)
    fp32 of the scaled (capped) scores."""
    if tuple(window) != (-1, -1) or softcap:
        out, lse = _attention_local(q, k, v, causal, scale, variant, window, softcap)
    elif _is_quantized(q) or _is_quantized(k) or _is_quantized(v):
        out, lse = _attention_quantized(q, k, v, causal, scale, variant)
    else:
        out, lse = _attention_16bit(q, k, v, causal, scale, variant)
    return (out, lse) if return_lse else out


LOCAL_DEFAULT_VARIANT = "fa2"  # variant=None with a window or softcap


def _attention_local(q, k, v, causal, scale, variant, window, softcap):
    """window / softcap checked and the variant refused unless it declares both; the rest as _attention_16bit."""
    from compare import oracle
    window = oracle.as_window(window)
    oracle.check_softcap(softcap)
    takes = sorted(name for name, spec in VARIANTS.items() if spec.get("local") and spec.get("softcap"))
    if _is_quantized(q) or _is_quantized(k) or _is_quantized(v):
        raise NotImplementedError(f"window / softcap: 16-bit and fp32 inputs only (variants {takes})")
    variant = LOCAL_DEFAULT_VARIANT if variant is None else variant
    if variant in VARIANTS and not (VARIANTS[variant].get("local") and VARIANTS[variant].get("softcap")):
        raise NotImplementedError(f"variant {variant!r} has no local window / softcap; the variants with them: "
                                  f"{takes}")
    return _attention_16bit(q, k, v, causal, scale, variant, window, float(softcap))


def _attention_16bit(q, k, v, causal, scale, variant, window=(-1, -1), softcap=0.0):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor or a QuantTensor, got {type(t).__name__}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k, v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if q.dtype not in _TORCH_FORMATS:
        raise TypeError(f"dtype {q.dtype} not supported; use bfloat16, float16 (or float32 with 'fa2'), "
                        f"or a QuantTensor")
    variant = _choose_variant(_TORCH_FORMATS[q.dtype], variant, q, k, v, causal)
    _check_shapes(q, k, v.shape, variant)
    scale = _resolve_scale(scale, q.shape[-1])
    if window != (-1, -1) or softcap:  # a variant that declares both (_attention_local)
        return run_op(_fwd_local_op, _fwd_local, (q, k, v), bool(causal), scale, int(window[0]), int(window[1]),
                    softcap, variant)
    if VARIANTS[variant]["op"] == "decode":
        return _attention_decode(q, k, v, causal, scale, variant)
    return run_op(_fwd_op, _fwd, (q, k, v), bool(causal), scale, variant)


def _attention_decode(q, k, v, causal, scale, variant):
    """The dense (B, H, S, D) call on the decode kernel: a contiguous cache of Sk keys per sequence, read through
    (B, S, H, D) views of the same storage (no copy of the inputs)."""
    from triton_impl import decode
    longest = VARIANTS[variant]["max_seqlen_q"]
    if q.shape[2] > longest:
        raise ValueError(f"variant {variant!r} takes 1..{longest} query tokens, got Sq = {q.shape[2]}")
    out, lse = decode.forward(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), None, None,
                              causal=bool(causal), scale=scale)
    # (B, Sq, H, D) -> (B, H, Sq, D) as every other path returns it: contiguous (a copy of Sq > 1 rows only)
    return out.transpose(1, 2).contiguous(), lse


def _fwd_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, causal: bool, scale: float,
                window_left: int, window_right: int, softcap: float,
                variant: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_runnable("fwd", variant, (q, k, v), {})
    out = torch.empty((*q.shape[:2], v.shape[2]), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    kernels = importlib.import_module(VARIANTS[variant]["kernels"])
    with device_scope(q):
        kernels.launch_varlen(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
                              scale, window=(window_left, window_right), softcap=softcap)
    return out, lse


_fwd_varlen_op = torch.library.custom_op("triton_fa::fwd_varlen", mutates_args=())(_fwd_varlen)


@_fwd_varlen_op.register_fake
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, window_left,
                     window_right, softcap, variant):
    return q.new_empty((*q.shape[:2], v.shape[2])), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


VARLEN_DEFAULT_VARIANT = "fa2"


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *, causal=False,
                     window=(-1, -1), softcap=0.0, scale=None, return_lse=False, variant=None):
    """Packed variable-length batches, FlashAttention's flash_attn_varlen_func layouts (compare.varlen): q
    (total_q, Hq, D), k / v (total_k, Hkv, D), cu_seqlens_q / cu_seqlens_k (B + 1,) int32 offsets on q's device,
    max_seqlen_q / max_seqlen_k at least the longest sequence. causal, window and softcap per sequence as in
    attention(); v (total_k, Hkv, Dv) with the head dims attention() takes. Returns out (total_q, Hq, Dv), and with
    return_lse lse (Hq, total_q) float32. The offsets are not read on the host (no sync;
    compare.varlen.check_values checks them, one sync, for debugging). Variants with "varlen" in VARIANTS only
    (variant=None: "fa2"); an untuned fixed tile per head_dim."""
    from compare import varlen
    window = tuple(window) if isinstance(window, list) else window
    layout = varlen.check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, window=window,
                                 softcap=softcap)
    variant = VARLEN_DEFAULT_VARIANT if variant is None else variant
    takes = sorted(name for name, spec in VARIANTS.items() if spec.get("varlen"))
    if variant in VARIANTS and not VARIANTS[variant].get("varlen"):
        raise NotImplementedError(f"variant {variant!r} takes no packed batches; the variants that do: {takes}")
    variant = _choose_variant(_TORCH_FORMATS[q.dtype], variant, q, k, v, causal)
    _check_head_dims(variant, layout.head_dim, layout.head_dim_v)
    scale = _resolve_scale(scale, layout.head_dim)
    out, lse = run_op(_fwd_varlen_op, _fwd_varlen, (q, k, v, cu_seqlens_q, cu_seqlens_k), int(max_seqlen_q),
                    int(max_seqlen_k), bool(causal), scale, int(window[0]), int(window[1]), float(softcap), variant)
    return (out, lse) if return_lse else out


def attention_with_kvcache(q, k_cache, v_cache, *, cache_seqlens, block_table=None, k_new=None, v_new=None,
                           causal=False, scale=None, return_lse=False, k_descale=None, v_descale=None,
                           num_splits=None, split_size=None, window=(-1, -1)):
    """Decode attention against a KV cache, shaped like FlashAttention's flash_attn_with_kvcache (compare.kvcache
    has the layouts): q (B, Sq, Hq, D) bf16/fp16 (fp32 too) with Sq 1..64; k_cache / v_cache paged
    (num_blocks, page_size, Hkv, D) with block_table (B, max_blocks) int32, or contiguous (B, S_max, Hkv, D)
    without one; cache_seqlens (B,) int32. k_new / v_new (B, S_new, Hkv, D), if given, are written into the cache
    at cache_seqlens first (in place; one host sync checks that they fit) and attended to. causal is
    bottom-right aligned on the cache (query i sees key j <= i + L - Sq). Returns out (B, Sq, Hq, D) in q's
    dtype, and with return_lse the LSE (B, Hq, Sq) float32.

    Split-KV: num_splits=None picks the chunking from the shape and the GPU; num_splits=N forces N chunks;
    split_size=K chunks every sequence by K keys (a multiple of 64), so each sequence's result is the same bits
    whatever the batch around it. Results are deterministic either way. Without k_new there is no host sync:
    a length beyond the capacity, a negative one, or a block-table entry in use outside the cache gives that
    sequence NaN (compare.kvcache.check_values raises instead, at the cost of a sync).

    window=(left, right): local attention as attention() defines it, on each sequence's keys (query i of a
    sequence of L keys sees keys i + L - Sq - left .. i + L - Sq + right; -1: unbounded; causal sets right to 0);
    key tiles outside every row's window are not read."""
    fast = native.kvcache_decode
    # The compiled entry (triton_impl.native) for plain tensors outside torch's modes and tracers, with arguments
    # its schema parses as given, while Triton launches as by default; it answers None where the Python path below
    # has to run (a check fails, a tensor needs grad, or no call of this key has run yet).
    if (fast is not None
            and native_build.plain_call(q, k_cache, v_cache, cache_seqlens, block_table, k_new, v_new, k_descale,
                                        v_descale, causal, scale, num_splits, split_size, window)
            and native.plain_launches()):
        out, lse = fast(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal, scale,
                        num_splits, split_size, window[0], window[1])
        if out is not None:
            return (out, lse) if return_lse else out
    from compare import kvcache, oracle
    from triton_impl import decode
    window = oracle.as_window(window)
    layout = kvcache.check_inputs(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                                  k_new=k_new, v_new=v_new, k_descale=k_descale, v_descale=v_descale,
                                  dtypes=native.KVCACHE_DTYPES,
                                  head_dims=VARIANTS["decode"]["head_dims"], backend="triton_impl",
                                  head_dim_pairs=VARIANTS["decode"]["head_dim_pairs"])
    kvcache.check_splits(num_splits, split_size)
    scale = kvcache.resolve_scale(scale, layout.head_dim)
    reason = unavailable_reason("decode")
    if reason is not None:
        raise RuntimeError(reason)
    if k_new is not None:
        cache_seqlens = kvcache.append(layout, k_cache, v_cache, k_new, v_new, cache_seqlens, block_table)
    out, lse = decode.forward(q, k_cache, v_cache, cache_seqlens, block_table, causal=bool(causal), scale=scale,
                              k_descale=k_descale, v_descale=v_descale, num_splits=num_splits,
                              split_size=split_size, window=window)
    return (out, lse) if return_lse else out


def attention_mla_decode(q, kv_cache, *, cache_seqlens, block_table=None, head_dim_v=512, causal=False, scale=None,
                         return_lse=False, kv_descale=None, num_splits=None, split_size=None):
    """Multi-head latent attention decode (DeepSeek's MLA, FlashMLA's shapes): q (B, Sq, Hq, 576) with Sq 1..64
    against one latent cache, paged (num_blocks, page_size, 1, 576) with block_table (B, max_blocks) int32 or
    contiguous (B, S_max, 1, 576); V is the cache's first head_dim_v (512) columns, read from the same rows
    (no second copy). An e4m3 cache takes kv_descale (B, 1) float32 for both. scale defaults to 1/sqrt(576): pass
    the model's own (DeepSeek-V3: 1/sqrt(192) times its YaRN factor). Returns out (B, Sq, Hq, head_dim_v) and with
    return_lse the LSE (B, Hq, Sq); otherwise as attention_with_kvcache(q, kv_cache, kv_cache[..., :head_dim_v])."""
    from compare import kvcache
    k_cache, v_cache = kvcache.latent_views(kv_cache, head_dim_v)
    return attention_with_kvcache(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                                  causal=causal, scale=scale, return_lse=return_lse, k_descale=kv_descale,
                                  v_descale=kv_descale, num_splits=num_splits, split_size=split_size)


def _attention_quantized(q, k, v, causal, scale, variant):
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not _is_quantized(t):
            raise TypeError(f"q, k, v must all be QuantTensor when one is; {name} is {type(t).__name__}")
    fmts = {q.fmt, k.fmt, v.fmt}
    if len(fmts) != 1:
        raise TypeError(f"q, k, v must share one format, got {q.fmt}, {k.fmt}, {v.fmt}")
    variant = _choose_variant(q.fmt, variant, q, k, v, causal)
    if q.transposed or k.transposed or not v.transposed:
        raise ValueError("q and k must be stored untransposed and v transposed (B, H, D, Sk); "
                         "use compare.formats.quantize_attention_inputs")
    if q.fmt in _BLOCKED:
        return _attention_blocked(q, k, v, causal, scale, variant)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.data.dtype != torch.float8_e4m3fn:
            raise TypeError(f"{name}.data must be float8_e4m3fn for format {q.fmt!r}, got {t.data.dtype}")
        if t.data.dim() != 4:
            raise ValueError(f"{name}.data must be 4-D, got shape {tuple(t.data.shape)}")
    vt = v.data
    _check_shapes(q.data, k.data, (vt.shape[0], vt.shape[1], vt.shape[3], vt.shape[2]), variant)
    descales = []
    for name, t in (("q", q), ("k", k), ("v", v)):
        expected = tuple(t.data.shape[:2])
        if tuple(t.scale.shape) != expected or t.scale.dtype != torch.float32:
            raise ValueError(f"{name}.scale must be float32 of shape (batch, heads) = {expected}, "
                             f"got {t.scale.dtype} {tuple(t.scale.shape)}")
        descales.append(t.scale.contiguous())
    scale = _resolve_scale(scale, q.data.shape[-1])
    return run_op(_fwd_fp8_op, _fwd_fp8, (q.data, k.data, vt, *descales), bool(causal), scale, variant)


def _attention_blocked(q, k, v, causal, scale, variant):
    """MXFP8 / NVFP4 containers: check the stored layouts of compare.formats, then run the op."""
    data_dtype, scale_dtype, per_byte, block = _BLOCKED[q.fmt]
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.data.dtype != data_dtype or t.scale.dtype != scale_dtype:
            raise TypeError(f"{name} ({q.fmt}) must hold {data_dtype} data and {scale_dtype} scales, "
                            f"got {t.data.dtype} and {t.scale.dtype}")
        if t.block != block or len(t.shape) != 4 or t.data.dim() != 4:
            raise ValueError(f"{name} must be a 4-D {q.fmt} container with blocks of {block}, got block {t.block} "
                             f"and stored shape {tuple(t.data.shape)}")
        padded = -(-t.shape[-1] // block) * block
        if (tuple(t.data.shape) != (*t.shape[:-1], padded // per_byte)
                or tuple(t.scale.shape) != (*t.shape[:-1], padded // block)):
            raise ValueError(f"{name}: data {tuple(t.data.shape)} and scales {tuple(t.scale.shape)} do not match "
                             f"the {q.fmt} layout of stored shape {tuple(t.shape)} (last dim padded to {padded})")
        if q.fmt == "nvfp4" and (t.tensor_scale is None or t.tensor_scale.numel() != 1
                                 or t.tensor_scale.dtype != torch.float32):
            raise ValueError(f"{name}.tensor_scale must be a one-element float32 tensor for nvfp4")
    _check_shapes(torch.empty(q.logical_shape, device="meta"), torch.empty(k.logical_shape, device="meta"),
                  v.logical_shape, variant)
    kernels = importlib.import_module(VARIANTS[variant]["kernels"])
    if not hasattr(kernels, "launch"):
        raise NotImplementedError(kernels.LIMITATION)
    scale = _resolve_scale(scale, q.logical_shape[-1])
    tensor_scales = [t.tensor_scale.reshape(()) if q.fmt == "nvfp4" else None for t in (q, k, v)]
    tensors = (q.data.contiguous(), q.scale.contiguous(), k.data.contiguous(), k.scale.contiguous(),
               v.data.contiguous(), v.scale.contiguous(), *tensor_scales)
    return run_op(_fwd_blocked_op, _fwd_blocked, tensors, bool(causal), scale, variant)
