"""The torch.library custom ops "cuda_fa::fwd" (16-bit; "cuda_fa::fwd_local" with a window or softcap,
"cuda_fa::fwd_varlen" on packed sequences), "cuda_fa::fwd_fp8" (e4m3 with descales),
"cuda_fa::fwd_mx" (MXFP8 / NVFP4 block-scaled storage) and "cuda_fa::decode" (split-KV decode against a KV
cache, cuda_impl.decode), with fake implementations for torch.compile.

`fwd`, `fwd_fp8` and `fwd_mx` are what cuda_impl.attention calls: in plain eager use they run the
implementation directly, since torch's custom-op dispatch is about half of a call's host time
(scripts/bench_api_overhead_gpu.py); whenever a torch machinery has to see the op (torch.compile or
export tracing, jit tracing, fake tensors, dispatch or function modes, autograd) they go through it."""

from __future__ import annotations

import torch

from cuda_impl import _lib


def _eager(tensors) -> bool:
    """Plain tensors that need no autograd, outside every tracing machinery and torch mode."""
    if torch.compiler.is_compiling() or torch.jit.is_tracing():
        return False
    if torch._C._len_torch_dispatch_stack() or torch._C._is_torch_function_mode_enabled():
        return False
    return all(t is None or (type(t) is torch.Tensor and not t.requires_grad) for t in tensors)


def _fwd_impl(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, variant: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Hq, Sq, D) in q's dtype, lse (B, Hq, Sq) float32). Inputs are validated by the caller."""
    return _fwd_local_impl(q, k, v, causal, scale, -1, -1, 0.0, variant)


