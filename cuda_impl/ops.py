"""The torch.library custom ops "cuda_fa::fwd" (16-bit) and "cuda_fa::fwd_fp8" (e4m3 with descales),
with fake implementations for torch.compile."""

from __future__ import annotations

import torch

from cuda_impl import _lib


@torch.library.custom_op("cuda_fa::fwd", mutates_args=(), device_types="cuda")
def fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float, variant: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Hq, Sq, D) in q's dtype, lse (B, Hq, Sq) float32). Inputs are validated by the caller."""
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    _lib.launch_forward(variant, q, k, v, out, lse, causal=causal, scale=scale)
    return out, lse


@fwd.register_fake
def _fwd_fake(q, k, v, causal, scale, variant):
    return q.new_empty(q.shape), q.new_empty(q.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("cuda_fa::fwd_fp8", mutates_args=(), device_types="cuda")
def fwd_fp8(
    q: torch.Tensor, k: torch.Tensor, vt: torch.Tensor, q_descale: torch.Tensor, k_descale: torch.Tensor,
    v_descale: torch.Tensor, causal: bool, scale: float, variant: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Hq, Sq, D) bf16, lse (B, Hq, Sq) float32) from e4m3 q, k and vt (B, Hkv, D, Sk)."""
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
    _lib.launch_forward_fp8(variant, q, k, vt, q_descale, k_descale, v_descale, out, lse, causal=causal, scale=scale)
    return out, lse


@fwd_fp8.register_fake
def _fwd_fp8_fake(q, k, vt, q_descale, k_descale, v_descale, causal, scale, variant):
    return q.new_empty(q.shape, dtype=torch.bfloat16), q.new_empty(q.shape[:-1], dtype=torch.float32)