def _fwd_local_impl(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, window_left: int,
    window_right: int, softcap: float, variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """_fwd_impl with a local window (left, right keys around the diagonal; -1: unbounded) and a logit cap (0:
    none), for the variants that declare them."""
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    _lib.launch_forward(variant, q, k, v, out, lse, causal=causal, scale=scale, window=(window_left, window_right),
                        softcap=softcap)
    return out, lse


_fwd_op = torch.library.custom_op("cuda_fa::fwd", mutates_args=(), device_types="cuda")(_fwd_impl)


@_fwd_op.register_fake
def _fwd_fake(q, k, v, causal, scale, variant):
    return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty(q.shape[:-1], dtype=torch.float32)


def fwd(q, k, v, causal: bool, scale: float, variant: str):
    return (_fwd_impl if _eager((q, k, v)) else _fwd_op)(q, k, v, causal, scale, variant)


_fwd_local_op = torch.library.custom_op("cuda_fa::fwd_local", mutates_args=(), device_types="cuda")(_fwd_local_impl)


@_fwd_local_op.register_fake
def _fwd_local_fake(q, k, v, causal, scale, window_left, window_right, softcap, variant):
    return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty(q.shape[:-1], dtype=torch.float32)


def fwd_local(q, k, v, causal: bool, scale: float, window: tuple[int, int], softcap: float, variant: str):
    impl = _fwd_local_impl if _eager((q, k, v)) else _fwd_local_op
    return impl(q, k, v, causal, scale, int(window[0]), int(window[1]), float(softcap), variant)


def _fwd_varlen_impl(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int, max_seqlen_k: int, causal: bool, scale: float, window_left: int, window_right: int,
    softcap: float, variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (total_q, Hq, D) in q's dtype, lse (Hq, total_q) float32) of packed sequences (compare.varlen): the
    kernel writes every row of every sequence. A batch without a query or without a key launches nothing: zeros
    and lse -inf."""
    if min(q.shape[0], k.shape[0], max_seqlen_q, max_seqlen_k) == 0:
        return (torch.zeros((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device),
                torch.full((q.shape[1], q.shape[0]), -torch.inf, dtype=torch.float32, device=q.device))
    out = torch.empty((*q.shape[:-1], v.shape[-1]), dtype=q.dtype, device=q.device)
    lse = torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device)
    _lib.launch_varlen(variant, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                       causal=causal, scale=scale, window=(window_left, window_right), softcap=softcap)
    return out, lse


_fwd_varlen_op = torch.library.custom_op("cuda_fa::fwd_varlen", mutates_args=(), device_types="cuda")(
    _fwd_varlen_impl)


@_fwd_varlen_op.register_fake
def _fwd_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale, window_left,
                     window_right, softcap, variant):
    return q.new_empty((*q.shape[:-1], v.shape[-1])), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def fwd_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
               scale: float, window: tuple[int, int], softcap: float, variant: str):
    tensors = (q, k, v, cu_seqlens_q, cu_seqlens_k)
    impl = _fwd_varlen_impl if _eager(tensors) else _fwd_varlen_op
    return impl(*tensors, int(max_seqlen_q), int(max_seqlen_k), bool(causal), float(scale), int(window[0]),
                int(window[1]), float(softcap), variant)


def _fwd_fp8_impl(
    q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_descale: torch.Tensor, k_descale: torch.Tensor,
    v_descale: torch.Tensor, causal: bool, scale: float, variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Hq, Sq, D) bf16, lse (B, Hq, Sq) float32) from e4m3 q, k and vt (B, Hkv, D, Sk)."""
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    _lib.launch_forward_fp8(variant, q, k, vt, q_descale, k_descale, v_descale, out, lse, causal=causal, scale=scale)
    return out, lse


_fwd_fp8_op = torch.library.custom_op("cuda_fa::fwd_fp8", mutates_args=(), device_types="cuda")(_fwd_fp8_impl)


@_fwd_fp8_op.register_fake
def _fwd_fp8_fake(q, k, vt, q_descale, k_descale, v_descale, causal, scale, variant):
    return q.new_empty(q.shape, dtype=torch.bfloat16), q.new_empty(q.shape[:-1], dtype=torch.float32)


def fwd_fp8(q, k, vt, q_descale, k_descale, v_descale, causal: bool, scale: float, variant: str):
    args = (q, k, vt, q_descale, k_descale, v_descale)
    return (_fwd_fp8_impl if _eager(args) else _fwd_fp8_op)(*args, causal, scale, variant)


def _fwd_mx_impl(
    fmt: str, q: torch.Tensor, q_scale: torch.Tensor, k: torch.Tensor, k_scale: torch.Tensor, vt: torch.Tensor,
    vt_scale: torch.Tensor, q_ts: torch.Tensor | None, k_ts: torch.Tensor | None, v_ts: torch.Tensor | None,
    head_dim: int, seqlen_k: int, causal: bool, scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Hq, Sq, D) bf16, lse (B, Hq, Sq) float32) from compare.formats block-scaled storage:
    q, k (B, H, S, D*), vt (B, Hkv, D, Sk_padded*) (* = bytes: D / 2 for nvfp4) and their block scales.
    Dequantizes exactly to 16-bit tiles (csrc/dequant_blocked.cu), then runs csrc/fwd_hopper_mx.cu."""
    q16, k16, vt16 = (_lib.dequantize_blocked(fmt, d, s) for d, s in ((q, q_scale), (k, k_scale), (vt, vt_scale)))
    out = torch.empty((*q.shape[:-1], head_dim), dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    _lib.launch_forward_mx(fmt, q16, k16, vt16, q_ts, k_ts, v_ts, out, lse, causal=causal, scale=scale,
                           seqlen_k=seqlen_k)
    return out, lse


_fwd_mx_op = torch.library.custom_op("cuda_fa::fwd_mx", mutates_args=(), device_types="cuda")(_fwd_mx_impl)


@_fwd_mx_op.register_fake
def _fwd_mx_fake(fmt, q, q_scale, k, k_scale, vt, vt_scale, q_ts, k_ts, v_ts, head_dim, seqlen_k, causal, scale):
    shape = (*q.shape[:-1], head_dim)
    return q.new_empty(shape, dtype=torch.bfloat16), q.new_empty(q.shape[:-1], dtype=torch.float32)


def fwd_mx(fmt, q, q_scale, k, k_scale, vt, vt_scale, q_ts, k_ts, v_ts, head_dim: int, seqlen_k: int,
           causal: bool, scale: float):
    tensors = (q, q_scale, k, k_scale, vt, vt_scale, q_ts, k_ts, v_ts)
    impl = _fwd_mx_impl if _eager(tensors) else _fwd_mx_op
    return impl(fmt, *tensors, head_dim, seqlen_k, causal, scale)


def _decode_impl(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, cache_seqlens: torch.Tensor | None,
    block_table: torch.Tensor | None, k_descale: torch.Tensor | None, v_descale: torch.Tensor | None,
    causal: bool, scale: float, num_splits: int, split_keys: int, window_left: int, window_right: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Sq, Hq, Dv) in q's dtype, Dv = v_cache's head_dim; lse (B, Hq, Sq) float32) of csrc/fwd_decode.cu;
    the split (num_splits chunks of split_keys keys) and the window's sides (-1: unbounded) are chosen by
    cuda_impl.decode.forward (plan_splits, kernel_window). The workspace for the partials comes from torch's caching
    allocator (stream-ordered, so CUDA graphs capture it)."""
    batch, seqlen_q, heads_q, _ = q.shape
    head_dim_v = v_cache.shape[-1]
    out = torch.empty((batch, seqlen_q, heads_q, head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    workspace = None
    if num_splits > 1:
        workspace = torch.empty(num_splits * batch * heads_q * seqlen_q * (head_dim_v + 1), dtype=torch.float32,
                                device=q.device)
    _lib.launch_decode(q, k_cache, v_cache, out, lse, cache_seqlens, block_table, k_descale, v_descale, workspace,
                       causal=causal, scale=scale, num_splits=num_splits, split_keys=split_keys,
                       window=(window_left, window_right))
    return out, lse


_decode_op = torch.library.custom_op("cuda_fa::decode", mutates_args=(), device_types="cuda")(_decode_impl)


@_decode_op.register_fake
def _decode_fake(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal, scale, num_splits,
                 split_keys, window_left, window_right):
    batch, seqlen_q, heads_q, _ = q.shape
    return (q.new_empty((batch, seqlen_q, heads_q, v_cache.shape[-1])),
            q.new_empty((batch, heads_q, seqlen_q), dtype=torch.float32))


def decode(q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale, causal: bool, scale: float,
           num_splits: int, split_keys: int, window_left: int, window_right: int):
    tensors = (q, k_cache, v_cache, cache_seqlens, block_table, k_descale, v_descale)
    impl = _decode_impl if _eager(tensors) else _decode_op
    return impl(*tensors, causal, scale, num_splits, split_keys, int(window_left), int(window_right))
